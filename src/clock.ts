/**
 * What time it is, for the checks that can destroy or refuse data. The system clock alone
 * cannot be trusted with that: a Raspberry Pi has no RTC, NTP or GPS steps the clock at any
 * moment, and a bad time source can move it weeks ahead. Measured before this existed: with
 * the clock 31 days ahead while offline, the age limit dropped every buffered reading, all
 * of them really a minute old.
 *
 * Three witnesses, and a check that would refuse or drop data uses the one most favourable
 * to keeping it:
 * - the wall clock;
 * - the monotonic clock since the agent started, anchored to the wall clock at start;
 * - the newest committed reading's own time (GPS time for most sources), advanced by the
 *   monotonic time since it was committed; at start, the newest reading in the buffer.
 *
 * `earliest()` is the lowest of them (what "too old" is judged against) and `latest()` the
 * highest of the first two (what "in the future" is judged against). A step of the wall
 * clock by more than a day between two looks is a jump: logged, and the age limit waits.
 */

export const CLOCK_JUMP_MS = 86_400_000;

export interface ClockSources {
  wall: () => number;
  mono: () => number;
}

/** The system's clocks: Date.now for times that are shown and stored, performance.now for waits. */
export const systemClocks: ClockSources = { wall: () => Date.now(), mono: () => performance.now() };

/**
 * The clocks for an injected `now` (a test's fake time): both read it, so moving it moves the
 * deadlines too. Without one, the system's.
 */
export function clockOf(now?: () => number): ClockSources {
  return now ? { wall: now, mono: now } : systemClocks;
}

/**
 * A deadline on the monotonic clock, `ms` from now, and the wall time it falls at as shown to
 * operators (`status`: "next attempt in 4 s"). A step of the wall clock moves neither the
 * deadline nor, once `reshow` has run, what is shown: measured before deadlines were
 * monotonic, a 1 h step back left delivery waiting an hour and `status` said "1 min 28 s ago".
 */
export interface Deadline {
  mono: number;
  wall: number;
}

export function deadlineIn(ms: number, clocks: ClockSources): Deadline {
  return { mono: clocks.mono() + ms, wall: clocks.wall() + ms };
}

/** The wall time a deadline falls at, from the clocks now (after a step of the wall clock). */
export function wallOf(deadline: Deadline, clocks: ClockSources): number {
  return Math.round(clocks.wall() + (deadline.mono - clocks.mono()));
}

export function isPast(deadline: Deadline, clocks: ClockSources): boolean {
  return clocks.mono() >= deadline.mono;
}

/** A wall clock that moved this much against the monotonic clock between two looks was stepped. */
export const STEP_MS = 1000;

/**
 * The one detector of wall clock steps in the daemon: each look compares wall minus monotonic
 * time with the last look's, and a change of STEP_MS or more is told to every listener (the
 * trace schedule restarts node-cron, the agent logs it and shows its deadlines again). Anyone
 * may look (the agent every second, the cron guard before each run); whoever looks first
 * after a step tells everyone.
 */
export class ClockSteps {
  private skew: number;
  private readonly listeners = new Set<(stepMs: number) => void>();

  constructor(private readonly clocks: ClockSources = systemClocks) {
    this.skew = clocks.wall() - clocks.mono();
  }

  /** The step seen since the last look (0 if under STEP_MS), told to the listeners first. */
  look(): number {
    const skew = this.clocks.wall() - this.clocks.mono();
    const step = skew - this.skew;
    this.skew = skew;
    if (Math.abs(step) < STEP_MS) return 0;
    for (const fn of this.listeners) fn(step);
    return step;
  }

  /** Told of each step; returns what stops the telling. */
  onStep(fn: (stepMs: number) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }
}

export class TrustedClock {
  private readonly startWall: number;
  private readonly startMono: number;
  /** Newest reading time known, and the monotonic time when it was learnt. */
  private newest: { timeMs: number; mono: number } | undefined;
  /** Wall and monotonic time at the last look, for jump detection. */
  private last: { wall: number; mono: number };

  constructor(
    newestReadingMs?: number,
    private readonly clocks: ClockSources = systemClocks,
  ) {
    this.startWall = clocks.wall();
    this.startMono = clocks.mono();
    this.last = { wall: this.startWall, mono: this.startMono };
    if (newestReadingMs !== undefined && Number.isFinite(newestReadingMs)) this.newest = { timeMs: newestReadingMs, mono: this.startMono };
  }

  /** The wall clock now. */
  wall(): number {
    return this.clocks.wall();
  }

  /** A batch was committed whose newest reading has this time. */
  noteCommitted(newestReadingMs: number): void {
    if (!Number.isFinite(newestReadingMs)) return;
    if (!this.newest || newestReadingMs >= this.newest.timeMs) this.newest = { timeMs: newestReadingMs, mono: this.clocks.mono() };
  }

  /** The lowest of the three witnesses: "too old" is judged against this. */
  earliest(): number {
    const mono = this.clocks.mono();
    let t = Math.min(this.clocks.wall(), this.startWall + (mono - this.startMono));
    if (this.newest) t = Math.min(t, this.newest.timeMs + (mono - this.newest.mono));
    return t;
  }

  /** The highest of wall and monotonic reckoning: "in the future" is judged against this. */
  latest(): number {
    return Math.max(this.clocks.wall(), this.startWall + (this.clocks.mono() - this.startMono));
  }

  /** The newest time known to have passed: the latest of the wall clock, the monotonic reckoning and the newest reading carried forward. */
  newestKnown(): number {
    const t = this.latest();
    return this.newest ? Math.max(t, this.newest.timeMs + (this.clocks.mono() - this.newest.mono)) : t;
  }

  /**
   * How far the wall clock moved beyond the monotonic clock since the previous call (a jump
   * when over CLOCK_JUMP_MS either way), and start the next interval from now.
   */
  takeDrift(): number {
    const wall = this.clocks.wall();
    const mono = this.clocks.mono();
    const drift = wall - this.last.wall - (mono - this.last.mono);
    this.last = { wall, mono };
    return drift;
  }
}

/** `+31 d 0 h`, `-2 h 5 min`: a clock step for a log line. */
export function formatStep(ms: number): string {
  const sign = ms < 0 ? '-' : '+';
  let s = Math.round(Math.abs(ms) / 1000);
  const d = Math.floor(s / 86_400);
  s -= d * 86_400;
  const h = Math.floor(s / 3600);
  const m = Math.floor((s - h * 3600) / 60);
  if (d > 0) return `${sign}${d} d ${h} h`;
  if (h > 0) return `${sign}${h} h ${m} min`;
  return `${sign}${m} min ${s % 60} s`;
}
