/**
 * Rows 8a-8c: back on air after an outage. A truck's coverage comes back for minutes at a
 * time; the first delivery must not wait for a backoff that grew through the outage.
 *
 * `telematics-agent run` (1 Hz simulator, a load, defaults) whose service is away: its port
 * answers every connection with a reset, counted (the daemon's attempts), for 1, 5 and 30
 * minutes (--quick: 4, 8 and 16 s, with delivery.reconnect_max_s 2 s instead of 30 s); a
 * milestone recorded with the CLI when the outage starts gives it something to send. Then
 * the sandbox listens on that port again; measured: from its return to its first 2xx.
 * Target: delivery.reconnect_max_s + 5 s (35 s with the defaults).
 *
 * The three outages run side by side and beside the other rows (an idle daemon costs a few
 * tenths of a percent of a core), so the full bench lasts as long as the longest outage.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { Sandbox } from '../src/sandbox/server.js';
import { BENCH_KEY, BENCH_SCAC, sleep } from './common.js';
import { daemonFiles, recordMilestone, startDaemon } from './daemon.js';
import { QUICK } from './options.js';
import { progress, waitExit } from './processes.js';
import type { Row } from './report.js';
import { round } from './report.js';

export const OUTAGES_S = QUICK ? [4, 8, 16] : [60, 300, 1800];
/** delivery.reconnect_max_s of the daemons: the default, or scaled down with the outages. */
export const RECONNECT_MAX_S = QUICK ? 2 : 30;
const TARGET_S = RECONNECT_MAX_S + 5;

export interface OutageRun {
  outageS: number;
  /** Connections the daemon opened while the service was away. */
  attempts: number;
  /** From the service's return to the first request it accepted, seconds. */
  firstOkS: number;
}

/** A port where the service is not: every connection is reset as soon as it is accepted. */
async function resettingPort(): Promise<{ server: Server; port: number; attempts: () => number }> {
  let attempts = 0;
  const server = createServer((s: Socket) => {
    attempts += 1;
    s.resetAndDestroy();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no port for the outage');
  return { server, port: address.port, attempts: () => attempts };
}

async function oneOutage(dir: string, outageS: number): Promise<OutageRun> {
  const down = await resettingPort();
  const files = daemonFiles(join(dir, `outage-${outageS}`), `http://127.0.0.1:${down.port}`, 'NORMAL', `outage-${outageS}`, `[delivery]\nreconnect_max_s = ${RECONNECT_MAX_S}\n`);
  let sandbox: Sandbox | undefined;
  const daemon = await startDaemon(files);
  try {
    await recordMilestone(files);
    await sleep(outageS * 1000);
    const attempts = down.attempts();
    await new Promise<void>((r) => down.server.close(() => r()));
    sandbox = new Sandbox({ key: BENCH_KEY, scac: BENCH_SCAC, port: down.port, host: '127.0.0.1', keepBodies: false });
    await sandbox.start();
    const back = performance.now();
    const deadline = back + (RECONNECT_MAX_S + 60) * 1000;
    while (sandbox.stats.accepted < 1) {
      if (performance.now() > deadline) throw new Error(`no request reached the service within ${RECONNECT_MAX_S + 60} s of its return after a ${outageS} s outage: ${daemon.output().slice(-1500)}`);
      await sleep(20);
    }
    return { outageS, attempts, firstOkS: (performance.now() - back) / 1000 };
  } finally {
    down.server.close();
    daemon.child.kill('SIGTERM');
    const r = await waitExit(daemon.child, 25_000);
    if (r.code !== 0) progress(`outage daemon exited with ${r.code ?? r.signal}: ${daemon.output().slice(-1000)}`);
    await sandbox?.stop().catch(() => undefined);
  }
}

/** Every outage at once; resolves when the longest is over and its service answered. */
export function benchOutages(dir: string): Promise<OutageRun[]> {
  return Promise.all(OUTAGES_S.map((s) => oneOutage(dir, s)));
}

const label = (s: number) => (s >= 60 ? `${s / 60} min` : `${s} s`);

export function outageRows(runs: OutageRun[]): Row[] {
  return runs.map((r, i) => ({
    id: `8${'abc'[i]}`,
    measure: `back on air after an outage of ${label(r.outageS)} (connections reset): service back to first 2xx; reconnect_max_s ${RECONNECT_MAX_S}`,
    value: `${round(r.firstOkS, 1)} s`,
    reference: `${r.attempts} attempts during it`,
    ratio: '',
    target: `<= ${TARGET_S} s`,
    pass: r.firstOkS <= TARGET_S,
  }));
}

export function outageFigures(runs: OutageRun[]): Record<string, number> {
  return Object.fromEntries(
    runs.flatMap((r) => [
      [`outage${r.outageS}sFirstOkS`, r.firstOkS],
      [`outage${r.outageS}sAttempts`, r.attempts],
    ]),
  );
}
