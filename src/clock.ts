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

const systemClocks: ClockSources = { wall: () => Date.now(), mono: () => performance.now() };

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
