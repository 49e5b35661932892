/**
 * Late readings: a reading stamped inside an ended load's window that arrives after the load
 * was closed (an MQTT persistent session replayed after a restart, a gateway uploading its
 * backlog, an exec adapter catching up) is still the load's when it arrives within
 * `loads.late_readings_s` of `load end`, and goes in a later trace request of the load; one
 * arriving later, or stamped after the end, is dropped and counted. A real buffer file, the
 * real ingest and sender, the real sandbox, the real CLI for `status`.
 */
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { Ingest } from '../src/admission/ingest.js';
import { type LoadRow, type StoredReading, Store } from '../src/buffer/store.js';
import { configSchema, type Config } from '../src/config/schema.js';
import { buildTraceChunk } from '../src/delivery/traces.js';
import { createLogger } from '../src/log.js';
import type { Reading } from '../src/reading.js';
import { agentConfig, daemonFixture, runCli, TEST_SCAC, waitFor } from './helpers.js';
import { inProcessSender } from './in-process-sender.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });
const T0 = Date.UTC(2026, 5, 1, 12);
const MIN = 60_000;
const H = 60 * MIN;

let store: Store;
let config: Config;
let ingest: Ingest;
let sender: ReturnType<typeof inProcessSender>;
/** The ingest's clock: when a reading arrives. */
let now = T0;

const fx = daemonFixture({
  afterStop: async () => {
    await sender.stop();
    store.close();
  },
});
beforeEach(async () => {
  const { url } = await fx.sandbox.start();
  // The defaults that matter here: a point a minute (sampling.interval_s) and 6 h of late
  // readings (loads.late_readings_s).
  config = configSchema.parse({
    api: { base_url: url, scac: TEST_SCAC, timeout_s: 2 },
    buffer: { path: join(fx.tmp.dir, 'buffer.db') },
    delivery: { poll_interval_ms: 20, retry_initial_s: 0.05, retry_max_s: 0.2, drain_interval_ms: 0 },
    sources: [{ type: 'simulator', resource_id: 'TRUCK-1' }],
  });
  store = Store.open(config.buffer.path);
  sender = inProcessSender(store, config);
  now = T0;
  ingest = new Ingest(store, { batchSize: 100, flushIntervalMs: 60_000, keepWithoutLoad: false, lateReadingsMs: config.loads.late_readings_s * 1000 }, silent, () => now);
});

const at = (timeMs: number, resourceId = 'TRUCK-1'): Reading => ({ resourceId, timeMs, lat: 41.8, lon: -87.6 + (timeMs % H) / 1e8 });

/** Readings arriving at `atMs`, committed as the daemon does (the queue emptied); how many were kept and how many dropped for no load. */
function arrive(atMs: number, ...readings: Reading[]): { kept: number; dropped: number } {
  now = atMs;
  const { committed, discardedNoLoad } = ingest.stats;
  for (const r of readings) ingest.admit(r);
  ingest.flush();
  return { kept: ingest.stats.committed - committed, dropped: ingest.stats.discardedNoLoad - discardedNoLoad };
}

/** Every point the service took, as the reading id of its traceId, with the load it came in. */
const accepted = () => fx.sandbox.traces.flatMap((t) => t.body.traces.map((p) => ({ id: Number(p.references![0].value.split('-')[1]), load: t.body.loadNumber })));

/** One push, waited for until the buffer has nothing left to send. */
async function push(): Promise<void> {
  const s = sender.get();
  s.requestTracePush();
  await s.kick();
  await waitFor(() => store.loadsWithReadings().length === 0 && store.counts().readings === 0, 10_000, 'the push drained the buffer');
  await s.idle();
}

/** L1 on TRUCK-1 from T0: a reading a minute for 10 minutes, ended at T0 + 10 min and closed by the next commit. */
function endedLoad(): LoadRow {
  store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: T0 });
  expect(arrive(T0 + 10 * MIN, ...Array.from({ length: 10 }, (_, i) => at(T0 + i * MIN)))).toEqual({ kept: 10, dropped: 0 });
  store.endLoad('L1', T0 + 10 * MIN);
  // The truck goes on without a load: its next reading is nobody's, and its commit closes L1.
  expect(arrive(T0 + 11 * MIN, at(T0 + 11 * MIN))).toEqual({ kept: 0, dropped: 1 });
  const l1 = store.getLoad('L1')!;
  expect(l1.endId).toBe(10);
  return l1;
}

describe('a reading stamped inside an ended load window, arriving late', () => {
  it('within loads.late_readings_s of the end: due to the load, and a later push delivers it once', async () => {
    endedLoad();
    await push();
    expect(accepted().map((p) => p.id)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(store.getLoad('L1')!.ackedId).toBe(10);

    // Two hours after the end, a gateway uploads what it held: a reading from 4.5 min into the load.
    expect(arrive(T0 + 2 * H, at(T0 + 4.5 * MIN))).toEqual({ kept: 1, dropped: 0 });
    const late = store.db.prepare('SELECT max(id) FROM readings').pluck().get() as number;
    expect(late).toBeGreaterThan(10);
    // Due to L1, which is open for it again; nothing it had delivered is due again.
    expect(store.loadsWithReadings()).toEqual(['L1']);
    expect(store.backlogs(['L1']).get('L1')).toBe(1);
    expect([...store.iterateReadings('L1')].map((r) => r.id)).toEqual([late]);
    expect(store.getLoad('L1')).toMatchObject({ ackedId: 10, endId: late });

    await push();
    await push();
    // In a request of its own for L1, a minute's sampling notwithstanding (the load sent a
    // point at 9 min already): once, and nothing else again.
    const got = accepted();
    expect(got.slice(10)).toEqual([{ id: late, load: 'L1' }]);
    expect(fx.sandbox.traces).toHaveLength(2);
    expect(fx.sandbox.stats.duplicateTracePoints).toBe(0);
    expect(store.getLoad('L1')).toMatchObject({ ackedId: late, endId: late });
    store.purgeAcked();
    expect(store.db.prepare('SELECT count(*) FROM readings').pluck().get()).toBe(0);
  });

  it('also while the load still has its own readings to send: they go together, each once', async () => {
    endedLoad();
    expect(arrive(T0 + H, at(T0 + 2.5 * MIN), at(T0 + 6.5 * MIN))).toEqual({ kept: 2, dropped: 0 });
    await push();
    const ids = accepted().map((p) => p.id);
    expect(ids.slice(0, 10)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(ids.slice(10)).toEqual([11, 12]);
    expect(fx.sandbox.stats.duplicateTracePoints).toBe(0);
  });

  it('stamped after the end, or arriving after loads.late_readings_s (or with it 0): dropped and counted', () => {
    endedLoad();
    const rows = () => store.db.prepare('SELECT count(*) FROM readings').pluck().get() as number;
    // Stamped after the end: never the load's, however soon it comes.
    expect(arrive(T0 + 20 * MIN, at(T0 + 10 * MIN), at(T0 + 15 * MIN))).toEqual({ kept: 0, dropped: 2 });
    // Stamped in the window: the last second of the 6 h still takes it, the next one not.
    expect(arrive(T0 + 10 * MIN + 6 * H - 1000, at(T0 + 3 * MIN))).toEqual({ kept: 1, dropped: 0 });
    expect(arrive(T0 + 10 * MIN + 6 * H + 1000, at(T0 + 3.5 * MIN))).toEqual({ kept: 0, dropped: 1 });
    expect(rows()).toBe(11);
    // Off: nothing after the close joins the load.
    const off = new Ingest(store, { ...ingest.options, lateReadingsMs: 0 }, silent, () => T0 + H);
    off.admit(at(T0 + 5.5 * MIN));
    off.flush();
    expect(off.stats).toMatchObject({ committed: 0, discardedNoLoad: 1 });
    expect(rows()).toBe(11);
    expect(store.backlogs(['L1']).get('L1')).toBe(11);
  });

  it('a reading of the window kept without a load while late readings were off joins the load with the next late one, and is purged once delivered', () => {
    endedLoad();
    const keep = new Ingest(store, { ...ingest.options, keepWithoutLoad: true, lateReadingsMs: 0 }, silent, () => T0 + H);
    keep.admit(at(T0 + 1.5 * MIN));
    keep.flush();
    expect(store.counts().unassignedReadings).toBe(1);
    // Another load delivers and purges: the purge's floor passes the unassigned row.
    store.startLoad({ loadNumber: 'L2', resourceId: 'TRUCK-2', resourceType: 'Truck', stops: [], nowMs: T0 });
    store.insertReadings([at(T0 + H, 'TRUCK-2'), at(T0 + H + MIN, 'TRUCK-2')]);
    store.ackReadings('L1', 10, null);
    store.ackReadings('L2', 13, null);
    store.purgeAcked();
    expect(store.db.prepare('SELECT id FROM readings ORDER BY id').pluck().all()).toEqual([11]);

    expect(arrive(T0 + 2 * H, at(T0 + 7.5 * MIN))).toEqual({ kept: 1, dropped: 0 });
    expect([...store.iterateReadings('L1')].map((r) => r.id)).toEqual([11, 14]);
    expect(store.counts()).toMatchObject({ readings: 2, unassignedReadings: 0 });
    store.ackReadings('L1', 14, null);
    store.purgeAcked();
    expect(store.db.prepare('SELECT count(*) FROM readings').pluck().get()).toBe(0);
  });
});

describe('sampling of late readings', () => {
  /** L1 ended at 10 min, its last point sent the one at 9 min. */
  const load: LoadRow = {
    loadNumber: 'L1',
    resourceId: 'TRUCK-1',
    resourceType: 'Truck',
    stops: [],
    startedMs: T0,
    endedMs: T0 + 10 * MIN,
    windowFromMs: T0,
    windowUntilMs: T0 + 10 * MIN,
    endId: 100,
    nextStop: null,
    lastSampleMs: T0 + 9 * MIN,
    ackedId: 10,
    correlationId: null,
    cursorFix: null,
  };
  const row = (id: number, timeMs: number): StoredReading => ({
    id,
    resource_id: 'TRUCK-1',
    load_number: 'L1',
    time_ms: timeMs,
    lat: 41.8,
    lon: -87.6,
    speed: null,
    heading: null,
    odometer: null,
    temp_c: null,
  });
  const opts = {
    samplingMs: MIN,
    maxPoints: 500,
    dateForm: 'utc' as const,
    deviceId: 'dev',
    temperatureMaxAgeMs: 0,
    temperatureUnit: 'C' as const,
    extraFields: {},
    temperatureWithoutFix: 'last_fix' as const,
    maxFixAgeMs: 30 * MIN,
  };

  it('older than the last point by an interval or more: points, a minute apart among themselves; closer to it: sampled away', () => {
    // 10 s apart from 2:00 to 4:50, then one 40 s before the last point sent (8:20).
    const late = Array.from({ length: 18 }, (_, i) => row(11 + i, T0 + 2 * MIN + i * 10_000));
    const chunk = buildTraceChunk(load, [...late, row(29, T0 + 8 * MIN + 20_000)], () => undefined, opts, true)!;
    expect(chunk.body!.traces.map((t) => t.time.dateTime)).toEqual(['2026-06-01T12:02:00Z', '2026-06-01T12:03:00Z', '2026-06-01T12:04:00Z']);
    // Every one of them consumed; the sampling point stays the newest point sent.
    expect(chunk).toMatchObject({ lastId: 29, lastSampleMs: T0 + 9 * MIN });
    // Built again from the same readings: the same request, the same key.
    expect(buildTraceChunk(load, [...late, row(29, T0 + 8 * MIN + 20_000)], () => undefined, opts, true)!.idempotencyKey).toBe(chunk.idempotencyKey);
  });

  it('with sampling.interval_s = 0 every late reading is a point', () => {
    const chunk = buildTraceChunk(load, [row(11, T0 + 8 * MIN + 59_000), row(12, T0 + 2 * MIN), row(13, T0 + 2 * MIN)], () => undefined, { ...opts, samplingMs: 0 }, true)!;
    expect(chunk.readingIds).toEqual([11, 12, 13]);
  });
});

describe('status', () => {
  it('shows the ended loads still taking late readings, and until when (text and --json)', async () => {
    const realNow = Date.now();
    store.startLoad({ loadNumber: 'L0', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: realNow - 9 * H });
    store.endLoad('L0', realNow - 7 * H);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: realNow - 3 * H });
    store.insertReadings([at(realNow - 2 * H), at(realNow - 1.5 * H)]);
    store.endLoad('L1', realNow - H);
    store.closeEndedLoads(realNow);
    store.startLoad({ loadNumber: 'L2', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: realNow - H });
    store.close();
    const cfg = agentConfig(fx.tmp.dir, config.api.base_url);

    const json = await runCli(['status', '--json', '--config', cfg]);
    expect(json.code).toBe(3);
    const report = JSON.parse(json.stdout) as { lateLoads: Array<{ loadNumber: string; resourceId: string; endedMs: number; lateUntilMs: number; backlog: number }>; activeLoads: Array<{ loadNumber: string }> };
    expect(report.lateLoads).toEqual([{ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', endedMs: realNow - H, lateUntilMs: realNow + 5 * H, backlog: 2 }]);
    expect(report.activeLoads.map((l) => l.loadNumber)).toEqual(['L2']);

    const text = await runCli(['status', '--config', cfg]);
    expect(text.stdout).toMatch(/\nended loads: {2}TRUCK-1: L1 \(ended \S+ \S+ \(1 h 0 min ago\), takes late readings of its window until \S+ \S+ \(in [45] h \d+ min\), 2 readings to send\)\n/);
    expect(text.stdout).not.toContain('L0');
    store = Store.open(config.buffer.path);
  });
});
