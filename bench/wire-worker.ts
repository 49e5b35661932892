/**
 * Child process of the bench's wire rows (bench/wire.ts): the real Agent (no sources) with
 * the defaults, but for where the service is and its CA, pushing one truck-day in compressed
 * time. Driven over IPC: each push waits for `next`, so that the bench can let the idle time
 * between pushes pass at the service (its idle timeout closes the connection) first.
 *
 * - `agent`: 96 pushes (a day of the default 15-minute schedule), each of the 15 readings of
 *   its 15 minutes at the default 60 s sampling, and a milestone every 2 hours, sent as the
 *   daemon sends one: on its own, when recorded. Between pushes the worker collects garbage
 *   (global.gc): the stand-in for the 15 minutes of a daemon at work, whose collections decide
 *   what a weakly held object (undici's TLS session cache) outlives.
 * - `peer`: the pattern of a tracker that posts every reading on its own: one point per
 *   request, a new connection each, no session resumed.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Agent } from '../src/agent.js';
import { configSchema } from '../src/config/schema.js';
import { createLogger } from '../src/log.js';
import { recordMilestone } from '../src/milestones/record.js';
import { BENCH_DEVICE, BENCH_KEY, BENCH_SCAC, loadOf, resourceOf, syntheticReading } from './common.js';

export type WireCommand =
  | { cmd: 'agent'; url: string; caFile: string; dbPath: string; pushes: number; api?: Record<string, unknown>; traces?: Record<string, unknown> }
  | { cmd: 'peer'; url: string; caFile: string; requests: number }
  | { cmd: 'next' };

export type WireEvent = { ev: 'pushed'; push: number; milestone: boolean } | { ev: 'done'; traceRequests: number; tracePoints: number; milestones: number } | { ev: 'error'; message: string };

export const POINTS_PER_PUSH = 15;
export const SAMPLING_S = 60;
export const PUSH_S = 900;
/** A milestone every 2 hours: every 8th push. */
export const MILESTONE_EVERY = 8;

const send = (e: WireEvent) => process.send?.(e);
let waiting: (() => void) | undefined;
const nextCommand = () => new Promise<void>((resolve) => (waiting = resolve));

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

async function agentDay(c: Extract<WireCommand, { cmd: 'agent' }>): Promise<void> {
  const config = configSchema.parse({
    device_id: BENCH_DEVICE,
    api: { base_url: c.url, scac: BENCH_SCAC, ca_file: c.caFile, ...c.api },
    buffer: { path: c.dbPath },
    // Far away: the worker pushes itself, in compressed time.
    schedule: { traces: '0 0 1 1 *', splay_s: 0 },
    traces: { ...c.traces },
    milestones: { detect: false },
    log: { level: 'warn' },
    sources: [{ type: 'simulator', resource_id: 'BENCH' }],
  });
  const agent = new Agent({ file: '(bench)', config, deviceId: BENCH_DEVICE, warnings: [] }, { key: BENCH_KEY, origin: 'bench' }, createLogger({ level: 'warn' }), { sources: () => [] });
  await agent.start();
  const dayStartMs = Date.now() - c.pushes * PUSH_S * 1000;
  agent.store.startLoad({ loadNumber: loadOf(0), resourceId: resourceOf(0), resourceType: 'Truck', stops: [], nowMs: dayStartMs - 1000 });
  for (let p = 0; p < c.pushes; p++) {
    const batch = Array.from({ length: POINTS_PER_PUSH }, (_, j) => {
      const i = p * POINTS_PER_PUSH + j;
      return { ...syntheticReading(0, i * SAMPLING_S, dayStartMs + i * SAMPLING_S * 1000), source: 'bench' };
    });
    agent.store.insertReadings(batch);
    await agent.pushTracesNow();
    await agent.sender.idle();
    gc();
    const milestone = (p + 1) % MILESTONE_EVERY === 0;
    send({ ev: 'pushed', push: p, milestone: false });
    await nextCommand();
    if (milestone) {
      const sent = agent.sender.status.sent.milestones;
      const at = syntheticReading(0, (p + 1) * POINTS_PER_PUSH * SAMPLING_S, Date.now());
      recordMilestone(agent.store, config, { loadNumber: loadOf(0), code: (p / MILESTONE_EVERY) % 2 === 0 ? 'X3' : 'AF', lat: at.lat, lon: at.lon, force: true });
      // The daemon sends a milestone as it is recorded (its poll), on its own connection.
      const deadline = Date.now() + 30_000;
      while (agent.sender.status.sent.milestones === sent) {
        if (Date.now() > deadline) throw new Error('the milestone was not delivered within 30 s');
        await new Promise((r) => setTimeout(r, 20));
      }
      await agent.sender.idle();
      gc();
      send({ ev: 'pushed', push: p, milestone: true });
      await nextCommand();
    }
  }
  const { traceRequests, tracePoints, milestones } = agent.sender.status.sent;
  await agent.stop();
  send({ ev: 'done', traceRequests, tracePoints, milestones });
}

/** One reading per request, each on a connection of its own, no session kept. */
async function peer(c: Extract<WireCommand, { cmd: 'peer' }>): Promise<void> {
  const { readFileSync } = await import('node:fs');
  const { Client, request } = await import('undici');
  const config = configSchema.parse({ api: { base_url: c.url, scac: BENCH_SCAC }, sources: [{ type: 'simulator', resource_id: 'BENCH' }] });
  const url = new URL(config.api.trace_path, c.url);
  const ca = readFileSync(c.caFile, 'utf8');
  const startMs = Date.now() - c.requests * SAMPLING_S * 1000;
  for (let i = 0; i < c.requests; i++) {
    const r = syntheticReading(0, i * SAMPLING_S, startMs + i * SAMPLING_S * 1000);
    const body = JSON.stringify({
      loadNumber: loadOf(0),
      traces: [
        {
          time: { dateTime: new Date(r.timeMs).toISOString().replace(/\.\d+Z$/, 'Z'), timeZoneCode: 'UTC', timeZoneOffset: 'UTC+0' },
          resourceId: r.resourceId,
          resourceType: 'Truck',
          coordinate: { latitude: Number(r.lat?.toFixed(6)), longitude: Number(r.lon?.toFixed(6)) },
          odometer: Number(r.odometer?.toFixed(1)),
          temperature: { unitOfMeasure: 'C', value: Number(r.temperatureC?.toFixed(2)), dateTime: new Date(r.timeMs).toISOString().replace(/\.\d+Z$/, 'Z') },
        },
      ],
    });
    const client = new Client(url.origin, { connect: { ca, maxCachedSessions: 0 } });
    const res = await request(url, {
      method: 'POST',
      dispatcher: client,
      headers: { 'Ocp-Apim-Subscription-Key': BENCH_KEY, carrierSCAC: BENCH_SCAC, Accept: 'application/json', 'Content-Type': 'application/json', 'Idempotency-Key': `peer-${i}` },
      body,
    });
    await res.body.text();
    if (res.statusCode !== 200) throw new Error(`peer request ${i}: HTTP ${res.statusCode}`);
    await client.close();
  }
  send({ ev: 'done', traceRequests: c.requests, tracePoints: c.requests, milestones: 0 });
}

process.on('message', (c: WireCommand) => {
  if (c.cmd === 'next') return waiting?.();
  const run = c.cmd === 'agent' ? agentDay(c) : peer(c);
  run.catch((err) => send({ ev: 'error', message: (err as Error).stack ?? String(err) })).finally(() => process.disconnect?.());
});
