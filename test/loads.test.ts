/**
 * Several loads on one resource (less than truckload, consolidated multi-stop routes): the
 * buffer's model. A reading is stored once, for its resource; a load is the resource and a
 * window (by reading time, from `load start` to `load end`) with its own cursor; a reading
 * goes once every load whose window holds it has delivered it. Real SQLite files; the
 * migration from a buffer written by the previous version (schema 6) is checked end to end
 * against the sandbox.
 */
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Ingest } from '../src/admission/ingest.js';
import { ApiClient } from '../src/api/client.js';
import { SCHEMA_VERSION } from '../src/buffer/migrations.js';
import { CHUNK_QUERY } from '../src/buffer/readings.js';
import { PURGE_RANGE } from '../src/buffer/reclaim.js';
import { salvage } from '../src/buffer/salvage.js';
import { Store } from '../src/buffer/store.js';
import { configSchema } from '../src/config/schema.js';
import { Sender } from '../src/delivery/sender.js';
import { createLogger } from '../src/log.js';
import { MilestoneDetector } from '../src/milestones/detector.js';
import { recordMilestone } from '../src/milestones/record.js';
import type { Reading } from '../src/reading.js';
import { Sandbox } from '../src/sandbox/server.js';
import { ROOT, TEST_KEY, TEST_SCAC, waitFor, tempFixture } from './helpers.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });
/** 10:00 in Chicago (CDT). */
const TEN = Date.UTC(2026, 5, 1, 15);
const MIN = 60_000;

const tmp = tempFixture();
let store: Store;
beforeEach(() => {
  store = Store.open(tmp.buffer);
});
afterEach(() => {
  store.close();
});

const at = (timeMs: number, resourceId = 'TRUCK-1'): Reading => ({ resourceId, timeMs, lat: 41.8 + (timeMs - TEN) / 1e9, lon: -87.6 });
const ids = (load: string) => [...store.iterateReadings(load)].map((r) => r.id);
const times = (load: string) => [...store.iterateReadings(load)].map((r) => (r.time_ms - TEN) / MIN);
const rows = () => store.db.prepare('SELECT count(*) FROM readings').pluck().get() as number;
const start = (loadNumber: string, nowMs: number, resourceId = 'TRUCK-1') => store.startLoad({ loadNumber, resourceId, resourceType: 'Truck', stops: [], nowMs });

describe('a load is its resource and a window', () => {
  it('stores each reading once; each load takes the readings of its own window', () => {
    start('A', TEN - 60 * MIN);
    store.insertReadings([at(TEN - 30 * MIN), at(TEN - 10 * MIN)]);
    start('B', TEN);
    store.insertReadings([at(TEN + MIN), at(TEN + 2 * MIN)]);
    store.endLoad('A', TEN + 3 * MIN);
    // Committed after `load end`: a point from before the end is still A's (it was in the
    // daemon's memory); one from after is not.
    store.insertReadings([at(TEN + 2.5 * MIN), at(TEN + 4 * MIN)], false, undefined, undefined, TEN + 5 * MIN);
    store.insertReadings([at(TEN + 5 * MIN)], false, undefined, undefined, TEN + 6 * MIN);
    expect(times('A')).toEqual([-30, -10, 1, 2, 2.5]);
    expect(times('B')).toEqual([1, 2, 2.5, 4, 5]);
    expect(rows()).toBe(7);
    expect(store.getLoad('A')).toMatchObject({ windowFromMs: TEN - 60 * MIN, windowUntilMs: TEN + 3 * MIN, endId: 6 });
    // Closed: a point from before its end committed now (hours late) is no longer A's; it is
    // still in B's window.
    store.insertReadings([at(TEN + 2.8 * MIN)]);
    expect(times('A')).toEqual([-30, -10, 1, 2, 2.5]);
    expect(times('B')).toEqual([1, 2, 2.5, 4, 5, 2.8]);
  });

  it('a load started at 10:00 never receives a point from 09:59, not even one committed after the start', () => {
    start('EARLY', TEN - 60 * MIN);
    const ingest = new Ingest(store, { batchSize: 100, flushIntervalMs: 60_000, keepWithoutLoad: false }, silent);
    ingest.admit(at(TEN - 2 * MIN)); // the first reading is committed at once
    ingest.admit(at(TEN - MIN / 60)); // 09:59:59, waiting in memory...
    start('LATE', TEN); // ...when the second load starts
    ingest.admit(at(TEN + MIN));
    ingest.flush();
    expect(times('EARLY')).toEqual([-2, -1 / 60, 1]);
    expect(times('LATE')).toEqual([1]);
    expect(rows()).toBe(3);
  });

  it('keeps readings no window holds only with record_without_load, as unassigned, never sent', () => {
    start('A', TEN);
    expect(store.insertReadings([at(TEN - MIN), at(TEN + MIN), at(TEN, 'OTHER')])).toBe(1);
    expect(store.insertReadings([at(TEN - MIN), at(TEN, 'OTHER')], true)).toBe(2);
    expect(times('A')).toEqual([1]);
    expect(store.counts()).toMatchObject({ readings: 1, unassignedReadings: 2 });
    store.ackReadings('A', ids('A')[0], null);
    store.purgeAcked();
    expect(rows()).toBe(2);
  });

  it('goes once every load holding it has delivered it; an ended load that delivered all is done', () => {
    start('A', TEN);
    start('B', TEN + 2 * MIN);
    for (let m = 1; m <= 3; m++) store.insertReadings([at(TEN + m * MIN)]);
    store.endLoad('A', TEN + 3.5 * MIN);
    store.insertReadings([at(TEN + 4 * MIN)]);
    store.closeEndedLoads(TEN + 4 * MIN);
    expect(times('A')).toEqual([1, 2, 3]);
    expect(times('B')).toEqual([2, 3, 4]);
    // B delivers everything: only what A still needs stays.
    store.ackReadings('B', ids('B').at(-1)!, null);
    store.purgeAcked();
    expect(rows()).toBe(3);
    expect(store.counts().readings).toBe(3);
    expect(store.loadsWithReadings()).toEqual(['A']);
    // A delivers its first two: the first goes (B never wanted it), the second waited for A.
    store.ackReadings('A', ids('A')[1], null);
    store.purgeAcked();
    expect(rows()).toBe(1);
    expect(times('A')).toEqual([3]);
    // A delivers the last of its window: done, its cursor at its last id; nothing is left.
    store.ackReadings('A', ids('A')[0], null);
    const a = store.getLoad('A')!;
    expect(a.ackedId).toBe(a.endId);
    expect(store.loadsWithReadings()).toEqual([]);
    store.purgeAcked();
    expect(rows()).toBe(0);
    expect(store.counts().readings).toBe(0);
  });

  it('load end never cuts off a reading the load already holds: a source clock ahead, a system clock not yet set', () => {
    // The source's clock 2 minutes ahead of the system's: its readings are stamped after the
    // moment `load end` gives, but they were committed while the load was on.
    start('A', TEN);
    store.insertReadings([1, 2, 3, 4, 5].map((m) => at(TEN + (m + 2) * MIN)));
    store.endLoad('A', TEN + 5 * MIN);
    store.insertReadings([at(TEN + 8 * MIN)]);
    store.closeEndedLoads(TEN + 9 * MIN);
    expect(times('A')).toEqual([3, 4, 5, 6, 7]);
    // The system clock not set when the command runs (a Pi without RTC, offline): 1970.
    start('B', TEN, 'TRUCK-2');
    store.insertReadings(Array.from({ length: 100 }, (_, i) => at(TEN + i * 1000, 'TRUCK-2')));
    store.endLoad('B', 60_000);
    store.closeEndedLoads(60_001);
    expect(ids('B')).toHaveLength(100);
    // Nothing goes before it is delivered.
    store.purgeAcked();
    expect(rows()).toBe(105);
    store.ackReadings('A', ids('A').at(-1)!, null);
    store.ackReadings('B', ids('B').at(-1)!, null);
    store.purgeAcked();
    expect(rows()).toBe(0);
    expect(store.loadsWithReadings()).toEqual([]);
  });

  it('a point one load parked or sent ahead is still due to the other; a retry goes to the load that parked it', () => {
    start('A', TEN);
    start('B', TEN);
    store.insertReadings([1, 2, 3, 4].map((m) => at(TEN + m * MIN)));
    const [r1, r2, r3, r4] = ids('A');
    store.parkReading(r2, 'A', 400, 'refused', { loadNumber: 'A' }, TEN);
    store.markSent('B', [r4]);
    expect(ids('A')).toEqual([r1, r3, r4]);
    expect(ids('B')).toEqual([r1, r2, r3]);
    store.ackReadings('A', r4, null);
    store.ackReadings('B', r3, null);
    store.purgeAcked();
    // The parked point stays for its dead letter; the rest went.
    expect(store.db.prepare('SELECT id FROM readings').pluck().all()).toEqual([r2]);
    expect(store.counts()).toMatchObject({ readings: 0, deadLetters: 1 });
    expect(store.retryDeadLetters('all')).toBe(1);
    expect(store.retryReadings(10).map((r) => [r.id, r.load_number])).toEqual([[r2, 'A']]);
    expect(store.counts().retryReadings).toBe(1);
    store.retryDone('A', [r2]);
    expect(store.counts()).toMatchObject({ retryReadings: 0, deadLetters: 0 });
    expect(rows()).toBe(0);
  });

  it("finds a load's readings by one range of the resource index, and purges through the undone loads only", () => {
    start('A', TEN);
    store.insertReadings([at(TEN + MIN)]);
    const plan = (sql: string, n: number) => (store.db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...Array<number>(n).fill(1)) as Array<{ detail: string }>).map((r) => r.detail).join('; ');
    expect(plan(CHUNK_QUERY, 5)).toBe('SEARCH readings USING INDEX readings_by_resource (resource_id=? AND id>? AND id<?)');
    const purge = plan(PURGE_RANGE, 2);
    expect(purge).toMatch(/^SEARCH r USING INTEGER PRIMARY KEY \(rowid>\? AND rowid<\?\)/);
    expect(purge).toContain('SEARCH l USING INDEX loads_undone (resource_id=?)');
    expect(purge).not.toMatch(/SCAN (l|loads)\b/);
  });
});

describe('each load its traces and its milestones', () => {
  const DOCK = { lat: 41.8781, lon: -87.6298 }; // Chicago: a pick-up both loads share
  const GARY = { lat: 41.5934, lon: -87.3464 };
  const INDY = { lat: 39.7684, lon: -86.1581 };
  const stop = (sequence: number, type: 'pickup' | 'delivery', p: { lat: number; lon: number }) => ({ sequence, type, latitude: p.lat, longitude: p.lon, radiusM: 300 });
  const config = configSchema.parse({
    api: { scac: TEST_SCAC },
    sampling: { interval_s: 0 },
    milestones: { dwell_s: 60, min_fixes: 2, delay: { enabled: false } },
    sources: [{ type: 'simulator', resource_id: 'TRUCK-1' }],
  });
  /** A fix a minute from `fromMin` (minutes after 10:00) to `toMin`, at `p`. */
  const fixes = (fromMin: number, toMin: number, p: { lat: number; lon: number }): Reading[] =>
    Array.from({ length: toMin - fromMin + 1 }, (_, i) => ({ resourceId: 'TRUCK-1', timeMs: TEN + (fromMin + i) * MIN, lat: p.lat + i * 1e-6, lon: p.lon }));

  it('detection runs per load against its own stops: a shared stop gives each load its milestone, a load sees only its window', () => {
    store.startLoad({ loadNumber: 'A', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [stop(1, 'pickup', DOCK), stop(2, 'delivery', GARY)], nowMs: TEN - 10 * MIN });
    store.startLoad({ loadNumber: 'B', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [stop(1, 'pickup', DOCK), stop(2, 'delivery', INDY)], nowMs: TEN - 10 * MIN });
    const detector = new MilestoneDetector(
      store,
      () => config,
      silent,
      () => {},
    );
    const feed = (batch: Reading[]) => {
      store.insertReadings(batch);
      detector.process(batch);
    };
    feed(fixes(0, 5, DOCK)); // both at the dock
    // C starts while the truck is at the dock: its own arrival, from its first fix.
    store.startLoad({ loadNumber: 'C', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [stop(1, 'pickup', DOCK)], nowMs: TEN + 5.5 * MIN });
    feed(fixes(6, 9, DOCK));
    feed(fixes(10, 12, GARY)); // leaves the dock: A, B and C depart; A arrives at Gary
    const of = (load: string) => store.listMilestones(load).map((m) => [m.code, m.stop, (m.body.time as { dateTime: string }).dateTime.slice(11, 16)]);
    expect(of('A')).toEqual([
      ['X3', 1, '10:00'],
      ['AF', 1, '10:09'],
      ['X1', 2, '10:10'],
    ]);
    expect(of('B')).toEqual([
      ['X3', 1, '10:00'],
      ['AF', 1, '10:09'],
    ]);
    expect(of('C')).toEqual([
      ['X3', 1, '10:06'],
      ['AF', 1, '10:09'],
    ]);
    expect(store.listMilestones().every((m) => m.body.loadNumber === m.loadNumber)).toBe(true);
    expect([store.getLoad('A')?.nextStop, store.getLoad('B')?.nextStop]).toEqual([2, 2]);
  });

  it("each load's trace requests carry its points only, its loadNumber, its next stop and its own key", async () => {
    store.startLoad({ loadNumber: 'A', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [stop(1, 'pickup', DOCK), stop(2, 'delivery', GARY)], nowMs: TEN });
    store.insertReadings(fixes(0, 9, DOCK));
    store.startLoad({ loadNumber: 'B', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [stop(1, 'pickup', GARY), stop(2, 'delivery', INDY)], nowMs: TEN + 10 * MIN });
    store.insertReadings(fixes(10, 14, GARY));
    store.endLoad('A', TEN + 15 * MIN);
    store.insertReadings(fixes(15, 19, GARY));
    store.insertReadings(fixes(20, 24, INDY), false, undefined, undefined, TEN + 25 * MIN);
    // A left its pick-up at 10:05, B its own at 10:18: each load's later points name its next stop.
    recordMilestone(store, config, { loadNumber: 'A', code: 'AF', stop: 1, timeMs: TEN + 5 * MIN, lat: DOCK.lat, lon: DOCK.lon }, TEN + 30 * MIN);
    recordMilestone(store, config, { loadNumber: 'B', code: 'AF', stop: 1, timeMs: TEN + 18 * MIN, lat: GARY.lat, lon: GARY.lon }, TEN + 30 * MIN);

    const sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
    const { url } = await sandbox.start();
    const cfg = configSchema.parse({
      api: { base_url: url, scac: TEST_SCAC, timeout_s: 2 },
      buffer: { path: tmp.buffer },
      sampling: { interval_s: 0 },
      delivery: { poll_interval_ms: 50, max_traces_per_request: 4 },
      sources: [{ type: 'simulator', resource_id: 'TRUCK-1' }],
    });
    const client = new ApiClient({ baseUrl: url, milestonePath: cfg.api.milestone_path, tracePath: cfg.api.trace_path, scac: TEST_SCAC, subscriptionKey: TEST_KEY, timeoutMs: 2000 });
    const sender = new Sender({ store, client, config: cfg, deviceId: 'dev', log: silent });
    try {
      sender.start();
      sender.requestTracePush();
      await waitFor(() => store.counts().readings === 0 && sandbox.milestones.length === 2, 10_000, 'both loads delivered');
      await sender.idle();
      const requests = (load: string) => sandbox.traces.filter((t) => t.body.loadNumber === load);
      const points = (load: string) =>
        requests(load)
          .flatMap((t) => t.body.traces.map((p) => [(Date.parse(p.time.dateTime) - TEN) / MIN, p.stopsequenceNumber ?? null, p.resourceId] as const))
          .sort((a, b) => a[0] - b[0]);
      // A backlog longer than a chunk: each load's newest position first, alone.
      const minutes = (load: string) => requests(load)[0].body.traces.map((p) => (Date.parse(p.time.dateTime) - TEN) / MIN);
      expect([minutes('A'), minutes('B')]).toEqual([[14], [24]]);
      expect(points('A')).toEqual(Array.from({ length: 15 }, (_, m) => [m, m < 5 ? 1 : 2, 'TRUCK-1']));
      expect(points('B')).toEqual(Array.from({ length: 15 }, (_, i) => [10 + i, 10 + i < 18 ? 1 : 2, 'TRUCK-1']));
      // Requests with the same readings, for two loads: two keys, and no duplicate point.
      const keys = sandbox.traces.map((t) => t.idempotencyKey);
      expect(new Set(keys).size).toBe(keys.length);
      expect(sandbox.stats.duplicateTracePoints).toBe(0);
      expect(sandbox.traces.every((t) => t.body.traces.length <= 4)).toBe(true);
      // Stored once: 25 readings for 30 points; all gone once both loads had them.
      expect(rows()).toBe(0);
    } finally {
      await sender.stop();
      await client.close();
      await sandbox.stop();
    }
  });
});

describe('salvage of a buffer with several loads on one truck', () => {
  it('copies each load with its window; each gets what it had not delivered, and nothing it had', () => {
    start('A', TEN);
    start('B', TEN + 2 * MIN);
    store.insertReadings([0, 1, 2, 3, 4, 5].map((m) => at(TEN + m * MIN)));
    const a = ids('A');
    store.ackReadings('A', a[2], null); // A delivered 0-2
    store.parkReading(a[4], 'A', 400, 'refused', { loadNumber: 'A' }, TEN); // 4 refused for A
    store.markSent('B', [a[5]]); // B's newest went ahead
    store.close();
    const old = join(tmp.dir, 'old.db');
    copyFileSync(tmp.buffer, old);
    store = Store.open(join(tmp.dir, 'fresh.db'));
    const report = salvage(old, store);
    expect(report).toMatchObject({ loads: 2, readings: 4, deadLetters: 1, skippedDelivered: 2, skippedNoLoad: 0 });
    expect(times('A')).toEqual([3, 5]);
    expect(times('B')).toEqual([2, 3, 4]);
    // Four readings some load still has to send, the one parked for A (and due to B) among them.
    expect(store.counts()).toMatchObject({ readings: 4, deadLetters: 1 });
    expect(store.listDeadLetters().map((d) => [d.loadNumber, d.kind])).toEqual([['A', 'trace']]);
  });
});

describe('a buffer of schema 6 (written by the previous version) migrates in place', () => {
  /**
   * test/fixtures/buffer-v6/buffer.sqlite was written by the agent's own code at schema 6 (see
   * make.mjs beside it): loads LA (ended, partly delivered, one point parked and one put back
   * for a retry, its newest point sent ahead), LB (active on the same truck after LA, with a
   * reading of just before its start), LC (active, with milestones and stop state), LD
   * (ended and delivered), readings kept without a load, and rows delivered but not purged.
   */
  const fixture = join(ROOT, 'test', 'fixtures', 'buffer-v6', 'buffer.sqlite');

  /** What schema 6 said each load still had to send, read with its own rules. */
  function before(file: string) {
    const db = new Database(file, { readonly: true });
    try {
      expect(db.pragma('user_version', { simple: true })).toBe(6);
      const waiting = db.prepare('SELECT l.load_number AS load, r.id FROM loads l JOIN readings r ON r.load_number = l.load_number WHERE r.state = 0 AND r.id > l.acked_id ORDER BY r.id').all() as Array<{
        load: string;
        id: number;
      }>;
      const byLoad = (state: number) => db.prepare('SELECT load_number AS load, id FROM readings WHERE state = ? ORDER BY id').all(state) as Array<{ load: string; id: number }>;
      return {
        waiting: Object.fromEntries(['LA', 'LB', 'LC', 'LD'].map((l) => [l, waiting.filter((w) => w.load === l).map((w) => w.id)])),
        parked: byLoad(1),
        retry: byLoad(2),
        unassigned: db.prepare('SELECT count(*) FROM readings WHERE load_number IS NULL').pluck().get() as number,
        rows: db.prepare('SELECT count(*) FROM readings').pluck().get() as number,
        loads: db.prepare('SELECT load_number, resource_id, started_ms, ended_ms, next_stop, stops FROM loads ORDER BY load_number').all(),
      };
    } finally {
      db.close();
    }
  }

  it('keeps every reading with its load: nothing queued is lost or sent again, and what comes next goes to the active load', async () => {
    store.close();
    copyFileSync(fixture, tmp.buffer);
    const old = before(tmp.buffer);
    expect(old.waiting.LA.length).toBeGreaterThan(10);
    expect(old.waiting.LB.length).toBeGreaterThan(5);
    expect(old.parked).toHaveLength(1);
    expect(old.retry).toHaveLength(1);

    store = Store.open(tmp.buffer);
    expect(store.db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
    expect(store.db.pragma('integrity_check', { simple: true })).toBe('ok');
    // Each load has exactly what it had, in order; delivered rows stay delivered.
    for (const l of ['LA', 'LB', 'LC', 'LD']) expect(ids(l), l).toEqual(old.waiting[l]);
    expect(store.retryReadings(10).map((r) => [r.id, r.load_number])).toEqual(old.retry.map((r) => [r.id, r.load]));
    expect(store.counts()).toMatchObject({
      readings: old.waiting.LA.length + old.waiting.LB.length + old.waiting.LC.length,
      unassignedReadings: old.unassigned,
      deadLetters: 1,
      retryReadings: 1,
      pendingMilestones: 1,
    });
    expect(store.db.prepare('SELECT load_number, resource_id, started_ms, ended_ms, next_stop, stops FROM loads ORDER BY load_number').all()).toEqual(old.loads);
    expect(store.activeLoadsOf('T1').map((l) => l.loadNumber)).toEqual(['LB']);
    expect(store.stopStates('LC').get(1)?.state).toBe('departed');
    expect(rows()).toBe(old.rows);

    // Delivered against the sandbox: each load's points exactly once, the retry once for LA,
    // the parked point never, the waiting milestone.
    const sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
    const { url } = await sandbox.start();
    const config = configSchema.parse({
      api: { base_url: url, scac: TEST_SCAC, timeout_s: 2 },
      buffer: { path: tmp.buffer },
      sampling: { interval_s: 0 },
      delivery: { poll_interval_ms: 50, retry_initial_s: 0.1, retry_max_s: 0.3 },
      sources: [{ type: 'simulator', resource_id: 'T1' }],
    });
    const client = new ApiClient({ baseUrl: url, milestonePath: config.api.milestone_path, tracePath: config.api.trace_path, scac: TEST_SCAC, subscriptionKey: TEST_KEY, timeoutMs: 2000 });
    const sender = new Sender({ store, client, config, deviceId: 'dev', log: silent });
    try {
      sender.start();
      sender.requestTracePush();
      await waitFor(() => store.counts().readings === 0 && store.counts().retryReadings === 0 && sandbox.milestones.length === 1, 10_000, 'the migrated backlog delivered');
      await sender.idle();
      const got: Record<string, number[]> = {};
      for (const t of sandbox.traces) for (const p of t.body.traces) (got[t.body.loadNumber] ??= []).push(Number(p.references![0].value.split('-')[1]));
      expect(got.LA.sort((a, b) => a - b)).toEqual([...old.waiting.LA, old.retry[0].id].sort((a, b) => a - b));
      expect(got.LB).toEqual(old.waiting.LB);
      expect(got.LC).toEqual(old.waiting.LC);
      expect(got.LD).toBeUndefined();
      expect(sandbox.stats.duplicateTracePoints).toBe(0);
      expect(sandbox.milestones.map((m) => m.body.eventCode)).toEqual(['AF']);
      // Left: the parked point (its dead letter) and the readings kept without a load.
      expect(store.db.prepare('SELECT id FROM readings WHERE state = 1').pluck().all()).toEqual(old.parked.map((p) => p.id));
      expect(rows()).toBe(1 + old.unassigned);

      // The truck drives on: its new readings are the active load's, not the ended one's.
      const last = store.getLoad('LB')!;
      store.insertReadings([{ resourceId: 'T1', timeMs: last.windowFromMs + 3_600_000, lat: 41.9, lon: -87.7 }]);
      expect(ids('LB')).toHaveLength(1);
      expect(ids('LA')).toEqual([]);
    } finally {
      await sender.stop();
      await client.close();
      await sandbox.stop();
    }
  });
});
