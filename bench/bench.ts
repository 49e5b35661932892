/**
 * `npm run bench`: how fast, how small and how gentle the agent is, each figure measured in
 * the same run as its reference so the ratio holds on a noisy machine.
 *
 *   node dist-bench/bench/bench.js [--quick] [--json] [--dir DIR] [--cpu-prof DIR]
 *
 * 1. Ingest: Ingest.push + flush (validation, batches, the active-load subquery) vs a raw
 *    better-sqlite3 prepared insert loop in one transaction.
 * 2. Drain: a backlog delivered to the sandbox on loopback by the real Agent (in a child
 *    process) vs a plain undici client posting the same bodies; 7 days of one truck at 1 Hz;
 *    the same over a 150 ms link vs one request per reading (modelled).
 * 3. Memory: RSS of the agent's process idle, during the drain (sampled peak), after; small
 *    vs large backlog.
 * 4. Idle CPU and 5. flash writes: `telematics-agent run` with a 1 Hz simulator, from /proc.
 * 6. Startup: process start to first reading committed.
 *
 * It asserts nothing: it prints the numbers and PASS/MISS against each target of the brief.
 * The sandbox runs in this process (it only counts: keepBodies false); the agent side runs in
 * child processes so their RSS and CPU are the agent's alone.
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import pino from 'pino';
import { openDatabase } from '../src/buffer/db.js';
import { Ingest } from '../src/buffer/ingest.js';
import { Store } from '../src/buffer/store.js';
import { configSchema } from '../src/config/schema.js';
import { PURGE_SLICE } from '../src/delivery/sender.js';
import { packageFile } from '../src/paths.js';
import { Sandbox } from '../src/sandbox/server.js';
import type { Reading } from '../src/sources/types.js';
import {
  BENCH_KEY,
  BENCH_SCAC,
  CHUNK,
  cpuSecondsOf,
  loadOf,
  memoryOf,
  resourceOf,
  schedSecondsOf,
  sleep,
  syntheticReading,
  unitNodeOptions,
  writeBacklog,
  writeBytesOf,
  type Backlog,
  type WorkerCommand,
  type WorkerEvent,
} from './common.js';

/**
 * The workers run a bundle made as the one that ships (dist-bench/pkg/, written by
 * bench/bundle.mjs with scripts/bundle.mjs's settings), as the bin runs dist/pkg/: their
 * memory figures are the shipped code's, not those of tsc's one file per module.
 */
const WORKER = packageFile('dist-bench', 'pkg', 'drain-worker.js');
const BIN = packageFile('bin', 'telematics-agent.js');
const MB = 1024 * 1024;

// ---- options ------------------------------------------------------------------------------

const argv = process.argv.slice(2);
const flag = (name: string) => argv.includes(name);
const option = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
if (flag('--help') || flag('-h')) {
  process.stdout.write(`usage: node dist-bench/bench/bench.js [--quick] [--json] [--dir DIR] [--cpu-prof DIR]
  --quick          small sizes (CI): 20k readings, 5 s idle
  --json           print the results as one JSON object instead of the table
  --dir DIR        work directory (must be on a real disk for the flash figure; default: the OS temp dir)
  --cpu-prof DIR   run the drain workers with --cpu-prof, profiles written to DIR
`);
  process.exit(0);
}
if (!existsSync(WORKER)) {
  process.stderr.write(`bench: ${WORKER} is missing: run \`npm run build:bench\` (tsc, then the bundle)\n`);
  process.exit(1);
}
const QUICK = flag('--quick');
const JSON_OUT = flag('--json');
const PROF_DIR = option('--cpu-prof');

const SIZES = QUICK
  ? { ingest: 20_000, rounds: 3, large: { loads: 200, perLoad: 100 }, small: { loads: 20, perLoad: 100 }, week: 20_000, cellular: 10_000, peerRequests: 10, idleS: 5, settleMs: 500, idleSettleMs: 3000 }
  : { ingest: 200_000, rounds: 3, large: { loads: 200, perLoad: 5000 }, small: { loads: 200, perLoad: 500 }, week: 604_800, cellular: 604_800, peerRequests: 40, idleS: 60, settleMs: 2000, idleSettleMs: 15_000 };
const LATENCY_MS = 150;
const BUFFER_DEFAULTS = configSchema.shape.buffer.parse({});
/** The agent's processes (drain worker, daemon) run with the unit's heap flags; reference clients with Node's defaults. */
const AGENT_NODE_OPTIONS = unitNodeOptions();
const PEER_RETRY_S = 30;

// ---- bookkeeping ----------------------------------------------------------------------------

const children = new Set<ChildProcess>();
const progress = (s: string) => process.stderr.write(`bench: ${s}\n`);
const round = (n: number, d = 1) => Math.round(n * 10 ** d) / 10 ** d;

/** Kill every child still running, by its PID. */
function killChildren(): void {
  for (const c of children) {
    if (c.exitCode === null && c.signalCode === null && c.pid) {
      try {
        process.kill(c.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
  }
}

function waitExit(child: ChildProcess, timeoutMs = 30_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolvePromise) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolvePromise({ code: child.exitCode, signal: child.signalCode });
    const timer = setTimeout(() => child.pid && process.kill(child.pid, 'SIGKILL'), timeoutMs);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      resolvePromise({ code, signal });
    });
  });
}

/** A drain-worker child and the events it sends. */
class Worker {
  readonly child: ChildProcess;
  private queue: WorkerEvent[] = [];
  private waiting: Array<(e: WorkerEvent | Error) => void> = [];

  constructor(agent: boolean) {
    const execArgv = [...(agent ? AGENT_NODE_OPTIONS.split(/\s+/) : []), ...(PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROF_DIR}`] : [])];
    this.child = fork(WORKER, [], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'], execArgv });
    children.add(this.child);
    this.child.on('message', (e: WorkerEvent) => this.deliver(e));
    this.child.on('exit', (code, signal) => {
      children.delete(this.child);
      const err = new Error(`bench worker exited (code ${code}, signal ${signal})`);
      for (const w of this.waiting.splice(0)) w(err);
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  private deliver(e: WorkerEvent): void {
    const w = this.waiting.shift();
    if (w) w(e);
    else this.queue.push(e);
  }

  send(c: WorkerCommand): void {
    this.child.send(c);
  }

  /** The next event, which must be `ev`. */
  async next<K extends WorkerEvent['ev']>(ev: K, timeoutMs = 15 * 60_000): Promise<Extract<WorkerEvent, { ev: K }>> {
    const queued = this.queue.shift();
    const e =
      queued ??
      (await new Promise<WorkerEvent | Error>((resolvePromise) => {
        const timer = setTimeout(() => resolvePromise(new Error(`timed out waiting for ${ev} from the bench worker`)), timeoutMs);
        this.waiting.push((x) => {
          clearTimeout(timer);
          resolvePromise(x);
        });
      }));
    if (e instanceof Error) throw e;
    if (e.ev === 'error') throw new Error(`bench worker failed: ${e.message}`);
    if (e.ev !== ev) throw new Error(`bench worker sent ${e.ev}, expected ${ev}`);
    return e as Extract<WorkerEvent, { ev: K }>;
  }

  async exit(): Promise<void> {
    await waitExit(this.child);
  }
}

// ---- 1. ingest ------------------------------------------------------------------------------

function ingestReadings(n: number): Reading[] {
  const trucks = 10;
  const start = Date.now() - n * 100;
  return Array.from({ length: n }, (_, i) => syntheticReading(i % trucks, Math.floor(i / trucks), start + Math.floor(i / trucks) * 1000));
}

function rawInsert(path: string, readings: Reading[]): number {
  const db = openDatabase(path);
  const loads = new Map<string, string>();
  for (let t = 0; t < 10; t++) loads.set(resourceOf(t), loadOf(t));
  const insert = db.prepare(
    'INSERT INTO readings (resource_id, load_number, time_ms, lat, lon, speed, heading, odometer, temp_c, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
  );
  const t0 = performance.now();
  db.transaction(() => {
    for (const r of readings) {
      insert.run(r.resourceId, loads.get(r.resourceId), r.timeMs, r.lat ?? null, r.lon ?? null, r.speed ?? null, r.heading ?? null, r.odometer ?? null, r.temperatureC ?? null, 'bench');
    }
  })();
  const ms = performance.now() - t0;
  const count = (db.prepare('SELECT count(*) AS n FROM readings').get() as { n: number }).n;
  db.close();
  if (count !== readings.length) throw new Error(`raw insert stored ${count} of ${readings.length}`);
  return ms;
}

function agentInsert(path: string, readings: Reading[], batchSize: number, flushIntervalMs: number): number {
  const store = Store.open(path);
  for (let t = 0; t < 10; t++) store.startLoad({ loadNumber: loadOf(t), resourceId: resourceOf(t), resourceType: 'Truck', stops: [], nowMs: Date.now() });
  const ingest = new Ingest(store, { batchSize, flushIntervalMs, keepWithoutLoad: false }, pino({ level: 'silent' }));
  const t0 = performance.now();
  for (const r of readings) ingest.push(r, 'bench');
  ingest.flush();
  const ms = performance.now() - t0;
  store.close();
  if (ingest.stats.committed !== readings.length) throw new Error(`ingest committed ${ingest.stats.committed} of ${readings.length}`);
  return ms;
}

function benchIngest(dir: string) {
  const readings = ingestReadings(SIZES.ingest);
  const raw: number[] = [];
  const ours: number[] = [];
  const fresh = (name: string) => {
    const p = join(dir, name);
    for (const s of ['', '-wal', '-shm']) rmSync(p + s, { force: true });
    return p;
  };
  // Alternating rounds, each on a fresh file; the best of each side is compared.
  for (let i = 0; i < SIZES.rounds; i++) {
    raw.push(rawInsert(fresh('ingest-raw.db'), readings));
    ours.push(agentInsert(fresh('ingest-agent.db'), readings, BUFFER_DEFAULTS.batch_size, BUFFER_DEFAULTS.flush_interval_ms));
  }
  const rawPerS = readings.length / (Math.min(...raw) / 1000);
  const oursPerS = readings.length / (Math.min(...ours) / 1000);
  return { readings: readings.length, batchSize: BUFFER_DEFAULTS.batch_size, rawPerS, oursPerS, ratio: oursPerS / rawPerS };
}

// ---- 2./3. drain and memory -------------------------------------------------------------------

interface DrainResult {
  readings: number;
  ms: number;
  /** Deleting the delivered rows after the push, in slices, off the delivery path. */
  purgeMs: number;
  perS: number;
  requests: number;
  idle: { rss: number; anon: number; file: number };
  /** RSS `settleMs` after start, before V8's memory reducer has shrunk the young generation. */
  earlyRss: number;
  peakRss: number;
  peakAnon: number;
  hwm: number;
  afterRss: number;
  samples: number;
  /** Bytes the worker wrote to disk during the drain (acknowledged readings leaving the buffer). */
  writeBytes: number;
}

/** `idleSettleMs`: how long after start the idle RSS is taken (the large run's figure 3a). */
async function drainRun(sandbox: Sandbox, dbPath: string, readings: number, latencyMs = 0, idleSettleMs = SIZES.settleMs): Promise<DrainResult> {
  sandbox.reset();
  if (latencyMs) sandbox.setFaults({ latencyMs });
  const w = new Worker(true);
  try {
    w.send({ cmd: 'drain', dbPath, url: sandbox.url });
    await w.next('started', 120_000);
    await sleep(SIZES.settleMs);
    const early = memoryOf(w.pid)!.rss;
    await sleep(Math.max(0, idleSettleMs - SIZES.settleMs));
    const idle = memoryOf(w.pid)!;
    let peak = idle.rss;
    let peakAnon = idle.anon;
    let samples = 0;
    const sampler = setInterval(() => {
      const m = memoryOf(w.pid);
      if (m) {
        peak = Math.max(peak, m.rss);
        peakAnon = Math.max(peakAnon, m.anon);
        samples += 1;
      }
    }, 50);
    const io0 = writeBytesOf(w.pid).writeBytes;
    w.send({ cmd: 'go' });
    const d = await w.next('drained');
    clearInterval(sampler);
    const writeBytes = writeBytesOf(w.pid).writeBytes - io0;
    const hwm = memoryOf(w.pid)!.hwm;
    await sleep(SIZES.settleMs);
    const after = memoryOf(w.pid)!.rss;
    w.send({ cmd: 'stop' });
    await w.next('stopped', 60_000);
    await w.exit();
    const s = sandbox.stats;
    if (d.left > 0) throw new Error(`drain left ${d.left} readings in the buffer`);
    if (s.tracePoints !== readings || s.duplicateTracePoints !== 0 || s.invalid !== 0) {
      throw new Error(`sandbox got ${s.tracePoints} trace points (${s.duplicateTracePoints} duplicates, ${s.invalid} invalid requests) for ${readings} readings`);
    }
    return {
      readings,
      ms: d.ms,
      purgeMs: d.purgeMs,
      perS: readings / (d.ms / 1000),
      requests: d.requests,
      idle: { rss: idle.rss, anon: idle.anon, file: idle.file },
      earlyRss: early,
      peakRss: peak,
      peakAnon,
      hwm,
      afterRss: after,
      samples,
      writeBytes,
    };
  } finally {
    killChildren();
  }
}

async function postRun(sandbox: Sandbox, c: WorkerCommand & { cmd: 'ceiling' | 'peer' }, latencyMs = 0) {
  sandbox.reset();
  if (latencyMs) sandbox.setFaults({ latencyMs });
  const w = new Worker(false);
  try {
    w.send(c);
    const r = await w.next('posted');
    await w.exit();
    if (r.failed > 0) throw new Error(`${r.failed} of ${r.requests} requests of the ${c.cmd} client failed`);
    return r;
  } finally {
    killChildren();
  }
}

function backlogFile(dir: string, name: string, b: Backlog): string {
  const p = join(dir, name);
  writeBacklog(p, b);
  return p;
}

// ---- 4./5./6. the daemon: idle CPU, flash writes, startup ------------------------------------

interface DaemonRun {
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

function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('TELEMATICS_AGENT_')) delete env[k];
  delete env.CREDENTIALS_DIRECTORY;
  delete env.NOTIFY_SOCKET;
  return env;
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

async function benchDaemons(sandbox: Sandbox, dir: string): Promise<DaemonRun[]> {
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

// ---- 7. a full disk ---------------------------------------------------------------------------

/** Size of the tmpfs the full-disk run puts the buffer on. */
const FULL_DISK_BYTES = 4 * MB;
/** The tmpfs mounted by the full-disk run, until it is unmounted (a signal must not leave it behind). */
let mounted: string | undefined;

function unmount(): void {
  if (!mounted) return;
  try {
    execFileSync('umount', [mounted], { stdio: 'ignore' });
    mounted = undefined;
  } catch {
    // Still busy: the caller's removal of the directory says so.
  }
}

/** Why the full-disk run cannot happen here (it mounts a tmpfs), or undefined. */
function fullDiskBlocker(mnt: string): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root to mount a tmpfs';
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${FULL_DISK_BYTES}`, 'tmpfs', mnt], { stdio: 'pipe' });
    mounted = mnt;
    return undefined;
  } catch (err) {
    return `mount -t tmpfs failed: ${String((err as { stderr?: Buffer }).stderr ?? (err as Error).message).trim()}`;
  }
}

/**
 * The exec source of the full-disk run: position lines without a time, about 10,000 a second
 * until the file `slow` exists, then 4 a second.
 */
const FULL_DISK_SOURCE = `import { appendFileSync, existsSync } from 'node:fs';
const [slowFile, pidFile] = process.argv.slice(2);
appendFileSync(pidFile, process.pid + '\\n');
process.stdout.on('error', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0));
let i = 0;
const line = () => { i += 1; return JSON.stringify({ resourceId: 'TRUCK-FULL', latitude: 41.8 + (i % 1000) * 1e-5, longitude: -87.6 + (i % 997) * 1e-5, speed: 20, heading: 90 }) + '\\n'; };
function tick() {
  const slow = existsSync(slowFile);
  let s = '';
  for (let k = 0; k < (slow ? 1 : 100); k++) s += line();
  const next = () => setTimeout(tick, slow ? 250 : 10);
  if (process.stdout.write(s)) next(); else process.stdout.once('drain', next);
}
tick();
`;

interface FullDiskRun {
  windowS: number;
  /** CPU of every thread over the window, seconds (schedstat). */
  cpuS: number;
  rss: number;
  anon: number;
  /** From the service answering again to its first 2xx, and to every reading waiting in memory committed, seconds. */
  first2xxS: number;
  resumeS: number;
  /** SIGTERM to exit, the disk full again and the service down again. */
  sigtermS: number;
  exitCode: number | null;
  shutdownTimeoutS: number;
}

/**
 * `telematics-agent run` with its buffer on a 4 MB tmpfs and the service answering 503: a
 * fast exec source fills the disk, then slows to 4 readings a second. Measured: CPU and
 * memory while the disk is full, the time from the service answering again to the first 2xx
 * and to commits resuming (the disk is full until delivery purges), and after filling it
 * again with the service down, the time from SIGTERM to exit.
 */
async function benchFullDisk(sandbox: Sandbox, dir: string): Promise<FullDiskRun | { skipped: string }> {
  const base = join(dir, 'full-disk');
  const mnt = join(base, 'mnt');
  mkdirSync(mnt, { recursive: true });
  const blocker = fullDiskBlocker(mnt);
  if (blocker) return { skipped: blocker };
  const pids = join(base, 'pids');
  let child: ChildProcess | undefined;
  try {
    const keyFile = join(base, 'key');
    writeFileSync(keyFile, `${BENCH_KEY}\n`, { mode: 0o600 });
    const source = join(base, 'source.mjs');
    writeFileSync(source, FULL_DISK_SOURCE);
    const slow = join(base, 'slow');
    const db = join(mnt, 'buffer.db');
    const config = join(base, 'agent.toml');
    // Defaults, except: a push every 2 s and retries within 1 s, so the service's return is
    // seen at once (the defaults push every 15 minutes and retry after 5 s, doubling); and
    // every reading a trace point, so a failed push costs one chunk, not a walk through the
    // whole backlog for 500 points a minute apart, which would be measured instead of the disk.
    writeFileSync(
      config,
      `device_id = "bench-full-disk"
[api]
base_url = "${sandbox.url}"
scac = "${BENCH_SCAC}"
subscription_key_file = "${keyFile}"
[buffer]
path = "${db}"
[schedule]
traces = "*/2 * * * * *"
splay_s = 0
[sampling]
interval_s = 0
[delivery]
retry_initial_s = 0.2
retry_max_s = 1
[[sources]]
type = "exec"
command = ${JSON.stringify([process.execPath, source, slow, pids])}
`,
    );
    const store = Store.open(db);
    store.startLoad({ loadNumber: 'FULL-L1', resourceId: 'TRUCK-FULL', resourceType: 'Truck', stops: [], nowMs: Date.now() });
    store.close();
    sandbox.reset();
    sandbox.setFaults({ forceStatus: 503 });

    const c = spawn(process.execPath, [BIN, 'run', '--config', config], { env: { ...cleanEnv(), NODE_OPTIONS: AGENT_NODE_OPTIONS }, stdio: ['ignore', 'pipe', 'pipe'] });
    child = c;
    children.add(c);
    let out = '';
    const onData = (d: Buffer) => {
      out += d.toString();
      // Only the lines this run looks for are kept.
      if (out.length > 1_000_000) out = out.split('\n').filter((l) => l.includes('could not commit') || l.includes('room again')).join('\n');
    };
    c.stdout!.on('data', onData);
    c.stderr!.on('data', onData);
    const lines = (text: string) => out.split('\n').filter((l) => l.includes(text));
    const until = async (what: string, ok: () => boolean, timeoutMs = 60_000) => {
      const end = performance.now() + timeoutMs;
      while (!ok()) {
        if (c.exitCode !== null) throw new Error(`full disk: the daemon exited with ${c.exitCode} waiting for ${what}: ${out.slice(-2000)}`);
        if (performance.now() > end) throw new Error(`full disk: no ${what} within ${timeoutMs / 1000} s: ${out.slice(-2000)}`);
        await sleep(20);
      }
    };

    await until('disk full', () => lines('could not commit readings').length > 0);
    writeFileSync(slow, '');
    await sleep(QUICK ? 500 : 3000);
    const pid = c.pid!;
    const cpu0 = schedSecondsOf(pid);
    const t0 = performance.now();
    await sleep(QUICK ? 2000 : 10_000);
    const cpuS = schedSecondsOf(pid) - cpu0;
    const windowS = (performance.now() - t0) / 1000;
    const mem = memoryOf(pid)!;

    // The service answers again; the disk stays full until delivery purges.
    const accepted = sandbox.stats.accepted;
    const back = Date.now();
    sandbox.setFaults({ forceStatus: 0 });
    await until('2xx', () => sandbox.stats.accepted > accepted);
    const first2xxS = (Date.now() - back) / 1000;
    await until('commit after the disk was full', () => lines('disk has room again').length > 0);
    const resumed = JSON.parse(lines('disk has room again')[0]) as { time: number };
    const resumeS = (resumed.time - back) / 1000;

    // Full again, with the service down again, then SIGTERM.
    sandbox.setFaults({ forceStatus: 503 });
    rmSync(slow);
    await until('the disk full again', () => lines('could not commit readings').length > 1);
    writeFileSync(slow, '');
    await sleep(QUICK ? 500 : 2000);
    const s0 = performance.now();
    c.kill('SIGTERM');
    const exit = await waitExit(c, 60_000);
    const sigtermS = (performance.now() - s0) / 1000;
    return {
      windowS,
      cpuS,
      rss: mem.rss,
      anon: mem.anon,
      first2xxS,
      resumeS,
      sigtermS,
      exitCode: exit.code,
      shutdownTimeoutS: configSchema.shape.delivery.parse({}).shutdown_timeout_s,
    };
  } finally {
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await waitExit(child);
    }
    // The exec source's command, by PID: a daemon killed with SIGKILL cannot stop it.
    if (existsSync(pids)) {
      for (const p of readFileSync(pids, 'utf8').split('\n').filter(Boolean).map(Number)) {
        try {
          process.kill(p, 'SIGKILL');
        } catch {
          // Gone already.
        }
      }
    }
    sandbox.reset();
    unmount();
  }
}

/** Rows 7a-7c: information, except SIGTERM to exit (below delivery.shutdown_timeout_s). */
function fullDiskRows(r: FullDiskRun | { skipped: string }): Row[] {
  const row = (id: string, measure: string, value: string, target = '', pass: boolean | null = null): Row => ({ id, measure, value, reference: '', ratio: '', target, pass });
  if ('skipped' in r) {
    const skipped = `skipped (${r.skipped})`;
    return [
      row('7a', 'full disk: CPU share and RSS of `run` while the disk is full', skipped),
      row('7b', 'full disk: service back to first 2xx / to commits resuming', skipped),
      row('7c', 'full disk: SIGTERM to exit', skipped, '< shutdown_timeout_s'),
    ];
  }
  return [
    row('7a', `full disk: CPU share (schedstat, ${round(r.windowS, 0)} s, source at 4/s) and RSS of \`run\` while the disk is full`, `${round((r.cpuS / r.windowS) * 100, 2)}%, RSS ${mb(r.rss)} (anon ${mb(r.anon)})`),
    row('7b', 'full disk: service back to first 2xx / to commits resuming (the disk full until delivery purges)', `${round(r.first2xxS, 2)} s / ${round(r.resumeS, 2)} s`),
    row('7c', `full disk: SIGTERM to exit (service down; exit status ${r.exitCode})`, `${round(r.sigtermS, 2)} s`, `< ${r.shutdownTimeoutS} s (shutdown_timeout_s)`, r.sigtermS < r.shutdownTimeoutS && (r.exitCode === 0 || r.exitCode === 1)),
  ];
}

// ---- machine ----------------------------------------------------------------------------------

function machine() {
  const cpu = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1]?.trim() ?? 'unknown';
  let memory = `${round(totalmem() / 1024 ** 3, 1)} GiB`;
  try {
    const free = execFileSync('free', ['-h'], { encoding: 'utf8' });
    const m = /^Mem:\s+(\S+)\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S+)/m.exec(free);
    if (m) memory = `${m[1]} total, ${m[2]} available`;
  } catch {
    // No procps: the total from os will do.
  }
  return { nproc: availableParallelism(), memory, cpu, node: process.version, platform: `${process.platform}-${process.arch}` };
}

// ---- report -----------------------------------------------------------------------------------

interface Row {
  id: string;
  measure: string;
  value: string;
  reference: string;
  ratio: string;
  target: string;
  /** true PASS, false MISS, null: no target (information). */
  pass: boolean | null;
}

function table(rows: Row[]): string {
  const head = ['#', 'measure', 'ours', 'reference', 'ratio', 'target', 'result'];
  const cells = rows.map((r) => [r.id, r.measure, r.value, r.reference, r.ratio, r.target, r.pass === null ? 'info' : r.pass ? 'PASS' : 'MISS']);
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (c: string[]) => `| ${c.map((x, i) => x.padEnd(widths[i])).join(' | ')} |`;
  return [line(head), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...cells.map(line)].join('\n');
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
const mb = (b: number) => `${round(b / MB, 1)} MB`;
const pct = (x: number) => `${round(x * 100, 0)}%`;

async function main(): Promise<void> {
  const started = performance.now();
  const base = option('--dir') ? resolve(option('--dir')!) : tmpdir();
  mkdirSync(base, { recursive: true });
  const dir = mkdtempSync(join(base, 'telematics-bench-'));
  if (PROF_DIR) mkdirSync(PROF_DIR, { recursive: true });
  const sandbox = new Sandbox({ key: BENCH_KEY, scac: BENCH_SCAC, keepBodies: false });
  const onSignal = () => {
    killChildren();
    unmount();
    rmSync(dir, { recursive: true, force: true });
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const m = machine();
    progress(`${QUICK ? 'quick' : 'full'} run in ${dir} (${m.nproc} CPUs, ${m.cpu}, Node ${m.node})`);

    progress(`1. ingest: ${fmt(SIZES.ingest)} readings x ${SIZES.rounds} rounds, agent path vs raw loop`);
    const ingest = benchIngest(dir);

    await sandbox.start();
    const large = SIZES.large.loads * SIZES.large.perLoad;
    const small = SIZES.small.loads * SIZES.small.perLoad;
    progress(`2. drain: writing a backlog of ${fmt(large)} readings across ${SIZES.large.loads} loads`);
    const largeDb = backlogFile(dir, 'large.db', SIZES.large);
    const requests = SIZES.large.loads * Math.ceil(SIZES.large.perLoad / CHUNK);
    progress(`   ceiling: a plain undici client posting ${fmt(requests)} pre-built bodies`);
    const ceilingBefore = await postRun(sandbox, { cmd: 'ceiling', dbPath: largeDb, url: sandbox.url, requests, distinct: Math.min(requests, 100) });
    progress(`   the agent draining ${fmt(large)} readings (child process, RSS sampled every 50 ms)`);
    const drain = await drainRun(sandbox, largeDb, large, 0, SIZES.idleSettleMs);
    rmSync(largeDb, { force: true });

    progress(`3. memory: the agent draining ${fmt(small)} readings (and the ceiling again, so it brackets the drain)`);
    const smallDb = backlogFile(dir, 'small.db', SIZES.small);
    const ceilingAfter = await postRun(sandbox, { cmd: 'ceiling', dbPath: smallDb, url: sandbox.url, requests, distinct: Math.min(requests, 100) });
    // The ceiling of the run: both brackets together (the machine may be busier before or after).
    const ceiling = {
      requests: ceilingBefore.requests + ceilingAfter.requests,
      points: ceilingBefore.points + ceilingAfter.points,
      ms: ceilingBefore.ms + ceilingAfter.ms,
    };
    const rateOf = (r: { points: number; ms: number }) => r.points / (r.ms / 1000);
    const drainSmall = await drainRun(sandbox, smallDb, small);

    progress(`   7 days of one truck at 1 Hz: ${fmt(SIZES.week)} readings`);
    const weekTemplate = backlogFile(dir, 'week-template.db', { loads: 1, perLoad: SIZES.week });
    const weekDb = join(dir, 'week.db');
    copyFileSync(weekTemplate, weekDb);
    const week = await drainRun(sandbox, weekDb, SIZES.week);

    progress(`   the same over a ${LATENCY_MS} ms link: ${fmt(SIZES.cellular)} readings`);
    const cellTemplate = SIZES.cellular === SIZES.week ? weekTemplate : backlogFile(dir, 'cell-template.db', { loads: 1, perLoad: SIZES.cellular });
    const cellDb = join(dir, 'cell.db');
    copyFileSync(cellTemplate, cellDb);
    const cellular = await drainRun(sandbox, cellDb, SIZES.cellular, LATENCY_MS);
    progress(`   peer: ${SIZES.peerRequests} single-reading requests over the same link`);
    const peer = await postRun(sandbox, { cmd: 'peer', dbPath: cellTemplate, url: sandbox.url, requests: SIZES.peerRequests }, LATENCY_MS);
    const peerPerRequestMs = peer.ms / peer.requests;
    // The peer baseline: one request per reading, one after another, no batching; the fixed
    // 30 s retry only adds time when a request fails (none are modelled: a lower bound).
    const peerModelS = (peerPerRequestMs * SIZES.cellular) / 1000;

    progress(`4.-6. telematics-agent run with a 1 Hz simulator: startup, then ${SIZES.idleS} s idle (NORMAL and FULL side by side)`);
    const [normal, full] = await benchDaemons(sandbox, dir);
    progress(`7. a full disk: \`run\` with its buffer on a ${FULL_DISK_BYTES / MB} MB tmpfs, filled by a fast exec source while the service answers 503`);
    const fullDisk = await benchFullDisk(sandbox, dir);
    if ('skipped' in fullDisk) progress(`   skipped (${fullDisk.skipped})`);
    await sandbox.stop();

    // schedstat (ns, every live thread), not utime+stime: in clock ticks of 10 ms an idle
    // agent can show 0 over a short window.
    const cpuFraction = normal.schedS / normal.windowS;
    const bytesPerReading = normal.writeBytes / Math.max(1, normal.readings);
    const bytesPerReadingFull = full.writeBytes / Math.max(1, full.readings);
    const growth = drain.peakRss - drainSmall.peakRss;
    const growthOk = drain.peakRss <= drainSmall.peakRss * 1.1 + 5 * MB;
    const label = (n: number) => (n >= 1_000_000 ? `${n / 1_000_000}M` : n >= 1000 ? `${round(n / 1000, 1)}k` : String(n));

    const rows: Row[] = [
      {
        id: '1',
        measure: `ingest, readings/s (push + flush, batch ${ingest.batchSize}, ${label(ingest.readings)})`,
        value: fmt(ingest.oursPerS),
        reference: `${fmt(ingest.rawPerS)} raw loop`,
        ratio: pct(ingest.ratio),
        target: '>= 50% of raw',
        pass: ingest.ratio >= 0.5,
      },
      {
        id: '2a',
        measure: `drain ${label(large)} readings / ${SIZES.large.loads} loads, loopback, readings/s`,
        value: `${fmt(drain.perS)} (${round(drain.ms / 1000)} s)`,
        reference: `${fmt(rateOf(ceiling))} ceiling`,
        ratio: pct(drain.perS / rateOf(ceiling)),
        target: '>= 50% of ceiling',
        pass: drain.perS >= 0.5 * rateOf(ceiling),
      },
      {
        id: '2b',
        measure: `drain 7 days x 1 Hz (${fmt(SIZES.week)}), loopback, wall time`,
        value: `${round(week.ms / 1000)} s (${fmt(week.perS)}/s)`,
        reference: '(vs the ceiling)',
        ratio: pct(week.perS / rateOf(ceiling)),
        target: '< 120 s',
        pass: week.ms < 120_000,
      },
      {
        id: '2c',
        measure: `drain ${fmt(SIZES.cellular)} over ${LATENCY_MS} ms/request, wall time`,
        value: `${round(cellular.ms / 1000)} s (${fmt(cellular.requests)} requests)`,
        reference: `${fmt(peerModelS)} s peer model`,
        ratio: `${fmt(peerModelS / (cellular.ms / 1000))}x faster`,
        target: 'faster than peer',
        pass: cellular.ms / 1000 < peerModelS,
      },
      {
        id: '2d',
        measure: `purge of the ${label(large)} delivered rows after the drain (slices of ${fmt(PURGE_SLICE)} ids between other work)`,
        value: `${round(drain.purgeMs / 1000, 1)} s (${round((drain.purgeMs * 1000) / large, 2)} µs/row)`,
        reference: '',
        ratio: '',
        target: '',
        pass: null,
      },
      {
        id: '3a',
        measure: `RSS idle, ${round(SIZES.idleSettleMs / 1000, 0)} s after start (Agent in the worker; anon ${mb(drain.idle.anon)} + file ${mb(drain.idle.file)}; ${mb(drain.earlyRss)} at ${round(SIZES.settleMs / 1000, 1)} s)`,
        value: mb(drain.idle.rss),
        reference: '',
        ratio: '',
        target: '<= 60 MB',
        pass: drain.idle.rss <= 60 * MB,
      },
      {
        id: '3b',
        measure: `RSS peak during the ${label(large)} drain (sampled; VmHWM ${mb(drain.hwm)}; anon peak ${mb(drain.peakAnon)})`,
        value: mb(drain.peakRss),
        reference: '',
        ratio: '',
        target: '<= 120 MB',
        pass: drain.peakRss <= 120 * MB,
      },
      {
        id: '3c',
        measure: `RSS peak ${label(small)} vs ${label(large)} backlog (7 days: ${mb(week.peakRss)})`,
        value: `${mb(drainSmall.peakRss)} vs ${mb(drain.peakRss)}`,
        reference: '',
        ratio: `${growth >= 0 ? '+' : ''}${mb(growth)}`,
        target: 'flat (<= +10% +5 MB)',
        pass: growthOk,
      },
      { id: '3d', measure: `RSS after the ${label(large)} drain`, value: mb(drain.afterRss), reference: '', ratio: '', target: '', pass: null },
      {
        id: '3e',
        measure: `RSS of \`run\` after ${SIZES.idleS} s at 1 Hz (VmHWM ${mb(normal.hwm)})`,
        value: mb(normal.rss),
        reference: '',
        ratio: '',
        target: '<= 60 MB',
        pass: normal.rss <= 60 * MB,
      },
      {
        id: '4',
        measure: `idle CPU, \`run\` at 1 Hz, ${round(normal.windowS, 0)} s (schedstat, all threads; utime+stime ${round(normal.cpuS, 2)} s)`,
        value: `${round(normal.schedS, 3)} s = ${round(cpuFraction * 100, 2)}%`,
        reference: '',
        ratio: '',
        target: '<= 1% of a core',
        pass: cpuFraction <= 0.01,
      },
      {
        id: '5',
        measure: `flash: bytes written per reading (${normal.readings} readings), WAL + synchronous NORMAL`,
        value: `${fmt(bytesPerReading)} B (${round((bytesPerReading * 86_400) / MB, 0)} MB/day)`,
        reference: `${fmt(bytesPerReadingFull)} B with FULL`,
        ratio: '',
        target: '',
        pass: null,
      },
      {
        id: '5b',
        measure: `flash: bytes written per reading delivered, ${label(large)} drain (7 days: ${fmt(week.writeBytes / week.readings)} B)`,
        value: `${fmt(drain.writeBytes / large)} B (${mb(drain.writeBytes)})`,
        reference: '',
        ratio: '',
        target: '',
        pass: null,
      },
      {
        id: '6',
        measure: `startup: process start to first reading committed ('agent started' at ${fmt(normal.startedMs)} ms)`,
        value: `${fmt(normal.firstCommitMs)} ms`,
        reference: '',
        ratio: '',
        target: '',
        pass: null,
      },
      ...fullDiskRows(fullDisk),
    ];

    const figures = {
      ingestReadings: ingest.readings,
      ingestOursPerS: ingest.oursPerS,
      ingestRawPerS: ingest.rawPerS,
      ingestRatio: ingest.ratio,
      drainReadings: large,
      drainPerS: drain.perS,
      drainWallS: drain.ms / 1000,
      drainRequests: drain.requests,
      drainPurgeS: drain.purgeMs / 1000,
      ceilingPerS: rateOf(ceiling),
      ceilingRequests: ceiling.requests,
      ceilingBeforePerS: rateOf(ceilingBefore),
      ceilingAfterPerS: rateOf(ceilingAfter),
      drainRatio: drain.perS / rateOf(ceiling),
      weekReadings: SIZES.week,
      weekWallS: week.ms / 1000,
      weekPerS: week.perS,
      cellularReadings: SIZES.cellular,
      cellularLatencyMs: LATENCY_MS,
      cellularWallS: cellular.ms / 1000,
      peerPerRequestMs,
      peerModelS,
      cellularSpeedup: peerModelS / (cellular.ms / 1000),
      rssIdleMB: drain.idle.rss / MB,
      rssIdleEarlyMB: drain.earlyRss / MB,
      rssIdleAnonMB: drain.idle.anon / MB,
      rssIdleFileMB: drain.idle.file / MB,
      rssPeakAnonMB: drain.peakAnon / MB,
      rssPeakMB: drain.peakRss / MB,
      rssPeakHwmMB: drain.hwm / MB,
      rssAfterMB: drain.afterRss / MB,
      rssPeakSmallMB: drainSmall.peakRss / MB,
      smallReadings: small,
      rssPeakWeekMB: week.peakRss / MB,
      rssDaemonMB: normal.rss / MB,
      idleWindowS: normal.windowS,
      idleCpuSeconds: normal.schedS,
      idleCpuPercent: cpuFraction * 100,
      flashReadings: normal.readings,
      flashBytesPerReading: bytesPerReading,
      flashBytesPerReadingFull: bytesPerReadingFull,
      drainWriteBytesPerReading: drain.writeBytes / large,
      weekWriteBytesPerReading: week.writeBytes / week.readings,
      startupAgentStartedMs: normal.startedMs,
      startupFirstCommitMs: normal.firstCommitMs,
      // Absent when the run was skipped (not root): every figure here is a measurement.
      ...('skipped' in fullDisk
        ? {}
        : {
            fullDiskWindowS: fullDisk.windowS,
            fullDiskCpuPercent: (fullDisk.cpuS / fullDisk.windowS) * 100,
            fullDiskRssMB: fullDisk.rss / MB,
            fullDiskRssAnonMB: fullDisk.anon / MB,
            fullDiskFirst2xxS: fullDisk.first2xxS,
            fullDiskResumeS: fullDisk.resumeS,
            fullDiskSigtermS: fullDisk.sigtermS,
          }),
      benchWallS: (performance.now() - started) / 1000,
    };
    const syncNote =
      'WAL with synchronous=NORMAL: a commit is safe from a crash of the process (kill -9) at once, and never corrupts the file; ' +
      'a power loss can roll back the commits not yet synced to the disk: the WAL is synced only at a checkpoint (every 1000 pages), ' +
      'so in practice what the kernel had not yet written back (up to ~30 s: vm.dirty_expire_centisecs), plus the readings still ' +
      `queued in memory (up to flush_interval_ms = ${BUFFER_DEFAULTS.flush_interval_ms} ms). Rolled-back acknowledgements make already delivered chunks go again with the same Idempotency-Key.`;

    if (JSON_OUT) {
      process.stdout.write(`${JSON.stringify({ quick: QUICK, machine: m, nodeOptions: AGENT_NODE_OPTIONS, sizes: SIZES, figures, rows, syncNote }, null, 2)}\n`);
    } else {
      const out = [
        '',
        `telematics-agent bench (${QUICK ? 'quick' : 'full'} run, ${round(figures.benchWallS, 0)} s)`,
        `machine: ${m.nproc} CPUs (${m.cpu}), ${m.memory}, Node ${m.node} ${m.platform}`,
        `agent processes run with the unit's NODE_OPTIONS: ${AGENT_NODE_OPTIONS}`,
        '',
        table(rows),
        '',
        `ingest: best of ${SIZES.rounds} alternating rounds each, fresh file each; raw = one prepared INSERT per reading in one transaction, load number known.`,
        `drain: until the service has every reading; the Agent in a child process (sampling 0, ${CHUNK} per request, drain_interval_ms 0; the newest point of each load goes first, alone);`,
        `  deleting the delivered rows afterwards is timed apart (2d); memory and flash figures include it.`,
        `  ceiling = plain undici client, same process layout, posting the agent's bodies (${CHUNK} points, ${Math.min(requests, 100)} distinct, cycled, fresh keys) one after another:`,
        `  ${fmt(requests)} requests before the drain (${fmt(rateOf(ceilingBefore))}/s) and ${fmt(requests)} after it (${fmt(rateOf(ceilingAfter))}/s); the reference is both together.`,
        `  ${fmt(drain.requests)} requests; the sandbox validated every body and counted ${fmt(large)} points, no duplicates.`,
        `peer model: ${fmt(SIZES.cellular)} readings x ${round(peerPerRequestMs)} ms per single-reading request (measured, ${peer.requests} requests over the ${LATENCY_MS} ms link),`,
        `  sequential, no failures; each failure would add the fixed ${PEER_RETRY_S} s retry (1% failed = +${fmt((SIZES.cellular * 0.01 * PEER_RETRY_S) / 3600)} h).`,
        `memory: RSS from /proc/PID/status of the worker; idle = ${SIZES.idleSettleMs} ms after start (V8 shrinks its young generation after some 8 s without allocation; the figure at ${SIZES.settleMs} ms is shown beside it), peak sampled every 50 ms (${drain.samples} samples), after = ${SIZES.settleMs} ms after the drain.`,
        `idle/flash/startup: \`telematics-agent run\` with defaults (WAL, synchronous NORMAL, flush_interval_ms ${BUFFER_DEFAULTS.flush_interval_ms}, traces every 15 min) and one simulator at 1 Hz, a load with 2 stops active;`,
        `  CPU = run time of every thread from /proc/PID/task/*/schedstat (ns); bytes = write_bytes from /proc/PID/io (page cache pages dirtied, i.e. what reaches the disk).`,
        `full disk: \`run\` with its buffer on a ${FULL_DISK_BYTES / MB} MB tmpfs (reserve and WAL limit sized for it), the unit's NODE_OPTIONS, an exec source at ~10,000 readings/s until the disk is full, then 4/s;`,
        `  traces pushed every 2 s and retried within 1 s so the service's return is seen at once, sampling 0 (a point per reading);`,
        `  CPU from schedstat, memory from /proc/PID/status at the end of the window;`,
        `  SIGTERM with the disk full again and the service answering 503.`,
        `sync level: ${syncNote}`,
        '',
      ];
      process.stdout.write(out.join('\n'));
    }
  } finally {
    killChildren();
    await sandbox.stop().catch(() => undefined);
    unmount();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`);
  killChildren();
  process.exitCode = 1;
});
