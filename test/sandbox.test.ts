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
    expect(await res.json()).toEqual({ error: 'invalid body', problems: ['traces.1.coordinate.latitude: Too big: expected number to be <=90'] });
    const bad = await post(MILESTONE_PATH, { ...milestone, stopsequenceNumber: 0, time: { ...time, timeZoneOffset: 'UTC-06:00' } });
    expect(bad.status).toBe(400);
    expect((await bad.json()).problems).toEqual([
      'time.timeZoneOffset: expected UTC<sign><hours>[:minutes], e.g. UTC-5 or UTC-3:30',
      'stopsequenceNumber: Too small: expected number to be >=1',
    ]);
    expect(sandbox.stats.invalid).toBe(2);
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
