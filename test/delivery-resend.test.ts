/**
 * Answers the sender must not take at face value, the real sender and a real SQLite file
 * against a service on port 0 that deduplicates by key (test/dedup-service.ts).
 *
 * An answer whose body never ends: the service, or a proxy or captive portal in front of it,
 * answers 200 with `content-length: 100000000` and trickles a byte every 100 ms. undici's body
 * timeout only catches silence, and the client read bodies to their end: the sender, one
 * cycle at a time, waited on that body forever, and nothing else went, milestones included,
 * until a restart.
 *
 * A request the client sent twice: the service read it on a kept-alive connection, which then
 * died unanswered, and the client sent it again at once under the same key (ApiClient.postNow).
 * The answer is then to a repeat. Before, it was taken as the answer to a first send: a 409
 * (the service has it) split a trace request into halves under new keys, the same points went
 * to the service twice, and a milestone the service had was parked as a dead letter; a 429 or
 * 503 let the trace request go and it was built anew, more points under another key.
 * The real sender and a real SQLite file against a service that deduplicates by key.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiClient } from '../src/api/client.js';
import { Store } from '../src/buffer/store.js';
import { type Config, configSchema } from '../src/config/schema.js';
import { Sender } from '../src/delivery/sender.js';
import { createLogger } from '../src/log.js';
import { recordMilestone } from '../src/milestones/record.js';
import { type Act, type DedupService, dedupService, type Got } from './dedup-service.js';
import { TEST_KEY, TEST_SCAC, waitFor, tempFixture } from './helpers.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });
const T0 = Date.UTC(2026, 5, 1, 12);
const tmp = tempFixture();
let service: DedupService | undefined;
let store: Store;
let client: ApiClient | undefined;
let sender: Sender | undefined;
let config: Config;
afterEach(async () => {
  await sender?.stop();
  await client?.close();
  sender = undefined;
  client = undefined;
  store.close();
  await service?.close();
  service = undefined;
});

async function setup(plan: (g: Got) => Act | undefined, onRequest?: (g: Got) => void, opts = { timeoutS: 2, maxTraces: 5 }): Promise<DedupService> {
  service = await dedupService(plan, onRequest);
  config = configSchema.parse({
    api: { base_url: service.url, scac: TEST_SCAC, timeout_s: opts.timeoutS },
    buffer: { path: join(tmp.dir, 'b.db') },
    sampling: { interval_s: 0 },
    delivery: { poll_interval_ms: 20, retry_initial_s: 0.05, retry_max_s: 0.2, max_traces_per_request: opts.maxTraces, drain_interval_ms: 0 },
    sources: [{ type: 'simulator', resource_id: 'T1' }],
  });
  store = Store.open(config.buffer.path);
  store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 });
  return service;
}

function start(): Sender {
  client = new ApiClient({
    baseUrl: config.api.base_url,
    milestonePath: config.api.milestone_path,
    tracePath: config.api.trace_path,
    scac: TEST_SCAC,
    subscriptionKey: TEST_KEY,
    timeoutMs: config.api.timeout_s * 1000,
  });
  sender = new Sender({ store, client, config, deviceId: 'dev', log: silent });
  sender.start();
  return sender;
}

function addReadings(n: number, from = 0) {
  store.insertReadings(Array.from({ length: n }, (_, i) => ({ resourceId: 'T1', timeMs: T0 + (from + i) * 1000, lat: 41.8, lon: -87.6 + (from + i) * 1e-5 })));
}
const drained = () => store.counts().readings === 0 && store.counts().pendingMilestones === 0;
/** The keys of the requests that carried any of these points. */
const keysCarrying = (got: Got[], ids: number[]) => new Set(got.filter((g) => g.points.some((p) => ids.includes(p))).map((g) => g.key));

describe('a request sent again at once after a kept-alive connection died under it', () => {
  it('a trace request the service read, its copy answered 409: delivered as a duplicate, its points never under another key', async () => {
    // The first chunk (points 1-5) goes after the newest position, on the same connection.
    let dropped = false;
    const s = await setup((g) => (g.points.includes(1) && !dropped ? ((dropped = true), 'drop') : undefined));
    addReadings(12);
    const sender = start();
    sender.requestTracePush();
    await waitFor(drained, 10_000, 'every reading delivered');
    const first = s.got.find((g) => g.answer === 'dropped')!;
    expect(first.points).toEqual([1, 2, 3, 4, 5]);
    // The copy, answered 409, under the same key; no request with another key carries those points.
    expect(s.got.filter((g) => g.key === first.key).map((g) => g.answer)).toEqual(['dropped', 409]);
    expect(keysCarrying(s.got, [1, 2, 3, 4, 5])).toEqual(new Set([first.key]));
    expect(store.counts()).toMatchObject({ readings: 0, deadLetters: 0 });
    expect(sender.status.duplicates).toBe(1);
    expect(sender.status.deadLettered.tracePoints).toBe(0);
    expect(new Set(s.got.flatMap((g) => g.points))).toEqual(new Set(Array.from({ length: 12 }, (_, i) => i + 1)));
  });

  it('a milestone the service read, its copy answered 409: delivered as a duplicate, not parked', async () => {
    let dropped = false;
    const s = await setup((g) => (g.code === 'AF' && !dropped ? ((dropped = true), 'drop') : undefined));
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    recordMilestone(store, config, { loadNumber: 'L1', code: 'AF' });
    const sender = start();
    await waitFor(drained, 10_000, 'both milestones settled');
    expect(s.got.map((g) => [g.code, g.answer])).toEqual([
      ['X3', 200],
      ['AF', 'dropped'],
      ['AF', 409],
    ]);
    expect(s.got[1].key).toBe(s.got[2].key);
    const af = store.listMilestones('L1').find((m) => m.code === 'AF')!;
    expect(af).toMatchObject({ parkedMs: null, lastStatus: 409 });
    expect(af.sentMs).not.toBeNull();
    expect(store.counts().deadLetters).toBe(0);
    expect(sender.status.duplicates).toBe(1);
    expect(sender.status.deadLettered.milestones).toBe(0);
  });

  it.each([429, 503])('a trace request the service read, its copy answered %i: it goes again as it was, under its key, not built anew with more points', async (status) => {
    let tries = 0;
    const s = await setup(
      (g) => {
        if (!g.points.includes(1)) return undefined;
        tries += 1;
        return tries === 1 ? 'drop' : tries === 2 ? status : undefined;
      },
      (g) => {
        // More readings come while the service is busy: a request built anew would take them.
        if (g.answer === status) addReadings(3, 3);
      },
    );
    // A milestone first: the trace request goes on a kept-alive connection.
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    addReadings(3);
    const sender = start();
    sender.requestTracePush();
    await waitFor(drained, 10_000, 'every reading delivered');
    const first = s.got.find((g) => g.answer === 'dropped')!;
    expect(first.points).toEqual([1, 2, 3]);
    const carrying = s.got.filter((g) => g.points.some((p) => p <= 3));
    expect(carrying.map((g) => [g.key, g.points, g.answer])).toEqual([
      [first.key, [1, 2, 3], 'dropped'],
      [first.key, [1, 2, 3], status],
      [first.key, [1, 2, 3], 409],
    ]);
    expect(store.counts()).toMatchObject({ readings: 0, deadLetters: 0 });
    expect(new Set(s.got.flatMap((g) => g.points))).toEqual(new Set([1, 2, 3, 4, 5, 6]));
  });
});

describe('an answer whose body never ends', () => {
  it('is given up on within api.timeout_s of its headers: a milestone recorded meanwhile goes next, the trace request again under its key', async () => {
    const TIMEOUT_MS = 1000;
    let trickled = false;
    const svc = await setup(
      (g) => (g.kind === 'trace' && !trickled ? ((trickled = true), 'trickle') : undefined),
      (g) => {
        // The milestone is recorded while the trace request's answer trickles.
        if (g.answer === 'trickled') recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
      },
      { timeoutS: TIMEOUT_MS / 1000, maxTraces: 100 },
    );
    addReadings(3);
    const s = start();
    s.requestTracePush();

    await waitFor(drained, 10_000, 'the milestone and the readings delivered');
    const [first, ...rest] = svc.got;
    expect(first).toMatchObject({ kind: 'trace', answer: 'trickled', points: [1, 2, 3] });
    // Abandoned (its connection closed by the client) after the timeout, not long after: the
    // upper bound is loose, a busy machine's; the old code never gave up.
    const abandonedAfter = first.closedAt! - first.at;
    expect(abandonedAfter).toBeGreaterThanOrEqual(TIMEOUT_MS - 10);
    expect(abandonedAfter).toBeLessThan(TIMEOUT_MS + 4000);
    // Then the milestone, then the same request under the same key (the service has it: 409, a duplicate).
    expect(rest.map((g) => [g.kind, g.code ?? g.points, g.answer])).toEqual([
      ['milestone', 'X3', 200],
      ['trace', [1, 2, 3], 409],
    ]);
    expect(rest[1].key).toBe(first.key);
    expect(rest[0].at).toBeGreaterThanOrEqual(first.closedAt!);
    expect(store.listMilestones('L1')[0]).toMatchObject({ code: 'X3', parkedMs: null, lastStatus: 200 });
    expect(store.counts()).toMatchObject({ readings: 0, deadLetters: 0 });
    expect(s.status.duplicates).toBe(1);
  });
});
