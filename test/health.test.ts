import { Writable } from 'node:stream';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Agent } from '../src/agent.js';
import { configSchema } from '../src/config/schema.js';
import { healthProblems } from '../src/health.js';
import type { Source, SourceHealth } from '../src/sources/types.js';
import { addSecret, createLogger } from '../src/log.js';
import { TEST_KEY, TEST_SCAC, waitFor, writeFile, daemonFixture } from './helpers.js';

// The in-process agent is this fixture's daemon: stopped after each test.
const fx = daemonFixture<Agent>();

function capture() {
  let text = '';
  const stream = new Writable({
    write(chunk, _enc, cb) {
      text += chunk.toString();
      cb();
    },
  });
  return { stream, text: () => text };
}

/** A stand-in agent for healthProblems: nothing queued, no trouble; `more` gives its sources and clock. */
function idleAgent(more: { sources: Source[]; clockState: () => unknown }): Agent {
  return {
    sender: { status: {} },
    store: { counts: () => ({ readings: 0, pendingMilestones: 0 }) },
    pushIntervalMs: () => 900_000,
    startedAt: 0,
    ingest: { stats: { trouble: null } },
    config: { health: { source_silent_s: 300 } },
    pageView: () => undefined,
    ...more,
  } as unknown as Agent;
}

/** Prometheus text format: `name{labels} value` lines into a map. */
function parseMetrics(text: string): Map<string, number> {
  const m = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-z_]+(?:\{[^}]*\})?) (-?[\d.e+]+)$/.exec(line);
    expect(match, `metrics line ${JSON.stringify(line)}`).not.toBeNull();
    m.set(match![1], Number(match![2]));
  }
  return m;
}

describe('health endpoint and metrics', () => {
  it('reports ok, serves parseable metrics, and turns unhealthy when pushes fail while data waits', async () => {
    const { url } = await fx.sandbox.start();
    const config = configSchema.parse({
      api: { base_url: url, scac: TEST_SCAC, timeout_s: 1 },
      buffer: { path: join(fx.tmp.dir, 'b.db'), flush_interval_ms: 100 },
      schedule: { traces: '* * * * * *', splay_s: 0 },
      sampling: { interval_s: 0 },
      delivery: { poll_interval_ms: 100, retry_initial_s: 0.1, retry_max_s: 0.2 },
      health: { listen: '127.0.0.1:0' },
      sources: [{ type: 'simulator', resource_id: 'T1', time_scale: 10, interval_s: 1 }],
    });
    const log = createLogger({ level: 'silent', destination: capture().stream });
    fx.daemon = new Agent({ file: '(test)', config, deviceId: 'dev', warnings: [] }, { key: TEST_KEY, origin: 'test' }, log);
    await fx.daemon.start();
    fx.daemon.store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: Date.now() });
    const base = `http://127.0.0.1:${fx.daemon.healthPort}`;
    await waitFor(() => fx.sandbox.stats.tracePoints > 5, 10_000, 'traces delivered');

    const ok = await fetch(`${base}/healthz`);
    expect(ok.status).toBe(200);
    expect(await ok.text()).toBe('ok\n');
    const metrics = parseMetrics(await (await fetch(`${base}/metrics`)).text());
    expect(metrics.get('telematics_pushes_total{class="delivered"}')).toBeGreaterThan(0);
    expect(metrics.get('telematics_source_healthy{source="simulator:T1",type="simulator"}')).toBe(1);
    expect(metrics.get('telematics_source_readings_total{source="simulator:T1"}')).toBeGreaterThan(5);
    expect(metrics.has('telematics_queue_readings')).toBe(true);
    expect(metrics.get('telematics_buffer_bytes')).toBeGreaterThan(0);
    expect(metrics.get('telematics_dead_letters')).toBe(0);

    // The service goes away; readings keep coming; after two push intervals (1 s each) it is unhealthy.
    await fx.sandbox.stop();
    const bad = await waitFor(
      async () => {
        const r = await fetch(`${base}/healthz`);
        return r.status === 503 ? r.text() : undefined;
      },
      10_000,
      'an unhealthy report',
    );
    expect(bad).toMatch(/^unhealthy\nno successful push for \d+ s while data waits \(push interval 1 s\)/);
    const after = parseMetrics(await (await fetch(`${base}/metrics`)).text());
    expect(after.get('telematics_pushes_total{class="retry"}')).toBeGreaterThan(0);
    expect(after.get('telematics_queue_readings')).toBeGreaterThan(0);
  });
});

describe('per-source counts', () => {
  it('show in status and /metrics: readings, rejected and timeRejected; the simulator is not judged for its time', async () => {
    const { url } = await fx.sandbox.start();
    const plugin = writeFile(
      fx.tmp.dir,
      'plugin.mjs',
      `export function createSource(ctx) {
  return {
    start() {
      const now = Date.now();
      ctx.emit({ resourceId: 'T2', timeMs: now, temperatureC: 4 });
      ctx.emit({ resourceId: 'T2', timeMs: now + 3600000, temperatureC: 4 });
      ctx.emit({ resourceId: 'T2', timeMs: now, temperatureC: 400 });
      ctx.reject('frame 9: bad CRC');
    },
    stop() {},
  };
}
`,
    );
    const config = configSchema.parse({
      api: { base_url: url, scac: TEST_SCAC, timeout_s: 1 },
      buffer: { path: join(fx.tmp.dir, 'b.db'), flush_interval_ms: 100 },
      health: { listen: '127.0.0.1:0' },
      sources: [
        { type: 'module', name: 'reefer', path: plugin },
        // A day ahead of the wall clock, as a demo at a high time_scale soon is.
        { type: 'simulator', resource_id: 'T1', time_scale: 10, interval_s: 1, start_time: new Date(Date.now() + 86_400_000).toISOString() },
      ],
    });
    const out = capture();
    fx.daemon = new Agent({ file: '(test)', config, deviceId: 'dev', warnings: [] }, { key: TEST_KEY, origin: 'test' }, createLogger({ level: 'info', destination: out.stream }));
    await fx.daemon.start();
    await waitFor(() => fx.daemon!.state(true).sources[1].readings >= 2, 10_000, 'simulator readings');
    const [reefer, sim] = fx.daemon.state(true).sources;
    expect(reefer).toMatchObject({ name: 'reefer', readings: 2, rejected: 2, timeRejected: 1 });
    expect(sim).toMatchObject({ name: 'simulator:T1', rejected: 0, timeRejected: 0 });
    const metrics = parseMetrics(await (await fetch(`http://127.0.0.1:${fx.daemon.healthPort}/metrics`)).text());
    expect(metrics.get('telematics_source_readings_total{source="reefer"}')).toBe(2);
    expect(metrics.get('telematics_source_rejected_total{source="reefer"}')).toBe(2);
    const skipped = out
      .text()
      .split('\n')
      .filter((l) => l.includes('bad input skipped'))
      .map((l) => JSON.parse(l) as { source: string; rejected: number; msg: string });
    expect(skipped.map((l) => [l.source, l.rejected, l.msg.replace(/\d{4}-\S+Z/, 'T')])).toEqual([
      ['reefer', 1, 'bad input skipped: time: T is 3600 s in the future (sources_time.max_future_s = 300)'],
      ['reefer', 2, 'bad input skipped: temperature: out of range (400)'],
      ['reefer', 3, 'bad input skipped: frame 9: bad CRC'],
    ]);
    expect(fx.daemon.ingest.stats.rejected).toBe(3);
  });
});

describe('source silence', () => {
  it('calls a source silent after health.source_silent_s, unless it finished on purpose', () => {
    const source = (name: string, h: Partial<SourceHealth>): Source => ({
      name,
      type: 'nmea',
      start: async () => undefined,
      stop: async () => undefined,
      health: () => ({ healthy: true, readings: 60, rejected: 0, lastReadingMs: 0, finished: false, ...h }),
    });
    const agent = idleAgent({
      clockState: () => ({ state: 'synchronised', from: 'test', offsetMs: 0, held: 0, heldExpired: 0 }),
      // The detail no longer decides: a file whose name holds "finished" is still watched.
      sources: [source('replay', { finished: true, detail: 'end of file after 315 lines' }), source('gps', { detail: 'reading /tmp/finished.nmea (fifo)' })],
    });
    expect(healthProblems(agent, 301_000)).toEqual(['source gps silent for more than 300 s']);
  });
});

describe('logs', () => {
  it('never show the subscription key, whatever field or message it hides in', () => {
    const out = capture();
    const log = createLogger({ level: 'trace', destination: out.stream });
    addSecret(TEST_KEY);
    log.info({ key: TEST_KEY, subscriptionKey: TEST_KEY }, 'fields');
    log.warn({ headers: { 'ocp-apim-subscription-key': TEST_KEY } }, 'headers');
    log.error({ err: `upstream said: bad key ${TEST_KEY}` }, `message with ${TEST_KEY} inside`);
    log.child({ component: 'x' }).debug({ nested: { deeper: TEST_KEY } }, 'nested');
    const text = out.text();
    expect(text.split('\n').filter(Boolean)).toHaveLength(4);
    expect(text).not.toContain(TEST_KEY);
    expect(text).toContain('[REDACTED]');
  });
});

describe('the system clock', () => {
  it('is a problem once readings were kept with the time of a clock not synchronised', () => {
    const agent = idleAgent({
      sources: [],
      clockState: () => ({ state: 'unsynchronised', from: 'the kernel (timedatectl)', offsetMs: null, held: 2, heldExpired: 0 }),
    });
    // Waiting for the first fix is not yet a problem...
    expect(healthProblems(agent, 1000)).toEqual([]);
    // ...readings kept with a wrong time are.
    (agent as unknown as { clockState: () => unknown }).clockState = () => ({ state: 'unsynchronised', from: 'the kernel (timedatectl)', offsetMs: null, held: 0, heldExpired: 3 });
    expect(healthProblems(agent, 1000)).toEqual(["system clock not synchronised (the kernel (timedatectl)) and no GNSS time came: 3 readings kept with the system clock's time"]);
  });
});
