/**
 * How the request ledger (a request fixed once, with its key and points), late readings and
 * parked trace requests meet: a lost answer followed by a 503, temperature-only readings that
 * arrive late for a load already delivered, and a trace request refused whole that holds
 * temperature-only readings or a kept traceId. Each against the real sandbox on port 0 and a
 * real SQLite file.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Ingest } from '../src/admission/ingest.js';
import type { ApiClient } from '../src/api/client.js';
import { COUNTER_DROPPED_NO_FIX } from '../src/buffer/chunk-ack.js';
import { Store } from '../src/buffer/store.js';
import { configSchema, type Config } from '../src/config/schema.js';
import { Sender } from '../src/delivery/sender.js';
import { createLogger } from '../src/log.js';
import type { Reading } from '../src/reading.js';
import type { SandboxEvent } from '../src/sandbox/server.js';
import { TEST_SCAC, waitFor, daemonFixture } from './helpers.js';
import { testClient } from './in-process-sender.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });
const MIN = 60_000;
const H = 60 * MIN;

const fx = daemonFixture({ sandbox: { onRequest: (e) => events.push(e) } });
let store: Store | undefined;
let ingest: Ingest | undefined;
let client: ApiClient | undefined;
let sender: Sender | undefined;
let config: Config;
let events: SandboxEvent[];

beforeEach(async () => {
  events = [];
  const { url } = await fx.sandbox.start();
  config = configSchema.parse({
    api: { base_url: url, scac: TEST_SCAC, timeout_s: 2 },
    buffer: { path: join(fx.tmp.dir, 'b.db') },
    sampling: { interval_s: 60 },
    delivery: { poll_interval_ms: 20, retry_initial_s: 0.05, retry_max_s: 0.2, drain_interval_ms: 0 },
    sources: [{ type: 'simulator', resource_id: 'T1' }],
  });
  store = Store.open(config.buffer.path);
});
afterEach(async () => {
  await sender?.stop();
  await client?.close();
  ingest?.stop();
  sender = undefined;
  client = undefined;
  ingest = undefined;
  store?.close();
  store = undefined;
});

function db(): Store {
  if (!store) throw new Error('no store');
  return store;
}
function start(): Sender {
  client = testClient(config);
  sender = new Sender({ store: db(), client, config, deviceId: 'dev', log: silent });
  sender.start();
  return sender;
}
const fixAt = (timeMs: number, resourceId = 'T1'): Reading => ({ resourceId, timeMs, lat: 41.8, lon: -87.6 + (timeMs % H) / 1e8 });
const tempAt = (timeMs: number, temperatureC: number, resourceId = 'T1'): Reading => ({ resourceId, timeMs, temperatureC });
/** The traceId of every point of every accepted trace request, by request. */
const requestRefs = () => fx.sandbox.traces.map((t) => t.body.traces.map((p) => p.references![0].value));
const points = () => fx.sandbox.traces.flatMap((t) => t.body.traces);
const traceEvents = () => events.filter((e) => e.kind === 'trace');
const readingIds = () => db().db.prepare('SELECT id FROM readings ORDER BY id').pluck().all() as number[];
const devIds = (ids: number[]) => ids.map((id) => `dev-${id}`);
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe('a fixed request meets a lost answer, a 503 and new readings', () => {
  it('a request whose answer was lost and whose retry met a 503 goes again with the same key and points; readings committed meanwhile go in the next request', async () => {
    const store = db();
    const T0 = Date.now() - 3 * H;
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 });
    store.insertReadings([0, 1, 2, 3, 4, 5].map((m) => fixAt(T0 + m * MIN)));

    // The service takes the first request (ids 1-6), but its answer is lost.
    fx.sandbox.setFaults({ loseResponseNext: 1 });
    const s = start();
    s.requestTracePush();
    await s.kick();
    await s.idle();
    expect(fx.sandbox.traces).toHaveLength(1);
    const key = fx.sandbox.traces[0].idempotencyKey!;
    expect(key).toBeTruthy();
    expect(store.requests.fixed('L1', 'chunk')).toMatchObject({ pointIds: range(1, 6), key });

    // The truck moves on (ids 7-9), and the retry of the request meets a 503 (held until seen).
    store.insertReadings([7, 8, 9].map((m) => fixAt(T0 + m * MIN)));
    fx.sandbox.setFaults({ forceStatus: 503 });
    s.requestTracePush();
    await waitFor(() => traceEvents().some((e) => e.status === 503), 5000, 'the retry to meet a 503');
    await waitFor(() => s.status.consecutiveFailures >= 2, 5000, 'the 503 to be taken as a failure');
    await s.idle();
    // The 503 leaves the request as it was fixed: the same points, the same key.
    expect(store.requests.fixed('L1', 'chunk')).toMatchObject({ pointIds: range(1, 6), key });

    fx.sandbox.setFaults({ forceStatus: 0 });
    await waitFor(
      () => {
        s.requestTracePush();
        return fx.sandbox.traces.length >= 3 && store.requests.fixed('L1', 'chunk') === undefined && store.backlogs(['L1']).get('L1') === 0;
      },
      5000,
      'the repeated request and the new readings to be taken',
    );
    await s.idle();

    expect(requestRefs()).toEqual([devIds(range(1, 6)), devIds(range(1, 6)), devIds([7, 8, 9])]);
    const keys = fx.sandbox.traces.map((t) => t.idempotencyKey);
    expect(keys[1]).toBe(key);
    expect(keys[2]).toBeTruthy();
    expect(keys[2]).not.toBe(key);
    // The statuses seen: the lost answer (0), the 503(s), then two answered requests.
    const statuses = traceEvents().map((e) => e.status);
    expect(statuses[0]).toBe(0);
    expect(statuses.slice(1, -2).every((st) => st === 503)).toBe(true);
    expect(statuses.slice(1, -2).length).toBeGreaterThanOrEqual(1);
    expect(statuses.slice(-2)).toEqual([200, 200]);
    // Only the repeated request's points are duplicates, and only once.
    expect(fx.sandbox.stats.duplicateTracePoints).toBe(6);
    expect(fx.sandbox.stats.duplicateRequests).toBe(1);
  });
});

describe('late temperature-only readings of a load already delivered', () => {
  it('temperatures stamped inside an ended, delivered load that arrive within loads.late_readings_s are sent with their temperature or counted as dropped, never acknowledged silently', async () => {
    const store = db();
    const T0 = Date.UTC(2026, 5, 1, 12);
    let now = T0;
    const ing = new Ingest(store, { batchSize: 100, flushIntervalMs: 60_000, keepWithoutLoad: false, lateReadingsMs: config.loads.late_readings_s * 1000 }, silent, () => now);
    ingest = ing;
    const arrive = (atMs: number, readings: Reading[]) => {
      now = atMs;
      for (const r of readings) expect(ing.admit(r)).toBeUndefined();
      ing.flush();
    };
    const s = start();
    const push = async () => {
      s.requestTracePush();
      await s.kick();
      await waitFor(() => store.loadsWithReadings().length === 0, 5000, 'the load to have nothing left to send');
      await s.idle();
    };

    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 });
    arrive(
      T0 + 10 * MIN,
      range(0, 9).map((m) => fixAt(T0 + m * MIN)),
    );
    store.endLoad('L1', T0 + 10 * MIN);
    arrive(T0 + 11 * MIN, [fixAt(T0 + 11 * MIN)]);
    await push();
    const first = points().length;
    expect(first).toBeGreaterThan(0);
    expect(points().some((p) => p.temperature)).toBe(false);

    // A reefer controller's backlog: six temperatures without a fix, stamped inside the load's
    // window, arrive an hour later (well within loads.late_readings_s).
    expect(config.loads.late_readings_s * 1000).toBeGreaterThan(H);
    const temps = [-18, -17, -16, -15, -14, -13];
    arrive(
      T0 + H,
      [2.2, 3.2, 4.2, 5.2, 6.2, 7.2].map((m, i) => tempAt(T0 + m * MIN, temps[i])),
    );
    expect(store.backlogs(['L1']).get('L1')).toBe(6);
    await push();

    const late = points().slice(first);
    const sentTemps = late.filter((p) => p.temperature).map((p) => p.temperature!.value);
    const dropped = store.counters()[COUNTER_DROPPED_NO_FIX] ?? 0;
    // Every late temperature is either a point with its temperature, or counted as dropped.
    expect(sentTemps.length + dropped).toBe(6);
    for (const t of sentTemps) expect(temps).toContain(t);
    // Sent ones are placed at a fix of the load.
    const fixes = range(0, 9).map((m) => fixAt(T0 + m * MIN));
    for (const p of late) expect(fixes.some((f) => f.lat === p.coordinate.latitude && f.lon === p.coordinate.longitude)).toBe(true);
    // Here the fix before each one is in the buffer: all six go, with their temperatures.
    expect(sentTemps.sort((a, b) => a - b)).toEqual(temps);
    expect(dropped).toBe(0);
    expect(store.backlogs(['L1']).get('L1') ?? 0).toBe(0);
  });
});

describe('a trace request refused whole, then taken', () => {
  it('the retry of a parked request sends every parked reading, the temperature-only ones included, and no row is purged unsent', async () => {
    const store = db();
    const T0 = Date.now() - 3 * H;
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 });
    store.insertReadings([0, 1, 2].map((m) => ({ ...fixAt(T0 + m * MIN), lat: 41.8, lon: -87.6 + m / 1000 })));
    const s = start();
    s.requestTracePush();
    await s.kick();
    await s.idle();
    expect(requestRefs()).toEqual([devIds([1, 2, 3])]);

    // The service refuses the load's requests now; temperatures without a fix (ids 4-9) and
    // fixes (ids 10-12) follow, and the load ends and is closed.
    fx.sandbox.setFaults({ rejectLoads: ['L1'] });
    store.insertReadings([...range(5, 10).map((m) => tempAt(T0 + m * MIN, -17 + m / 10)), ...range(12, 14).map((m) => ({ resourceId: 'T1', timeMs: T0 + m * MIN, lat: 41.9, lon: -87.6 + m / 1000 }))]);
    store.endLoad('L1', T0 + 20 * MIN);
    store.closeEndedLoads(Date.now());
    s.requestTracePush();
    await waitFor(() => store.listDeadLetters().length > 0, 5000, 'the refused request to be parked');
    await s.idle();
    const parked = store.listDeadLetters();
    expect(parked).toHaveLength(1);
    expect(parked[0].kind).toBe('trace');
    const parkedIds = parked[0].recordIds!;
    expect(parkedIds).toEqual(range(4, 12));

    // While parked, a purge keeps every parked row.
    store.purgeAcked();
    expect(readingIds()).toEqual(expect.arrayContaining(parkedIds));

    fx.sandbox.setFaults({ rejectLoads: [] });
    await waitFor(() => fx.sandbox.traces.length >= 2 && store.listDeadLetters().length === 0, 5000, 'the parked request to be taken');
    await s.idle();

    expect(fx.sandbox.traces).toHaveLength(2);
    const retried = fx.sandbox.traces[1].body.traces;
    expect(retried.map((p) => p.references![0].value)).toEqual(devIds(parkedIds));
    // The temperature-only readings (ids 4-9, minutes 5-10) went with their own temperatures.
    expect(retried.slice(0, 6).map((p) => p.temperature?.value)).toEqual(range(5, 10).map((m) => -17 + m / 10));
    expect(fx.sandbox.stats.duplicateTracePoints).toBe(0);
    expect(store.counters()[COUNTER_DROPPED_NO_FIX] ?? 0).toBe(0);
    expect(store.backlogs(['L1']).get('L1') ?? 0).toBe(0);

    // Every row is gone only once it was sent.
    store.purgeAcked();
    expect(readingIds()).toEqual([]);
    expect(
      points()
        .map((p) => p.references![0].value)
        .sort(),
    ).toEqual(devIds(range(1, 12)).sort());
  });

  it('a kept traceId (readings.trace_id, e.g. salvaged) survives the retry of a parked request', async () => {
    const store = db();
    const T0 = Date.now() - 3 * H;
    fx.sandbox.setFaults({ rejectLoads: ['L1'] });
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 });
    store.insertReadings([
      ...range(0, 5).map((m) => ({ resourceId: 'T1', timeMs: T0 + m * MIN, lat: 41.8, lon: -87.6 + m / 1000, temperatureC: -18 })),
      ...range(7, 12).map((m) => tempAt(T0 + m * MIN, -17 + m / 10)),
    ]);
    store.endLoad('L1', T0 + 20 * MIN);
    store.closeEndedLoads(Date.now());
    // Reading 3 came from another buffer (salvaged): it keeps the traceId it went with there.
    store.db.prepare("UPDATE readings SET trace_id = 'olddev-77' WHERE id = 3").run();

    const s = start();
    s.requestTracePush();
    await waitFor(() => store.listDeadLetters().length > 0, 5000, 'the refused request to be parked');
    await s.idle();
    const parked = store.listDeadLetters();
    expect(parked).toHaveLength(1);
    expect(parked[0].recordIds).toEqual(range(1, 12));
    expect(fx.sandbox.traces).toHaveLength(0);

    fx.sandbox.setFaults({ rejectLoads: [] });
    await waitFor(() => fx.sandbox.traces.length >= 1 && store.listDeadLetters().length === 0, 5000, 'the parked request to be taken');
    await s.idle();

    expect(fx.sandbox.traces).toHaveLength(1);
    const refs = requestRefs()[0];
    expect(refs).toEqual(['dev-1', 'dev-2', 'olddev-77', ...devIds(range(4, 12))]);
    expect(refs).not.toContain('dev-3');
    expect(fx.sandbox.traces[0].body.traces[2].temperature).toBeTruthy();
  });
});
