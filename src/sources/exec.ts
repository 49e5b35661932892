/**
 * The universal adapter: a command that prints one JSON reading per line on stdout (the
 * contract in the brief: camelCase like the API, `resourceId` required, `time` optional).
 *
 * Each line is validated with zod; a bad one is counted and reported with its line number,
 * and the next line is read as usual. A line longer than `max_line_bytes` is skipped as it
 * arrives, never held whole. The command's stderr goes to the log (rate-limited: a crashing
 * adapter must not fill the journal). When the command exits it is started again with
 * capped backoff. It runs in its own process group, so `stop()` (and an exit of the main
 * process) takes down whatever it started too: a shell pipeline, a helper it forked.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { basename } from 'node:path';
import * as z from 'zod';
import { KEY_ENV } from '../config/load.js';
import type { ExecSourceConfig } from '../config/schema.js';
import { Backoff } from '../backoff.js';
import { LineSplitter, preview, sourceHealth, timer } from './common.js';
import type { Reading, Source, SourceContext, SourceHealth } from './types.js';

/** One line of the exec contract. Unknown keys are refused: a misspelt `lat` must not vanish silently. */
export const execLineSchema = z.strictObject({
  resourceId: z.string().min(1).max(64),
  time: z.iso.datetime({ offset: true, error: 'expected an ISO 8601 time with Z or an offset, e.g. 2026-01-15T14:05:03Z' }).optional(),
  latitude: z.number().min(-90).max(90).optional(),
  longitude: z.number().min(-180).max(180).optional(),
  speed: z.number().min(0).max(150).optional(),
  heading: z.number().min(0).max(360).optional(),
  odometer: z.number().min(0).optional(),
  temperature: z.number().optional(),
  temperatureUnit: z.enum(['C', 'F']).default('C'),
});

export type ExecLineResult = { ok: true; reading: Reading } | { ok: false; reason: string };

/** Validate one line of output; `nowMs` stamps a line without `time`. */
export function parseExecLine(text: string, nowMs: number): ExecLineResult {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { ok: false, reason: `not JSON: ${preview(text)}` };
  }
  const r = execLineSchema.safeParse(json);
  if (!r.success) {
    const problems = r.error.issues.slice(0, 3).map((i) => `${i.path.length ? `${i.path.join('.')}: ` : ''}${i.message}`);
    return { ok: false, reason: problems.join('; ') };
  }
  const l = r.data;
  const t = l.temperature === undefined ? undefined : l.temperatureUnit === 'F' ? Math.round(((l.temperature - 32) / 1.8) * 1000) / 1000 : l.temperature;
  return {
    ok: true,
    reading: {
      resourceId: l.resourceId,
      timeMs: l.time === undefined ? nowMs : Date.parse(l.time),
      lat: l.latitude,
      lon: l.longitude,
      speed: l.speed,
      heading: l.heading,
      odometer: l.odometer,
      temperatureC: t,
    },
  };
}

/** At most this many stderr lines are logged per minute; the rest are counted. */
const STDERR_LINES_PER_MIN = 30;
const STDERR_LINE_BYTES = 4096;

interface Run {
  child: ChildProcess;
  startedMs: number;
  readingsAtStart: number;
  done: boolean;
  exit?: { code: number | null; signal: NodeJS.Signals | null };
  killTimer?: NodeJS.Timeout;
  closed: Promise<void>;
  splitter: LineSplitter;
}

export class ExecSource implements Source {
  readonly type = 'exec';
  readonly name: string;
  private readonly backoff: Backoff;
  private run: Run | undefined;
  private running = false;
  private restartTimer: NodeJS.Timeout | undefined;
  private watchdog: NodeJS.Timeout | undefined;
  private silent = false;
  private lastExit: string | undefined;
  private stderrWindow = { startMs: 0, lines: 0, suppressed: 0 };
  private readonly counters = { starts: 0, exits: 0, overlongLines: 0, stderrLines: 0 };

  constructor(
    private readonly cfg: ExecSourceConfig,
    private readonly ctx: SourceContext,
  ) {
    const program = typeof cfg.command === 'string' ? cfg.command.split(/\s+/)[0] : cfg.command[0];
    this.name = cfg.name ?? `exec:${basename(program)}`;
    this.backoff = new Backoff({ initialMs: cfg.restart_initial_s * 1000, maxMs: cfg.restart_max_s * 1000 });
  }

  /** PID of the running command (tests, status). */
  get pid(): number | undefined {
    return this.run?.child.pid;
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.spawnCommand();
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.restartTimer);
    clearTimeout(this.watchdog);
    this.restartTimer = undefined;
    this.watchdog = undefined;
    const run = this.run;
    if (!run || run.done) return;
    const pid = run.child.pid;
    killGroup(pid, 'SIGTERM');
    const killer = setTimeout(() => killGroup(pid, 'SIGKILL'), this.cfg.stop_timeout_s * 1000);
    await run.closed;
    clearTimeout(killer);
    // The leader is gone; anything left in its group (a child that ignores SIGTERM) goes too.
    killGroup(pid, 'SIGKILL');
  }

  health(): SourceHealth & { counters: Record<string, number> } {
    let detail: string;
    const running = this.run && !this.run.done;
    if (!this.running) detail = 'stopped';
    else if (running && this.silent) detail = `pid ${this.pid}: no output for ${this.cfg.no_data_timeout_s} s`;
    else if (running) detail = `running, pid ${this.pid}`;
    else detail = `not running: ${this.lastExit ?? 'starting'}; restart pending`;
    if (this.counters.exits) detail += `; ${this.counters.exits} exits`;
    // Every input this source refused is a bad line or an overlong one (admission counted them).
    const { starts, exits, overlongLines, stderrLines } = this.counters;
    const badLines = this.ctx.counts.rejected - overlongLines;
    if (badLines || overlongLines) detail += `; ${badLines} bad lines, ${overlongLines} too long`;
    return sourceHealth(this.ctx, { healthy: this.running && !!running && !this.silent, detail }, { starts, exits, badLines, overlongLines, stderrLines });
  }

  private spawnCommand(): void {
    const [file, args] = typeof this.cfg.command === 'string' ? ['/bin/sh', ['-c', this.cfg.command]] : [this.cfg.command[0], this.cfg.command.slice(1)];
    const child = spawn(file, args, {
      cwd: this.cfg.cwd,
      env: commandEnv(this.cfg.env),
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group: stop() signals the group, pipelines and helpers included.
      detached: true,
    });
    this.counters.starts += 1;
    let resolveClosed!: () => void;
    const closed = new Promise<void>((r) => (resolveClosed = r));
    const run: Run = {
      child,
      startedMs: Date.now(),
      readingsAtStart: this.ctx.counts.readings,
      done: false,
      closed,
      splitter: new LineSplitter(this.cfg.max_line_bytes, {
        line: (text, n) => this.onLine(text, n),
        overlong: (n, bytes) => {
          this.counters.overlongLines += 1;
          this.ctx.reject(`line ${n}: ${bytes} bytes, longer than max_line_bytes (${this.cfg.max_line_bytes}); skipped`);
        },
      }),
    };
    this.run = run;
    this.silent = false;
    this.armWatchdog(run);
    if (child.pid !== undefined) this.ctx.log.debug({ pid: child.pid, command: this.cfg.command }, 'command started');

    const stderr = new LineSplitter(STDERR_LINE_BYTES, {
      line: (text) => this.onStderr(text),
      overlong: (_n, bytes) => this.onStderr(`[a stderr line of ${bytes} bytes, not logged]`),
    });
    child.stdout!.on('data', (chunk: Buffer) => {
      if (this.run !== run) return;
      this.silent = false;
      this.armWatchdog(run);
      run.splitter.push(chunk);
    });
    child.stderr!.on('data', (chunk: Buffer) => stderr.push(chunk));
    child.on('error', (err) => {
      // Spawn failures (ENOENT, EACCES): no process, no 'exit'.
      this.lastExit = `could not start: ${(err as NodeJS.ErrnoException).code ?? err.message}`;
      if (child.pid === undefined) this.finish(run, resolveClosed);
    });
    child.on('exit', (code, signal) => {
      run.exit = { code, signal };
      // Leftovers of the group still hold stdout open: ask them to go, then insist.
      killGroup(child.pid, 'SIGTERM');
      run.killTimer = timer(() => killGroup(child.pid, 'SIGKILL'), this.cfg.stop_timeout_s * 1000);
    });
    child.on('close', () => {
      stderr.end();
      this.finish(run, resolveClosed);
    });
  }

  private finish(run: Run, resolveClosed: () => void): void {
    if (run.done) return;
    run.done = true;
    clearTimeout(run.killTimer);
    run.splitter.end();
    resolveClosed();
    if (this.run === run) clearTimeout(this.watchdog);
    if (!this.running) return;
    this.counters.exits += 1;
    if (run.exit) this.lastExit = run.exit.signal ? `killed by ${run.exit.signal}` : `exited with code ${run.exit.code}`;
    // A run that delivered, or lasted, earns a fresh start; a command failing at once backs off.
    if (this.ctx.counts.readings > run.readingsAtStart || Date.now() - run.startedMs >= this.cfg.restart_max_s * 1000) this.backoff.reset();
    const wait = this.backoff.next();
    const n = this.backoff.failures;
    const fields = { command: this.cfg.command, reason: this.lastExit, restartInMs: wait, failuresInARow: n };
    if (n <= 3 || n % 10 === 0) this.ctx.log.warn(fields, 'command ended; restarting');
    else this.ctx.log.debug(fields, 'command ended; restarting');
    this.restartTimer = timer(() => {
      this.restartTimer = undefined;
      if (this.running) this.spawnCommand();
    }, wait);
  }

  private onLine(text: string, n: number): void {
    if (text.trim() === '') return;
    const r = parseExecLine(text, Date.now());
    if (!r.ok) this.ctx.reject(`line ${n}: ${r.reason}`);
    else this.ctx.emit(r.reading, `line ${n}`);
  }

  private onStderr(text: string): void {
    this.counters.stderrLines += 1;
    const now = Date.now();
    const w = this.stderrWindow;
    if (now - w.startMs >= 60_000) {
      if (w.suppressed) this.ctx.log.warn({ suppressed: w.suppressed }, 'stderr lines of the command not logged (more than 30 a minute)');
      this.stderrWindow = { startMs: now, lines: 0, suppressed: 0 };
    }
    if (this.stderrWindow.lines >= STDERR_LINES_PER_MIN) {
      this.stderrWindow.suppressed += 1;
      return;
    }
    this.stderrWindow.lines += 1;
    this.ctx.log.warn({ stderr: text.length > 1000 ? `${text.slice(0, 1000)}...` : text }, 'command stderr');
  }

  private armWatchdog(run: Run): void {
    clearTimeout(this.watchdog);
    if (this.cfg.no_data_timeout_s <= 0) return;
    this.watchdog = timer(() => {
      if (this.run !== run || run.done) return;
      if (!this.silent) this.ctx.log.warn({ pid: run.child.pid, timeoutS: this.cfg.no_data_timeout_s }, 'no output from the command');
      this.silent = true;
    }, this.cfg.no_data_timeout_s * 1000);
  }
}

/**
 * The agent's environment without what is not the command's business: the subscription key
 * and the systemd credentials directory it lies in (an adapter that logs its environment,
 * or reads that directory, must not get the key), systemd's notify and watchdog variables
 * (a child that speaks sd_notify would speak for the agent) and the agent's NODE_OPTIONS.
 * `env` from the config comes last.
 */
export function commandEnv(extra: Record<string, string>, base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env = { ...base };
  delete env[KEY_ENV];
  delete env.CREDENTIALS_DIRECTORY;
  delete env.NOTIFY_SOCKET;
  delete env.WATCHDOG_USEC;
  delete env.WATCHDOG_PID;
  // The agent's own heap limits (set by its unit) are not the adapter's: a Node.js adapter
  // gets Node's defaults unless the source's env says otherwise.
  delete env.NODE_OPTIONS;
  return { ...env, ...extra };
}

/** Signal a whole process group; a group that is already gone is not an error. */
function killGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: nothing left to signal.
  }
}
