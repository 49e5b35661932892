/**
 * Shared pieces of the source tests: a context that records what a source emits, rejects
 * and logs; free ports; a pseudo-terminal playing an NMEA log; a real gpsd on it; and
 * stopping every process we start by its PID.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { delimiter, join } from 'node:path';
import { Ingest } from '../../src/admission/ingest.js';
import type { Reading } from '../../src/reading.js';
import type { SourceContext } from '../../src/sources/types.js';
import { jsonLogger, ROOT, waitFor } from '../helpers.js';

export const FIXTURES = join(ROOT, 'test', 'fixtures');
export const NMEA_LOG = join(FIXTURES, 'nmea', 'i65-drive.nmea');

export interface Recorder {
  ctx: SourceContext;
  readings: Reading[];
  rejects: string[];
  logs: Array<{ level: number; msg: string } & Record<string, unknown>>;
}

/**
 * A SourceContext that keeps everything for assertions (logs as parsed pino lines, debug and
 * up). Behind it is the agent's own admission, as in the daemon: readings it refuses are
 * rejects with their reason, and the source's counts are admission's. Reading times are not
 * judged: the fixtures are recorded drives.
 */
export function recorder(): Recorder {
  const readings: Reading[] = [];
  const rejects: string[] = [];
  const logs: Recorder['logs'] = [];
  const log = jsonLogger(logs);
  const ingest = new Ingest({ roomForReadings: () => true, insertReadings: (batch) => batch.length, bump: () => undefined }, { batchSize: 1, flushIntervalMs: 60_000, keepWithoutLoad: true }, log);
  const intake = ingest.intake('test', log);
  const ctx: SourceContext = {
    log,
    counts: intake.counts,
    emit: (r, where) => {
      const problem = ingest.admit(r, intake, where);
      if (problem) rejects.push(problem);
      else readings.push(r);
    },
    reject: (reason) => {
      intake.reject(reason);
      rejects.push(reason);
    },
  };
  return { ctx, readings, rejects, logs };
}

/**
 * A TCP port nobody listens on right now (another gpsd may hold 2947), below the kernel's
 * ephemeral range: a port from that range can be taken at any moment as the local port of an
 * outgoing connection (the tests make thousands), and a server started on it then fails to bind.
 */
export async function freePort(): Promise<number> {
  const low = ephemeralLow();
  for (let tries = 0; ; tries++) {
    const port = 10_000 + Math.floor(Math.random() * (low - 10_000));
    const srv = createServer();
    const ok = await new Promise<boolean>((r) => {
      srv.once('error', () => r(false));
      srv.listen(port, '127.0.0.1', () => r(true));
    });
    if (ok) {
      await new Promise((r) => srv.close(r));
      return port;
    }
    if (tries > 100) throw new Error(`no free port between 10000 and ${low}`);
  }
}

/** The first port of the kernel's ephemeral range (32768 where it cannot be read). */
export function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 11_000 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

/** Stop a process we started: SIGTERM by PID, SIGKILL after a second, wait for the exit. */
export async function stopProcess(p: ChildProcess | undefined): Promise<void> {
  if (!p || p.pid === undefined || p.exitCode !== null || p.signalCode !== null) return;
  const exited = new Promise<void>((r) => p.once('exit', () => r()));
  process.kill(p.pid, 'SIGTERM');
  const t = setTimeout(() => {
    if (p.exitCode === null && p.signalCode === null) process.kill(p.pid!, 'SIGKILL');
  }, 1000);
  await exited;
  clearTimeout(t);
}

/** True while a process with this PID exists (and is not a zombie we could reap). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    // A zombie (exited, parent not yet reaped) still answers kill 0.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
}

export interface Pty {
  path: string;
  proc: ChildProcess;
  /** Start playing the log (the helper waits for this, so a test can connect first). */
  go(): void;
}

/** A pseudo-terminal that plays an NMEA log line by line, like a receiver on a serial port. */
export async function startPty(log: string, secondsPerLine: number, opts: { loop?: boolean } = {}): Promise<Pty> {
  const proc = spawn('python3', [join(FIXTURES, 'pty-feed.py'), log, String(secondsPerLine), opts.loop ? 'loop' : 'once'], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  let out = '';
  proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  const path = await waitFor(() => (out.includes('\n') ? out.split('\n')[0].trim() : undefined), 5000, 'the pty helper to print its device');
  return { path, proc, go: () => proc.stdin!.write('go\n') };
}

/**
 * The gpsd binary the gpsd source tests run against: on PATH, or in an sbin directory a
 * user's PATH often lacks. Without it those tests fail at once saying so, instead of
 * waiting out their timeouts after an uncaught spawn ENOENT.
 */
export function requireGpsd(dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin', '/sbin']): string {
  for (const dir of dirs) {
    if (!dir) continue;
    const file = join(dir, 'gpsd');
    try {
      accessSync(file, fsConstants.X_OK);
      return file;
    } catch {
      // Not here.
    }
  }
  throw new Error('gpsd not found: install gpsd (apt-get install gpsd); the gpsd source tests run against a real one');
}

/** A real gpsd in the foreground on `port`, reading `device`, polling it without a client (-n). */
export function startGpsd(device: string, port: number): { proc: ChildProcess; output: () => string } {
  const proc = spawn(requireGpsd(), ['-N', '-n', '-b', '-S', String(port), device], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  // A gpsd that cannot be started shows in output(), not as an uncaught error.
  proc.on('error', (err) => (out += `cannot start gpsd: ${err.message}\n`));
  return { proc, output: () => out };
}

/** Timers, sockets, pipes and child processes the event loop holds (for "stop leaves nothing"). */
export function activeResources(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const r of process.getActiveResourcesInfo()) counts[r] = (counts[r] ?? 0) + 1;
  return counts;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
