import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Sandbox } from '../src/sandbox/server.js';
import { TEST_KEY, TEST_SCAC } from './helpers.js';

let sandbox: Sandbox;
let url: string;
beforeEach(async () => {
  sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
  ({ url } = await sandbox.start());
});
afterEach(() => sandbox.stop());

const MILESTONE_PATH = '/rcsc/events/v1/loads/milestone-requests';
const TRACE_PATH = '/rcsc/events/v1/loads/trace-requests';
const time = { dateTime: '2026-11-22T14:05:03.120-06:00', timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' };
const milestone = { eventCode: 'X3', reasonCode: 'NS', loadNumber: 'L1', eventCity: 'Chicago', eventState: 'IL', time, stopsequenceNumber: 1, references: [{ name: 'milestoneId', value: 'm1' }] };
const trace = (lat = 41.8) => ({ time, resourceId: 'T1', resourceType: 'Truck', coordinate: { latitude: lat, longitude: -87.6 }, references: [{ name: 'traceId', value: `d-${lat}` }] });

function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'Ocp-Apim-Subscription-Key': TEST_KEY, carrierSCAC: TEST_SCAC, Accept: 'application/json', 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

describe('sandbox', () => {
  it('accepts valid milestone and trace bodies and records them', async () => {
    expect((await post(MILESTONE_PATH, milestone)).status).toBe(200);
    expect((await post(TRACE_PATH, { loadNumber: 'L1', traces: [trace()] })).status).toBe(200);
    expect(sandbox.milestones.map((m) => m.body.eventCode)).toEqual(['X3']);
    expect(sandbox.traces[0].body.traces).toHaveLength(1);
    expect(sandbox.stats.accepted).toBe(2);
    // What the sandbox keeps never holds the key.
    expect(JSON.stringify(sandbox.milestones)).not.toContain(TEST_KEY);
  });

  it('holds a request its gate returns a promise for, read whole, until the promise resolves; others pass', async () => {
    let open!: () => void;
    const gated: string[] = [];
    sandbox.gate = (req) => {
      if (req.headers['x-hold'] === undefined) return undefined;
      gated.push(String(req.headers['x-hold']));
      return new Promise<void>((r) => (open = r));
    };
    const held = post(TRACE_PATH, { loadNumber: 'L1', traces: [trace(41.1)] }, { 'x-hold': 'yes' });
    for (let i = 0; i < 100 && gated.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(gated).toEqual(['yes']);
    // Another request goes through while the first waits; the first is not handled yet.
    expect((await post(TRACE_PATH, { loadNumber: 'L1', traces: [trace(41.2)] })).status).toBe(200);
    expect(sandbox.traces.map((t) => t.body.traces[0].coordinate.latitude)).toEqual([41.2]);
    open();
    expect((await held).status).toBe(200);
    expect(sandbox.traces.map((t) => t.body.traces[0].coordinate.latitude)).toEqual([41.2, 41.1]);
    sandbox.gate = undefined;
  });

  it('rejects a missing or wrong key with 401 and a wrong SCAC with 403', async () => {
    expect((await post(MILESTONE_PATH, milestone, { 'Ocp-Apim-Subscription-Key': 'wrong' })).status).toBe(401);
    const res = await fetch(`${url}${MILESTONE_PATH}`, { method: 'POST', headers: { carrierSCAC: TEST_SCAC, 'Content-Type': 'application/json', Accept: 'application/json' }, body: '{}' });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: 'missing Ocp-Apim-Subscription-Key header' });
    const scac = await post(MILESTONE_PATH, milestone, { carrierSCAC: 'ZZZZ' });
    expect(scac.status).toBe(403);
    expect(await scac.json()).toEqual({ error: 'carrierSCAC ZZZZ is not allowed for this key' });
    expect(sandbox.stats.unauthorized).toBe(3);
    expect(sandbox.milestones).toHaveLength(0);
  });

  it('answers 400 naming the bad field, with the schemas the agent uses', async () => {
    const res = await post(TRACE_PATH, { loadNumber: 'L1', traces: [trace(), trace(200)] });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: 'invalid body', problems: ['traces[1].coordinate.latitude: expected a number <= 90, got 200'] });
    const bad = await post(MILESTONE_PATH, { ...milestone, stopsequenceNumber: 0, time: { ...time, timeZoneOffset: 'UTC-06:00' } });
    expect(bad.status).toBe(400);
    expect((await bad.json()).problems).toEqual(['time.timeZoneOffset: expected UTC<sign><hours>[:minutes], e.g. UTC-5 or UTC-3:30, got "UTC-06:00"', 'stopsequenceNumber: expected a number >= 1, got 0']);
    const month13 = await post(MILESTONE_PATH, { ...milestone, time: { ...time, dateTime: '2026-13-01T10:00:00Z' } });
    expect((await month13.json()).problems).toEqual(['time.dateTime: expected a date that exists, got "2026-13-01T10:00:00Z"']);
    expect(sandbox.stats.invalid).toBe(3);
  });

  it('injects 503, 429 with Retry-After, dropped connections, forced statuses and refused loads', async () => {
    sandbox.setFaults({ failNext: 1, throttleNext: 1, retryAfter: '7' });
    const throttled = await post(MILESTONE_PATH, milestone);
    expect(throttled.status).toBe(429);
    expect(throttled.headers.get('retry-after')).toBe('7');
    expect((await post(MILESTONE_PATH, milestone)).status).toBe(503);
    expect((await post(MILESTONE_PATH, milestone)).status).toBe(200);

    sandbox.setFaults({ dropNext: 1 });
    await expect(post(MILESTONE_PATH, milestone)).rejects.toThrow();
    expect(sandbox.stats.faults.dropped).toBe(1);

    sandbox.setFaults({ forceStatus: 301, redirectTo: 'http://elsewhere.invalid/' });
    const moved = await fetch(`${url}${MILESTONE_PATH}`, { method: 'POST', redirect: 'manual', body: '{}' });
    expect(moved.status).toBe(301);
    expect(moved.headers.get('location')).toBe('http://elsewhere.invalid/');
    sandbox.setFaults({ forceStatus: 0, rejectLoads: ['L1'] });
    expect((await post(MILESTONE_PATH, milestone)).status).toBe(400);
    expect((await post(MILESTONE_PATH, { ...milestone, loadNumber: 'L2' })).status).toBe(200);
  });

  it('counts duplicates by Idempotency-Key and by trace reference', async () => {
    await post(TRACE_PATH, { loadNumber: 'L1', traces: [trace(41.1)] }, { 'Idempotency-Key': 'k1' });
    await post(TRACE_PATH, { loadNumber: 'L1', traces: [trace(41.1)] }, { 'Idempotency-Key': 'k1' });
    await post(TRACE_PATH, { loadNumber: 'L1', traces: [trace(41.2)] }, { 'Idempotency-Key': 'k2' });
    expect(sandbox.stats.duplicateRequests).toBe(1);
    expect(sandbox.stats.duplicateTracePoints).toBe(1);
  });

  it('is steered over HTTP by its control endpoints', async () => {
    const put = await fetch(`${url}/_sandbox/faults`, { method: 'PUT', body: JSON.stringify({ failNext: 1 }) });
    expect(put.status).toBe(200);
    expect((await post(MILESTONE_PATH, milestone)).status).toBe(503);
    const unknown = await fetch(`${url}/_sandbox/faults`, { method: 'PUT', body: JSON.stringify({ explode: true }) });
    expect(unknown.status).toBe(400);
    await post(MILESTONE_PATH, milestone);
    const got = (await (await fetch(`${url}/_sandbox/received`)).json()) as { milestones: unknown[]; stats: { faults: { failed: number } } };
    expect(got.milestones).toHaveLength(1);
    expect(got.stats.faults.failed).toBe(1);
  });
});

describe('strict sandbox', () => {
  let strict: Sandbox;
  let strictUrl: string;
  afterEach(() => strict?.stop());
  const start = async (opts: { strict?: boolean; loadNumberPattern?: string }) => {
    strict = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC, ...opts });
    ({ url: strictUrl } = await strict.start());
  };
  const postTo = (path: string, body: unknown) =>
    fetch(`${strictUrl}${path}`, {
      method: 'POST',
      headers: { 'Ocp-Apim-Subscription-Key': TEST_KEY, carrierSCAC: TEST_SCAC, Accept: 'application/json', 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
  const utc = { ...time, dateTime: '2026-11-22T20:05:03Z' };
  const warm = (t: ReturnType<typeof trace>, dateTime: string) => ({ ...t, temperature: { unitOfMeasure: 'C', value: 3.5, dateTime } });

  it('refuses the specification’s local dateTime and a body without source, naming each field', async () => {
    await start({ strict: true });
    const m = await postTo(MILESTONE_PATH, milestone);
    expect(m.status).toBe(400);
    expect(await m.json()).toEqual({
      error: 'invalid body',
      problems: ['source: required (expected a non-empty string such as "carrier")', 'time.dateTime: expected UTC with whole seconds (YYYY-MM-DDTHH:MM:SSZ), got "2026-11-22T14:05:03.120-06:00"'],
    });
    const t = await postTo(TRACE_PATH, { source: 'carrier', loadNumber: 'L1', traces: [warm({ ...trace(), time: utc }, utc.dateTime), warm(trace(41.9), '2026-11-22T20:05:03.5Z')] });
    expect(t.status).toBe(400);
    expect((await t.json()).problems).toEqual([
      'traces[1].time.dateTime: expected UTC with whole seconds (YYYY-MM-DDTHH:MM:SSZ), got "2026-11-22T14:05:03.120-06:00"',
      'traces[1].temperature.dateTime: expected UTC with whole seconds (YYYY-MM-DDTHH:MM:SSZ), got "2026-11-22T20:05:03.5Z"',
    ]);
    const empty = await postTo(MILESTONE_PATH, { ...milestone, time: utc, source: '' });
    expect((await empty.json()).problems).toEqual(['source: expected a non-empty string, got ""']);
    expect(strict.stats.invalid).toBe(3);
    expect(strict.milestones).toHaveLength(0);
  });

  it('names schema and strict problems in one answer, each field once', async () => {
    await start({ strict: true });
    const res = await postTo(MILESTONE_PATH, { ...milestone, stopsequenceNumber: 0, time: { ...time, dateTime: 'yesterday' } });
    expect((await res.json()).problems).toEqual([
      'time.dateTime: expected an ISO 8601 timestamp with a UTC offset, got "yesterday"',
      'stopsequenceNumber: expected a number >= 1, got 0',
      'source: required (expected a non-empty string such as "carrier")',
    ]);
  });

  it('accepts UTC whole-second dateTimes with a source', async () => {
    await start({ strict: true });
    expect((await postTo(MILESTONE_PATH, { ...milestone, source: 'carrier', time: utc })).status).toBe(200);
    expect((await postTo(TRACE_PATH, { source: 'carrier', loadNumber: 'L-2026-1', traces: [warm({ ...trace(), time: utc }, utc.dateTime)] })).status).toBe(200);
    expect(strict.stats.accepted).toBe(2);
  });

  it('holds load numbers to the agent’s rule by default, or to --load-number-pattern as a whole', async () => {
    await start({ strict: true });
    const ok = { ...milestone, source: 'carrier', time: utc };
    expect((await postTo(MILESTONE_PATH, { ...ok, loadNumber: 'A'.repeat(35) })).status).toBe(200);
    const long = await postTo(MILESTONE_PATH, { ...ok, loadNumber: 'A'.repeat(36) });
    expect((await long.json()).problems).toEqual([`loadNumber: expected a match for ^[A-Za-z0-9-]{1,35}$, got "${'A'.repeat(36)}"`]);
    await strict.stop();

    await start({ strict: true, loadNumberPattern: '\\d{4}-\\d{6}' });
    expect((await postTo(MILESTONE_PATH, { ...ok, loadNumber: '2026-000123' })).status).toBe(200);
    const partial = await postTo(TRACE_PATH, { source: 'carrier', loadNumber: '2026-0001234', traces: [{ ...trace(), time: utc }] });
    expect(partial.status).toBe(400);
    expect((await partial.json()).problems).toEqual(['loadNumber: expected a match for \\d{4}-\\d{6}, got "2026-0001234"']);
  });

  it('applies a load number pattern without --strict, and nothing else', async () => {
    await start({ loadNumberPattern: '\\d+' });
    expect((await postTo(MILESTONE_PATH, { ...milestone, loadNumber: '42' })).status).toBe(200);
    const res = await postTo(MILESTONE_PATH, milestone);
    expect(res.status).toBe(400);
    expect((await res.json()).problems).toEqual(['loadNumber: expected a match for \\d+, got "L1"']);
  });

  it('throws on an invalid pattern, even one that would compile once anchored', () => {
    expect(() => new Sandbox({ key: TEST_KEY, scac: TEST_SCAC, loadNumberPattern: '[' })).toThrow(SyntaxError);
    expect(() => new Sandbox({ key: TEST_KEY, scac: TEST_SCAC, loadNumberPattern: 'a)(b' })).toThrow(SyntaxError);
  });
});
