/**
 * `buffer salvage` and the position history: what places a milestone typed after the event
 * comes along with a buffer set aside. Real SQLite files; the CLI's own salvage.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { positionAt } from '../src/buffer/position-at.js';
import { salvage } from '../src/buffer/salvage.js';
import { Store } from '../src/buffer/store.js';
import { ROOT, tempFixture } from './helpers.js';

const T0 = Date.UTC(2026, 10, 20, 12);
const MIN = 60_000;
const tmp = tempFixture();

describe('buffer salvage copies the position history', () => {
  it('of a buffer whose readings were delivered and purged: a time 2 h back is placed from it afterwards', () => {
    const oldPath = join(tmp.dir, 'old.db');
    const old = Store.open(oldPath);
    // Two hours of one position a minute, as the history keeps it; no reading left.
    const put = old.db.prepare('INSERT INTO positions (resource_id, t_s, lat_e5, lon_e5) VALUES (?, ?, ?, ?)');
    for (let m = 0; m < 120; m++) put.run('T1', (T0 + m * MIN) / 1000, 4_180_000 + m * 100, -8_760_000);
    old.close();

    const store = Store.open(join(tmp.dir, 'buffer.db'));
    try {
      // This buffer has a row in one of those minutes already (10 s into it): kept, no second one.
      store.db.prepare('INSERT INTO positions (resource_id, t_s, lat_e5, lon_e5) VALUES (?, ?, ?, ?)').run('T1', (T0 + 30 * MIN) / 1000 + 10, 4_180_000 + 3000, -8_760_000);
      expect(positionAt(store, 'T1', T0 + 10 * MIN, 5 * MIN)).toBeUndefined();
      // history.keep_days = 0: no history is kept, none copied.
      expect(salvage(oldPath, store, { history: { intervalS: 60, keepDays: 0 } }).positions).toBe(0);
      const report = salvage(oldPath, store, { force: true });
      expect(report.positions).toBe(119);
      expect(report.unreadable).toEqual({});
      expect(positionAt(store, 'T1', T0 + 10 * MIN + 5000, 5 * MIN)).toEqual({ timeMs: T0 + 10 * MIN, lat: 41.81, lon: -87.6, from: 'history' });
      expect(store.db.prepare("SELECT count(*) FROM positions WHERE resource_id = 'T1'").pluck().get()).toBe(120);
      // Run again (--force): nothing new.
      expect(salvage(oldPath, store, { force: true }).positions).toBe(0);
    } finally {
      store.close();
    }
  });

  it('of a buffer older than the history (schema 10): one position a minute from its readings', () => {
    const oldPath = join(tmp.dir, 'old.db');
    const db = new Database(oldPath);
    db.exec(readFileSync(join(ROOT, 'test', 'fixtures', 'buffer-schema-10.sql'), 'utf8'));
    db.prepare("INSERT INTO loads (load_number, resource_id, resource_type, started_ms, window_from_ms, acked_id) VALUES ('L-7', 'T1', 'Truck', ?, ?, 0)").run(T0, T0);
    const reading = db.prepare("INSERT INTO readings (id, resource_id, time_ms, lat, lon, temp_c, state) VALUES (?, 'T1', ?, ?, -87.6, 3, 0)");
    // 10 minutes at 1 Hz, and a temperature without a fix: 10 positions.
    for (let i = 0; i < 600; i++) reading.run(i + 1, T0 + i * 1000, 41.8 + i / 1e5);
    db.prepare("INSERT INTO readings (id, resource_id, time_ms, lat, lon, temp_c, state) VALUES (601, 'T1', ?, NULL, NULL, 3, 0)").run(T0 + 700_000);
    db.close();

    const store = Store.open(join(tmp.dir, 'buffer.db'));
    try {
      const report = salvage(oldPath, store);
      expect(report.readings).toBe(601);
      expect(report.positions).toBe(10);
      const rows = store.db.prepare("SELECT t_s, lat_e5 FROM positions WHERE resource_id = 'T1' ORDER BY t_s").all() as Array<{ t_s: number; lat_e5: number }>;
      expect(rows.map((r) => r.t_s * 1000 - T0)).toEqual(Array.from({ length: 10 }, (_, m) => m * MIN));
      expect(rows[1]!.lat_e5).toBe(4_180_060);
    } finally {
      store.close();
    }
  });
});
