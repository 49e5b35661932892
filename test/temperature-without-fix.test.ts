/**
 * Temperature-only readings of a load (a parked reefer's 1-Wire sensor, no fix): sent at the
 * resource's last fix, or acknowledged and counted as dropped, never left waiting. Against
 * the real sandbox on port 0 and a real SQLite file.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ApiClient } from '../src/api/client.js';
import { COUNTER_DROPPED_NO_FIX } from '../src/buffer/chunk-ack.js';
import { migrate } from '../src/buffer/migrations.js';
import { Store } from '../src/buffer/store.js';
import { buildStatus, formatStatus } from '../src/cli/status.js';
import { configSchema, type Config } from '../src/config/schema.js';
import { Sender } from '../src/delivery/sender.js';
import type { Agent } from '../src/agent.js';
import { healthProblems } from '../src/health.js';
import { createLogger } from '../src/log.js';
import { TEST_SCAC, waitFor, daemonFixture } from './helpers.js';
import { testClient } from './in-process-sender.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });
const T0 = Date.UTC(2026, 5, 1, 12);
const MIN = 60_000;
const fx = daemonFixture();
let store: Store;
let client: ApiClient | undefined;
let sender: Sender | undefined;

beforeEach(async () => {
  await fx.sandbox.start();
});
afterEach(async () => {
  await stopSender();
  store.close();
});

function configWith(traces: Record<string, unknown> = {}): Config {
  return configSchema.parse({
    api: { base_url: fx.sandbox.url, scac: TEST_SCAC, timeout_s: 2 },
    buffer: { path: join(fx.tmp.dir, 'b.db') },
    sampling: { interval_s: 60 },
    traces,
    delivery: { poll_interval_ms: 20, retry_initial_s: 0.05, retry_max_s: 0.2, drain_interval_ms: 0 },
    sources: [{ type: 'simulator', resource_id: 'T1' }],
  });
}

async function stopSender() {
  await sender?.stop();
  await client?.close();
  sender = undefined;
  client = undefined;
}

/** One trace push to its end (purge included), with a sender of its own. */
async function push(config: Config) {
  client = testClient(config);
  sender = new Sender({ store, client, config, deviceId: 'dev', log: silent });
  sender.start();
  sender.requestTracePush();
  await waitFor(() => sender!.status.lastTracePushMs !== null, 5000, 'the push to end');
  await sender.idle();
  const status = sender.status;
  await stopSender();
  return status;
}

const fix = (timeMs: number) => ({ resourceId: 'T1', timeMs, lat: 41.8, lon: -87.6 });
/** A reefer reading with no position: `n` of them, a minute apart from `fromMs`. */
const temperatures = (n: number, fromMs: number) => Array.from({ length: n }, (_, i) => ({ resourceId: 'T1', timeMs: fromMs + i * MIN, temperatureC: -18 + i / 10 }));
const points = () => fx.sandbox.traces.flatMap((t) => t.body.traces);
const traceIds = () => points().map((p) => p.references![0].value);
const rowsLeft = () => store.db.prepare('SELECT count(*) FROM readings').pluck().get() as number;

/** What /healthz would say an hour after these pushes, with pushes due every 15 minutes. */
function healthLater(config: Config, lastSuccessMs: number | null): string[] {
  const agent = {
    sender: { status: { lastSuccessMs } },
    store,
    pushIntervalMs: () => 15 * MIN,
    startedAt: Date.now(),
    ingest: { stats: { trouble: null } },
    config,
    sources: [],
    clockState: () => ({ state: 'synchronised', from: 'test', offsetMs: null, held: 0, heldExpired: 0 }),
    pageView: () => undefined,
  } as unknown as Agent;
  return healthProblems(agent, Date.now() + 60 * MIN);
}

describe('temperature-only readings of a load', () => {
  it('go out at the last fix before them, from a later push after a restart and the fix purged; nothing stays due, health is ok', async () => {
    const config = configWith();
    store = Store.open(config.buffer.path);
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Trailer', stops: [], nowMs: T0 });
    store.insertReadings([fix(T0)]);
    await push(config);
    expect(traceIds()).toEqual(['dev-1']);
    // Delivered and purged: the fix's row is gone, and so is the agent.
    expect(rowsLeft()).toBe(0);
    store.close();

    // The tractor leaves; the trailer's sensor goes on, a reading a minute, for 20 minutes.
    store = Store.open(config.buffer.path);
    store.insertReadings(temperatures(20, T0 + MIN));
    const status = await push(config);
    const sent = points().slice(1);
    expect(sent.map((p) => p.references![0].value)).toEqual(Array.from({ length: 20 }, (_, i) => `dev-${i + 2}`));
    expect(sent.every((p) => p.coordinate.latitude === 41.8 && p.coordinate.longitude === -87.6)).toBe(true);
    expect(sent.map((p) => p.temperature?.value)).toEqual(temperatures(20, 0).map((r) => r.temperatureC));
    // Each at its own time, its temperature too.
    expect(sent[0].time.dateTime).toBe('2026-06-01T07:01:00.000-05:00');
    expect(sent[0].temperature?.dateTime).toBe(sent[0].time.dateTime);
    expect(store.counts().readings).toBe(0);
    expect(store.counters()[COUNTER_DROPPED_NO_FIX]).toBeUndefined();
    expect(healthLater(config, status.lastSuccessMs)).toEqual([]);
  });

  it('with no fix within milestones.max_fix_age_s are acknowledged and counted as dropped: nothing due, status says so, health is ok', async () => {
    const config = configWith();
    store = Store.open(config.buffer.path);
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Trailer', stops: [], nowMs: T0 });
    store.insertReadings([fix(T0)]);
    await push(config);
    // 31 minutes later the sensor reads again; the fix is past max_fix_age_s (1800 s).
    store.insertReadings(temperatures(5, T0 + 31 * MIN));
    const status = await push(config);
    expect(traceIds()).toEqual(['dev-1']);
    expect(store.counts().readings).toBe(0);
    expect(store.counters()[COUNTER_DROPPED_NO_FIX]).toBe(5);
    expect(formatStatus(buildStatus(store, { deviceId: 'dev', configFile: '(test)', buffer: config.buffer.path }))).toMatch(/^dropped: +5 readings \(no fix\)$/m);
    expect(healthLater(config, status.lastSuccessMs)).toEqual([]);
    // Once acknowledged they are the purge's: nothing waits for a fix that never came.
    expect(rowsLeft()).toBe(0);
  });

  it('of a resource that never had a fix are dropped and counted the same way', async () => {
    const config = configWith();
    store = Store.open(config.buffer.path);
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Trailer', stops: [], nowMs: T0 });
    store.insertReadings(temperatures(3, T0));
    const status = await push(config);
    expect(fx.sandbox.traces).toEqual([]);
    expect(store.counts().readings).toBe(0);
    expect(store.counters()[COUNTER_DROPPED_NO_FIX]).toBe(3);
    expect(healthLater(config, status.lastSuccessMs)).toEqual([]);
  });

  it('with traces.temperature_without_fix = "drop" are acknowledged and counted, however recent the fix', async () => {
    const config = configWith({ temperature_without_fix: 'drop' });
    store = Store.open(config.buffer.path);
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Trailer', stops: [], nowMs: T0 });
    store.insertReadings([fix(T0), ...temperatures(10, T0 + MIN)]);
    const status = await push(config);
    expect(traceIds()).toEqual(['dev-1']);
    expect(store.counts().readings).toBe(0);
    expect(store.counters()[COUNTER_DROPPED_NO_FIX]).toBe(10);
    expect(healthLater(config, status.lastSuccessMs)).toEqual([]);
  });

  it('while fixes keep coming ride on their points, as before: none is a point of its own or dropped', async () => {
    const config = configWith();
    store = Store.open(config.buffer.path);
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Trailer', stops: [], nowMs: T0 });
    // A fix every 10 s and, from another source, a temperature every 30 s between them.
    const rows = Array.from({ length: 60 }, (_, i) => (i % 4 === 3 ? { resourceId: 'T1', timeMs: T0 + i * 10_000 + 5000, temperatureC: -18 } : fix(T0 + i * 10_000)));
    store.insertReadings(rows);
    await push(config);
    const sent = points();
    expect(sent.length).toBeGreaterThan(5);
    expect(sent.every((p) => Number(p.references![0].value.split('-')[1]) % 4 !== 0)).toBe(true);
    expect(sent.slice(1).every((p) => p.temperature?.value === -18)).toBe(true);
    expect(store.counters()[COUNTER_DROPPED_NO_FIX]).toBeUndefined();
  });
});

describe("the fix at a load's cursor", () => {
  it('is found for the loads of a buffer of schema 7 as it migrates, and taken by a load started afterwards', () => {
    const path = join(fx.tmp.dir, 'b.db');
    const db = new Database(path);
    migrate(db, 7);
    const load = db.prepare("INSERT INTO loads (load_number, resource_id, resource_type, started_ms, window_from_ms, acked_id) VALUES (?, ?, 'Trailer', ?, ?, ?)");
    const reading = db.prepare('INSERT INTO readings (id, resource_id, time_ms, lat, lon, temp_c, state) VALUES (?, ?, ?, ?, ?, ?, 0)');
    // A: its fix is below the cursor, still in the buffer.
    load.run('A', 'T1', T0, T0, 1);
    reading.run(1, 'T1', T0, 41.8, -87.6, null);
    reading.run(2, 'T1', T0 + MIN, null, null, -18);
    // B: its fix was purged; the resource's last fix is older than its next reading.
    db.prepare('INSERT INTO last_fix (resource_id, time_ms, lat, lon) VALUES (?, ?, ?, ?)').run('T2', T0, 41, -87);
    load.run('B', 'T2', T0, T0, 5);
    reading.run(6, 'T2', T0 + MIN, null, null, -18);
    // C: the resource's last fix is newer than the reading after the cursor: not before it.
    db.prepare('INSERT INTO last_fix (resource_id, time_ms, lat, lon) VALUES (?, ?, ?, ?)').run('T3', T0 + 10 * MIN, 40, -86);
    load.run('C', 'T3', T0, T0, 6);
    reading.run(7, 'T3', T0, null, null, -18);
    db.close();

    store = Store.open(path);
    expect(store.getLoad('A')!.cursorFix).toEqual({ timeMs: T0, lat: 41.8, lon: -87.6 });
    expect(store.getLoad('B')!.cursorFix).toEqual({ timeMs: T0, lat: 41, lon: -87 });
    expect(store.getLoad('C')!.cursorFix).toBeNull();
    expect(store.startLoad({ loadNumber: 'D', resourceId: 'T3', resourceType: 'Trailer', stops: [], nowMs: T0 + 20 * MIN }).cursorFix).toEqual({ timeMs: T0 + 10 * MIN, lat: 40, lon: -86 });
    expect(store.startLoad({ loadNumber: 'E', resourceId: 'T9', resourceType: 'Trailer', stops: [], nowMs: T0 }).cursorFix).toBeNull();
  });
});
