/**
 * Buffers in the field, as earlier versions made them, opened by this one. A buffer of schema 10
 * is the one telematics-agent 0.1.0 made up to commit d925e15 (test/fixtures/buffer-schema-10.sql,
 * dumped from that commit's own migrations), the version test/deb.test.ts upgrades from.
 *
 * Step 7 -> 8 (requests) was changed after it had shipped: the merge of "temperature without a
 * fix" added requests.dropped to it instead of to a step of its own, so a buffer made before
 * had no such column and the upgraded agent died at every start ("table requests has no column
 * named dropped", exit 1, restarted every 10 s, nothing delivered again).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { migrate, SCHEMA_VERSION } from '../src/buffer/db.js';
import { Store } from '../src/buffer/store.js';
import { ROOT, tempFixture } from './helpers.js';

const tmp = tempFixture();

const T0 = 1_795_000_000_000;
const columns = (db: Database.Database, table: string) => (db.prepare(`PRAGMA table_info(${table})`).all() as Array<{ name: string }>).map((c) => c.name);

/** A load with readings waiting and a trace request fixed and unanswered, as the old version left them. */
function backlog(db: Database.Database): void {
  db.prepare("INSERT INTO loads (load_number, resource_id, resource_type, started_ms, window_from_ms, acked_id) VALUES ('L-7', 'TRUCK-1', 'Truck', ?, ?, 0)").run(T0, T0);
  const reading = db.prepare("INSERT INTO readings (id, resource_id, time_ms, lat, lon, temp_c, state) VALUES (?, 'TRUCK-1', ?, 41.8, -87.6, 3, 0)");
  for (let i = 1; i <= 5; i++) reading.run(i, T0 + i * 1000);
  db.prepare("INSERT INTO requests (load_number, kind, after_id, last_id, last_sample_ms, point_ids, idem_key, fixed_ms) VALUES ('L-7', 'chunk', 0, 3, NULL, '1,1,1', 'k-1', ?)").run(T0 + 4000);
}

describe('a buffer of schema 10, as 0.1.0 at d925e15 made it', () => {
  it('opens and migrates: its fixed request keeps its points and key, and takes a drop count of 0', () => {
    const db = new Database(tmp.buffer);
    db.exec(readFileSync(join(ROOT, 'test', 'fixtures', 'buffer-schema-10.sql'), 'utf8'));
    expect(columns(db, 'requests')).not.toContain('dropped');
    backlog(db);
    db.close();

    const store = Store.open(tmp.buffer);
    expect(store.db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
    expect(store.requests.fixed('L-7', 'chunk')).toMatchObject({ afterId: 0, lastId: 3, pointIds: [1, 2, 3], key: 'k-1', dropped: 0 });
    expect([...store.iterateReadings('L-7')]).toHaveLength(5);
    store.close();
  });
});

describe('a buffer of schema 11 made by a version that had requests.dropped in step 7 -> 8', () => {
  it('opens and migrates without adding the column twice', () => {
    const db = new Database(tmp.buffer);
    migrate(db, 11);
    if (!columns(db, 'requests').includes('dropped')) db.exec('ALTER TABLE requests ADD COLUMN dropped INTEGER NOT NULL DEFAULT 0');
    db.close();

    const store = Store.open(tmp.buffer);
    expect(store.db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
    expect(columns(store.db, 'requests').filter((c) => c === 'dropped')).toHaveLength(1);
    store.close();
  });
});
