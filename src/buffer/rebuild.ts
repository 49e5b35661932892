/**
 * A clean copy of a buffer SQLite cannot read, made from what its pages still hold
 * (pages.ts), for `buffer salvage` to copy from as from any old buffer: the same tables (the
 * file's own definitions where its schema survives, the agent's where not), every row that
 * could be read, and the buffer's identity, so a salvage recorded against the file is
 * recognised whichever way it was read.
 */
import { rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import { createPrivate } from './db.js';
import { migrate } from './migrations.js';
import { readPages } from './pages.js';

export interface Rebuilt {
  /** Pages in the file, and how many of them could not be read as rows of a table. */
  pages: number;
  unreadablePages: number;
  unreadableRows: number;
  /** Rows read, by table. */
  rows: Record<string, number>;
}

/** The agent's own table definitions, for a file whose schema pages are lost. */
function knownTables(): Array<{ name: string; sql: string }> {
  const db = new Database(':memory:');
  try {
    migrate(db);
    return db.prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all() as Array<{ name: string; sql: string }>;
  } finally {
    db.close();
  }
}

/** Write to `dest` (replaced) every row of `file` that can be read page by page. */
export function rebuildFromPages(file: string, dest: string): Rebuilt {
  const read = readPages(file, knownTables());
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(dest + suffix, { force: true });
  createPrivate(dest);
  const db = new Database(dest);
  const rows: Record<string, number> = {};
  try {
    db.transaction(() => {
      for (const t of read.tables.values()) {
        db.exec(t.sql);
        const found = read.rows.get(t.name) ?? [];
        if (found.length === 0) continue;
        const names = t.columns.map((c) => `"${c.name}"`).join(', ');
        // A row read twice (a page and an older copy of it): the first, from the table's own tree, stays.
        const insert = db.prepare(`INSERT OR IGNORE INTO "${t.name}" (${names}) VALUES (${t.columns.map(() => '?').join(', ')})`);
        let n = 0;
        for (const row of found) {
          try {
            n += insert.run(...row).changes;
          } catch {
            // A row that breaks a constraint of its own table (a NOT NULL column read as NULL from a torn record).
          }
        }
        rows[t.name] = n;
      }
    })();
    if (read.applicationId !== 0) db.pragma(`application_id = ${read.applicationId}`);
    db.pragma(`user_version = ${read.userVersion}`);
  } finally {
    db.close();
  }
  return { pages: read.pages, unreadablePages: read.unreadablePages, unreadableRows: read.unreadableRows, rows };
}
