/**
 * The position history (src/buffer/history.ts) and the lookup of where a resource was at a
 * time (src/buffer/position-at.ts), on a real SQLite file: one row per resource per
 * interval, written in the commit of its fix and only then; pruned after keep_days; found
 * from the readings while they are held and from the history once they are purged, the
 * nearest in time winning, and never by a scan of the readings; a buffer of schema 11 gets
 * the table, with the positions of the readings it holds.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { HistoryOptions } from '../src/buffer/history.js';
import { migrate, SCHEMA_VERSION } from '../src/buffer/migrations.js';
import { positionAt } from '../src/buffer/position-at.js';
import { Store } from '../src/buffer/store.js';
import type { Reading } from '../src/reading.js';
import { configSchema } from '../src/config/schema.js';
import { tempFixture } from './helpers.js';

const T0 = Date.UTC(2026, 10, 25, 12); // on a minute boundary
const MIN = 60_000;
const DAY = 86_400_000;
const ON: HistoryOptions = { intervalS: 60, keepDays: 14 };

const tmp = tempFixture();
let store: Store;
beforeEach(() => {
  store = Store.open(tmp.buffer);
  store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 - 30 * DAY });
});
afterEach(() => {
  store.close();
});

const rows = (resource = 'T1') =>
  store.db.prepare('SELECT t_s AS tS, lat_e5 AS lat, lon_e5 AS lon FROM positions WHERE resource_id = ? ORDER BY t_s').all(resource) as Array<{ tS: number; lat: number; lon: number }>;
/** 1 Hz fixes of T1 from `fromMs`, `n` of them, moving north 1e-4 degree a second. */
const fixes = (fromMs: number, n: number, resourceId = 'T1'): Reading[] => Array.from({ length: n }, (_, i) => ({ resourceId, timeMs: fromMs + i * 1000, lat: 41 + i * 1e-4, lon: -87.5 }));
/** A commit of readings as the daemon's (null: without [history]). */
const commit = (batch: Reading[], history: HistoryOptions | null = ON, keepWithoutLoad = false) => store.insertReadings(batch, keepWithoutLoad, undefined, undefined, undefined, undefined, history ?? undefined);

describe('the position history is written with the fixes', () => {
  it('one row per resource per interval: the first fix of each, in integers', () => {
    // 10 minutes at 1 Hz, committed in batches of 90 (as the daemon does), and a temperature-only reading.
    const all = fixes(T0, 600);
    for (let i = 0; i < all.length; i += 90) commit(all.slice(i, i + 90));
    commit([{ resourceId: 'T1', timeMs: T0 + 30_000, temperatureC: -18 }]);
    const r = rows();
    expect(r).toHaveLength(10);
    expect(r.map((p) => p.tS)).toEqual(Array.from({ length: 10 }, (_, i) => T0 / 1000 + i * 60));
    expect(r[1]).toEqual({ tS: T0 / 1000 + 60, lat: Math.round((41 + 60e-4) * 1e5), lon: -8_750_000 });
    // A late reading of an interval already written adds nothing, nor does a second process's
    // commit (its own hint empty): the table itself is asked.
    commit(fixes(T0 + 30_000, 1));
    const other = Store.open(tmp.buffer);
    try {
      other.insertReadings(fixes(T0 + 45_000, 1), false, undefined, undefined, undefined, undefined, ON);
    } finally {
      other.close();
    }
    expect(rows()).toHaveLength(10);
    // A longer interval (a reload): one row per 5 minutes from then on.
    commit(fixes(T0 + 20 * MIN, 600), { intervalS: 300, keepDays: 14 });
    expect(rows().filter((p) => p.tS >= (T0 + 20 * MIN) / 1000)).toHaveLength(2);
  });

  it('only for fixes the buffer keeps, and not at all with keep_days = 0 or without [history]', () => {
    // T9 has no load: its readings are not kept (privacy.record_without_load off), nor are its positions.
    commit(fixes(T0, 120, 'T9'));
    expect(rows('T9')).toEqual([]);
    commit(fixes(T0, 120, 'T9'), ON, true);
    expect(rows('T9')).toHaveLength(2);
    commit(fixes(T0 + 10 * MIN, 120), { intervalS: 60, keepDays: 0 });
    commit(fixes(T0 + 20 * MIN, 120), null);
    expect(rows()).toEqual([]);
  });

  it('a commit that fails leaves neither the readings nor their positions, and the retry writes both', () => {
    const batch = fixes(T0, 30);
    // A rider that ends the transaction (as SQLite does on an I/O error): the whole commit fails.
    const fail = { write: () => store.db.exec('ROLLBACK'), failed: () => undefined };
    expect(() => store.insertReadings(batch, false, undefined, [fail], undefined, undefined, ON)).toThrow();
    expect(store.db.prepare('SELECT count(*) FROM readings').pluck().get()).toBe(0);
    expect(rows()).toEqual([]);
    commit(batch);
    expect(store.db.prepare('SELECT count(*) FROM readings').pluck().get()).toBe(30);
    expect(rows()).toHaveLength(1);
  });

  it('is pruned after keep_days (against the newest row when the clock is far ahead); keep_days = 0 empties it', () => {
    commit(fixes(T0 - 20 * DAY, 61));
    commit(fixes(T0 - 13 * DAY, 61));
    commit(fixes(T0, 61, 'T1'));
    expect(rows()).toHaveLength(6);
    // A clock set a year ahead does not take the last 14 days with it.
    expect(store.readings.history.prune(T0 + 365 * DAY, 14)).toBe(2);
    expect(rows().map((p) => p.tS)).toEqual([(T0 - 13 * DAY) / 1000, (T0 - 13 * DAY) / 1000 + 60, T0 / 1000, T0 / 1000 + 60]);
    expect(store.readings.history.prune(T0, 14)).toBe(0);
    expect(store.readings.history.prune(T0, 7)).toBe(2);
    expect(store.readings.history.prune(T0, 0)).toBe(2);
    expect(rows()).toEqual([]);
  });
});

describe('where a resource was at a time', () => {
  it('from the readings while they are held (to the second), from the history once they are purged; the nearest wins', () => {
    // Fixes every 10 s with temperature-only readings between them, for an hour.
    const batch: Reading[] = [];
    for (let s = 0; s < 3600; s++) {
      batch.push(s % 10 === 0 ? { resourceId: 'T1', timeMs: T0 + s * 1000, lat: 41 + s * 1e-4, lon: -87.5 } : { resourceId: 'T1', timeMs: T0 + s * 1000, temperatureC: -18 });
    }
    commit(batch);
    commit(fixes(T0, 5, 'T2')); // another resource's readings in between change nothing
    const at = T0 + 1214_000;
    expect(positionAt(store, 'T1', at, 600_000)).toEqual({ timeMs: T0 + 1210_000, lat: 41 + 1210e-4, lon: -87.5, from: 'readings' });
    // Before the first reading and after the last, within the limit or not.
    expect(positionAt(store, 'T1', T0 - 30_000, 60_000)).toMatchObject({ timeMs: T0, from: 'readings' });
    expect(positionAt(store, 'T1', T0 - 30_000, 20_000)).toBeUndefined();
    expect(positionAt(store, 'T1', T0 + 3590_000 + 50_000, 60_000)).toMatchObject({ timeMs: T0 + 3590_000 });
    expect(positionAt(store, 'T9', at, 600_000)).toBeUndefined();

    // Purged: the history's row of that minute (T0 + 20 min), 14 s away.
    store.deleteReadings(store.db.prepare("SELECT id FROM readings WHERE resource_id = 'T1'").pluck().all() as number[]);
    const then = positionAt(store, 'T1', at, 600_000)!;
    expect(then).toMatchObject({ timeMs: T0 + 1200_000, from: 'history' });
    expect(then.lat).toBeCloseTo(41 + 1200e-4, 5);
    expect(positionAt(store, 'T1', at, 10_000)).toBeUndefined();

    // A reading held again near the time beats the history's row farther from it.
    commit([{ resourceId: 'T1', timeMs: at + 5000, lat: 42, lon: -88 }], null);
    expect(positionAt(store, 'T1', at, 600_000)).toEqual({ timeMs: at + 5000, lat: 42, lon: -88, from: 'readings' });
  });

  it('reads no more than a window of the readings, whatever the backlog (no scan of the table)', () => {
    commit(fixes(T0, 120));
    const plans: string[] = [];
    const db = store.db;
    const prepare = db.prepare.bind(db);
    db.prepare = ((sql: string) => {
      const params = Array.from({ length: (sql.match(/\?/g) ?? []).length }, () => 0);
      plans.push(...(prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...params) as Array<{ detail: string }>).map((p) => p.detail));
      return prepare(sql);
    }) as typeof db.prepare;
    try {
      expect(positionAt({ db }, 'T1', T0 + 30_000, 60_000)).toMatchObject({ timeMs: T0 + 30_000 });
    } finally {
      db.prepare = prepare;
    }
    expect(plans.some((d) => d.includes('readings_by_resource'))).toBe(true);
    expect(plans.filter((d) => /^SCAN (readings|positions)\b/.test(d))).toEqual([]);
  });
});

describe('a buffer of schema 11', () => {
  it('gets the history table as it migrates to 12, with one position a minute of the fixes it holds', () => {
    store.close();
    const old = join(tmp.dir, 'old.db');
    const db = new Database(old);
    migrate(db, 11);
    const reading = db.prepare('INSERT INTO readings (id, resource_id, time_ms, lat, lon, temp_c, state) VALUES (?, ?, ?, ?, ?, ?, 0)');
    let id = 1;
    for (let s = 0; s < 150; s++) reading.run(id++, 'T1', T0 + s * 1000, 41 + s * 1e-4, -87.5, null);
    reading.run(id++, 'T1', T0 + 200_000, null, null, -18);
    reading.run(id++, 'T2', T0 + 5000, 20.5, -100.4, null);
    db.close();

    store = Store.open(old);
    // Opened, it migrates on to the newest schema, through 12.
    expect(store.db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
    expect(SCHEMA_VERSION).toBeGreaterThanOrEqual(12);
    expect(rows()).toEqual([
      { tS: T0 / 1000, lat: 4_100_000, lon: -8_750_000 },
      { tS: T0 / 1000 + 60, lat: 4_100_600, lon: -8_750_000 },
      { tS: T0 / 1000 + 120, lat: 4_101_200, lon: -8_750_000 },
    ]);
    expect(rows('T2')).toEqual([{ tS: T0 / 1000 + 5, lat: 2_050_000, lon: -10_040_000 }]);
    // And it goes on being written.
    commit(fixes(T0 + 10 * MIN, 1), ON, true);
    expect(rows()).toHaveLength(4);
  });
});

describe('[history] in the config', () => {
  it('defaults to a position a minute kept 14 days; keep_days = 0 turns it off; an interval under 5 s is refused, naming the field', () => {
    const base = { api: { scac: 'ABCD' }, sources: [{ type: 'simulator', resource_id: 'T1' }] };
    expect(configSchema.parse(base).history).toEqual({ interval_s: 60, keep_days: 14 });
    expect(configSchema.parse({ ...base, history: { keep_days: 0 } }).history.keep_days).toBe(0);
    const bad = configSchema.safeParse({ ...base, history: { interval_s: 1 } });
    expect(bad.success).toBe(false);
    expect(bad.error!.issues[0].path).toEqual(['history', 'interval_s']);
  });
});
