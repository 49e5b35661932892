/**
 * Rows 7a to 7c, a full disk: `telematics-agent run` with its buffer on a small tmpfs (which
 * needs root to mount), CPU and memory while the disk is full, resuming, SIGTERM to exit.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Store } from '../src/buffer/store.js';
import { configSchema } from '../src/config/schema.js';
import type { Sandbox } from '../src/sandbox/server.js';
import { BENCH_KEY, BENCH_SCAC, type Memory, memoryOf, schedSecondsOf, sleep } from './common.js';
import { AGENT_NODE_OPTIONS, MB, QUICK } from './options.js';
import { BIN, children, cleanEnv, waitExit } from './processes.js';
import { split } from './memory.js';
import { round, type Row } from './report.js';

/** Size of the tmpfs the full-disk run puts the buffer on. */
export const FULL_DISK_BYTES = 4 * MB;
/** The tmpfs mounted by the full-disk run, until it is unmounted (a signal must not leave it behind). */
let mounted: string | undefined;

export function unmount(): void {
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
  memory: Memory;
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
export async function benchFullDisk(sandbox: Sandbox, dir: string): Promise<FullDiskRun | { skipped: string }> {
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
      if (out.length > 1_000_000)
        out = out
          .split('\n')
          .filter((l) => l.includes('could not commit') || l.includes('room again'))
          .join('\n');
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
      memory: mem,
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
export function fullDiskRows(r: FullDiskRun | { skipped: string }): Row[] {
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
    row('7a', `full disk: CPU share (schedstat, ${round(r.windowS, 0)} s, source at 4/s) and RSS of \`run\` while the disk is full`, `${round((r.cpuS / r.windowS) * 100, 2)}%, ${split(r.memory)}`),
    row('7b', 'full disk: service back to first 2xx / to commits resuming (the disk full until delivery purges)', `${round(r.first2xxS, 2)} s / ${round(r.resumeS, 2)} s`),
    row(
      '7c',
      `full disk: SIGTERM to exit (service down; exit status ${r.exitCode})`,
      `${round(r.sigtermS, 2)} s`,
      `< ${r.shutdownTimeoutS} s (shutdown_timeout_s)`,
      r.sigtermS < r.shutdownTimeoutS && (r.exitCode === 0 || r.exitCode === 1),
    ),
  ];
}
