import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ApiClient } from '../src/api/client.js';
import { Store } from '../src/buffer/store.js';
import { backoffMs, classify, retryAfterMs } from '../src/delivery/classify.js';
import { Sender } from '../src/delivery/sender.js';
import { configSchema, type Config } from '../src/config/schema.js';
import { createLogger } from '../src/log.js';
import { recordMilestone } from '../src/milestones/record.js';
import { TEST_SCAC, waitFor, daemonFixture } from './helpers.js';
import { testClient } from './in-process-sender.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });
const fx = daemonFixture();
let store: Store;
let sender: Sender;
let client: ApiClient;
let config: Config;

/** When the loads start: their windows hold the readings, which are stamped from then on. */
const T0 = Date.UTC(2026, 5, 1, 12);

async function setup(baseUrl?: string) {
  const { url } = await fx.sandbox.start();
  config = configSchema.parse({
    api: { base_url: baseUrl ?? url, scac: TEST_SCAC, timeout_s: 2 },
    buffer: { path: join(fx.tmp.dir, 'b.db') },
    sampling: { interval_s: 0 },
    delivery: { poll_interval_ms: 50, retry_initial_s: 0.1, retry_max_s: 0.3 },
    sources: [{ type: 'simulator', resource_id: 'T1' }],
  });
  store = Store.open(config.buffer.path);
  client = testClient(config);
  sender = new Sender({ store, client, config, deviceId: 'dev', log: silent });
  store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [{ sequence: 1, type: 'pickup' }], nowMs: T0 });
}

function addReadings(n: number) {
  store.insertReadings(Array.from({ length: n }, (_, i) => ({ resourceId: 'T1', timeMs: T0 + i * 1000, lat: 41.8, lon: -87.6 + i * 1e-4, temperatureC: 3 })));
}
afterEach(async () => {
  await sender?.stop();
  await client?.close();
  store?.close();
  (sender as unknown) = undefined;
  (client as unknown) = undefined;
  (store as unknown) = undefined;
});

describe('sender against the sandbox', () => {
  it('sends a committed milestone within the poll interval, with the interface E headers', async () => {
    await setup();
    sender.start();
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3', stop: 1 });
    await waitFor(() => fx.sandbox.milestones.length === 1, 3000, 'the milestone');
    const got = fx.sandbox.milestones[0];
    expect(got.headers.carrierscac).toBe(TEST_SCAC);
    expect(got.headers.accept).toBe('application/json');
    expect(got.headers['content-type']).toBe('application/json');
    expect(got.headers['idempotency-key']).toBe(got.body.references!.find((r) => r.name === 'milestoneId')!.value);
    await waitFor(() => store.counts().pendingMilestones === 0, 2000, 'the milestone marked sent');
    expect(store.counts().sentMilestones).toBe(1);
  });

  it('pushes traces only when due, in chunks, and removes readings only after the 2xx', async () => {
    await setup();
    config.delivery.max_traces_per_request = 40;
    addReadings(100);
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    sender.start();
    // A whole delivery pass: milestones are immediate; traces wait for the schedule.
    await sender.kick();
    expect(fx.sandbox.milestones).toHaveLength(1);
    expect(fx.sandbox.traces).toHaveLength(0);
    sender.requestTracePush();
    await waitFor(() => store.counts().readings === 0, 5000, 'the backlog drained');
    // A backlog longer than one chunk: the newest position goes first, then oldest first.
    expect(fx.sandbox.traces.map((t) => t.body.traces.length)).toEqual([1, 40, 40, 19]);
    const ids = fx.sandbox.traces.map((t) => t.body.traces.map((p) => Number(p.references![0].value.split('-')[1])));
    expect(ids[0]).toEqual([100]);
    expect(ids.slice(1).flat()).toEqual(Array.from({ length: 99 }, (_, i) => i + 1));
    expect(fx.sandbox.stats.duplicateTracePoints).toBe(0);
  });

  it('drains a depot backlog one chunk per load in turn, oldest first, then deletes what was delivered', async () => {
    await setup();
    config.delivery.max_traces_per_request = 10;
    store.startLoad({ loadNumber: 'L2', resourceId: 'T2', resourceType: 'Truck', stops: [], nowMs: T0 });
    // 25 readings of each truck, interleaved (L1's first reading is the oldest). Each backlog
    // is longer than a chunk, so each load's newest position goes first.
    for (let i = 0; i < 25; i++) {
      store.insertReadings([
        { resourceId: 'T1', timeMs: T0 + i * 1000, lat: 41.8, lon: -87.6 },
        { resourceId: 'T2', timeMs: T0 + i * 1000, lat: 40.1, lon: -88.2 },
      ]);
    }
    sender.start();
    sender.requestTracePush();
    await waitFor(() => store.counts().readings === 0, 5000, 'the backlog drained');
    await sender.idle();
    expect(fx.sandbox.traces.map((t) => `${t.body.loadNumber}:${t.body.traces.length}`)).toEqual(['L1:1', 'L2:1', 'L1:10', 'L2:10', 'L1:10', 'L2:10', 'L1:4', 'L2:4']);
    expect(fx.sandbox.stats.duplicateTracePoints).toBe(0);
    // Delivered rows are purged after the push, not just hidden.
    expect(store.db.prepare('SELECT count(*) FROM readings').pluck().get()).toBe(0);
  });

  it('ends a push even while every load keeps adding readings faster than a pass takes', async () => {
    await setup();
    config.delivery.max_traces_per_request = 10;
    const trucks = ['T1', 'T2', 'T3'];
    for (const [i, t] of trucks.slice(1).entries()) store.startLoad({ loadNumber: `L${i + 2}`, resourceId: t, resourceType: 'Truck', stops: [], nowMs: T0 });
    let n = 0;
    const add = () => {
      store.insertReadings(trucks.map((t) => ({ resourceId: t, timeMs: T0 + n * 1000, lat: 41.8, lon: -87.6 })));
      n += 1;
    };
    for (let i = 0; i < 30; i++) add();
    fx.sandbox.setFaults({ latencyMs: 20 });
    const feeding = setInterval(() => {
      for (let i = 0; i < 5; i++) add();
    }, 5);
    try {
      sender.start();
      sender.requestTracePush();
      await waitFor(() => sender.status.lastTracePushMs !== null, 5000, 'the push to end');
    } finally {
      clearInterval(feeding);
    }
    // Everything buffered when the push began went out; what came later waits for the next.
    const sent = new Set(fx.sandbox.traces.flatMap((t) => t.body.traces.map((p) => `${t.body.loadNumber}:${p.time.dateTime}`)));
    expect(sent.size).toBeGreaterThanOrEqual(90);
    expect(store.counts().readings).toBeGreaterThan(0);
  });

  it('keeps everything on 5xx and on a dead network, and delivers once the service is back', async () => {
    await setup();
    addReadings(10);
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    fx.sandbox.setFaults({ failNext: 3 });
    sender.start();
    sender.requestTracePush();
    // The service's last answer is there for status and the fleet: the 503, then the success.
    await waitFor(() => sender.status.lastAnswer === 'HTTP 503', 5000, 'a 503 as the last answer');
    await waitFor(() => fx.sandbox.stats.faults.failed === 3, 5000, 'three 503s');
    await waitFor(() => fx.sandbox.milestones.length === 1 && store.counts().readings === 0, 5000, 'delivery after the 503s');
    expect(sender.status.failures.retry).toBe(3);
    expect(sender.status.lastError).toContain('HTTP 503');
    expect(sender.status.lastAnswer).toMatch(/^HTTP 20\d$/);
    expect(sender.status.lastAnswerMs).toBeGreaterThanOrEqual(sender.status.lastErrorMs!);
    expect(fx.sandbox.traces.flatMap((t) => t.body.traces)).toHaveLength(10);
  });

  it('keeps records while nothing listens and reports a network error', async () => {
    await setup('http://127.0.0.1:9'); // discard port: connection refused
    addReadings(5);
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    sender.start();
    sender.requestTracePush();
    await waitFor(() => sender.status.consecutiveFailures >= 2, 5000, 'two failed attempts');
    expect(sender.status.lastError).toMatch(/network error: ECONNREFUSED/);
    expect(sender.status.lastAnswer).toBe('no answer (ECONNREFUSED)');
    expect(store.counts()).toMatchObject({ readings: 5, pendingMilestones: 1 });
    expect(store.pendingMilestones()[0].attempts).toBeGreaterThanOrEqual(2);
  });

  it('sends milestones before traces', async () => {
    await setup();
    addReadings(3);
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    recordMilestone(store, config, { loadNumber: 'L1', code: 'AF', stop: 1 });
    sender.requestTracePush();
    await sender.kick();
    const order = [...fx.sandbox.milestones.map((m) => ({ at: m.at, what: String(m.body.eventCode) })), ...fx.sandbox.traces.map((t) => ({ at: t.at, what: 'trace' }))]
      .sort((a, b) => a.at - b.at)
      .map((x) => x.what);
    expect(order).toEqual(['X3', 'AF', 'trace']);
  });
});

describe('response classes and backoff', () => {
  const res = (status: number) => ({ kind: 'response' as const, status, body: '', durationMs: 1 });
  it('classifies every status family', () => {
    expect([200, 202, 301, 401, 403, 404, 408, 413, 422, 425, 429, 400, 500, 503].map((s) => classify(res(s)))).toEqual([
      'delivered',
      'delivered',
      'redirect',
      'auth',
      'auth',
      'auth',
      'retry',
      'too-large',
      'refused',
      'retry',
      'retry',
      'refused',
      'retry',
      'retry',
    ]);
    expect(classify({ kind: 'network', error: 'x', durationMs: 1 })).toBe('retry');
  });
  it('reads Retry-After as seconds or an HTTP date, and jitters backoff under an exponential cap', () => {
    expect(retryAfterMs('30')).toBe(30_000);
    expect(retryAfterMs('Wed, 21 Oct 2015 07:28:30 GMT', Date.parse('Wed, 21 Oct 2015 07:28:00 GMT'))).toBe(30_000);
    expect(retryAfterMs('soon')).toBeUndefined();
    expect(backoffMs(0, 1000, 60_000, () => 1)).toBe(1000);
    expect(backoffMs(3, 1000, 60_000, () => 1)).toBe(8000);
    expect(backoffMs(20, 1000, 60_000, () => 1)).toBe(60_000);
    expect(backoffMs(20, 1000, 60_000, () => 0.5)).toBe(30_000);
  });
});
