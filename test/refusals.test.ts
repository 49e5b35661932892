/**
 * Refusals by their scope: a service that refuses every trace request of a load (a field it
 * requires, a load it does not know) costs 9 requests for 16 points (the whole, its halves,
 * and both halves at each level down the first half) and 1 dead letter, not 2n-1 and n, and
 * the load's traces wait for it; a refused point is still found by splitting, two refused
 * points answered alike too. Against the real
 * sandbox on port 0 and a real SQLite file; the last test runs the real daemon and `status`.
 */
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ApiClient } from '../src/api/client.js';
import type { TraceBody } from '../src/api/schemas.js';
import { salvage } from '../src/buffer/salvage.js';
import { Store } from '../src/buffer/store.js';
import { configSchema, type Config } from '../src/config/schema.js';
import { Sender } from '../src/delivery/sender.js';
import { createLogger } from '../src/log.js';
import { recordMilestone } from '../src/milestones/record.js';
import { Sandbox, type SandboxEvent } from '../src/sandbox/server.js';
import { TEST_KEY, TEST_SCAC, agentConfig, runCli, startDaemon, waitFor, type Daemon, tempFixture } from './helpers.js';
import { testClient } from './in-process-sender.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });
const T0 = Date.UTC(2026, 5, 1, 12);
/** What the sandbox answers to every body of a load it was told to refuse (`rejectLoads`). */
const L1_REFUSED = 'HTTP 400: {"error":"refused","problems":["loadNumber: L1 is not a load of this carrier"]}';

const tmp = tempFixture();
let sandbox: Sandbox;
let store: Store;
let client: ApiClient | undefined;
let sender: Sender | undefined;
let events: SandboxEvent[];

async function setUp(opts: { strict?: boolean; retryMaxS: number; api?: Record<string, unknown> }): Promise<Config> {
  sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC, strict: opts.strict, onRequest: (e) => events.push(e) });
  const { url } = await sandbox.start();
  const config = configSchema.parse({
    api: { base_url: url, scac: TEST_SCAC, timeout_s: 2, ...opts.api },
    buffer: { path: join(tmp.dir, 'b.db') },
    sampling: { interval_s: 0 },
    delivery: { poll_interval_ms: 20, retry_initial_s: 0.05, retry_max_s: opts.retryMaxS, max_traces_per_request: 100, drain_interval_ms: 0 },
    sources: [{ type: 'simulator', resource_id: 'T1' }],
  });
  store = Store.open(config.buffer.path);
  for (const n of [1, 2]) store.startLoad({ loadNumber: `L${n}`, resourceId: `T${n}`, resourceType: 'Truck', stops: [], nowMs: T0 });
  return config;
}

beforeEach(() => {
  events = [];
});
afterEach(async () => {
  await sender?.stop();
  await client?.close();
  sender = undefined;
  client = undefined;
  store?.close();
  await sandbox?.stop();
});

function start(config: Config) {
  client = testClient(config);
  sender = new Sender({ store, client, config, deviceId: 'dev', log: silent });
  sender.start();
  return sender;
}
/** `n` readings of a truck, a second apart; T1's first are ids 1-16 when added first. */
function addReadings(resource: string, n: number, from = 0) {
  store.insertReadings(Array.from({ length: n }, (_, i) => ({ resourceId: resource, timeMs: T0 + (from + i) * 1000, lat: 41.8, lon: -87.6 + (from + i) * 1e-5 })));
}
const traceRequests = (load: string) => events.filter((e) => e.kind === 'trace' && (e.body as TraceBody | undefined)?.loadNumber === load);
/** The reading ids of a request's points (a traceId is the device id, '-', the reading id). */
const pointsOf = (e: SandboxEvent) => (e.body as TraceBody).traces.map((p) => Number(p.references![0].value.split('-').pop()));
/** A request of 16 points a service refuses whole: the whole, its halves, then both parts at each level down the first half ([status, points]). */
const REFUSED_ALIKE = [16, 8, 8, 4, 4, 2, 2, 1, 1].map((n) => [400, n]);
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** A push done: the sender finished one after `since`. */
async function pushed(s: Sender, since: number) {
  s.requestTracePush();
  await waitFor(() => (s.status.lastTracePushMs ?? 0) > since, 5000, 'the push to finish');
  await s.idle();
}

describe('a service that refuses every trace request of a load', () => {
  it('costs 9 requests and 1 dead letter for 16 points; the load waits, milestones and other loads flow; the retry after the fix delivers', async () => {
    const config = await setUp({ retryMaxS: 2 });
    addReadings('T1', 16);
    addReadings('T2', 16);
    sandbox.setFaults({ rejectLoads: ['L1'] });
    recordMilestone(store, config, { loadNumber: 'L2', code: 'X3' });
    const s = start(config);
    const parkedAt = Date.now();
    await pushed(s, 0);

    // The whole, each half once, and both halves at each level down the first half: all refused alike.
    expect(traceRequests('L1').map((e) => [e.status, pointsOf(e).length])).toEqual(REFUSED_ALIKE);
    const dead = store.listDeadLetters();
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ kind: 'trace', loadNumber: 'L1', recordId: 1, recordIds: range(1, 16), status: 400 });
    expect(dead[0].response).toContain('L1 is not a load of this carrier');
    expect(s.status.refusedLoads.L1).toMatchObject({ reason: `the service refuses every trace request: ${L1_REFUSED}`, deadLetter: dead[0].id, points: 16 });
    // The other load and the milestone went.
    expect(traceRequests('L2').map(pointsOf)).toEqual([range(17, 32)]);
    expect(sandbox.milestones.map((m) => m.body.loadNumber)).toEqual(['L2']);

    // A second push before retry_max_s: nothing of L1 goes; L2's new readings do.
    addReadings('T1', 5, 16); // ids 33-37
    addReadings('T2', 3, 16); // ids 38-40
    await pushed(s, s.status.lastTracePushMs!);
    expect(Date.now() - parkedAt).toBeLessThan(2000);
    expect(traceRequests('L1')).toHaveLength(9);
    expect(traceRequests('L2').map(pointsOf)).toEqual([range(17, 32), range(38, 40)]);
    // What waits: L1's new readings (the parked ones are its dead letter's).
    expect(store.counts()).toMatchObject({ readings: 5, deadLetters: 1 });

    // The service is fixed: at retry_max_s the parked request goes once, with its key, then the rest.
    sandbox.setFaults({ rejectLoads: [] });
    await waitFor(() => store.counts().readings === 0 && store.counts().deadLetters === 0, 5000, 'the load delivered after the fix');
    expect(Date.now() - parkedAt).toBeGreaterThanOrEqual(2000);
    const l1 = traceRequests('L1');
    expect(l1.slice(9).map((e) => [e.status, pointsOf(e)])).toEqual([
      [200, range(1, 16)],
      [200, range(33, 37)],
    ]);
    expect(l1[9].idempotencyKey).toBe(l1[0].idempotencyKey);
    expect(s.status.refusedLoads).toEqual({});
    expect(sandbox.stats.duplicateTracePoints).toBe(0);
  });

  it('while it still refuses, the parked request goes alone every retry_max_s, never split again', async () => {
    const config = await setUp({ retryMaxS: 0.3 });
    addReadings('T1', 16);
    sandbox.setFaults({ rejectLoads: ['L1'] });
    const s = start(config);
    await pushed(s, 0);
    addReadings('T1', 4, 16);
    await waitFor(() => traceRequests('L1').length >= 12, 5000, 'three retries');
    const retries = traceRequests('L1').slice(9);
    for (const e of retries) expect([e.status, pointsOf(e)]).toEqual([400, range(1, 16)]);
    expect(store.listDeadLetters()).toHaveLength(1);
    expect(s.status.refusedLoads.L1.reason).toBe(`the service refuses every trace request: ${L1_REFUSED}`);
  });

  it('`dead-letter retry` of the parked request ends the wait: its points go again', async () => {
    const config = await setUp({ retryMaxS: 60 });
    addReadings('T1', 16);
    sandbox.setFaults({ rejectLoads: ['L1'] });
    const s = start(config);
    await pushed(s, 0);
    expect(store.listDeadLetters()).toHaveLength(1);
    sandbox.setFaults({ rejectLoads: [] });
    expect(store.retryDeadLetters('all')).toBe(1);
    await waitFor(() => sandbox.stats.tracePoints === 16 && store.counts().retryReadings === 0, 5000, 'the retried points delivered');
    expect(store.counts()).toMatchObject({ readings: 0, deadLetters: 0 });
    expect(events.filter((e) => e.kind === 'trace' && e.status === 200).flatMap(pointsOf)).toEqual(range(1, 16));
    await waitFor(() => Object.keys(s.status.refusedLoads).length === 0, 2000, 'the wait to end');
  });

  it('a strict deployment that requires a field: the reload that adds it sends the parked request at once', async () => {
    const config = await setUp({ strict: true, retryMaxS: 60, api: { date_time_format: 'utc' } });
    addReadings('T1', 16);
    const s = start(config);
    await pushed(s, 0);
    expect(traceRequests('L1').map((e) => [e.status, pointsOf(e).length])).toEqual(REFUSED_ALIKE);
    expect(s.status.refusedLoads.L1.reason).toMatch(/^the service refuses every trace request: HTTP 400: .*source: required/);

    s.updateConfig({ ...config, api: { ...config.api, extra_fields: { source: 'carrier' } } });
    await waitFor(() => store.counts().readings === 0 && store.counts().deadLetters === 0, 5000, 'the parked request delivered after the reload');
    expect(sandbox.traces).toHaveLength(1);
    expect(sandbox.traces[0].body).toMatchObject({ source: 'carrier', loadNumber: 'L1' });
    expect(sandbox.traces[0].body.traces).toHaveLength(16);
  });
});

describe('a refused point', () => {
  it('is still found by splitting: 9 requests for 16 points, 1 dead letter of it, no wait', async () => {
    const config = await setUp({ retryMaxS: 60 });
    addReadings('T1', 16);
    sandbox.setFaults({ rejectTraceRefs: ['dev-11'] });
    const s = start(config);
    await pushed(s, 0);
    expect(traceRequests('L1')).toHaveLength(9);
    expect(store.listDeadLetters().map((d) => [d.recordId, d.recordIds])).toEqual([[11, null]]);
    expect(
      events
        .filter((e) => e.kind === 'trace' && e.status === 200)
        .flatMap(pointsOf)
        .sort((a, b) => a - b),
    ).toEqual(range(1, 16).filter((id) => id !== 11));
    expect(s.status.refusedLoads).toEqual({});
  });

  it('two of them, one in each half, answered alike and naming neither: found by splitting, the 14 others delivered, no wait', async () => {
    const config = await setUp({ retryMaxS: 60 });
    addReadings('T1', 16);
    sandbox.setFaults({ rejectTraceRefs: ['dev-3', 'dev-11'], rejectUnnamed: true });
    const s = start(config);
    await pushed(s, 0);
    expect(store.listDeadLetters().map((d) => [d.recordId, d.recordIds])).toEqual([
      [3, null],
      [11, null],
    ]);
    expect(
      events
        .filter((e) => e.kind === 'trace' && e.status === 200)
        .flatMap(pointsOf)
        .sort((a, b) => a - b),
    ).toEqual(range(1, 16).filter((id) => id !== 3 && id !== 11));
    expect(s.status.refusedLoads).toEqual({});
    expect(store.counts()).toMatchObject({ readings: 0, deadLetters: 2 });
    // The halves were answered alike: the first half was split on (1-4 refused, 5-8 taken), then each refused part.
    expect(
      traceRequests('L1')
        .slice(0, 5)
        .map((e) => [e.status, pointsOf(e)]),
    ).toEqual([
      [400, range(1, 16)],
      [400, range(1, 8)],
      [400, range(9, 16)],
      [400, range(1, 4)],
      [200, range(5, 8)],
    ]);
  });
});

describe('a request refused alike, the service failing in the middle of the probe', () => {
  it('pauses with nothing of it acknowledged; the retry sends the same requests under the same keys and delivers each point once', async () => {
    const config = await setUp({ retryMaxS: 60 });
    addReadings('T1', 16);
    sandbox.setFaults({ rejectTraceRefs: ['dev-3', 'dev-11'], rejectUnnamed: true });
    // The fifth trace request (the probe's part 5-8) is answered 503.
    let traces = 0;
    sandbox.gate = (req) => {
      if (req.url?.includes('trace') && ++traces === 5) sandbox.setFaults({ failNext: 1 });
      return undefined;
    };
    const s = start(config);
    s.requestTracePush();
    await waitFor(() => store.counts().readings === 0 && store.counts().deadLetters === 2, 10_000, 'every point delivered or parked after the retry');
    // The fifth was answered 503 (the sandbox records no body for it): delivery paused.
    expect(events.filter((e) => e.kind === 'trace')[4]!.status).toBe(503);
    const l1 = traceRequests('L1');
    expect(l1.slice(0, 4).map((e) => [e.status, pointsOf(e)])).toEqual([
      [400, range(1, 16)],
      [400, range(1, 8)],
      [400, range(9, 16)],
      [400, range(1, 4)],
    ]);
    // The retry goes the same way, each request under the key it had, and on past the failure.
    expect(l1.slice(4, 8).map((e) => e.idempotencyKey)).toEqual(l1.slice(0, 4).map((e) => e.idempotencyKey));
    expect([l1[8]!.status, pointsOf(l1[8]!)]).toEqual([200, range(5, 8)]);
    expect(store.listDeadLetters().map((d) => d.recordId)).toEqual([3, 11]);
    const delivered = l1.filter((e) => e.status === 200).flatMap(pointsOf);
    expect(delivered.sort((a, b) => a - b)).toEqual(range(1, 16).filter((id) => id !== 3 && id !== 11));
    expect(sandbox.stats.duplicateTracePoints).toBe(0);
    expect(s.status.refusedLoads).toEqual({});
  });
});

describe('a request refused whole, in the buffer', () => {
  it('is one dead letter through `salvage`, holding every reading with its new id, and `dead-letter retry` puts them all back', async () => {
    const config = await setUp({ retryMaxS: 60 });
    addReadings('T1', 16);
    addReadings('T1', 4, 16);
    store.parkRequest(range(3, 10), 'L1', 400, '{"error":"source required"}', { loadNumber: 'L1' }, T0);
    store.ackReadings('L1', 10, null);
    store.close();
    const old = join(tmp.dir, 'old.db');
    copyFileSync(config.buffer.path, old);
    store = Store.open(join(tmp.dir, 'fresh.db'));
    store.startLoad({ loadNumber: 'L0', resourceId: 'T9', resourceType: 'Truck', stops: [], nowMs: T0 });
    store.insertReadings([{ resourceId: 'T9', timeMs: T0, lat: 41.8, lon: -87.6 }]); // id 1 here: the copies get new ids

    const report = salvage(old, store);
    expect(report).toMatchObject({ readings: 18, deadLetters: 1 });
    const dead = store.listDeadLetters();
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ loadNumber: 'L1', status: 400, recordId: dead[0].recordIds![0] });
    const copied = dead[0].recordIds!;
    expect(copied).toHaveLength(8);
    expect(store.refusedRequests().map((r) => [r.loadNumber, r.readingIds])).toEqual([['L1', copied]]);
    expect(store.parkedReadings(store.refusedRequests()[0]).map((r) => r.time_ms)).toEqual(range(2, 9).map((i) => T0 + i * 1000));
    // What L1 still has to send: 11-20 of the old file, not the parked ones.
    expect(store.backlogs(['L1']).get('L1')).toBe(10);
    expect(store.retryDeadLetters('all')).toBe(1);
    expect(store.counts()).toMatchObject({ deadLetters: 0, retryReadings: 8 });
  });
});

describe('the daemon and `status`', () => {
  let daemon: Daemon | undefined;
  afterEach(async () => {
    await daemon?.stop('SIGKILL');
    daemon = undefined;
  });

  it('shows the load whose requests the service refuses, in text and --json, and logs it once', async () => {
    sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC, strict: true, onRequest: (e) => events.push(e) });
    const { url } = await sandbox.start();
    // UTC times but no `source`: the strict service refuses every body alike.
    const cfg = agentConfig(tmp.dir, url, '[[sources]]\ntype = "simulator"\nresource_id = "TRUCK-1"\ntime_scale = 20\ninterval_s = 1\n', {
      traces: '*/2 * * * * *',
      sampling: 5,
      api: 'date_time_format = "utc"\n',
    });
    expect((await runCli(['load', 'start', 'L-1', '--resource', 'TRUCK-1', '--config', cfg])).code).toBe(0);
    daemon = startDaemon(['--config', cfg]);
    const reason = await waitFor(
      async () => {
        const r = await runCli(['status', '--json', '--config', cfg]);
        const refused = (JSON.parse(r.stdout) as { delivery: { refusedLoads?: Record<string, { reason: string }> } | null }).delivery?.refusedLoads?.['L-1'];
        return refused?.reason;
      },
      20_000,
      'status --json to show the refused load',
    );
    expect(reason).toMatch(/^the service refuses every trace request: HTTP 400: \{"error":"invalid body","problems":\["source: required/);
    const text = await runCli(['status', '--config', cfg]);
    expect(text.stdout).toContain(`REFUSED:      load L-1: ${reason}; its traces wait`);

    // More pushes and retries (retry_max_s = 1) go by: the log says it once.
    const refusedSoFar = traceRequests('L-1').length;
    await waitFor(() => traceRequests('L-1').length >= refusedSoFar + 2, 10_000, 'two retries');
    const said = daemon
      .output()
      .split('\n')
      .filter((l) => l.includes('the service refuses every trace request'));
    expect(said).toHaveLength(1);
    // One dead letter holds the refused request; each retry is that request alone.
    const listed = await runCli(['dead-letter', 'list', '--json', '--config', cfg]);
    const whole = (JSON.parse(listed.stdout) as Array<{ recordIds: number[] | null }>).filter((d) => d.recordIds);
    expect(whole).toHaveLength(1);
    for (const e of traceRequests('L-1').slice(refusedSoFar)) expect(pointsOf(e)).toEqual(whole[0].recordIds);
  });
});
