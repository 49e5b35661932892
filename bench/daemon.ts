/**
 * Rows 3e, 3f, 4 and 6: `telematics-agent run` with defaults and a 1 Hz simulator: memory (and
 * its cgroup's view, 3f), idle CPU and startup, from /proc and the buffer (flash, row 5, is
 * flash.ts). The daemon sends one milestone before the window (recorded with the CLI, as a
 * driver would): its first request compiles undici's HTTP parser, which counts.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openDatabase } from '../src/buffer/db.js';
import { HIGHEST_READING_ID } from '../src/buffer/ledger.js';
import { Store } from '../src/buffer/store.js';
import type { Sandbox } from '../src/sandbox/server.js';
import { type CgroupMemory, MemoryCgroup, rssPlusBufferCache, uncachedNodeCopy } from './cgroup.js';
import { BENCH_KEY, BENCH_SCAC, cpuSecondsOf, type Memory, memoryOf, schedSecondsOf, sleep, writeBytesOf } from './common.js';
import { AGENT_NODE_OPTIONS, BUFFER_DEFAULTS, QUICK, SIZES } from './options.js';
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
  /** At the end of the window. */
  memory: Memory;
}

/** The daemon's cgroup (row 3f), read at the same moment as its memory. */
export interface CgroupView extends CgroupMemory {
  /** How much of the node binary's copy was cached before the start (it should be 0), bytes; undefined: unknown or no copy. */
  nodeCachedBytes?: number;
}

/**
 * `name` is the device id's tail; `extraToml` is appended to the config (a table of its own);
 * `bufferToml`, lines added to [buffer].
 */
export function daemonFiles(dir: string, url: string, synchronous: 'NORMAL' | 'FULL', name = `idle-${synchronous.toLowerCase()}`, extraToml = '', bufferToml = ''): { config: string; db: string } {
  mkdirSync(dir, { recursive: true });
  const keyFile = join(dir, 'key');
  writeFileSync(keyFile, `${BENCH_KEY}\n`, { mode: 0o600 });
  const db = join(dir, 'buffer.db');
  const config = join(dir, 'agent.toml');
  // Defaults for everything measured (flush interval, schedule every 15 minutes, sampling
  // 60 s); set are only the address, key, buffer, the sync level under test and the source.
  writeFileSync(
    config,
    `device_id = "bench-${name}"
[api]
base_url = "${url}"
scac = "${BENCH_SCAC}"
subscription_key_file = "${keyFile}"
[buffer]
path = "${db}"
synchronous = "${synchronous}"
${bufferToml}
[[sources]]
type = "simulator"
resource_id = "TRUCK-IDLE"
time_scale = 1
interval_s = 1
${extraToml}`,
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

/** The highest reading id the buffer at `db` ever held: how many readings it committed. */
export function committed(db: string): number {
  const d = openDatabase(db);
  try {
    return d.prepare(HIGHEST_READING_ID).pluck().get() as number;
  } finally {
    d.close();
  }
}

function milestonesSent(db: string): number {
  const d = openDatabase(db);
  try {
    return (d.prepare('SELECT count(*) AS n FROM milestones WHERE sent_ms IS NOT NULL').get() as { n: number }).n;
  } finally {
    d.close();
  }
}

/** Record a milestone with the CLI, as a driver would (the daemon sends it at once). */
export async function recordMilestone(files: { config: string }): Promise<void> {
  const args = [BIN, 'milestone', '--load', 'IDLE-L1', '--code', 'X3', '--stop', '1', '--lat', '41.847', '--lon', '-87.647', '--config', files.config];
  await new Promise<void>((resolve, reject) => execFile(process.execPath, args, { env: cleanEnv() }, (err, _out, stderr) => (err ? reject(new Error(`milestone: ${stderr || err.message}`)) : resolve())));
}

/** Record a milestone with the CLI and resolve when the daemon has delivered it. */
export async function oneMilestone(files: { config: string; db: string }): Promise<void> {
  await recordMilestone(files);
  const deadline = performance.now() + 30_000;
  while (milestonesSent(files.db) === 0) {
    if (performance.now() > deadline) throw new Error(`the daemon of ${files.config} did not deliver its milestone within 30 s`);
    await sleep(20);
  }
}

/** Start `telematics-agent run` (in `cgroup`, when given) and resolve when its first reading is committed. */
export async function startDaemon(files: { config: string; db: string }, cgroup?: { cg: MemoryCgroup; node: string }) {
  const t0 = performance.now();
  const [command, args] = cgroup ? cgroup.cg.wrap(cgroup.node, [BIN, 'run', '--config', files.config]) : [process.execPath, [BIN, 'run', '--config', files.config]];
  const child = spawn(command, args, {
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
  const highest = poll.prepare(HIGHEST_READING_ID).pluck();
  let firstCommitMs = NaN;
  try {
    const deadline = performance.now() + 30_000;
    while (performance.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`daemon exited with ${child.exitCode}: ${out.slice(-2000)}`);
      if ((highest.get() as number) > 0) {
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

/**
 * The daemon with the default synchronous level, in a fresh memory cgroup where one can be
 * made (row 3f), else its RSS plus the buffer's page cache.
 */
export async function benchDaemons(sandbox: Sandbox, dir: string): Promise<{ runs: DaemonRun[]; cgroup: CgroupView }> {
  sandbox.reset();
  const modes = [BUFFER_DEFAULTS.synchronous as 'NORMAL' | 'FULL'];
  const files = modes.map((m) => daemonFiles(join(dir, `idle-${m.toLowerCase()}`), sandbox.url, m));
  const made = MemoryCgroup.create(`telematics-bench-${process.pid}`);
  const cg = 'skipped' in made ? undefined : made;
  let started: Array<Awaited<ReturnType<typeof startDaemon>>> = [];
  try {
    const node = cg && uncachedNodeCopy(join(dir, `idle-${modes[0].toLowerCase()}`));
    if (cg && node) cg.warm(node.path);
    const settled = await Promise.allSettled(files.map((f, i) => startDaemon(f, i === 0 && cg && node ? { cg, node: node.path } : undefined)));
    started = settled.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    // One request each, at once (it compiles undici's parser), then let start-up work (module
    // loading, JIT, the first commits) settle, then measure a window.
    await Promise.all(files.map((f) => oneMilestone(f)));
    await sleep(QUICK ? 1000 : 3000);
    const before = started.map((d, i) => ({ cpu: cpuSecondsOf(d.child.pid!), sched: schedSecondsOf(d.child.pid!), io: writeBytesOf(d.child.pid!), n: committed(files[i].db), t: performance.now() }));
    await sleep(SIZES.idleS * 1000);
    const after = started.map((d, i) => ({ cpu: cpuSecondsOf(d.child.pid!), sched: schedSecondsOf(d.child.pid!), io: writeBytesOf(d.child.pid!), n: committed(files[i].db), t: performance.now() }));
    const mem = started.map((d) => memoryOf(d.child.pid!)!);
    const cgroup: CgroupView = cg
      ? { ...cg.read(), nodeCachedBytes: node?.cachedBytes }
      : rssPlusBufferCache(
          mem[0],
          ['', '-wal', '-shm'].map((s) => files[0].db + s),
          (made as { skipped: string }).skipped,
        );
    const runs = modes.map((synchronous, i) => ({
      synchronous,
      startedMs: started[i].startedMs,
      firstCommitMs: started[i].firstCommitMs,
      cpuS: after[i].cpu - before[i].cpu,
      schedS: after[i].sched - before[i].sched,
      windowS: (after[i].t - before[i].t) / 1000,
      readings: after[i].n - before[i].n,
      writeBytes: after[i].io.writeBytes - before[i].io.writeBytes,
      memory: mem[i],
    }));
    return { runs, cgroup };
  } finally {
    for (const d of started) if (d.child.exitCode === null) d.child.kill('SIGTERM');
    for (const d of started) {
      const r = await waitExit(d.child, 25_000);
      if (r.code !== 0) progress(`daemon exited with ${r.code ?? r.signal}: ${d.output().slice(-1000)}`);
    }
    await cg?.remove();
  }
}
