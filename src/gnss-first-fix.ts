/**
 * Whether the first GNSS fixes may set GNSS time (src/gnss-clock.ts). Before GNSS time is
 * known nothing can say a fix is ahead, and one fix was believed alone: a single RMC with a
 * garbled date (year 2099), or a receiver resolving its week number 1024 weeks the wrong
 * way, set GNSS time decades ahead until the clock was synchronised, and every re-stamped
 * reading, milestone and load went out in the future, to be refused by the service.
 *
 * Two guards, as a receiver's own time is checked before a time daemon trusts it:
 * - a fix more than FIRST_FIX_AHEAD_MS (half the 1024-week rollover) past the newest time
 *   the agent knows to have passed (the system clock, the buffer's newest reading, the
 *   release's floor) is refused: no device is switched off that long, and a rollover the
 *   wrong way is a whole 1024 weeks;
 * - GNSS time is taken only from two fixes of the same source that agree: the second as far
 *   after the first as the monotonic clock says it came, give or take AGREE_MS. A garbled date
 *   is a day or more off; a receiver's burst or a file read at once is seconds. Each source is
 *   compared with itself: a gateway's receivers, one of them wrong or late, take turns, and
 *   fixes compared across them would never agree. Until two agree, the clock
 *   stays `unsynchronised` (system-stamped readings keep waiting) and the fixes themselves
 *   are kept: their positions are real.
 */
import { CLOCK_FLOOR_MS } from './admission/time-guard.js';
import { type ClockSources, formatStep } from './clock.js';

export const AGREE_MS = 60_000;
export const FIRST_FIX_AHEAD_MS = 512 * 7 * 86_400_000;
/** Disagreements logged per run: a receiver garbling every date says so a few times, not once a second. */
const MAX_TOLD = 5;

export class FirstFix {
  /** Each source's newest fix before GNSS time is known. */
  private readonly candidates = new Map<string, { timeMs: number; mono: number }>();
  private told = 0;

  constructor(
    private readonly clocks: ClockSources,
    private readonly warn: (text: string) => void,
  ) {}

  /** Why this fix cannot be believed while no GNSS time is known (too far ahead), or undefined. `newestMs`: the newest time the agent knows. */
  problem(timeMs: number, newestMs: number): string | undefined {
    const known = Math.max(newestMs, CLOCK_FLOOR_MS);
    if (!(timeMs - known > FIRST_FIX_AHEAD_MS)) return undefined;
    const days = Math.round((timeMs - known) / 86_400_000);
    return `time: ${new Date(timeMs).toISOString()} is ${days} days after the newest time this agent knows (${new Date(known).toISOString()}) and no GNSS time is known yet: a garbled date or a GPS week rollover, not believed`;
  }

  /** A fix passed admission: true when it agrees with the one before, so GNSS time may be taken from it. */
  agrees(timeMs: number, source?: string): boolean {
    const mono = this.clocks.mono();
    const key = source ?? '';
    const c = this.candidates.get(key);
    this.candidates.set(key, { timeMs, mono });
    if (!c) return false;
    const gap = timeMs - c.timeMs - (mono - c.mono);
    if (Math.abs(gap) <= AGREE_MS) return true;
    if (this.told < MAX_TOLD) {
      this.told += 1;
      const who = (s?: string) => (s ? `${s}'s fix` : 'a fix');
      this.warn(
        `GNSS time not taken yet: ${who(source)} at ${new Date(c.timeMs).toISOString()} and ${who(source)} at ${new Date(timeMs).toISOString()} ${Math.round((mono - c.mono) / 1000)} s later disagree by ${formatStep(gap)} (a garbled date or a receiver's week rollover); GNSS time waits for two fixes that agree`,
      );
    }
    return false;
  }
}
