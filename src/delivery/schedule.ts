/**
 * When traces are pushed: the cron expression (`schedule.traces`, machine local time, run by
 * node-cron through `src/cron.ts`), each device a fixed share of `schedule.splay_s` after each
 * tick so a fleet of thousands does not hit the service in the same second, and whether a push
 * is due. A push stays due until it has drained everything that was buffered when it began (a
 * failure leaves it due, so the retry finishes it); asking for one (the demo, tests, the end of
 * a route) makes it due now.
 */
import { createHash } from 'node:crypto';
import type { ClockSteps } from '../clock.js';
import { CronSchedule } from '../cron.js';

/**
 * A fixed share of the splay window for this device, so a fleet spreads over it. Fixed, not
 * node-cron's random `maxRandomDelay`: a device pushes at the same second of every tick,
 * which `status` can show.
 */
export function splayMs(deviceId: string, splayS: number): number {
  if (splayS <= 0) return 0;
  const h = createHash('sha256').update(deviceId).digest().readUInt32BE(0);
  return h % Math.round(splayS * 1000);
}

export class TraceSchedule {
  private cron: CronSchedule | undefined;
  private started = false;
  private splayTimer: NodeJS.Timeout | undefined;
  private isDue = false;
  /** Told when a push becomes due; `fresh` when none was due before (a new push begins). */
  onDue: (fresh: boolean) => void = () => undefined;

  /**
   * `expression` undefined: no timer, pushes happen only when asked for (a sender built by a
   * test or the bench). `steps`: the daemon's detector of clock steps, which the cron guard
   * looks at too.
   */
  constructor(
    private expr: string | undefined,
    private splay: number,
    private readonly steps?: ClockSteps,
  ) {}

  /** The cron expression the schedule follows (undefined: only when asked). */
  get expression(): string | undefined {
    return this.expr;
  }

  /** A schedule from the config: `schedule.traces`, and this device's share of `schedule.splay_s`. */
  static fromConfig(schedule: { traces: string; splay_s: number }, deviceId: string, steps?: ClockSteps): TraceSchedule {
    return new TraceSchedule(schedule.traces, splayMs(deviceId, schedule.splay_s), steps);
  }

  start(): void {
    this.started = true;
    if (this.expr === undefined || this.cron) return;
    this.cron = new CronSchedule(
      this.expr,
      () => {
        clearTimeout(this.splayTimer);
        this.splayTimer = setTimeout(() => this.request(), this.splay);
      },
      undefined,
      this.steps,
    );
    this.cron.start();
  }

  stop(): void {
    this.started = false;
    this.cron?.stop();
    this.cron = undefined;
    clearTimeout(this.splayTimer);
  }

  /** A new expression or splay (a reload): followed from now on; a push already due stays due. */
  reconfigure(schedule: { traces: string; splay_s: number }, deviceId: string): void {
    const splay = splayMs(deviceId, schedule.splay_s);
    if (schedule.traces === this.expr && splay === this.splay) return;
    const wasStarted = this.started;
    this.stop();
    this.expr = schedule.traces;
    this.splay = splay;
    if (wasStarted) this.start();
  }

  /** A push is due now. */
  request(): void {
    const fresh = !this.isDue;
    this.isDue = true;
    this.onDue(fresh);
  }

  /** Whether a push is due and not yet done. */
  get due(): boolean {
    return this.isDue;
  }

  /** The push drained what was buffered when it began: nothing due until the next tick. */
  completed(): void {
    this.isDue = false;
  }

  /** Why the schedule cannot follow the machine's zone, while started (see CronSchedule). */
  get zoneProblem(): string | undefined {
    return this.cron?.zoneProblem;
  }

  /** When the next push starts (the next tick plus this device's splay), while started. */
  nextPushMs(): number | null {
    const next = this.cron?.nextRun;
    return next === undefined ? null : next + this.splay;
  }

  /** The gap between the next two ticks (15 min when it cannot be told). */
  intervalMs(): number {
    const runs = this.cron?.nextRuns(2);
    return runs && runs.length === 2 ? runs[1] - runs[0] : 15 * 60_000;
  }
}
