/**
 * Rows 4 to 6: `telematics-agent run` with a 1 Hz simulator, idle CPU, flash writes and
 * startup, from /proc and the buffer; synchronous NORMAL and FULL side by side.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openDatabase } from '../src/buffer/db.js';
import { Store } from '../src/buffer/store.js';
import type { Sandbox } from '../src/sandbox/server.js';
import { BENCH_KEY, BENCH_SCAC, cpuSecondsOf, memoryOf, schedSecondsOf, sleep, writeBytesOf } from './common.js';
import { AGENT_NODE_OPTIONS, QUICK, SIZES } from './options.js';
import { BIN, children, cleanEnv, progress, waitExit } from './processes.js';

export interface DaemonRun {
  synchronous: string;
  startedMs: number;
  firstCommitMs: number;
  cpuS: number;
  schedS: number;
  windowS: number;
  readings: number;
  writeBytes: number;
  rss: number;
  hwm: number;
}

function daemonFiles(dir: string, url: string, synchronous: 'NORMAL' | 'FULL'): { config: string; db: string } {
  mkdirSync(dir, { recursive: true });
  const keyFile = join(dir, 'key');
  writeFileSync(keyFile, `${BENCH_KEY}\n`, { mode: 0o600 });
  const db = join(dir, 'buffer.db');
  const config = join(dir, 'agent.toml');
  // Defaults for everything measured (flush interval, schedule every 15 minutes, sampling
  // 60 s); set are only the address, key, buffer, the sync level under test and the source.
  writeFileSync(
    config,
    `device_id = "bench-idle-${synchronous.toLowerCase()}"
[api]
base_url = "${url}"
scac = "${BENCH_SCAC}"
subscription_key_file = "${keyFile}"
[buffer]
path = "${db}"
synchronous = "${synchronous}"
[[sources]]
type = "simulator"
resource_id = "TRUCK-IDLE"
time_scale = 1
interval_s = 1
`,
  );
  // A load with its two stops is active before the daemon starts, so every reading is kept.
  const store = Store.open(db);
  const now = Date.now();
  store.startLoad({
    loadNumber: 'IDLE-L1',
    resourceId: 'TRUCK-IDLE',
    resourceType: 'Truck',
    nowMs: now,
    stops: [
      { sequence: 1, type: 'pickup', latitude: 41.847, longitude: -87.647, radiusM: 300, city: 'Chicago', state: 'IL' },
      {
        sequence: 2,
        type: 'delivery',
        latitude: 39.768,
        longitude: -86.158,
        radiusM: 400,
        city: 'Indianapolis',
        state: 'IN',
        appointment: { start: new Date(now + 4 * 3600_000).toISOString(), end: new Date(now + 6 * 3600_000).toISOString() },
      },
    ],
  });
  store.close();
  return { config, db };
}

function committed(db: string): number {
  const d = openDatabase(db);
  try {
    const r = d.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'readings'").get() as { seq: number } | undefined;
    return r?.seq ?? 0;
  } finally {
    d.close();
  }
}

/** Start `telematics-agent run` and resolve when its first reading is committed. */
async function startDaemon(files: { config: string; db: string }) {
  const t0 = performance.now();
  const child = spawn(process.execPath, [BIN, 'run', '--config', files.config], {
    env: { ...cleanEnv(), NODE_OPTIONS: AGENT_NODE_OPTIONS },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let out = '';
  let startedMs = NaN;
  const onData = (d: Buffer) => {
    if (Number.isNaN(startedMs) && d.toString().includes('agent started')) startedMs = performance.now() - t0;
    if (out.length < 100_000) out += d.toString();
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  // Poll the buffer for the first committed reading (the daemon holds the file open; WAL lets us read).
  const poll = openDatabase(files.db);
  const seq = poll.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'readings'");
  let firstCommitMs = NaN;
  try {
    const deadline = performance.now() + 30_000;
    while (performance.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`daemon exited with ${child.exitCode}: ${out.slice(-2000)}`);
      if ((seq.get() as { seq: number } | undefined)?.seq) {
        firstCommitMs = performance.now() - t0;
        break;
      }
      await sleep(5);
    }
  } finally {
    poll.close();
  }
  if (Number.isNaN(firstCommitMs)) throw new Error(`no reading committed within 30 s: ${out.slice(-2000)}`);
  return { child, startedMs, firstCommitMs, output: () => out };
}

export async function benchDaemons(sandbox: Sandbox, dir: string): Promise<DaemonRun[]> {
  sandbox.reset();
  const modes = ['NORMAL', 'FULL'] as const;
  const files = modes.map((m) => daemonFiles(join(dir, `idle-${m.toLowerCase()}`), sandbox.url, m));
  const starting = files.map((f) => startDaemon(f));
  const settled = await Promise.allSettled(starting);
  const started = settled.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  try {
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    // Let start-up work (module loading, JIT, the first commits) settle, then measure a window.
    await sleep(QUICK ? 1000 : 3000);
    const before = started.map((d, i) => ({ cpu: cpuSecondsOf(d.child.pid!), sched: schedSecondsOf(d.child.pid!), io: writeBytesOf(d.child.pid!), n: committed(files[i].db), t: performance.now() }));
    await sleep(SIZES.idleS * 1000);
    const after = started.map((d, i) => ({ cpu: cpuSecondsOf(d.child.pid!), sched: schedSecondsOf(d.child.pid!), io: writeBytesOf(d.child.pid!), n: committed(files[i].db), t: performance.now() }));
    const mem = started.map((d) => memoryOf(d.child.pid!)!);
    return modes.map((synchronous, i) => ({
      synchronous,
      startedMs: started[i].startedMs,
      firstCommitMs: started[i].firstCommitMs,
      cpuS: after[i].cpu - before[i].cpu,
      schedS: after[i].sched - before[i].sched,
      windowS: (after[i].t - before[i].t) / 1000,
      readings: after[i].n - before[i].n,
      writeBytes: after[i].io.writeBytes - before[i].io.writeBytes,
      rss: mem[i].rss,
      hwm: mem[i].hwm,
    }));
  } finally {
    for (const d of started) if (d.child.exitCode === null) d.child.kill('SIGTERM');
    for (const d of started) {
      const r = await waitExit(d.child, 25_000);
      if (r.code !== 0) progress(`daemon exited with ${r.code ?? r.signal}: ${d.output().slice(-1000)}`);
    }
  }
}
