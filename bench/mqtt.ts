/**
 * Rows 9a and 9b, MQTT ingest: `telematics-agent run` subscribed to a real mosquitto on
 * loopback while the bench publishes, at QoS 1, 2,000 messages a second from 500 trailers
 * (one topic each) for 60 s (`--quick`: 3 s, 50 trailers). Every message is one reading with
 * a number of its own; afterwards the buffer must hold each number once: none lost. CPU share
 * (schedstat) and memory of the daemon over the publishing window.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { join } from 'node:path';
import { connect as mqttConnect } from 'mqtt';
import { openDatabase } from '../src/buffer/db.js';
import type { Sandbox } from '../src/sandbox/server.js';
import { findMosquitto, type Memory, memoryOf, schedSecondsOf, sleep } from './common.js';
import { daemonFiles, startDaemon } from './daemon.js';
import { split } from './memory.js';
import { QUICK } from './options.js';
import { children, waitExit } from './processes.js';
import { fmt, round, type Row } from './report.js';

export const MQTT_RATE = 2000;
export const MQTT_TRAILERS = QUICK ? 50 : 500;
export const MQTT_SECONDS = QUICK ? 3 : 60;

export interface MqttRun {
  published: number;
  /** Distinct message numbers in the buffer. */
  stored: number;
  /** Messages published a second, as achieved. */
  ratePerS: number;
  windowS: number;
  cpuS: number;
  peak: Memory;
  end: Memory;
}

const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = tcpConnect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });

/**
 * A port nobody listens on now, below the kernel's ephemeral range: the bench's own drains
 * take ports from that range for their outgoing connections, and a broker put on one of them
 * fails to bind.
 */
async function freePort(): Promise<number> {
  let low = 32_768;
  try {
    low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || low;
  } catch {
    // Not Linux: the usual start of the range.
  }
  for (;;) {
    const port = 10_000 + Math.floor(Math.random() * Math.max(1000, low - 10_000));
    if (!(await listening(port))) return port;
  }
}

export async function startBroker(dir: string): Promise<{ proc: ChildProcess; url: string }> {
  const bin = findMosquitto();
  if (!bin) throw Object.assign(new Error('mosquitto is not installed (apt-get install mosquitto)'), { skip: true });
  mkdirSync(dir, { recursive: true });
  // A port can still be taken between the check and mosquitto's bind: a few ports are tried.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const conf = join(dir, 'mosquitto.conf');
    // The agent's session queue unbounded here: what is measured is the agent, not a broker
    // dropping messages past its default 1,000 queued per client.
    writeFileSync(conf, `listener ${port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\nlog_dest stderr\nlog_type error\n${process.getuid?.() === 0 ? 'user root\n' : ''}`);
    const proc = spawn(bin, ['-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
    children.add(proc);
    let stderr = '';
    proc.stderr?.on('data', (d: Buffer) => {
      if (stderr.length < 4096) stderr += d.toString();
    });
    const deadline = performance.now() + 10_000;
    let up = false;
    while (!up && proc.exitCode === null && performance.now() <= deadline) {
      up = await listening(port);
      if (!up) await sleep(20);
    }
    if (up) return { proc, url: `mqtt://127.0.0.1:${port}` };
    if (proc.exitCode === null) proc.kill('SIGKILL');
    if (attempt >= 5) throw new Error(`mosquitto did not start on port ${port} (attempt ${attempt}): ${stderr.trim() || 'no error printed'}`);
  }
}

/** Whether a warm-up message is in the buffer. */
function warmedUp(db: string): boolean {
  const d = openDatabase(db);
  try {
    return d.prepare("SELECT 1 FROM readings WHERE resource_id = 'WARMUP' LIMIT 1").get() !== undefined;
  } finally {
    d.close();
  }
}

/** Distinct message numbers (odometer) the buffer holds for the trailers. */
function storedNumbers(db: string): number {
  const d = openDatabase(db);
  try {
    return d.prepare("SELECT count(DISTINCT odometer) FROM readings WHERE resource_id LIKE 'TRAILER-%'").pluck().get() as number;
  } finally {
    d.close();
  }
}

export async function benchMqtt(sandbox: Sandbox, dir: string): Promise<MqttRun | { skipped: string }> {
  const runDir = join(dir, 'mqtt');
  let broker: { proc: ChildProcess; url: string };
  try {
    broker = await startBroker(join(runDir, 'broker'));
  } catch (err) {
    if ((err as { skip?: boolean }).skip) return { skipped: (err as Error).message };
    throw err;
  }
  const files = daemonFiles(
    runDir,
    sandbox.url,
    'FULL',
    'mqtt',
    `[[sources]]
type = "mqtt"
url = "${broker.url}"
topics = ["depot/+/reefer"]
resource_from_topic = 2
[privacy]
record_without_load = true
`,
    // Commits each second, so the buffer can be counted while the daemon runs.
    'flush_interval_ms = 1000',
  );
  const daemon = await startDaemon(files);
  const publisher = mqttConnect(broker.url, { clientId: 'bench-gateway' });
  try {
    await new Promise<void>((resolve, reject) => {
      publisher.once('connect', () => resolve());
      publisher.once('error', reject);
    });
    // The window starts once the daemon's subscription is in place: a warm-up message a
    // quarter second until one is in the buffer (a message before it would be lost to no fault of the agent's).
    const warm = performance.now();
    while (!warmedUp(files.db)) {
      if (performance.now() - warm > 30_000) throw new Error('the daemon did not take a warm-up message within 30 s');
      await publisher.publishAsync('depot/WARMUP/reefer', JSON.stringify({ temperature: 1 }), { qos: 1 });
      await sleep(250);
    }
    const total = MQTT_RATE * MQTT_SECONDS;
    const acks: Array<Promise<unknown>> = [];
    let peak = memoryOf(daemon.child.pid!)!;
    const cpu0 = schedSecondsOf(daemon.child.pid!);
    const t0 = performance.now();
    let sent = 0;
    while (sent < total) {
      // Paced on the clock: as many as should be out by now, then the next 5 ms tick.
      const due = Math.min(total, Math.floor(((performance.now() - t0) / 1000) * MQTT_RATE));
      for (; sent < due; sent++) {
        const trailer = `TRAILER-${String(sent % MQTT_TRAILERS).padStart(3, '0')}`;
        acks.push(publisher.publishAsync(`depot/${trailer}/reefer`, JSON.stringify({ temperature: -18 + (sent % 10) / 10, odometer: sent }), { qos: 1 }));
      }
      const m = memoryOf(daemon.child.pid!);
      if (m && m.rss > peak.rss) peak = m;
      await sleep(5);
    }
    await Promise.all(acks);
    const windowS = (performance.now() - t0) / 1000;
    const cpuS = schedSecondsOf(daemon.child.pid!) - cpu0;
    // Everything the broker acknowledged reaches the buffer within a few commit intervals.
    const deadline = performance.now() + 60_000;
    let stored = storedNumbers(files.db);
    while (stored < total && performance.now() < deadline) {
      await sleep(500);
      stored = storedNumbers(files.db);
      const m = memoryOf(daemon.child.pid!);
      if (m && m.rss > peak.rss) peak = m;
    }
    const end = memoryOf(daemon.child.pid!)!;
    return { published: total, stored, ratePerS: total / windowS, windowS, cpuS, peak, end };
  } finally {
    await publisher.endAsync(true).catch(() => undefined);
    daemon.child.kill('SIGTERM');
    await waitExit(daemon.child);
    broker.proc.kill('SIGTERM');
    await waitExit(broker.proc);
  }
}

export function mqttRows(r: MqttRun | { skipped: string }): Row[] {
  const what = `${fmt(MQTT_RATE)} msg/s from ${MQTT_TRAILERS} trailers for ${MQTT_SECONDS} s, QoS 1`;
  if ('skipped' in r) {
    const skipped = `skipped (${r.skipped})`;
    return [
      { id: '9a', measure: `MQTT ingest, ${what}: messages lost`, value: skipped, reference: '', ratio: '', target: '0 lost', pass: null },
      { id: '9b', measure: 'MQTT ingest: CPU share and RSS of `run`', value: skipped, reference: '', ratio: '', target: '', pass: null },
    ];
  }
  const lost = r.published - r.stored;
  return [
    {
      id: '9a',
      measure: `MQTT ingest, ${what} (${fmt(r.ratePerS)}/s achieved): messages lost`,
      value: `${fmt(lost)} of ${fmt(r.published)}`,
      reference: '',
      ratio: '',
      target: '0 lost',
      pass: lost === 0,
    },
    {
      id: '9b',
      measure: `MQTT ingest: CPU share (schedstat, ${round(r.windowS, 0)} s) and RSS of \`run\` (peak ${split(r.peak)})`,
      value: `${round((r.cpuS / r.windowS) * 100, 1)}%, ${split(r.end)}`,
      reference: '',
      ratio: '',
      target: '',
      pass: null,
    },
  ];
}

export function mqttFigures(r: MqttRun | { skipped: string }): Record<string, number> {
  if ('skipped' in r) return {};
  return {
    mqttPublished: r.published,
    mqttStored: r.stored,
    mqttRatePerS: r.ratePerS,
    mqttCpuPercent: (r.cpuS / r.windowS) * 100,
    mqttRssMB: r.end.rss / 1_048_576,
    mqttRssAnonMB: r.end.anon / 1_048_576,
    mqttPeakRssMB: r.peak.rss / 1_048_576,
  };
}
