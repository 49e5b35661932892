/**
 * The universal adapter: a command that prints one JSON reading per line on stdout (the
 * contract in the brief: camelCase like the API, `resourceId` required, `time` optional).
 *
 * Each line is validated with zod; a bad one is counted and reported with its line number,
 * and the next line is read as usual. A line longer than `max_line_bytes` is skipped as it
 * arrives, never held whole. The command runs in its own process group with its stderr in
 * the log (command.ts); when it exits it is started again with capped backoff.
 */
import { basename } from 'node:path';
import * as z from 'zod';
import type { ExecSourceConfig } from '../config/schema.js';
import type { Reading } from '../reading.js';
import { check, problemLine } from '../validation.js';
import { CommandLink, StderrLog } from './command.js';
import { preview, sourceHealth } from './common.js';
import { Reconnector, type Opened } from './reconnector.js';
import type { Source, SourceContext, SourceHealth } from './types.js';

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
  const r = check(execLineSchema, json);
  if (!r.success) return { ok: false, reason: r.problems.slice(0, 3).map(problemLine).join('; ') };
  const l = r.data;
  const t = l.temperature === undefined ? undefined : l.temperatureUnit === 'F' ? Math.round(((l.temperature - 32) / 1.8) * 1000) / 1000 : l.temperature;
  return {
    ok: true,
    reading: {
      resourceId: l.resourceId,
      timeMs: l.time === undefined ? nowMs : Date.parse(l.time),
      // A line without its own time is stamped by this computer's clock (see Reading.clock).
      clock: l.time === undefined ? 'system' : undefined,
      lat: l.latitude,
      lon: l.longitude,
      speed: l.speed,
      heading: l.heading,
      odometer: l.odometer,
      temperatureC: t,
    },
  };
}

/** A command that failed this many times within this window is unhealthy (a crash loop). */
export const CRASH_LOOP = { failures: 3, windowMs: 60_000 };

export class ExecSource implements Source {
  readonly type = 'exec';
  readonly name: string;
  private readonly link: Reconnector<Opened<CommandLink>>;
  private readonly stderr: StderrLog;
  /** The last command started: its PID, when, and the readings counted by then. */
  private run: { pid: number | undefined; startedMs: number; readingsAtStart: number } = { pid: undefined, startedMs: 0, readingsAtStart: 0 };
  private lastExit: string | undefined;
  private readonly counters = { starts: 0, exits: 0 };
  /** When (monotonic ms) the command last failed (exit code not 0, a signal, not started), newest last. */
  private failedAt: number[] = [];

  constructor(
    private readonly cfg: ExecSourceConfig,
    private readonly ctx: SourceContext,
  ) {
    const program = typeof cfg.command === 'string' ? cfg.command.split(/\s+/)[0] : cfg.command[0];
    this.name = cfg.name ?? `exec:${basename(program)}`;
    this.stderr = new StderrLog(ctx.log);
    this.link = new Reconnector<Opened<CommandLink>>({
      ctx,
      open: () => {
        this.counters.starts += 1;
        return CommandLink.start({ command: cfg.command, cwd: cfg.cwd, env: cfg.env, stopTimeoutS: cfg.stop_timeout_s, stderr: this.stderr });
      },
      initialMs: cfg.restart_initial_s * 1000,
      maxMs: cfg.restart_max_s * 1000,
      noDataTimeoutS: cfg.no_data_timeout_s,
      maxLineBytes: cfg.max_line_bytes,
      data: 'heard',
      lastLine: 'decode',
      line: (text, n) => this.onLine(text, n),
      opened: ({ link }) => {
        this.run = { pid: link.child.pid, startedMs: performance.now(), readingsAtStart: ctx.counts.readings };
        ctx.log.debug({ pid: link.child.pid, command: cfg.command }, 'command started');
      },
      // A command that prints nothing is left running (it may be waiting for its device).
      silent: ({ link }) => ctx.log.warn({ pid: link.child.pid, timeoutS: cfg.no_data_timeout_s }, 'no output from the command'),
      closed: ({ link }) => {
        this.lastExit = link.exit ? (link.exit.signal ? `killed by ${link.exit.signal}` : `exited with code ${link.exit.code}`) : link.error ? `could not start: ${link.error}` : this.lastExit;
        if (!link.exit || link.exit.code !== 0) this.noteFailure();
        // A run that delivered, or lasted, earns a fresh start; a command failing at once backs off.
        if (ctx.counts.readings > this.run.readingsAtStart || performance.now() - this.run.startedMs >= cfg.restart_max_s * 1000) this.link.backoff.reset();
        return 'reopen';
      },
      failed: () => {
        this.lastExit = `could not start: ${this.link.lastError}`;
        this.noteFailure();
      },
      retrying: (wait) => this.restarting(wait),
    });
  }

  /** PID of the running (or last) command (tests, status). */
  get pid(): number | undefined {
    return this.run.pid;
  }

  async start(): Promise<void> {
    await this.link.start();
  }

  async stop(): Promise<void> {
    await this.link.stop();
  }

  health(): SourceHealth & { counters: Record<string, number> } {
    const link = this.link;
    const running = !!link.current;
    let detail: string;
    if (!link.active) detail = 'stopped';
    else if (running && link.silent) detail = `pid ${this.pid}: no output for ${this.cfg.no_data_timeout_s} s`;
    else if (running) detail = `running, pid ${this.pid}`;
    else detail = `not running: ${this.lastExit ?? 'starting'}; restart pending`;
    const { starts, exits } = this.counters;
    if (exits) detail += `; ${exits} exits`;
    // A command that fails again and again is unhealthy even in the second it runs between.
    const since = performance.now() - CRASH_LOOP.windowMs;
    this.failedAt = this.failedAt.filter((t) => t >= since);
    const looping = this.failedAt.length >= CRASH_LOOP.failures;
    if (looping) detail += `; failing: ${this.failedAt.length} failures in the last ${CRASH_LOOP.windowMs / 1000} s (last: ${this.lastExit})`;
    // Every input this source refused is a bad line or an overlong one (admission counted them).
    const { overlongLines } = link.counters;
    const badLines = this.ctx.counts.rejected - overlongLines;
    if (badLines || overlongLines) detail += `; ${badLines} bad lines, ${overlongLines} too long`;
    const healthy = link.active && running && !link.silent && !looping;
    return sourceHealth(this.ctx, { healthy, detail }, { starts, exits, badLines, overlongLines, stderrLines: this.stderr.lines });
  }

  private noteFailure(): void {
    this.failedAt.push(performance.now());
    if (this.failedAt.length > 100) this.failedAt.shift();
  }

  /** The command ended (or could not start): it is started again after `wait`. */
  private restarting(wait: number): void {
    this.counters.exits += 1;
    const n = this.link.failures;
    const fields = { command: this.cfg.command, reason: this.lastExit, restartInMs: wait, failuresInARow: n };
    if (n <= 3 || n % 10 === 0) this.ctx.log.warn(fields, 'command ended; restarting');
    else this.ctx.log.debug(fields, 'command ended; restarting');
  }

  private onLine(text: string, n: number): void {
    if (text.trim() === '') return;
    const r = parseExecLine(text, Date.now());
    if (!r.ok) this.ctx.reject(`line ${n}: ${r.reason}`);
    else this.ctx.emit(r.reading, `line ${n}`);
  }
}
