/**
 * Rows 3h and 3i: what the fleet link costs an idle agent. Three `run` daemons side by side with a 1 Hz
 * simulator: one without [fleet], one with it at the defaults (status_interval_s 300,
 * keepalive_s 60) and one publishing its status every 5 s, both linked to a real mosquitto on
 * loopback through a proxy that counts the bytes each way (MQTT's own, not TCP/IP's). Anon
 * memory (RssAnon) and CPU (schedstat) over the idle window are the default daemon's against
 * the plain one. The bytes an hour are measured, not computed from payload sizes: what one
 * status costs on the wire (the 5 s daemon's bytes in the window over the statuses a
 * subscriber saw), 3600 / 300 of them, plus the default daemon's own traffic in the window
 * (keepalives, a status on a change of state) scaled to the hour.
 */
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import { join } from 'node:path';
import { connectAsync } from 'mqtt';
import type { Sandbox } from '../src/sandbox/server.js';
import { type Memory, memoryOf, schedSecondsOf, sleep } from './common.js';
import { daemonFiles, startDaemon } from './daemon.js';
import { startBroker } from './mqtt.js';
import { MB, SIZES } from './options.js';
import { waitExit } from './processes.js';
import { fmt, mb, type Row, round } from './report.js';

/** Targets: at most this much more anonymous memory, and this many bytes an hour, with the link on. */
export const FLEET_ANON_MAX = 5 * MB;
export const FLEET_BYTES_PER_HOUR_MAX = 64 * 1024;
const DEFAULT_STATUS_S = 300;
const FAST_STATUS_S = 5;

export interface FleetIdleRun {
  withLink: Memory;
  without: Memory;
  /** CPU seconds over the window. */
  cpuWith: number;
  cpuWithout: number;
  windowS: number;
  /** Bytes one status publish costs (both ways), measured on the 5 s daemon. */
  statusBytes: number;
  /** The default daemon's bytes in the window (both ways). */
  idleBytes: number;
  bytesPerHour: number;
}

/** A TCP proxy to the broker that counts the bytes through it, both ways. */
async function countingProxy(brokerPort: number): Promise<{ server: Server; port: number; bytes: () => number }> {
  let bytes = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = tcpConnect(brokerPort, '127.0.0.1');
    sockets.add(client).add(upstream);
    client.on('data', (d: Buffer) => (bytes += d.length));
    upstream.on('data', (d: Buffer) => (bytes += d.length));
    client.pipe(upstream).pipe(client);
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  server.on('close', () => {
    for (const s of sockets) s.destroy();
  });
  return { server, port, bytes: () => bytes };
}

export async function benchFleetIdle(sandbox: Sandbox, dir: string): Promise<FleetIdleRun | { skipped: string }> {
  let broker: Awaited<ReturnType<typeof startBroker>>;
  try {
    broker = await startBroker(join(dir, 'fleet-broker'));
  } catch (err) {
    if ((err as { skip?: boolean }).skip) return { skipped: (err as Error).message };
    throw err;
  }
  const brokerPort = Number(new URL(broker.url).port);
  const proxies = [await countingProxy(brokerPort), await countingProxy(brokerPort)];
  const fleet = (port: number, interval?: number) => `[fleet]\nurl = "mqtt://127.0.0.1:${port}"\n${interval ? `status_interval_s = ${interval}\n` : ''}`;
  const plain = daemonFiles(join(dir, 'fleet-off'), sandbox.url, 'NORMAL', 'fleet-off');
  const linked = daemonFiles(join(dir, 'fleet-on'), sandbox.url, 'NORMAL', 'fleet-on', fleet(proxies[0].port));
  const fast = daemonFiles(join(dir, 'fleet-fast'), sandbox.url, 'NORMAL', 'fleet-fast', fleet(proxies[1].port, FAST_STATUS_S));
  const started = await Promise.all([startDaemon(plain), startDaemon(linked), startDaemon(fast)]);
  const watcher = await connectAsync(broker.url, { clientId: `bench-fleet-${process.pid}` });
  try {
    let statuses = 0;
    watcher.on('message', () => (statuses += 1));
    await watcher.subscribeAsync('fleet/bench-fleet-fast/status', { qos: 0 });
    // Connected, subscribed and the first status out: the window starts after.
    const deadline = performance.now() + 30_000;
    while (statuses === 0) {
      if (performance.now() > deadline) throw new Error(`the fleet link did not publish a status: ${started[2].output().slice(-2000)}`);
      await sleep(50);
    }
    await sleep(SIZES.idleSettleMs);
    const pids = started.map((d) => d.child.pid!);
    const cpu0 = pids.map(schedSecondsOf);
    const bytes0 = proxies.map((p) => p.bytes());
    const statuses0 = statuses;
    const t0 = performance.now();
    await sleep(Math.max(SIZES.idleS, 3 * FAST_STATUS_S) * 1000);
    const windowS = (performance.now() - t0) / 1000;
    const cpu = pids.map((p, i) => schedSecondsOf(p) - cpu0[i]);
    const [idleBytes, fastBytes] = proxies.map((p, i) => p.bytes() - bytes0[i]);
    const seen = statuses - statuses0;
    if (seen === 0) throw new Error(`no status of the ${FAST_STATUS_S} s daemon in ${round(windowS)} s`);
    const [without, withLink] = pids.map((p) => memoryOf(p)!);
    const statusBytes = fastBytes / seen;
    const bytesPerHour = (3600 / DEFAULT_STATUS_S) * statusBytes + (idleBytes * 3600) / windowS;
    return { withLink, without, cpuWith: cpu[1], cpuWithout: cpu[0], windowS, statusBytes, idleBytes, bytesPerHour };
  } finally {
    await watcher.endAsync().catch(() => undefined);
    for (const d of started) if (d.child.exitCode === null) d.child.kill('SIGTERM');
    for (const d of started) await waitExit(d.child, 25_000);
    for (const p of proxies) p.server.close();
    broker.proc.kill('SIGTERM');
    await waitExit(broker.proc, 10_000);
  }
}

export function fleetIdleRows(r: FleetIdleRun): Row[] {
  const delta = r.withLink.anon - r.without.anon;
  const cpuPct = (s: number) => `${round((s / r.windowS) * 100, 2)}%`;
  return [
    {
      id: '3h',
      measure: `\`run\` idle ${round(r.windowS, 0)} s with [fleet] linked to a mosquitto on loopback (defaults), vs the same daemon without it; anon, CPU of a core`,
      value: `${mb(r.withLink.anon)} vs ${mb(r.without.anon)}; CPU ${cpuPct(r.cpuWith)} vs ${cpuPct(r.cpuWithout)}`,
      reference: '',
      ratio: `${delta >= 0 ? '+' : ''}${mb(delta)}`,
      target: `<= +${FLEET_ANON_MAX / MB} MB`,
      pass: delta <= FLEET_ANON_MAX,
    },
    {
      id: '3i',
      measure: `the fleet link's MQTT bytes an hour at status_interval_s ${DEFAULT_STATUS_S} (a status ${fmt(r.statusBytes)} B both ways, x ${3600 / DEFAULT_STATUS_S}; plus ${fmt(r.idleBytes)} B of keepalives and changes in ${round(r.windowS, 0)} s, scaled)`,
      value: `${fmt(r.bytesPerHour)} B/h`,
      reference: '',
      ratio: '',
      target: `<= ${FLEET_BYTES_PER_HOUR_MAX / 1024} KB/h`,
      pass: r.bytesPerHour <= FLEET_BYTES_PER_HOUR_MAX,
    },
  ];
}
