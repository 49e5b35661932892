/**
 * `buffer salvage` as docs/operations.md has it run: beside the daemon that is already
 * committing into the buffer, and again after it was cut off mid-copy. Real files, the built
 * CLI and daemon as child processes, the real sandbox:
 * - beside a daemon: every reading of the salvaged load reaches the service once, with the
 *   traceId it had in the old buffer, whatever the daemon committed meanwhile;
 * - killed (-9) mid-copy, then run again: it continues where it stopped, no reading is
 *   copied twice, and what it copies is delivered once.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { Store } from '../src/buffer/store.js';
import { BIN, agentConfig, cleanEnv, runCli, startDaemon, waitFor, writeFile, daemonFixture } from './helpers.js';

const fx = daemonFixture();

const HOUR = 3_600_000;
const DELIVERED = 5000;

/**
 * The buffer set aside: load L0 on T1, delivered (ids 1-5000), then load L1 on T1, ended,
 * with `n` readings none of which was delivered (ids 5001 on, a second apart, each named by
 * its longitude: -87.6 + i * 1e-5).
 */
function oldBuffer(file: string, n: number): void {
  const t0 = Date.now() - 20 * HOUR;
  const store = Store.open(file);
  store.startLoad({ loadNumber: 'L0', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: t0 - DELIVERED * 1000 });
  store.insertReadings(Array.from({ length: DELIVERED }, (_, i) => ({ resourceId: 'T1', timeMs: t0 - (DELIVERED - i) * 1000, lat: 41.7, lon: -87.7 })));
  store.endLoad('L0', t0 - 1);
  store.closeEndedLoads(Date.now());
  store.ackReadings('L0', DELIVERED, null);
  store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: t0 });
  for (let from = 0; from < n; from += 50_000) {
    const size = Math.min(50_000, n - from);
    store.insertReadings(Array.from({ length: size }, (_, k) => ({ resourceId: 'T1', timeMs: t0 + (from + k) * 1000, lat: 41.8, lon: -87.6 + (from + k) * 1e-5 })));
  }
  store.endLoad('L1', t0 + n * 1000);
  store.closeEndedLoads(Date.now());
  store.close();
}

/** A truck T2 on load L2 that reports every 10 ms: the daemon commits every flush interval. */
const TRUCK = `export function createSource(ctx) {
  let timer;
  return {
    start() { timer = setInterval(() => ctx.emit({ resourceId: 'T2', timeMs: Date.now(), lat: 40.0, lon: -86.0 }), 10); },
    stop() { clearInterval(timer); },
  };
}
`;

function config(url: string): string {
  const source = writeFile(fx.tmp.dir, 'truck.mjs', TRUCK);
  return agentConfig(fx.tmp.dir, url, `[[sources]]\ntype = "module"\nname = "truck"\npath = "${source}"\n`, { traces: '* * * * * *', sampling: 0 });
}

/** The points the service took for a load: which reading (by longitude) under which traceId. */
function pointsOf(load: string): Array<{ index: number; traceId: string }> {
  return fx.sandbox.traces
    .filter((t) => t.body.loadNumber === load)
    .flatMap((t) => t.body.traces)
    .map((p) => ({ index: Math.round((p.coordinate.longitude + 87.6) / 1e-5), traceId: String(p.references?.find((r) => r.name === 'traceId')?.value) }));
}

/** Readings some load of the buffer still has to send, by load (read-only, beside the daemon). */
function due(buffer: string, load: string): number {
  const db = new Database(buffer, { readonly: true });
  try {
    return db
      .prepare(
        `SELECT count(*) FROM loads l JOIN readings r ON r.resource_id = l.resource_id AND r.id > l.acked_id AND r.id <= coalesce(l.end_id, 9e15)
           AND r.time_ms >= l.window_from_ms AND r.time_ms < coalesce(l.window_until_ms, 9e15) WHERE l.load_number = ?`,
      )
      .pluck()
      .get(load) as number;
  } finally {
    db.close();
  }
}

/** Every salvaged reading delivered once, each under the traceId it had in the old buffer. */
async function expectDeliveredOnce(buffer: string, n: number): Promise<void> {
  // Until the load has nothing left to send and what it sent has arrived (or all of it has).
  await waitFor(() => pointsOf('L1').length >= n || (due(buffer, 'L1') === 0 && fx.sandbox.stats.tracePoints > 0), 120_000, 'the salvaged load delivered');
  await new Promise((r) => setTimeout(r, 1500));
  const points = pointsOf('L1');
  const missing = n - new Set(points.map((p) => p.index)).size;
  expect({ points: points.length, missing }).toEqual({ points: n, missing: 0 });
  expect(points.filter((p) => p.traceId !== `test-device-${DELIVERED + 1 + p.index}`).slice(0, 3)).toEqual([]);
  expect(fx.sandbox.stats.duplicateTracePoints).toBe(0);
}

describe('buffer salvage beside a running daemon', () => {
  it('every reading of the salvaged load is delivered once, with its old traceId, whatever the daemon commits meanwhile', async () => {
    const N = 60_000;
    const old = join(fx.tmp.dir, 'old.db');
    oldBuffer(old, N);
    const { url } = await fx.sandbox.start();
    const cfg = config(url);
    const buffer = join(fx.tmp.dir, 'buffer.db');
    expect((await runCli(['load', 'start', 'L2', '-r', 'T2', '--config', cfg])).code).toBe(0);
    const d = startDaemon(['--config', cfg]);
    fx.daemon = d;
    await waitFor(() => pointsOf('L2').length > 0, 15_000, 'the daemon delivering its own truck');

    const commitsBefore = fx.sandbox.stats.tracePoints;
    const r = await runCli(['buffer', 'salvage', old, '--json', '--config', cfg], { timeoutMs: 60_000 });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ loads: 2, readings: N, skippedDelivered: DELIVERED, unreadable: {} });
    // The daemon goes on delivering its own truck beside the copy. (Within the copy itself is
    // not asserted: a copy of 2 s on a loaded machine may end before the next push's answer.)
    await waitFor(() => fx.sandbox.stats.tracePoints > commitsBefore, 15_000, 'the daemon delivering beside the salvage');

    await expectDeliveredOnce(buffer, N);
  }, 150_000);
});

describe('buffer salvage cut off mid-copy', () => {
  it('killed -9 and run again: continues, copies no reading twice; each is delivered once', async () => {
    const N = 60_000;
    const old = join(fx.tmp.dir, 'old.db');
    oldBuffer(old, N);
    const { url } = await fx.sandbox.start();
    const cfg = config(url);
    const buffer = join(fx.tmp.dir, 'buffer.db');
    Store.open(buffer).close();

    const rows = () => {
      const db = new Database(buffer, { readonly: true });
      try {
        return db.prepare("SELECT count(*) AS n, count(DISTINCT time_ms) AS distinct_times FROM readings WHERE resource_id = 'T1'").get() as { n: number; distinct_times: number };
      } finally {
        db.close();
      }
    };
    const child = spawn(process.execPath, [BIN, 'buffer', 'salvage', old, '--json', '--config', cfg], { env: cleanEnv(), stdio: 'ignore' });
    const exited = new Promise((r) => child.on('exit', r));
    // A power cut in the middle of the copy: some batches committed, not all.
    await waitFor(() => rows().n >= 10_000 || child.exitCode !== null, 60_000, 'the first batches copied');
    child.kill('SIGKILL');
    await exited;
    const cut = rows().n;
    expect(cut).toBeGreaterThan(0);
    expect(cut).toBeLessThan(N);

    const again = await runCli(['buffer', 'salvage', old, '--json', '--config', cfg], { timeoutMs: 60_000 });
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ readings: N - cut, unreadable: {} });
    expect(rows()).toEqual({ n: N, distinct_times: N });
    // Done now: a third run is refused, as after any complete salvage.
    const third = await runCli(['buffer', 'salvage', old, '--config', cfg]);
    expect(third.code).toBe(65);
    expect(third.stderr).toContain('was salvaged into this buffer already');

    const d = startDaemon(['--config', cfg]);
    fx.daemon = d;
    await expectDeliveredOnce(buffer, N);
  }, 240_000);
});
