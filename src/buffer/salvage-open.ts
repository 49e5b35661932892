/**
 * Opening the file `buffer salvage` copies from. SQLite reads it where it can; where it
 * cannot (a file cut short, the schema's page or a b-tree's interior page damaged), the file
 * is read page by page (pages.ts) into a clean copy, and that is read instead: a buffer cut
 * to 60% of its size gave SQLite nothing, its pages most of its rows.
 *
 * A file SQLite opens but whose check finds damage is read page by page too, unless a WAL
 * lies beside it: the page reader reads the main file only, and the WAL holds the newest
 * commits, which SQLite's own reading (fencing damaged rows off, salvage-read.ts) keeps.
 */
import { existsSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import Database from 'better-sqlite3';
import { BufferError } from '../errors.js';
import { type Rebuilt, rebuildFromPages } from './rebuild.js';

export interface SalvageSource {
  db: Database.Database;
  /** Set when the file was read page by page: what that found. */
  pages?: Rebuilt;
  close(): void;
}

/** Why SQLite cannot be trusted to read the file, or undefined when it can. */
function sqliteProblem(file: string): string | undefined {
  let db: Database.Database | undefined;
  try {
    db = new Database(file, { readonly: true, fileMustExist: true });
    const check = db.pragma('quick_check(1)', { simple: true }) as string;
    if (check === 'ok') return undefined;
    const wal = `${file}-wal`;
    return existsSync(wal) && statSync(wal).size > 0 ? undefined : check;
  } catch (err) {
    return (err as Error).message;
  } finally {
    db?.close();
  }
}

/** The copy made from the pages: beside the file, else in the temporary directory. */
function rebuild(file: string): { path: string; pages: Rebuilt } {
  const name = `${basename(file)}.pages-${process.pid}.db`;
  let first: unknown;
  for (const dir of [join(file, '..'), tmpdir()]) {
    const path = join(dir, name);
    try {
      return { path, pages: rebuildFromPages(file, path) };
    } catch (err) {
      for (const suffix of ['', '-journal', '-wal', '-shm']) rmSync(path + suffix, { force: true });
      first ??= err;
      // Only a place that cannot take the copy is worth a second try.
      const code = (err as { code?: string }).code ?? '';
      if (!/^(EACCES|EPERM|EROFS|ENOSPC|SQLITE_CANTOPEN|SQLITE_READONLY|SQLITE_FULL)/.test(code)) break;
    }
  }
  throw first;
}

export function openSalvageSource(file: string): SalvageSource {
  if (!existsSync(file)) throw new BufferError('corrupt', file, `${file}: no such file; nothing was copied`);
  const problem = sqliteProblem(file);
  if (problem === undefined) {
    const db = new Database(file, { readonly: true, fileMustExist: true });
    return { db, close: () => db.close() };
  }
  let copy: { path: string; pages: Rebuilt };
  try {
    copy = rebuild(file);
  } catch (err) {
    throw new BufferError('corrupt', file, `${file}: cannot be read as a buffer at all (${problem}; page by page: ${(err as Error).message}); nothing was copied`);
  }
  const db = new Database(copy.path, { readonly: true, fileMustExist: true });
  return {
    db,
    pages: copy.pages,
    close: () => {
      db.close();
      for (const suffix of ['', '-journal', '-wal', '-shm']) rmSync(copy.path + suffix, { force: true });
    },
  };
}
