/**
 * A buffer read page by page (src/buffer/pages.ts, rebuild.ts) when SQLite cannot read it: a
 * file cut to 60% of its size, as a torn copy or a card that lost its tail leaves it, gave
 * SQLite's own reader nothing ("database disk image is malformed" on the schema), though most
 * of its pages were intact. Real buffers, written by the agent's Store, cut and damaged here.
 */
import { readFileSync, renameSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { PAGE_SIZE } from '../src/buffer/db.js';
import { columnsOf, decodeRecord } from '../src/buffer/pages.js';
import { checkAhead } from '../src/buffer/check.js';
import { rebuildFromPages } from '../src/buffer/rebuild.js';
import { openBuffer } from '../src/buffer/recover.js';
import { Store } from '../src/buffer/store.js';
import { configSchema } from '../src/config/schema.js';
import { DAEMON_STATE_KEY } from '../src/daemon-state.js';
import { BufferError } from '../src/errors.js';
import { createLogger } from '../src/log.js';
import { recordMilestone } from '../src/milestones/record.js';
import { agentConfig, runCli, TEST_SCAC, tempFixture } from './helpers.js';

const config = configSchema.parse({ api: { base_url: 'http://127.0.0.1:9', scac: TEST_SCAC }, sources: [{ type: 'simulator', resource_id: 'T1' }] });

const T0 = Date.UTC(2026, 10, 1, 12);
const tmp = tempFixture();

type Row = { id: number; resource_id: string; time_ms: number; lat: number | null; lon: number | null; temp_c: number | null; state: number };

/** A cleanly closed buffer: 3 milestones, then 7,413 readings of one load (some without a position). */
function buffer(): { path: string; readings: Map<number, Row>; identity: number } {
  const path = join(tmp.dir, 'b.db');
  const store = Store.open(path);
  store.startLoad({ loadNumber: 'L-1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 - 1000 });
  for (const code of ['X3', 'AF', 'X1']) recordMilestone(store, config, { loadNumber: 'L-1', code });
  for (let b = 0; b < 15; b++) {
    store.insertReadings(
      Array.from({ length: 7413 / 15 + (b < 7413 % 15 ? 1 : 0) }, (_, i) => {
        const n = b * 500 + i;
        return n % 10 === 9
          ? { resourceId: 'T1', timeMs: T0 + n * 1000, temperatureC: 3.5 + (n % 7) / 10 }
          : { resourceId: 'T1', timeMs: T0 + n * 1000, lat: 41.8 + n * 1e-5, lon: -87.6 - n * 1e-5, speed: 20.5 };
      }),
    );
  }
  const readings = new Map((store.db.prepare('SELECT id, resource_id, time_ms, lat, lon, temp_c, state FROM readings').all() as Row[]).map((r) => [r.id, r]));
  const identity = store.db.pragma('application_id', { simple: true }) as number;
  store.close();
  return { path, readings, identity };
}

function rowsOf(file: string): Row[] {
  const db = new Database(file, { readonly: true });
  try {
    return db.prepare('SELECT id, resource_id, time_ms, lat, lon, temp_c, state FROM readings ORDER BY id').all() as Row[];
  } finally {
    db.close();
  }
}

describe('reading a buffer page by page', () => {
  it('decodes records and columns as SQLite writes them', () => {
    // A record by hand: header 5 bytes (size, NULL, int8, real, text of 2), then the values.
    const rec = Buffer.from([5, 0, 1, 7, 17, 0xfe, 0, 0, 0, 0, 0, 0, 0, 0, 0x68, 0x69]);
    rec.writeDoubleBE(41.5, 6);
    expect(decodeRecord(rec)).toEqual([null, -2, 41.5, 'hi']);
    expect(columnsOf('CREATE TABLE t (\n  id INTEGER PRIMARY KEY, -- the id\n  name TEXT NOT NULL,\n  v REAL, PRIMARY KEY (x, y)\n)')).toEqual({
      columns: [
        { name: 'id', type: 'INTEGER' },
        { name: 'name', type: 'TEXT' },
        { name: 'v', type: 'REAL' },
      ],
      rowidColumn: 0,
      withoutRowid: false,
    });
  });

  it('a buffer cut to 60% of its size: SQLite reads nothing, the pages give back every reading they hold, exactly', () => {
    const { path, readings, identity } = buffer();
    const size = statSync(path).size;
    truncateSync(path, Math.floor((size * 0.6) / PAGE_SIZE) * PAGE_SIZE);
    // What SQLite itself makes of it.
    expect(() => rowsOf(path)).toThrow(/malformed|not a database|disk image/);

    const out = join(tmp.dir, 'rebuilt.db');
    const r = rebuildFromPages(path, out);
    const got = rowsOf(out);
    // Most pages survive the cut, and with them most rows (the rest is counted, not guessed).
    expect(got.length).toBeGreaterThan(readings.size * 0.5);
    expect(got.length).toBeLessThan(readings.size);
    for (const row of got) expect(row).toEqual(readings.get(row.id));
    expect(r.rows.readings).toBe(got.length);
    const db = new Database(out, { readonly: true });
    expect(db.prepare('SELECT code FROM milestones ORDER BY id').pluck().all()).toEqual(['X3', 'AF', 'X1']);
    expect(db.prepare('SELECT load_number, resource_id FROM loads').all()).toEqual([{ load_number: 'L-1', resource_id: 'T1' }]);
    expect(db.pragma('application_id', { simple: true })).toBe(identity);
    db.close();
  });

  it("a new buffer's schema lies at the start of the file, and its loss costs no rows: the agent's own definitions read them", () => {
    const { path, readings } = buffer();
    const ro = new Database(path, { readonly: true });
    const schemaPages = ro.prepare("SELECT pageno FROM dbstat WHERE name = 'sqlite_schema'").pluck().all() as number[];
    const pages = ro.pragma('page_count', { simple: true }) as number;
    ro.close();
    // Written when the buffer was made, before any row: a torn tail does not reach it.
    expect(Math.max(...schemaPages)).toBeLessThan(pages / 10);
    // Every schema page wiped (page 1 past its header): SQLite reads nothing, the pages all.
    const bytes = readFileSync(path);
    for (const n of schemaPages) bytes.fill(0, n === 1 ? 100 : (n - 1) * PAGE_SIZE, n * PAGE_SIZE);
    writeFileSync(path, bytes);
    expect(() => rowsOf(path)).toThrow();
    const out = join(tmp.dir, 'rebuilt.db');
    rebuildFromPages(path, out);
    const got = rowsOf(out);
    expect(got.length).toBe(readings.size);
    for (const row of got) expect(row).toEqual(readings.get(row.id));
  });

  it('a damaged page in the middle costs only its own rows', () => {
    const { path, readings } = buffer();
    const bytes = readFileSync(path);
    const pages = bytes.length / PAGE_SIZE;
    // Three pages past the schema's, overwritten with garbage.
    for (const n of [Math.floor(pages / 3), Math.floor(pages / 2), Math.floor((2 * pages) / 3)]) bytes.fill(0xa5, n * PAGE_SIZE, (n + 1) * PAGE_SIZE);
    writeFileSync(path, bytes);
    const out = join(tmp.dir, 'rebuilt.db');
    rebuildFromPages(path, out);
    const got = rowsOf(out);
    // A 1 KB page holds some 20 readings: three pages (a leaf each, or an interior page whose leaves are found by shape).
    expect(got.length).toBeGreaterThanOrEqual(readings.size - 3 * 40);
    for (const row of got) expect(row).toEqual(readings.get(row.id));
  });
});

/** The page numbers of the readings table's leaves, in the order of the rows they hold. */
function readingLeaves(file: string): number[] {
  const db = new Database(file, { readonly: true });
  try {
    return db.prepare("SELECT pageno FROM dbstat WHERE name = 'readings' AND pagetype = 'leaf' ORDER BY path").pluck().all() as number[];
  } finally {
    db.close();
  }
}

function damage(file: string, page: number): void {
  const bytes = readFileSync(file);
  bytes.fill(0xa5, (page - 1) * PAGE_SIZE + 8, page * PAGE_SIZE);
  writeFileSync(file, bytes);
}

describe('the check at start after a clean stop', () => {
  const log = createLogger({ level: 'silent', destination: process.stdout });
  const cleanlyStopped = (path: string) => {
    const store = Store.open(path);
    store.setState(DAEMON_STATE_KEY, { running: false }, Date.now());
    store.close();
  };

  it('a damaged page among the next rows to send stops the daemon at open (exit 65), before anything is sent', () => {
    const { path } = buffer();
    cleanlyStopped(path);
    damage(path, readingLeaves(path)[3]);
    const b = configSchema.parse({ ...config, buffer: { path } }).buffer;
    expect(() => openBuffer(b, log)).toThrow(BufferError);
    try {
      openBuffer(b, log);
    } catch (err) {
      expect((err as BufferError).exitCode).toBe(65);
      expect((err as Error).message).toContain('buffer salvage');
    }
  });

  it("status on a buffer with a damaged page exits 65 with the daemon's guidance, not a bare SQLite message", async () => {
    const { path } = buffer();
    damage(path, readingLeaves(path)[3]);
    const cfg = agentConfig(tmp.dir, 'http://127.0.0.1:9');
    renameSync(path, join(tmp.dir, 'buffer.db'));
    for (const args of [['status'], ['status', '--json'], ['load', 'list']]) {
      const r = await runCli([...args, '--config', cfg]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(65);
      expect(r.stderr).toContain('the buffer is corrupt');
      expect(r.stderr).toContain('buffer salvage');
    }
  });

  it('past the size where every page is read, the rows the first requests take are read', () => {
    const { path } = buffer();
    const leaves = readingLeaves(path);
    damage(path, leaves[leaves.length - 1]);
    const store = Store.open(path);
    try {
      // The damage is past the first 1,000 rows: not what the next requests read.
      expect(() => checkAhead(store, { rowsPerLoad: 1000, quickCheckBytes: 0 })).not.toThrow();
      expect(() => checkAhead(store, { rowsPerLoad: 10_000, quickCheckBytes: 0 })).toThrow(/corrupt/);
      // Below that size, every page.
      expect(() => checkAhead(store, { rowsPerLoad: 1000 })).toThrow(/corrupt/);
    } finally {
      store.close();
    }
  });
});
