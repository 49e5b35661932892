/**
 * A full disk, with real parts: the buffer on a 4 MB tmpfs mounted by the test, the real
 * daemon fed by a real exec source, the real sandbox as the service, signals by PID.
 *
 * Needs root (mount); skipped with the reason printed otherwise. CI runs as root.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, statfsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cpuSecondsOf, memoryOf } from '../bench/common.js';
import { diskPlan } from '../src/buffer/disk.js';
import { Sandbox } from '../src/sandbox/server.js';
import { TEST_KEY, TEST_SCAC, runCli, startDaemon, tempDir, waitFor, writeFile, type Daemon, cannotMountTmpfs } from './helpers.js';
import { HIGHEST_READING_ID } from '../src/buffer/ledger.js';

const TMPFS_BYTES = 4 * 1024 * 1024;
const SHUTDOWN_TIMEOUT_S = 5;
/** buffer.max_pending: the default. */
const MAX_PENDING = 20_000;
const CHUNK = 500;

const skipReason = cannotMountTmpfs();
if (skipReason) console.warn(`disk-full tests skipped: ${skipReason}`);

/**
 * The exec source's command: JSON lines without a time (stamped at receipt), fast (about
 * 10,000 a second) until the file `slow` exists, then 4 a second, and none while the file
 * `quiet` exists (a restart that only delivers). Its PID goes to `pids` so the test can stop
 * it even when the daemon was killed before it could.
 */
const GENERATOR = `import { appendFileSync, existsSync } from 'node:fs';
const [slowFile, quietFile, pidFile] = process.argv.slice(2);
appendFileSync(pidFile, process.pid + '\\n');
process.stdout.on('error', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0));
let i = 0;
const line = () => { i += 1; return JSON.stringify({ resourceId: 'T1', latitude: 41.8 + (i % 1000) * 1e-5, longitude: -87.6 + (i % 997) * 1e-5 }) + '\\n'; };
function tick() {
  const slow = existsSync(slowFile);
  let s = '';
  const n = existsSync(quietFile) ? 0 : slow ? 1 : 100;
  for (let k = 0; k < n; k++) s += line();
  const next = () => setTimeout(tick, slow ? 250 : 10);
  if (process.stdout.write(s)) next(); else process.stdout.once('drain', next);
}
tick();
`;

let tmp: ReturnType<typeof tempDir>;
let mnt: string;
let sandbox: Sandbox;
let daemons: Daemon[] = [];

beforeEach(() => {
  tmp = tempDir('ta-disk-');
  mnt = join(tmp.dir, 'mnt');
  mkdirSync(mnt);
  if (!skipReason) execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${TMPFS_BYTES}`, 'tmpfs', mnt], { stdio: 'pipe' });
  sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
});

afterEach(async (ctx) => {
  // What the daemons said, when a case failed: a timeout alone does not tell why.
  if (ctx.task.result?.state === 'fail') {
    for (const d of daemons)
      console.error(
        d
          .output()
          .split('\n')
          .filter((l) => !l.includes('"level":20'))
          .slice(-40)
          .join('\n'),
      );
  }
  for (const d of daemons) await d.stop('SIGKILL');
  daemons = [];
  // The exec source's commands, by PID: a daemon killed with SIGKILL cannot stop them.
  const pids = join(tmp.dir, 'pids');
  if (existsSync(pids)) {
    for (const pid of readFileSync(pids, 'utf8').split('\n').filter(Boolean).map(Number)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
  }
  await sandbox.stop();
  if (!skipReason) {
    for (let i = 0; i < 20; i++) {
      try {
        execFileSync('umount', [mnt], { stdio: 'pipe' });
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }
  tmp.cleanup();
});

function config(url: string, timeoutS = 5): string {
  const keyFile = writeFile(tmp.dir, 'key', `${TEST_KEY}\n`, 0o600);
  const gen = writeFile(tmp.dir, 'gen.mjs', GENERATOR);
  return writeFile(
    tmp.dir,
    'agent.toml',
    `device_id = "disk"
[api]
base_url = "${url}"
scac = "${TEST_SCAC}"
subscription_key_file = "${keyFile}"
timeout_s = ${timeoutS}
[buffer]
path = "${join(mnt, 'buffer.db')}"
flush_interval_ms = 1000
max_pending = ${MAX_PENDING}
[schedule]
splay_s = 0
traces = "*/2 * * * * *"
[sampling]
interval_s = 0
[delivery]
max_traces_per_request = ${CHUNK}
poll_interval_ms = 200
retry_initial_s = 0.2
retry_max_s = 1
shutdown_timeout_s = ${SHUTDOWN_TIMEOUT_S}
[health]
listen = "127.0.0.1:0"
[[sources]]
type = "exec"
name = "gen"
command = ${JSON.stringify([process.execPath, gen, control('slow'), control('quiet'), join(tmp.dir, 'pids')])}
`,
  );
}

const buffer = () => join(mnt, 'buffer.db');
/** A file that switches the generator's pace (see GENERATOR), outside the tmpfs. */
const control = (name: string) => join(tmp.dir, name);
const pace = (name: 'slow' | 'quiet') => writeFile(tmp.dir, name, '');
/** The file's size, 0 when it is not there (the -wal comes and goes as SQLite opens and closes). */
const sizeOf = (p: string) => statSync(p, { throwIfNoEntry: false })?.size ?? 0;
const linesWith = (d: Daemon, text: string) =>
  d
    .output()
    .split('\n')
    .filter((l) => l.includes(text)).length;

/** The health port the daemon printed in its 'agent started' line. */
async function healthPort(d: Daemon): Promise<number> {
  return waitFor(
    () => {
      const line = d
        .output()
        .split('\n')
        .find((l) => l.includes('"agent started"'));
      return line ? (JSON.parse(line) as { health: number }).health : undefined;
    },
    15_000,
    "the daemon's 'agent started' line",
  );
}

async function get(port: number, path: string): Promise<{ status: number; text: string; ms: number }> {
  const t0 = performance.now();
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(5000) });
  const text = await res.text();
  return { status: res.status, text, ms: performance.now() - t0 };
}

/** Reading ids the sandbox received, each once per time it came. */
const receivedIds = () => sandbox.traces.flatMap((t) => t.body.traces.map((p) => Number(p.references![0].value.split('-').pop())));

/** The highest reading id ever committed (past the purge: HIGHEST_READING_ID). */
function maxCommittedId(): number {
  const db = new Database(buffer(), { readonly: true });
  try {
    return (db.prepare(HIGHEST_READING_ID).pluck().get() as number | undefined) ?? 0;
  } finally {
    db.close();
  }
}

/** The highest reading id the sandbox received (a loop: tens of thousands of ids are too many to spread into Math.max). */
function highestReceived(): number {
  let top = 0;
  for (const id of receivedIds()) if (id > top) top = id;
  return top;
}

async function loadStart(cfg: string): Promise<void> {
  const started = await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', cfg]);
  expect(started.code, started.stderr).toBe(0);
}

async function startAgent(cfg: string): Promise<{ d: Daemon; port: number }> {
  const d = startDaemon(['--config', cfg]);
  daemons.push(d);
  const port = await healthPort(d);
  return { d, port };
}

/** Let the fast source fill the disk and the pending queue up to its cap, then slow it down. */
async function fill(d: Daemon, port: number): Promise<void> {
  await waitFor(() => linesWith(d, 'could not commit readings') > 0, 30_000, 'the disk to fill');
  await waitFor(async () => Number(/^telematics_readings_pending (\d+)$/m.exec((await get(port, '/metrics')).text)?.[1]) >= MAX_PENDING, 15_000, `${MAX_PENDING} readings pending in memory`);
  pace('slow');
}

/** The largest size the -wal file reaches while this runs, sampled every 5 ms. */
function watchWal(): { max: () => number; stop: () => void } {
  let max = 0;
  const timer = setInterval(() => (max = Math.max(max, sizeOf(`${buffer()}-wal`))), 5);
  return { max: () => max, stop: () => clearInterval(timer) };
}

/** Rows in the buffer (waiting or delivered and not yet purged), read beside the daemon. */
function rowsInBuffer(): number {
  const db = new Database(buffer(), { readonly: true });
  try {
    return db.prepare('SELECT count(*) FROM readings').pluck().get() as number;
  } finally {
    db.close();
  }
}

/**
 * Every committed reading (ids 1 to the highest ever committed) reached the service; a
 * reading came twice only as part of one request sent again. Returns the count of duplicates.
 */
function expectAllDelivered(): number {
  const top = maxCommittedId();
  const ids = receivedIds();
  const distinct = new Set(ids);
  const missing: number[] = [];
  for (let i = 1; i <= top; i++) if (!distinct.has(i)) missing.push(i);
  expect(missing.slice(0, 20), `${missing.length} of ${top} committed readings never reached the service`).toEqual([]);
  expect(
    [...distinct].filter((i) => i > top),
    'ids that were never committed',
  ).toEqual([]);
  const duplicates = ids.length - distinct.size;
  expect(duplicates, `${duplicates} duplicate points: at most one request's worth`).toBeLessThanOrEqual(CHUNK);
  return duplicates;
}

/** Stop the daemon, start it again with a quiet source, and wait until the service has every committed reading. */
async function deliverTheRest(cfg: string, d: Daemon): Promise<void> {
  pace('quiet');
  const exit = await d.stop('SIGTERM');
  expect(exit, d.output().slice(-3000)).toEqual({ code: 0, signal: null });
  const top = maxCommittedId();
  const again = startDaemon(['--config', cfg]);
  daemons.push(again);
  // Started before it is stopped: a SIGTERM while node is still loading the agent ends it by the signal.
  await healthPort(again);
  await waitFor(() => new Set(receivedIds()).size >= top, 30_000, `all ${top} committed readings at the service`);
  expect(await again.stop('SIGTERM'), again.output().slice(-3000)).toEqual({ code: 0, signal: null });
}

interface StatusJson {
  commits: { kind: string; nextAttemptMs: number } | null;
  dropped: Record<string, number>;
  queue: { readings: number };
}

const mb = (b: number) => `${(b / 1_048_576).toFixed(1)} MB`;

describe.skipIf(skipReason !== undefined)('a full disk (4 MB tmpfs)', () => {
  it('backs off, keeps answering, delivers while full, resumes, keeps the WAL small and loses nothing committed', async () => {
    const { url } = await sandbox.start();
    sandbox.setFaults({ forceStatus: 503 });
    const cfg = config(url);
    const { walLimitBytes, reserveBytes } = diskPlan(buffer(), 2048);
    const wal = watchWal();
    try {
      await loadStart(cfg);
      const { d, port } = await startAgent(cfg);
      await fill(d, port);
      const pid = d.child.pid!;
      // a. Several seconds with the disk full and the source slow.
      await new Promise((r) => setTimeout(r, 1000));
      const cpu0 = cpuSecondsOf(pid);
      const t0 = performance.now();
      await new Promise((r) => setTimeout(r, 3000));
      const cpuShare = (cpuSecondsOf(pid) - cpu0) / ((performance.now() - t0) / 1000);
      const mem = memoryOf(pid)!;
      const metrics = await get(port, '/metrics');
      const healthz = await get(port, '/healthz');
      const status = await runCli(['status', '--json', '--config', cfg]);
      const commitErrors = linesWith(d, 'could not commit readings');
      console.log(
        `disk full: CPU ${(cpuShare * 100).toFixed(1)}% over 3 s, RSS ${mb(mem.rss)} (anon ${mb(mem.anon)}), /metrics in ${metrics.ms.toFixed(0)} ms, "could not commit" logged ${commitErrors} time(s)`,
      );
      expect(commitErrors, `"could not commit readings" logged ${commitErrors} times in 5 s`).toBeLessThanOrEqual(2);
      expect(cpuShare, `CPU share while full: ${(cpuShare * 100).toFixed(1)}%`).toBeLessThan(0.25);
      expect(metrics.status).toBe(200);
      expect(metrics.ms, `/metrics answered in ${metrics.ms.toFixed(0)} ms`).toBeLessThan(1000);
      expect(metrics.text).toMatch(/^telematics_disk_full 1$/m);
      const pending = Number(/^telematics_readings_pending (\d+)$/m.exec(metrics.text)?.[1]);
      expect(pending, `${pending} pending, cap ${MAX_PENDING}`).toBeLessThanOrEqual(MAX_PENDING);
      // The oldest pending readings were dropped past max_pending, and every view counts them.
      const dropped = Number(/^telematics_readings_dropped_total\{reason="pending"\} (\d+)$/m.exec(metrics.text)?.[1] ?? 0);
      expect(dropped, metrics.text).toBeGreaterThan(0);
      expect(healthz.status).toBe(503);
      expect(healthz.text, healthz.text).toMatch(/^disk full: .* [1-9]\d* dropped/m);
      const report = JSON.parse(status.stdout) as StatusJson;
      expect(report.commits?.kind, status.stdout).toBe('disk-full');
      expect(report.dropped.readings_dropped_pending, status.stdout).toBeGreaterThan(0);

      // b. The service comes back while the disk is still full, just after a failed commit
      // attempt, when the backoff (1 s doubling) has the next one 6 s or more away.
      const backoffUntil = await waitFor(
        async () => {
          const next = (JSON.parse((await runCli(['status', '--json', '--config', cfg])).stdout) as StatusJson).commits?.nextAttemptMs;
          return next !== undefined && next - Date.now() >= 6000 ? next : undefined;
        },
        30_000,
        'a commit attempt with the next one 6 s away',
      );
      const backlog = maxCommittedId();
      const back = performance.now();
      sandbox.setFaults({ forceStatus: 0 });
      await waitFor(() => sandbox.traces.length > 0, 20_000, 'a trace request to reach the service');
      const firstTraceS = (performance.now() - back) / 1000;
      await waitFor(() => linesWith(d, 'disk has room again') > 0, 30_000, 'commits to resume');
      const resumedS = (performance.now() - back) / 1000;
      await waitFor(async () => (await get(port, '/healthz')).status === 200, 30_000, '/healthz ok again');
      const healthyS = (performance.now() - back) / 1000;
      // Purging made room, and the readings went in then, not when the backoff tried next,
      // and not only once the whole backlog was delivered (it drains a chunk every 50 ms).
      const resumedAt = (
        JSON.parse(
          d
            .output()
            .split('\n')
            .find((l) => l.includes('disk has room again'))!,
        ) as { time: number }
      ).time;
      expect(resumedAt, `commits resumed ${((backoffUntil - resumedAt) / 1000).toFixed(1)} s before the backoff's next attempt`).toBeLessThan(backoffUntil);
      await waitFor(() => highestReceived() >= backlog, 30_000, `the backlog (readings 1 to ${backlog}) delivered`);
      const drainedAt = sandbox.traces.find((t) => t.body.traces.some((p) => p.references![0].value === `disk-${backlog}`))!.at;
      expect(resumedAt, `commits resumed ${((drainedAt - resumedAt) / 1000).toFixed(1)} s before the backlog was delivered`).toBeLessThan(drainedAt);
      // The reserve is in place for the next time.
      await waitFor(() => sizeOf(`${buffer()}.reserve`) === reserveBytes, 10_000, 'the reserve in place');
      console.log(
        `service back: first trace request after ${firstTraceS.toFixed(1)} s, commits resumed after ${resumedS.toFixed(1)} s, /healthz ok after ${healthyS.toFixed(1)} s; reserve given up ${linesWith(d, 'the reserve was given up')} time(s)`,
      );
      expect(linesWith(d, 'could not commit readings'), 'one line per state change').toBe(commitErrors);

      // d. Everything committed arrives.
      await deliverTheRest(cfg, d);
      const duplicates = expectAllDelivered();
      // c. The WAL stayed near its limit all along (a transaction may take it a little past).
      wal.stop();
      console.log(`WAL peak ${wal.max()} B (limit ${walLimitBytes} B); ${maxCommittedId()} readings committed, ${duplicates} duplicates`);
      expect(wal.max(), `WAL peaked at ${wal.max()} B, limit ${walLimitBytes} B`).toBeLessThanOrEqual(walLimitBytes * 1.5);
    } finally {
      wal.stop();
    }
  }, 150_000);

  it('SIGTERM with the disk full and the service down: exits within shutdown_timeout_s, and a restart finds every committed reading', async () => {
    const { url } = await sandbox.start();
    // Down, and slow to say so (no answer for 30 s, and the agent waits 60): a request is in
    // flight when the signal comes, and must be abandoned.
    sandbox.setFaults({ forceStatus: 503, latencyMs: 30_000 });
    const cfg = config(url, 60);
    await loadStart(cfg);
    const { d, port } = await startAgent(cfg);
    await fill(d, port);
    await waitFor(() => sandbox.stats.requests > 0, 15_000, 'a request in flight');
    const t0 = performance.now();
    const exit = await d.stop('SIGTERM');
    const exitS = (performance.now() - t0) / 1000;
    console.log(`SIGTERM to exit with the disk full: ${exitS.toFixed(2)} s (shutdown_timeout_s ${SHUTDOWN_TIMEOUT_S}), exit status ${exit.code}`);
    expect(exit.signal).toBeNull();
    expect([0, 1]).toContain(exit.code);
    // The time is the behaviour: shutdown_timeout_s is a promise to systemd. The request is
    // abandoned at 80% of it; 1.5 s beyond it is room for a busy machine.
    expect(exitS, `SIGTERM to exit: ${exitS.toFixed(2)} s`).toBeLessThan(SHUTDOWN_TIMEOUT_S + 1.5);

    // Nothing was delivered, so every reading ever committed is still in the buffer.
    const committed = maxCommittedId();
    expect(committed).toBeGreaterThan(1000);
    expect(rowsInBuffer()).toBe(committed);
    pace('quiet');
    sandbox.setFaults({ latencyMs: 0 });
    const again = startDaemon(['--config', cfg]);
    daemons.push(again);
    await healthPort(again);
    const status = await runCli(['status', '--json', '--config', cfg]);
    expect((JSON.parse(status.stdout) as StatusJson).queue.readings, status.stdout).toBe(committed);
    sandbox.setFaults({ forceStatus: 0 });
    await waitFor(() => new Set(receivedIds()).size >= committed, 30_000, `all ${committed} readings at the service`);
    expect((await again.stop('SIGTERM')).code).toBe(0);
    expectAllDelivered();
  }, 120_000);

  it('SIGTERM with the disk full: the readings dropped from memory are logged with their count, resources and time span', async () => {
    const { url } = await sandbox.start();
    sandbox.setFaults({ forceStatus: 503 });
    const cfg = config(url);
    await loadStart(cfg);
    const started = Date.now();
    const { d, port } = await startAgent(cfg);
    await fill(d, port);
    const exit = await d.stop('SIGTERM');
    const stopped = Date.now();
    expect(exit.signal).toBeNull();
    const lines = d
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: number; msg: string; readings?: number; resources?: Record<string, number>; firstReading?: string; lastReading?: string });
    const lost = lines.find((l) => l.readings !== undefined && l.msg.includes('never committed'));
    expect(lost, d.output().slice(-3000)).toBeDefined();
    console.log(`SIGTERM with the disk full: ${JSON.stringify(lost)}`);
    // Error level: readings are lost, and the operator's alerting must see it.
    expect(lost!.level).toBe(50);
    // The queue was at its cap (fill waits for it) and stays there while nothing commits.
    expect(lost!.readings).toBe(MAX_PENDING);
    expect(lost!.resources).toEqual({ T1: MAX_PENDING });
    const first = Date.parse(lost!.firstReading!);
    const last = Date.parse(lost!.lastReading!);
    expect(first).toBeGreaterThanOrEqual(started);
    expect(last).toBeGreaterThan(first);
    expect(last).toBeLessThanOrEqual(stopped);
    expect(lines.indexOf(lost!)).toBeLessThan(lines.findIndex((l) => l.msg === 'agent stopped'));
  }, 120_000);

  it('a disk filled by another file: the reserve lets delivery acknowledge and purge; removing the file lets everything resume', async () => {
    const { url } = await sandbox.start();
    const cfg = config(url);
    const { reserveBytes, walLimitBytes } = diskPlan(buffer(), 2048);
    const wal = watchWal();
    try {
      await loadStart(cfg);
      pace('slow');
      const { d, port } = await startAgent(cfg);
      expect(sizeOf(`${buffer()}.reserve`)).toBe(reserveBytes);
      await waitFor(() => sandbox.traces.length >= 2, 20_000, 'deliveries before the disk fills');
      // Someone else fills the disk to the last byte.
      const filler = join(mnt, 'filler');
      spawnSync('dd', ['if=/dev/zero', `of=${filler}`, 'bs=64k'], { stdio: 'ignore' });
      expect(statfsSync(mnt).bavail, 'the tmpfs is full').toBe(0);
      const atFill = maxCommittedId();
      // Delivery goes on: what was committed before reaches the service and leaves the buffer.
      await waitFor(() => linesWith(d, 'the reserve was given up') > 0, 30_000, 'the reserve to be given up for delivery');
      await waitFor(() => highestReceived() >= atFill, 30_000, `reading ${atFill} at the service with the disk full`);
      await waitFor(
        async () => ((await get(port, '/metrics')).text.match(/^telematics_queue_readings (\d+)$/m)?.[1] === '0' && rowsInBuffer() === 0 ? true : undefined),
        30_000,
        'the delivered readings purged',
      );
      const full = await get(port, '/healthz');
      console.log(`filled by another file: ${linesWith(d, 'could not commit readings')} "could not commit" line(s); /healthz ${full.status}`);

      rmSync(filler);
      const freed = performance.now();
      await waitFor(() => sizeOf(`${buffer()}.reserve`) === reserveBytes, 30_000, 'the reserve written again');
      await waitFor(async () => (await get(port, '/healthz')).status === 200, 30_000, '/healthz ok');
      const before = maxCommittedId();
      await waitFor(() => maxCommittedId() > before + 4, 30_000, 'new readings committed');
      await waitFor(() => highestReceived() > before, 30_000, 'new readings delivered');
      console.log(`filler removed: reserve back and healthy after ${((performance.now() - freed) / 1000).toFixed(1)} s`);
      if (linesWith(d, 'could not commit readings') > 0) expect(linesWith(d, 'disk has room again')).toBeGreaterThan(0);

      await deliverTheRest(cfg, d);
      expectAllDelivered();
      wal.stop();
      expect(wal.max(), `WAL peaked at ${wal.max()} B, limit ${walLimitBytes} B`).toBeLessThanOrEqual(walLimitBytes * 1.5);
    } finally {
      wal.stop();
    }
  }, 150_000);
});
