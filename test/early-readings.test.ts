/**
 * Early readings: a resource's readings from before its load started are kept unassigned for
 * `loads.keep_unassigned_s`, and a load started `--from` a time in that span takes them, once,
 * in the commit that starts it; older ones are discarded (counted as of no load). A real
 * buffer file, the real ingest and sender, the real sandbox; the CLI and the daemon at the end.
 */
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { Ingest } from '../src/admission/ingest.js';
import { ingestOptionsOf } from '../src/admission/ingest-options.js';
import { enforceBounds } from '../src/buffer/bounds.js';
import { Store } from '../src/buffer/store.js';
import { type Config, configSchema } from '../src/config/schema.js';
import { Commands } from '../src/fleet/commands.js';
import { createLogger } from '../src/log.js';
import { startLoadChecked } from '../src/milestones/assign.js';
import type { Reading } from '../src/reading.js';
import { agentConfig, daemonFixture, runCli, startDaemon, TEST_SCAC, waitFor, writeFile } from './helpers.js';
import { inProcessSender } from './in-process-sender.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });
const MIN = 60_000;
const T0 = Math.floor(Date.now() / 1000) * 1000 - 30 * MIN;

let store: Store;
let config: Config;
let ingest: Ingest;
let sender: ReturnType<typeof inProcessSender>;
let now = T0;

const fx = daemonFixture({
  afterStop: async () => {
    await sender.stop();
    store.close();
  },
});
beforeEach(async () => {
  const { url } = await fx.sandbox.start();
  // The defaults that matter: an hour of readings without a load kept (loads.keep_unassigned_s).
  config = configSchema.parse({
    api: { base_url: url, scac: TEST_SCAC, timeout_s: 2 },
    buffer: { path: join(fx.tmp.dir, 'buffer.db') },
    delivery: { poll_interval_ms: 20, retry_initial_s: 0.05, retry_max_s: 0.2, drain_interval_ms: 0 },
    sampling: { interval_s: 0 },
    sources: [{ type: 'simulator', resource_id: 'T1' }],
  });
  store = Store.open(config.buffer.path);
  sender = inProcessSender(store, config);
  now = T0;
  ingest = new Ingest(store, { ...ingestOptionsOf(config), batchSize: 100, flushIntervalMs: 60_000 }, silent, () => now);
});

const at = (timeMs: number, resourceId = 'T1'): Reading => ({ resourceId, timeMs, lat: 41.8, lon: -87.6 + (timeMs % MIN) / 1e7 });

/** Readings arriving at `atMs`, committed as the daemon does; how many were kept and how many discarded for no load. */
function arrive(atMs: number, ...readings: Reading[]): { kept: number; discarded: number } {
  now = atMs;
  const { committed, discardedNoLoad } = ingest.stats;
  for (const r of readings) ingest.admit(r);
  ingest.flush();
  return { kept: ingest.stats.committed - committed, discarded: ingest.stats.discardedNoLoad - discardedNoLoad };
}

/** Every point the service took, by reading time, with its load. */
const accepted = () => fx.sandbox.traces.flatMap((t) => t.body.traces.map((p) => ({ time: Date.parse(p.time.dateTime), load: t.body.loadNumber })));

async function push(): Promise<void> {
  const s = sender.get();
  s.requestTracePush();
  await s.kick();
  await waitFor(() => store.loadsWithReadings().length === 0, 10_000, 'the push drained the buffer');
  await s.idle();
}

const iso = (ms: number) => new Date(ms).toISOString();
const sec = (ms: number) => Math.floor(ms / 1000) * 1000;

describe('readings of a resource with no load', () => {
  it('are kept unassigned, and a load started --from takes those since then, once, with what comes after', async () => {
    // T1 reports for 10 minutes with no load; T2 too (not its resource).
    const early = Array.from({ length: 10 }, (_, i) => at(T0 + i * MIN));
    expect(arrive(T0 + 10 * MIN, ...early, at(T0 + 5 * MIN, 'T2'))).toEqual({ kept: 11, discarded: 0 });
    // Started at 10 min, from 4 min: the readings of 4..9 min are its own, not those before.
    const { row } = startLoadChecked(store, config, { loadNumber: 'L1', resourceId: 'T1', from: iso(T0 + 4 * MIN) }, T0 + 10 * MIN);
    expect(row.windowFromMs).toBe(T0 + 4 * MIN);
    expect(store.backlogs(['L1']).get('L1')).toBe(6);
    expect(arrive(T0 + 12 * MIN, at(T0 + 11 * MIN), at(T0 + 12 * MIN))).toEqual({ kept: 2, discarded: 0 });
    await push();
    const times = accepted().map((p) => p.time);
    expect(times).toEqual([4, 5, 6, 7, 8, 9, 11, 12].map((m) => sec(T0 + m * MIN)));
    expect(new Set(accepted().map((p) => p.load))).toEqual(new Set(['L1']));
    // Delivered, they go with the purge; the rest of no load stays unassigned, unsent.
    store.purgeAcked();
    expect(store.db.prepare('SELECT resource_id, time_ms FROM readings ORDER BY id').all()).toEqual([
      ...[0, 1, 2, 3].map((m) => ({ resource_id: 'T1', time_ms: T0 + m * MIN })),
      { resource_id: 'T2', time_ms: T0 + 5 * MIN },
    ]);
    // A second load from the same time takes nothing again: they were L1's.
    startLoadChecked(store, config, { loadNumber: 'L2', resourceId: 'T1', from: iso(T0 + 4 * MIN) }, T0 + 13 * MIN);
    expect(store.backlogs(['L2']).get('L2')).toBe(0);
    expect(fx.sandbox.stats.duplicateTracePoints).toBe(0);
  });

  it('beside another load of the resource: the new load takes only the unassigned ones, and the other load keeps its own', async () => {
    expect(arrive(T0 + 3 * MIN, at(T0), at(T0 + MIN), at(T0 + 2 * MIN))).toEqual({ kept: 3, discarded: 0 });
    store.startLoad({ loadNumber: 'A', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 + 3 * MIN });
    expect(arrive(T0 + 5 * MIN, at(T0 + 3 * MIN), at(T0 + 4 * MIN))).toEqual({ kept: 2, discarded: 0 });
    startLoadChecked(store, config, { loadNumber: 'B', resourceId: 'T1', from: iso(T0 + MIN) }, T0 + 5 * MIN);
    expect(store.backlogs(['A', 'B'])).toEqual(
      new Map([
        ['A', 2],
        ['B', 2],
      ]),
    );
    expect(arrive(T0 + 6 * MIN, at(T0 + 5 * MIN))).toEqual({ kept: 1, discarded: 0 });
    await push();
    const byLoad = (l: string) =>
      accepted()
        .filter((p) => p.load === l)
        .map((p) => (p.time - sec(T0)) / MIN);
    expect(byLoad('A')).toEqual([3, 4, 5]);
    expect(byLoad('B')).toEqual([1, 2, 5]);
  });

  it('older than loads.keep_unassigned_s: discarded at commit, or by the limits pass, counted as of no load', () => {
    // Stamped 70 min before it arrives: past the hour.
    expect(arrive(T0 + 70 * MIN, at(T0), at(T0 + 65 * MIN))).toEqual({ kept: 1, discarded: 1 });
    now = T0 + 130 * MIN;
    const r = enforceBounds(store, { maxSizeBytes: 1e12, maxAgeMs: 7 * 86_400_000, keepUnassignedMs: 3_600_000 }, silent, now);
    expect(r.unassigned).toBe(1);
    expect(store.counts().readings).toBe(0);
    // privacy.record_without_load: kept for good.
    ingest.configure({ ...ingest.options, keepWithoutLoad: true });
    expect(arrive(T0 + 132 * MIN, at(T0))).toEqual({ kept: 1, discarded: 0 });
    expect(enforceBounds(store, { maxSizeBytes: 1e12, maxAgeMs: 7 * 86_400_000 }, silent, T0 + 200 * MIN).unassigned).toBe(0);
  });

  it('a from older than loads.keep_unassigned_s, in the future, or without an offset is refused (65), and no load is started', () => {
    const nowMs = T0 + 90 * MIN;
    const refused = (from: string) => {
      let status: number | undefined;
      let message = '';
      try {
        startLoadChecked(store, config, { loadNumber: 'L1', resourceId: 'T1', from }, nowMs);
      } catch (err) {
        status = (err as { exitCode?: number }).exitCode;
        message = (err as Error).message;
      }
      return { status, message };
    };
    expect(refused(iso(nowMs - 61 * MIN))).toEqual({ status: 65, message: expect.stringContaining('loads.keep_unassigned_s (3600 s)') });
    expect(refused(iso(nowMs + MIN))).toEqual({ status: 65, message: expect.stringContaining('in the future') });
    expect(refused('2026-06-01T12:00:00')).toEqual({ status: 65, message: expect.stringContaining('offset') });
    expect(store.getLoad('L1')).toBeUndefined();
  });
});

describe("the fleet's load-start", () => {
  it('with from: applied as load start --from, and a from out of the span refused with 65', () => {
    expect(arrive(T0 + 10 * MIN, at(T0 + 8 * MIN), at(T0 + 9 * MIN))).toEqual({ kept: 2, discarded: 0 });
    const commands = new Commands(
      store,
      () => config,
      () => 65_536,
    );
    const send = (body: object) => commands.handle('load-start', Buffer.from(JSON.stringify(body)), T0 + 10 * MIN).reply;
    expect(send({ commandId: 'c1', loadNumber: 'L0', resourceId: 'T1', from: iso(T0 - 60 * MIN) })).toMatchObject({ ok: false, status: 65, message: expect.stringContaining('keep_unassigned_s') });
    expect(send({ commandId: 'c2', loadNumber: 'L1', resourceId: 'T1', from: iso(T0 + 8 * MIN) })).toMatchObject({ ok: true, status: 0 });
    expect(store.backlogs(['L1']).get('L1')).toBe(2);
  });
});

/** T1 reports a fix every 200 ms, stamped now. */
const SOURCE = `export function createSource(ctx) {
  let timer;
  let n = 0;
  return {
    start() { timer = setInterval(() => { n += 1; ctx.emit({ resourceId: 'T1', timeMs: Date.now(), lat: 41.8 + n * 1e-5, lon: -87.6 }); }, 200); },
    stop() { clearInterval(timer); },
  };
}
`;

describe('through the daemon and the CLI', () => {
  it('load start --from 5 minutes ago: the sandbox gets the points T1 reported before the load', async () => {
    const source = writeFile(fx.tmp.dir, 't1.mjs', SOURCE);
    const cfg = agentConfig(fx.tmp.dir, fx.sandbox.url, `[[sources]]\ntype = "module"\nname = "t1"\npath = "${source}"\n`, { traces: '* * * * * *', sampling: 0 });
    store.close();
    fx.daemon = startDaemon(['--config', cfg]);
    await fx.daemon!.started('the daemon');
    // Two seconds of T1 with no load.
    await new Promise((r) => setTimeout(r, 2000));
    const startMs = Date.now();
    const r = await runCli(['load', 'start', 'L1', '-r', 'T1', '--from', iso(Date.now() - 5 * MIN), '--config', cfg]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('its readings from');
    // Stamped before the load started: on the old code its window opened at the start, never before.
    const early = () => accepted().filter((p) => p.load === 'L1' && p.time < startMs);
    await waitFor(() => early().length >= 5, 20_000, 'the early points at the sandbox');
    expect(fx.sandbox.stats.duplicateTracePoints).toBe(0);
  });
});
