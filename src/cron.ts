/**
 * The trace schedule's cron, on node-cron (v4), in the machine's local time, and what the
 * agent wraps around it. Read in node-cron 4.6.0's source (dist/_shared.js: `Runner`,
 * `planBeat`) and measured (test/cron.test.ts):
 *
 * - node-cron arms one timer for the next run it computed (at most 24 h ahead) and, when it
 *   fires, walks from that planned run to the wall clock's now: every run more than 1 s late
 *   is reported as `execution:missed` (with a console warning each unless someone listens) and
 *   does not run. So a clock stepped forward (GPS or NTP setting it after boot, a resume from
 *   suspend) gives no push for the hours it skipped, and 120 warnings for two hours of a
 *   per-minute schedule; a stall of the event loop at a run's time skips the run. The walk
 *   costs about 0.1 ms a skipped run (Intl calls): 31 days ahead on a per-second schedule
 *   stall the event loop for minutes (systemd's watchdog kills the agent after 30 s).
 * - Node's timers run on the monotonic clock, so a clock stepped back leaves the timer aimed at
 *   the old wall time: no push until the wall clock gets there again (hours), while
 *   `getNextRun()` already answers from the new clock.
 * - Wrapped: a guard compares the wall clock with the monotonic clock at least once a minute
 *   and just before each of node-cron's runs. After a step either way it restarts the task
 *   from the new clock (node-cron then walks nothing) and owes one push if the step skipped a
 *   run. A step in the last 2 ms before a run reaches node-cron first; the runs it then
 *   reports missed, and those of a stalled event loop, are one push.
 * - Local time is Intl's (ICU's rules). The wrapper names the machine's zone as the agent
 *   reads it (`systemZone()`: TZ, /etc/localtime, /etc/timezone), so a TZ given as a file path
 *   (which ICU reads as a fixed offset without DST) still follows the zone. A TZ that is a
 *   POSIX rule (`CST6CDT,M3.2.0,M11.1.0`) is no zone name to Intl: node-cron then uses Intl's
 *   default, UTC, and `zoneProblem` says so for the log. ICU's rules may be older than the
 *   system's zoneinfo (Alberta on UTC-6 all year from November 2026 is in tzdata 2026f, not in
 *   Node 20's 2025c): an expression with fixed hours follows ICU's hour there.
 * - Not wrapped: a time a spring-forward change skips does not run that day; in the hour a
 *   fall-back change repeats, node-cron runs only the first pass (a `*\/15` schedule has one
 *   75-minute gap a year). Both day fields restricted means both must match (not Vixie's
 *   either-one rule).
 *
 * The expression grammar is node-cron's; the config schema refuses what it would refuse, with
 * a message naming the field (`cronProblem`).
 */
import { createTask, type ScheduledTask, validateDetailed } from 'node-cron';
import { ClockSteps } from './clock.js';
import { AgentError } from './errors.js';
import { EXIT } from './exit.js';
import { systemZone } from './geo/timezone.js';

/**
 * A cron expression that cannot be parsed. The schema refuses one in the config first
 * (cronProblem), so reaching a command it would be a configuration problem: exit 78.
 */
export class CronError extends AgentError {
  readonly code = 'ECRON';
  readonly exitCode = EXIT.CONFIG;
}

/** node-cron's field keys: our name for each and its numeric range. */
const FIELDS: Record<string, { name: string; min: number; max: number }> = {
  second: { name: 'second', min: 0, max: 59 },
  minute: { name: 'minute', min: 0, max: 59 },
  hour: { name: 'hour', min: 0, max: 23 },
  dayOfMonth: { name: 'day of month', min: 1, max: 31 },
  month: { name: 'month', min: 1, max: 12 },
  dayOfWeek: { name: 'day of week', min: 0, max: 7 },
};

/** A list item made of numbers only: `5`, `*`, `1-5`, `*\/15`, `1-30/2`. */
const NUMERIC_ITEM = /^(?:\*|(\d+)(?:-(\d+))?)(?:\/(\d+))?$/;

/**
 * Why node-cron would refuse `text`, naming the field, or undefined when it is a schedule that
 * runs. node-cron's own messages name the field but not the range (`75 is a invalid
 * expression for minute`); these say what is wrong.
 */
export function cronProblem(text: string): string | undefined {
  const result = validateDetailed(text);
  if (result.valid) return neverRuns(text);
  const { field: key, value = '', message } = result.errors[0];
  const field = FIELDS[key];
  if (!field) {
    const count = text.trim() === '' ? 0 : text.trim().split(/\s+/).length;
    if (count !== 5 && count !== 6) return `5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, not ${count}`;
    return `only digits, names, spaces and * / , - L W # ? may appear, in ${JSON.stringify(text)}`;
  }
  if (/impossible/.test(message)) return `${field.name}: no selected month has day ${value}, so it would never run`;
  for (const item of value.split(',')) {
    const m = NUMERIC_ITEM.exec(item);
    if (!m) continue;
    const out = [m[1], m[2]].find((n) => n !== undefined && (Number(n) < field.min || Number(n) > field.max));
    if (out !== undefined) return `${field.name}: ${Number(out)} is out of range ${field.min}-${field.max} in ${JSON.stringify(value)}`;
    if (m[3] !== undefined && Number(m[3]) < 1) return `${field.name}: a step must be at least 1 in ${JSON.stringify(value)}`;
  }
  return `${field.name}: ${JSON.stringify(value)} is not a value, range, step or name (${field.min}-${field.max})`;
}

/** A valid expression no date satisfies (`0 0 1 * 1#5`): node-cron would throw at start. */
function neverRuns(text: string): string | undefined {
  const task = createTask(text, () => undefined, { timezone: 'UTC' });
  try {
    task.getNextRuns(1);
    return undefined;
  } catch {
    return 'no date in the next 100 years matches it, so it would never run';
  } finally {
    task.destroy();
  }
}

/** The guard looks at least this often, and this long before each of node-cron's runs. */
const GUARD_EVERY_MS = 60_000;
const GUARD_LEAD_MS = 2;

/**
 * Calls `onTick` at every run of a cron expression in local time (node-cron), once for the
 * runs a clock step or a stall skipped, and follows a stepped clock within a minute.
 */
export class CronSchedule {
  private task: ScheduledTask | undefined;
  private guard: NodeJS.Timeout | undefined;
  private catchUp: NodeJS.Immediate | undefined;
  private unlisten: (() => void) | undefined;
  /** The run node-cron's timer is aimed at, as known before a step. */
  private expected: number | undefined;
  private zoneUsed: string | undefined;

  /**
   * Throws a CronError for an expression node-cron refuses. `zone` undefined: Intl's default.
   * `steps`: the daemon's detector of clock steps (clock.ts), else one of its own.
   */
  constructor(
    private readonly expression: string,
    private readonly onTick: () => void,
    private readonly zone: string | undefined = systemZone(),
    private readonly steps: ClockSteps = new ClockSteps(),
  ) {
    const problem = cronProblem(expression);
    if (problem) throw new CronError(problem);
  }

  start(): void {
    if (this.task) return;
    try {
      this.task = this.open(this.zone);
      this.zoneUsed = this.zone;
    } catch (err) {
      // Intl knows no such zone (a POSIX rule in TZ): node-cron's default, see zoneProblem.
      if (!(err instanceof RangeError) || this.zone === undefined) throw err;
      this.task = this.open(undefined);
      this.zoneUsed = undefined;
    }
    this.steps.look(); // a step before now is no step for this task, planned from the clock now
    this.unlisten = this.steps.onStep((step) => this.stepped(step));
    this.expected = this.nextFromNow();
    this.arm();
  }

  stop(): void {
    this.unlisten?.();
    this.unlisten = undefined;
    clearTimeout(this.guard);
    clearImmediate(this.catchUp);
    this.guard = this.catchUp = undefined;
    // destroy, not stop: node-cron keeps every task in a registry until it is destroyed.
    this.task?.destroy();
    this.task = this.expected = undefined;
  }

  /** The next run while started. */
  get nextRun(): number | undefined {
    return this.expected;
  }

  /** The next `count` runs (ms) from now, while started. */
  nextRuns(count: number): number[] {
    return this.task?.getNextRuns(count).map((d) => d.getTime()) ?? [];
  }

  /** Why the schedule does not follow `zone` (a TZ Intl cannot read), while started. */
  get zoneProblem(): string | undefined {
    if (!this.task || this.zoneUsed === this.zone) return undefined;
    return `the machine's zone ${JSON.stringify(this.zone)} is no zone name Node's Intl knows: the trace schedule runs in Intl's default zone instead (set TZ or /etc/localtime to a zone name)`;
  }

  private open(zone: string | undefined): ScheduledTask {
    const task = createTask(this.expression, () => this.fire(), { timezone: zone });
    task.on('execution:missed', () => this.missed());
    try {
      task.start(); // computes the first run: an unknown zone throws here
    } catch (err) {
      task.destroy();
      throw err;
    }
    return task;
  }

  private nextFromNow(): number | undefined {
    return this.task?.getNextRun()?.getTime();
  }

  private fire(): void {
    clearImmediate(this.catchUp);
    this.catchUp = undefined;
    this.expected = this.nextFromNow();
    this.arm();
    this.onTick();
  }

  /**
   * node-cron reports each skipped run, in one burst from one wake-up, and may run the next one
   * in the same wake-up: all of that is one push, after the burst.
   */
  private missed(): void {
    this.catchUp ??= setImmediate(() => this.fire());
  }

  /**
   * The guard wakes a minute after its last look, or just before node-cron's next run if that
   * is sooner: Node runs the timer that expires first first, so a step is seen here before
   * node-cron's timer would walk every run it skipped (about 0.1 ms each: 31 days of a
   * per-second schedule stall the event loop for minutes). The timers' expiries are whole
   * milliseconds read from two clocks, so they may differ by 1 ms either way: 2 ms ahead.
   */
  private arm(): void {
    clearTimeout(this.guard);
    const untilRun = (this.expected ?? Number.POSITIVE_INFINITY) - Date.now();
    const wait = untilRun > GUARD_LEAD_MS ? Math.min(untilRun - GUARD_LEAD_MS, GUARD_EVERY_MS) : GUARD_EVERY_MS;
    this.guard = setTimeout(() => this.look(), wait);
  }

  private look(): void {
    this.steps.look(); // a step is told to stepped() first
    this.arm();
  }

  /**
   * After a step either way (seen by this guard or by another look at the same detector),
   * node-cron, restarted, plans from the new clock; the runs a forward step skipped are owed
   * once.
   */
  private stepped(step: number): void {
    if (!this.task) return;
    const owed = step > 0 && this.expected !== undefined && this.expected <= Date.now();
    this.task.stop();
    this.task.start();
    this.expected = this.nextFromNow();
    // fire() arms the guard again.
    if (owed) this.fire();
    else this.arm();
  }
}
