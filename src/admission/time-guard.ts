/**
 * Which reading times can be trusted. A reading is stamped by the clock of whatever made it:
 * GPS time (gpsd, NMEA), the device's own clock (an exec adapter's `time`), or, for sources
 * without a clock (1-Wire, exec lines without `time`), this computer's clock at receipt.
 * Any of these can be wrong in ways seen in the field:
 *
 * - a receiver before its first fix reports 1980-01-06 or 2000-01-01, and a receiver with
 *   the GPS week-number rollover bug reports a date 1024 weeks (19.6 years) in the past;
 * - a Raspberry Pi has no RTC: until NTP or GPS sets it, the system clock starts at 1970 or
 *   at the last shutdown, so receive-time stamps are wrong too;
 * - an adapter's own clock drifts or runs in the wrong zone and stamps hours ahead.
 *
 * Such a reading would put a truck at the wrong place in a trace, drive the geofence
 * backwards, or be dropped at once by the buffer's age limit. The rule, in order:
 *
 * 1. A time before `CLOCK_FLOOR_MS` (a date this release cannot run before) is refused:
 *    the clock that stamped it was not set.
 * 2. If the system clock itself is before the floor (no RTC, no NTP yet), nothing can be
 *    judged against it: readings with a plausible time pass (GPS time is then the only
 *    good clock there is), and receive-time stamps fall under rule 1.
 * 3. Otherwise a time more than `maxFutureS` ahead of the system clock, or more than
 *    `maxPastDays` behind it, is refused with the reason.
 *
 * Refused readings are counted per source and logged (first few, then every 1000th): they
 * are bad input, not a reason to stop.
 */

import type { Reading } from '../reading.js';
import type { TimeCheck } from './intake.js';

/** No reading can honestly be older than this release: 2025-01-01T00:00:00Z. */
export const CLOCK_FLOOR_MS = Date.UTC(2025, 0, 1);

export interface TimeGuardOptions {
  /** `sources_time.max_future_s`: how far ahead of the system clock a reading may be. */
  maxFutureS: number;
  /** `sources_time.max_past_days`: how far behind it. */
  maxPastDays: number;
  /** Earliest believable time; defaults to CLOCK_FLOOR_MS (tests move it). */
  floorMs?: number;
}

/**
 * What "now" is for the check: one instant, or the window of the agent's clocks (see
 * src/clock.ts): too old is judged against the earliest of them, in the future against the
 * latest, so a wall clock that jumped cannot make good readings look bad.
 */
export type NowWindow = number | { earliestMs: number; latestMs: number };

/** Why a reading's time cannot be used, or undefined when it can. Pure: `now` is the system clock (or its window). */
export function timeProblem(timeMs: number, now: NowWindow, opts: TimeGuardOptions): string | undefined {
  if (!Number.isFinite(timeMs)) return 'time: not a valid time';
  const floor = opts.floorMs ?? CLOCK_FLOOR_MS;
  const iso = (ms: number) => new Date(ms).toISOString();
  if (timeMs < floor) {
    return `time: ${iso(timeMs)} is before ${iso(floor)}; the clock that stamped it was not set (no GPS time yet, or no RTC)`;
  }
  const earliest = typeof now === 'number' ? now : now.earliestMs;
  const latest = typeof now === 'number' ? now : now.latestMs;
  // +Infinity: nothing can say a time is ahead (GNSS time before the first fix, gnss-clock.ts).
  if (Number.isNaN(latest) || latest < floor) return undefined;
  const aheadS = (timeMs - latest) / 1000;
  if (aheadS > opts.maxFutureS) {
    return `time: ${iso(timeMs)} is ${Math.round(aheadS)} s in the future (sources_time.max_future_s = ${opts.maxFutureS})`;
  }
  if (!Number.isFinite(earliest) || earliest < floor) return undefined;
  const behindDays = (earliest - timeMs) / 86_400_000;
  if (behindDays > opts.maxPastDays) {
    return `time: ${iso(timeMs)} is ${behindDays.toFixed(1)} days in the past (sources_time.max_past_days = ${opts.maxPastDays})`;
  }
  return undefined;
}

/**
 * A reading's time as admitted: re-stamped where the GNSS clock says the system clock that
 * stamped it is wrong, and judged against the window it gives (the agent's clocks while the
 * system clock is synchronised). A GNSS fix that passes anchors GNSS time (the first once two
 * agree, src/gnss-first-fix.ts); `source` names it in the warning when they do not.
 */
export function judgeTime(reading: Reading, t: TimeCheck, source?: string): { reading: Reading; problem?: string } {
  const stamp = reading.clock ?? t.stamp;
  const j = t.gnss?.judge(reading.timeMs, stamp, t.clock);
  const r = j && j.timeMs !== reading.timeMs ? { ...reading, timeMs: j.timeMs } : reading;
  const problem = timeProblem(r.timeMs, j?.window ?? { earliestMs: t.clock.earliest(), latestMs: t.clock.latest() }, t) ?? t.gnss?.firstFixProblem(r.timeMs, stamp, t.clock);
  if (!problem && stamp === 'gnss') t.gnss?.noteFix(r.timeMs, source, reading.dateCarried === true);
  if (!problem && stamp === 'gnss' && t.gnss && !t.gnss.timeKnown()) return { reading: { ...r, untimed: true } };
  return { reading: r, problem };
}

/** True when the system clock cannot be trusted (before the floor): worth one warning at start. */
export function systemClockUnset(nowMs: number, floorMs = CLOCK_FLOOR_MS): boolean {
  return !Number.isFinite(nowMs) || nowMs < floorMs;
}
