/**
 * Delivery under the faults the real world serves, each against the real sandbox on port 0
 * and a real SQLite file.
 */
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ApiClient, PostOutcome } from '../src/api/client.js';
import { COUNTER_DROPPED_AGE, COUNTER_DROPPED_DISK_FULL, COUNTER_DROPPED_SIZE, enforceBounds, withRoom } from '../src/buffer/bounds.js';
import { Store } from '../src/buffer/store.js';
import { configSchema, type Config } from '../src/config/schema.js';
import { classify } from '../src/delivery/classify.js';
import { Sender } from '../src/delivery/sender.js';
import { createLogger } from '../src/log.js';
import { recordMilestone } from '../src/milestones/record.js';
import type { SandboxEvent } from '../src/sandbox/server.js';
import { TEST_KEY, TEST_SCAC, waitFor, daemonFixture } from './helpers.js';
import { testClient } from './in-process-sender.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });
const T0 = Date.UTC(2026, 5, 1, 12);
let store: Store;
let client: ApiClient | undefined;
let sender: Sender | undefined;
let config: Config;
let events: Array<SandboxEvent & { at: number }>;
/** Called with each of the sandbox's events, after it is recorded. */
let onEvent: ((e: SandboxEvent) => void) | undefined;
const fx = daemonFixture({
  sandbox: {
    onRequest: (e) => {
      events.push({ ...e, at: Date.now() });
      onEvent?.(e);
    },
  },
});

beforeEach(async () => {
  events = [];
  onEvent = undefined;
  const { url } = await fx.sandbox.start();
  config = configSchema.parse({
    api: { base_url: url, scac: TEST_SCAC, timeout_s: 2 },
    buffer: { path: join(fx.tmp.dir, 'b.db') },
    sampling: { interval_s: 0 },
    delivery: { poll_interval_ms: 20, retry_initial_s: 0.05, retry_max_s: 0.2, max_traces_per_request: 100, drain_interval_ms: 0, auth_retry_s: 60 },
    sources: [{ type: 'simulator', resource_id: 'T1' }],
  });
  store = Store.open(config.buffer.path);
  store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 });
});
afterEach(async () => {
  await sender?.stop();
  await client?.close();
  sender = undefined;
  client = undefined;
  store.close();
});

function start(key = TEST_KEY) {
  client = testClient(config, key);
  sender = new Sender({ store, client, config, deviceId: 'dev', log: silent });
  sender.start();
  return sender;
}
function addReadings(n: number, from = 0) {
  store.insertReadings(Array.from({ length: n }, (_, i) => ({ resourceId: 'T1', timeMs: T0 + (from + i) * 1000, lat: 41.8, lon: -87.6 + (from + i) * 1e-5 })));
}
const pointIds = () => fx.sandbox.traces.flatMap((t) => t.body.traces.map((p) => Number(p.references![0].value.split('-')[1])));
const drained = () => store.counts().readings === 0 && store.counts().pendingMilestones === 0;

describe('outage and recovery', () => {
  it('loses nothing: milestones first, then the newest position, then the backlog oldest first', async () => {
    addReadings(600);
    fx.sandbox.setFaults({ forceStatus: 503 });
    const s = start();
    s.requestTracePush();
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    await waitFor(() => s.status.consecutiveFailures >= 3, 5000, 'failures during the outage');
    addReadings(400, 600); // the truck kept driving
    recordMilestone(store, config, { loadNumber: 'L1', code: 'AF' });
    expect(store.counts()).toMatchObject({ readings: 1000, pendingMilestones: 2, deadLetters: 0 });

    fx.sandbox.setFaults({ forceStatus: 0 });
    await waitFor(drained, 10_000, 'the backlog drained after recovery');
    const accepted = events.filter((e) => e.status === 200);
    expect(accepted.slice(0, 2).map((e) => (e.body as { eventCode: string }).eventCode)).toEqual(['X3', 'AF']);
    const ids = pointIds();
    expect(ids[0]).toBe(1000); // where the truck is now, first
    expect(ids.slice(1)).toEqual(Array.from({ length: 999 }, (_, i) => i + 1)); // then oldest first
    expect(fx.sandbox.traces.slice(1).every((t) => t.body.traces.length <= 100)).toBe(true);
    expect(fx.sandbox.stats.duplicateTracePoints).toBe(0);
  });

  it('after an outage each load sends its newest position once, ahead of every backlog: a failure in the middle resumes, a refused one is parked', async () => {
    for (const n of [2, 3]) store.startLoad({ loadNumber: `L${n}`, resourceId: `T${n}`, resourceType: 'Truck', stops: [], nowMs: T0 });
    for (const t of ['T1', 'T2', 'T3']) {
      store.insertReadings(Array.from({ length: 250 }, (_, i) => ({ resourceId: t, timeMs: T0 + i * 1000, lat: 41.8, lon: -87.6 + i * 1e-5 })));
    }
    // Ids 1-250 are T1's, 251-500 T2's, 501-750 T3's: 250, 500 and 750 are the newest.
    fx.sandbox.setFaults({ rejectTraceRefs: ['dev-500'] });
    let failed = false;
    onEvent = (e) => {
      // The first newest position is in: the next request fails (an answer the agent retries).
      if (!failed && e.kind === 'trace' && e.status === 200) {
        failed = true;
        fx.sandbox.setFaults({ failNext: 1 });
      }
    };
    const s = start();
    s.requestTracePush();
    await waitFor(drained, 10_000, 'the backlogs drained');
    const traces = events.filter((e) => e.kind === 'trace');
    // L1's newest, a failure (L2's newest), L2's newest again and refused, L3's newest: then the backlogs.
    expect(traces.slice(0, 4).map((e) => e.status)).toEqual([200, 503, 400, 200]);
    const accepted = fx.sandbox.traces.map((t) => t.body.traces.map((p) => p.references![0].value));
    expect(accepted.slice(0, 2)).toEqual([['dev-250'], ['dev-750']]);
    expect(accepted.slice(2).every((points) => points.length > 1)).toBe(true);
    const ids = pointIds();
    expect(ids.sort((a, b) => a - b)).toEqual(Array.from({ length: 750 }, (_, i) => i + 1).filter((id) => id !== 500));
    expect(fx.sandbox.stats.duplicateTracePoints).toBe(0);
    expect(store.listDeadLetters().map((d) => d.recordId)).toEqual([500]);
  });

  it('honours Retry-After on 429 instead of its own shorter backoff', async () => {
    addReadings(5);
    fx.sandbox.setFaults({ throttleNext: 1, retryAfter: '1' });
    const s = start();
    s.requestTracePush();
    await waitFor(drained, 5000, 'delivery after the 429');
    const throttled = events.find((e) => e.status === 429)!;
    const next = events.find((e) => e.at > throttled.at)!;
    expect(next.at - throttled.at).toBeGreaterThanOrEqual(950);
    expect(s.status.failures.retry).toBe(1);
  });

  it('never follows a redirect: the data stays and the problem is reported as configuration', async () => {
    addReadings(5);
    fx.sandbox.setFaults({ forceStatus: 301, redirectTo: 'http://127.0.0.1:9/elsewhere' });
    const s = start();
    s.requestTracePush();
    await waitFor(() => s.status.consecutiveFailures >= 2, 5000, 'two refused attempts');
    expect(s.status.lastErrorClass).toBe('redirect');
    expect(s.status.lastError).toContain('redirect to http://127.0.0.1:9/elsewhere not followed');
    expect(s.status.lastError).toContain('api.base_url');
    expect(store.counts()).toMatchObject({ readings: 5, deadLetters: 0 });
  });

  it('a captive portal answering 200 with its page delivers nothing: the records stay and go to the service after it', async () => {
    addReadings(5);
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    fx.sandbox.setFaults({ portalNext: 3 });
    const s = start();
    s.requestTracePush();
    await waitFor(() => (s.status.failures.intercepted ?? 0) >= 1, 5000, 'the portal page answered');
    expect(s.status.lastErrorClass).toBe('intercepted');
    expect(s.status.lastError).toContain('captive portal');
    expect(s.status.lastAnswer).toBe('HTTP 200 (a web page, not the service)');
    await waitFor(drained, 10_000, 'delivery after the portal');
    expect(s.status.failures.intercepted).toBe(3);
    expect(fx.sandbox.milestones.map((m) => m.body.loadNumber)).toEqual(['L1']);
    expect(pointIds().sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5]);
    expect(s.status.lastAnswer).toMatch(/^HTTP 2\d\d$/);
  });
});

describe('what a 2xx is', () => {
  const answer = (body: string, type?: string): PostOutcome => ({ kind: 'response', status: 200, body, durationMs: 1, headers: type ? { 'content-type': type } : {} });
  it('markup is a web page, whatever its type says; anything else is the service', () => {
    expect(classify(answer('<!DOCTYPE html><html>...', 'text/html'))).toBe('intercepted');
    expect(classify(answer('  <html><body>Log in</body></html>'))).toBe('intercepted');
    expect(classify(answer('<HTML>', 'application/json'))).toBe('intercepted');
    expect(classify(answer('<meta http-equiv="refresh" content="0;url=http://portal">', 'text/html; charset=utf-8'))).toBe('intercepted');
    expect(classify(answer('', 'text/html'))).toBe('delivered');
    expect(classify(answer('Accepted', 'text/html'))).toBe('delivered');
    expect(classify(answer('{"id":"1"}', 'application/json'))).toBe('delivered');
    expect(classify(answer('<ok/>', 'application/xml'))).toBe('delivered');
  });
});

describe('poison records', () => {
  it('parks the one refused point of a batch of 500 and delivers the other 499 in the same cycle', async () => {
    config.delivery.max_traces_per_request = 500;
    addReadings(500);
    fx.sandbox.setFaults({ rejectTraceRefs: ['dev-250'] });
    const s = start();
    s.requestTracePush();
    await s.kick();
    await waitFor(drained, 5000, 'the batch resolved');
    const ids = pointIds();
    expect(new Set(ids).size).toBe(499);
    expect(ids).not.toContain(250);
    const dead = store.listDeadLetters();
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ kind: 'trace', loadNumber: 'L1', recordId: 250, status: 400 });
    expect(dead[0].response).toContain('refused by the service');
    expect(s.status.deadLettered.tracePoints).toBe(1);
    // The bisection took about 2 log2(500) requests, not 500.
    expect(events.filter((e) => e.status === 400).length).toBeLessThanOrEqual(10);

    // The operator fixes the cause and puts it back: it goes out as its own point.
    fx.sandbox.setFaults({ rejectTraceRefs: [] });
    expect(store.retryDeadLetters('all')).toBe(1);
    await waitFor(() => pointIds().includes(250), 5000, 'the retried point');
    expect(store.counts()).toMatchObject({ deadLetters: 0, retryReadings: 0 });
  });

  it('parks a refused milestone and sends the next one', async () => {
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    store.startLoad({ loadNumber: 'L2', resourceId: 'T2', resourceType: 'Truck', stops: [], nowMs: T0 });
    recordMilestone(store, config, { loadNumber: 'L2', code: 'X3' });
    fx.sandbox.setFaults({ rejectLoads: ['L1'] });
    start();
    await waitFor(() => fx.sandbox.milestones.length === 1 && store.counts().pendingMilestones === 0, 5000, 'L2 delivered');
    expect(fx.sandbox.milestones[0].body.loadNumber).toBe('L2');
    expect(store.listDeadLetters()).toMatchObject([{ kind: 'milestone', loadNumber: 'L1', status: 400 }]);
  });

  it('halves the chunk size on 413 and delivers everything', async () => {
    addReadings(90);
    fx.sandbox.setFaults({ maxTracesPerRequest: 30 });
    const s = start();
    s.requestTracePush();
    await waitFor(drained, 5000, 'delivery in smaller chunks');
    expect(s.status.chunkLimit).toBeLessThanOrEqual(30);
    expect(new Set(pointIds()).size).toBe(90);
    expect(store.counts().deadLetters).toBe(0);
  });
});

describe('credentials refused', () => {
  it('401 pauses delivery without dead-lettering, and a new key resumes it', async () => {
    addReadings(10);
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    const s = start('revoked-key');
    s.requestTracePush();
    await waitFor(() => s.status.paused !== null, 5000, 'the pause');
    expect(s.status.paused).toContain('HTTP 401');
    expect(s.status.nextAttemptMs! - Date.now()).toBeGreaterThan(50_000); // slow retries: auth_retry_s
    // No hammering while paused: delivery passes (as the poll timer starts them) send nothing.
    for (let i = 0; i < 5; i++) await s.kick();
    expect(fx.sandbox.stats.unauthorized).toBe(1);
    expect(store.counts()).toMatchObject({ readings: 10, pendingMilestones: 1, deadLetters: 0 });

    const fixed = testClient(config);
    s.updateConfig(config, fixed);
    await waitFor(drained, 5000, 'delivery with the new key');
    expect(s.status.paused).toBeNull();
    await fixed.close();
  });
});

describe('idempotency', () => {
  it('a retry after a lost answer carries the same idempotency key, for traces and milestones', async () => {
    addReadings(20);
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    fx.sandbox.setFaults({ loseResponseNext: 1 });
    const s = start();
    await waitFor(() => store.counts().pendingMilestones === 0, 5000, 'the milestone after its lost answer');
    fx.sandbox.setFaults({ loseResponseNext: 1 });
    s.requestTracePush();
    await waitFor(drained, 5000, 'the traces after their lost answer');
    expect(fx.sandbox.stats.duplicateRequests).toBe(2);
    expect(fx.sandbox.milestones).toHaveLength(2);
    expect(fx.sandbox.milestones[0].idempotencyKey).toBe(fx.sandbox.milestones[1].idempotencyKey);
    expect(fx.sandbox.traces[0].idempotencyKey).toBe(fx.sandbox.traces[1].idempotencyKey);
    expect(JSON.stringify(fx.sandbox.traces[0].body)).toBe(JSON.stringify(fx.sandbox.traces[1].body));
  });
});

describe('a request is fixed before it is sent', () => {
  /** Each trace request the service took: its key and the readings behind its points. */
  const requests = () => fx.sandbox.traces.map((t) => ({ key: t.idempotencyKey, ids: t.body.traces.map((p) => Number(p.references![0].value.split('-')[1])) }));

  it('a retry after a lost answer carries exactly the points of the first try under its key; readings committed meanwhile go in the next request', async () => {
    addReadings(3);
    fx.sandbox.setFaults({ loseResponseNext: 1 });
    let lost = false;
    onEvent = (e) => {
      // Committed while the retry waits for its backoff: before, the retry took them too, under a new key.
      if (e.problem?.includes('answer was lost') && !lost) {
        lost = true;
        addReadings(4, 3);
      }
    };
    const s = start();
    s.requestTracePush();
    await waitFor(drained, 5000, 'every reading delivered');
    const [first, retry, next] = requests();
    expect(requests()).toHaveLength(3);
    expect(first.ids).toEqual([1, 2, 3]);
    expect(retry).toEqual(first);
    expect(next.ids).toEqual([4, 5, 6, 7]);
    expect(next.key).not.toBe(first.key);
  });

  it('after a crash between the answer and its acknowledgement, the restarted agent repeats the same request, not a larger one', async () => {
    addReadings(3);
    const crashed = join(fx.tmp.dir, 'crashed.db');
    onEvent = (e) => {
      // The disk as a kill -9 leaves it the moment the service has taken the request: the
      // answer is on its way, the acknowledgement not yet written.
      if (e.kind === 'trace' && e.status === 200 && onEvent) {
        onEvent = undefined;
        copyFileSync(config.buffer.path, crashed);
        copyFileSync(`${config.buffer.path}-wal`, `${crashed}-wal`);
      }
    };
    const s = start();
    s.requestTracePush();
    await waitFor(drained, 5000, 'the first push delivered');
    await s.stop();
    await client?.close();
    store.close();
    store = Store.open(crashed);
    addReadings(2, 3);
    start().requestTracePush();
    await waitFor(drained, 5000, 'the restarted agent delivered');
    const [first, repeat, next] = requests();
    expect(requests()).toHaveLength(3);
    expect(repeat).toEqual(first);
    expect(next.ids).toEqual([4, 5]);
    expect(fx.sandbox.stats.duplicateRequests).toBe(1);
  });

  it('the newest position sent ahead of a backlog is repeated alone after a lost answer, under its key', async () => {
    // A backlog of more than one chunk (100 points): the newest position goes first, alone.
    addReadings(250);
    fx.sandbox.setFaults({ loseResponseNext: 1 });
    let lost = false;
    onEvent = (e) => {
      if (e.problem?.includes('answer was lost') && !lost) {
        lost = true;
        addReadings(5, 250);
      }
    };
    const s = start();
    s.requestTracePush();
    await waitFor(drained, 5000, 'every reading delivered');
    const [first, repeat] = requests();
    expect(first.ids).toEqual([250]);
    expect(repeat).toEqual(first);
    expect(
      requests()
        .flatMap((r) => r.ids)
        .filter((id) => id === 250),
    ).toHaveLength(2);
  });
});

describe('409 Conflict', () => {
  it('to a repeat of a trace request: the service has the points; acknowledged, counted as duplicates, never dead-lettered', async () => {
    addReadings(30);
    // The first try's answer is lost; its repeat is answered 409.
    fx.sandbox.setFaults({ dropNext: 1 });
    onEvent = (e) => {
      if (e.status === 0) fx.sandbox.setFaults({ forceStatus: 409 });
    };
    const s = start();
    s.requestTracePush();
    await waitFor(drained, 5000, 'the readings acknowledged');
    expect(store.counts()).toMatchObject({ readings: 0, deadLetters: 0 });
    expect(s.status.duplicates).toBeGreaterThanOrEqual(1);
    expect(s.status.deadLettered.tracePoints).toBe(0);
  });

  it('to a trace request that never went out before: no repeat, so a refusal; parked with its answer, not counted as delivered', async () => {
    addReadings(4);
    fx.sandbox.setFaults({ forceStatus: 409 });
    const s = start();
    s.requestTracePush();
    await waitFor(drained, 5000, 'the readings parked');
    expect(s.status.duplicates).toBe(0);
    expect(s.status.sent.tracePoints).toBe(0);
    const dead = store.listDeadLetters();
    expect(dead.length).toBeGreaterThanOrEqual(1);
    expect(dead.every((d) => d.kind === 'trace' && d.status === 409)).toBe(true);
  });

  it('with conflict_is_delivered = false: refused, the points parked with the answer and its headers', async () => {
    config.delivery.conflict_is_delivered = false;
    addReadings(2);
    fx.sandbox.setFaults({ forceStatus: 409 });
    const s = start();
    s.requestTracePush();
    await waitFor(drained, 5000, 'the readings parked');
    expect(s.status.duplicates).toBe(0);
    const dead = store.listDeadLetters();
    // Both halves refused alike: the request's refusal, one dead letter for both points.
    expect(dead.map((d) => [d.kind, d.status, d.recordIds])).toEqual([['trace', 409, [1, 2]]]);
    expect(dead[0].headers).toMatchObject({ 'content-type': 'application/json' });
  });
});

describe('bounds', () => {
  it('the size cap drops the oldest readings and never a milestone', () => {
    addReadings(20_000);
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    const before = store.usedBytes();
    const dropped = enforceBounds(store, { maxSizeBytes: before / 4, maxAgeMs: 365 * 86_400_000 }, silent, T0);
    expect(dropped.size).toBeGreaterThan(10_000);
    expect(store.usedBytes()).toBeLessThanOrEqual(before / 4);
    const left = [...store.iterateReadings('L1')];
    expect(left[0].id).toBe(dropped.size + 1); // the oldest went
    expect(store.counts().pendingMilestones).toBe(1);
    expect(store.counters()[COUNTER_DROPPED_SIZE]).toBe(dropped.size);
  });

  it('over the size cap the position history is shortened before any reading is dropped', () => {
    addReadings(2000);
    // 14 days of a depot's 50 trailers, a position a minute... a part of it: 2,000 minutes each.
    const put = store.db.prepare('INSERT INTO positions (resource_id, t_s, lat_e5, lon_e5) VALUES (?, ?, ?, ?)');
    store.db.transaction(() => {
      for (let r = 0; r < 50; r++) for (let m = 0; m < 2000; m++) put.run(`TRAILER-${r}`, T0 / 1000 - m * 60, 4_180_000 + m, -8_760_000 - r);
    })();
    const before = store.usedBytes();
    const dropped = enforceBounds(store, { maxSizeBytes: before * 0.7, maxAgeMs: 365 * 86_400_000, historyKeepDays: 14 }, silent, T0);
    expect(dropped.size).toBe(0);
    expect(store.counts().readings).toBe(2000);
    expect(store.usedBytes()).toBeLessThanOrEqual(before * 0.7);
    // The newest positions stay, the oldest went.
    const left = store.db.prepare("SELECT count(*) AS n, min(t_s) AS oldest, max(t_s) AS newest FROM positions WHERE resource_id = 'TRAILER-7'").get() as { n: number; oldest: number; newest: number };
    expect(left.newest).toBe(T0 / 1000);
    expect(left.n).toBeGreaterThan(0);
    expect(left.n).toBeLessThan(2000);
    expect(left.oldest).toBeGreaterThan(T0 / 1000 - 2000 * 60);
  });

  it('the position history is pruned to history.keep_days by the limits too, without a push', () => {
    const put = store.db.prepare('INSERT INTO positions (resource_id, t_s, lat_e5, lon_e5) VALUES (?, ?, ?, ?)');
    for (let day = 0; day < 20; day++) put.run('T1', T0 / 1000 - day * 86_400, 4_180_000, -8_760_000);
    enforceBounds(store, { maxSizeBytes: 1e12, maxAgeMs: 365 * 86_400_000, historyKeepDays: 14 }, silent, T0);
    expect(store.db.prepare("SELECT count(*) FROM positions WHERE resource_id = 'T1'").pluck().get()).toBe(15);
  });

  it('delivered rows waiting for their purge make room before any reading is dropped', () => {
    addReadings(20_000);
    const ids = [...store.iterateReadings('L1')].map((r) => r.id);
    store.ackReadings('L1', ids[11_999], null);
    const before = store.usedBytes();
    const dropped = enforceBounds(store, { maxSizeBytes: before * 0.6, maxAgeMs: 365 * 86_400_000 }, silent, T0);
    expect(dropped).toEqual({ age: 0, size: 0, unassigned: 0 });
    expect(store.counts().readings).toBe(8000);
    expect(store.counters()[COUNTER_DROPPED_SIZE]).toBeUndefined();
  });

  it('limits never count delivered rows as dropped, and a refused point with a wrong clock does not stop the age limit', () => {
    addReadings(100);
    const ids = [...store.iterateReadings('L1')].map((r) => r.id);
    // A reading stamped in the future, refused by the service and parked, sits at the front.
    store.insertReadings([{ resourceId: 'T1', timeMs: T0 + 10 * 86_400_000, lat: 41.8, lon: -87.6 }]);
    store.db.prepare('UPDATE readings SET id = 0 WHERE id = ?').run(ids.length + 1);
    store.parkReading(0, 'L1', 400, 'refused', {}, T0);
    store.ackReadings('L1', ids[29], null);
    const dropped = enforceBounds(store, { maxSizeBytes: 1e12, maxAgeMs: 50_000 }, silent, T0 + 100_000);
    expect(dropped.age).toBe(20); // readings 31-50 of 100: not the 30 delivered, not the parked one
    expect(store.counts().readings).toBe(50);
    expect(store.counts().deadLetters).toBe(1);
  });

  it('the age limit drops old readings only', () => {
    addReadings(100);
    const dropped = enforceBounds(store, { maxSizeBytes: 1e12, maxAgeMs: 50_000 }, silent, T0 + 100_000);
    expect(dropped.age).toBe(50);
    expect(store.counts().readings).toBe(50);
  });

  it('a drop and its count are one transaction: a count that cannot be written drops nothing', () => {
    addReadings(20_000);
    const before = store.usedBytes();
    // A real SQLite error where the count is written: the counters table refuses it.
    store.db.exec("CREATE TRIGGER refuse_count BEFORE INSERT ON counters BEGIN SELECT RAISE(ABORT, 'counters refuse rows'); END");
    expect(() => enforceBounds(store, { maxSizeBytes: 1e12, maxAgeMs: 50_000 }, silent, T0 + 100_000)).toThrow(/counters refuse rows/);
    expect(store.counts().readings).toBe(20_000);
    expect(() => enforceBounds(store, { maxSizeBytes: before / 4, maxAgeMs: 365 * 86_400_000 }, silent, T0)).toThrow(/counters refuse rows/);
    expect(store.counts().readings).toBe(20_000);
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    store.db.pragma('wal_checkpoint(TRUNCATE)');
    store.db.pragma(`max_page_count = ${store.db.pragma('page_count', { simple: true }) as number}`);
    const more = () => store.insertReadings(Array.from({ length: 5000 }, (_, i) => ({ resourceId: 'T1', timeMs: T0 + (30_000 + i) * 1000, lat: 41, lon: -87 })));
    expect(() => withRoom(store, silent, more, 2000)).toThrow(/counters refuse rows/);
    expect(store.counts().readings).toBe(20_000);
    // Once the count can be written, drops and counts move together.
    store.db.exec('DROP TRIGGER refuse_count');
    store.db.pragma('max_page_count = 1000000000');
    const dropped = enforceBounds(store, { maxSizeBytes: 1e12, maxAgeMs: 50_000 }, silent, T0 + 100_000);
    expect(dropped.age).toBe(50);
    expect(store.counts().readings).toBe(19_950);
    expect(store.counters()).toEqual({ [COUNTER_DROPPED_AGE]: 50 });
  });

  it('a full disk (SQLITE_FULL) drops the oldest readings, keeps milestones, and keeps working', () => {
    addReadings(5000);
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    // Cap the file at its current size: the next page allocation fails with SQLITE_FULL.
    store.db.pragma('wal_checkpoint(TRUNCATE)');
    const pages = store.db.pragma('page_count', { simple: true }) as number;
    store.db.pragma(`max_page_count = ${pages}`);
    expect(() => addReadings(5000, 5000)).toThrow(/full/);
    const kept = withRoom(store, silent, () => store.insertReadings(Array.from({ length: 500 }, (_, i) => ({ resourceId: 'T1', timeMs: T0 + (10_000 + i) * 1000, lat: 41, lon: -87 }))), 2000);
    expect(kept).toBe(500);
    const m = recordMilestone(store, config, { loadNumber: 'L1', code: 'AF' }, Date.now(), silent);
    expect(m.row.id).toBe(2);
    expect(store.counts().pendingMilestones).toBe(2);
    expect(store.counters()[COUNTER_DROPPED_DISK_FULL]).toBeGreaterThanOrEqual(2000);
  });
});
