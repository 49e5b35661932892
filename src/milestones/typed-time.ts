/**
 * A milestone's time as it came in: now, an instant (a program's, or typed with `Z` or an
 * offset), or a wall-clock time typed without an offset, which only a zone turns into an
 * instant. That zone is chosen once, by the caller (record.ts), and the text is read once:
 * reading it in one zone to decide where the truck was, then again in another, sent a
 * Chicago time six hours early from a device in UTC.
 */
import { CLOCK_FLOOR_MS } from '../admission/time-guard.js';
import { localTimeReadings, readDateTime } from '../geo/localtime.js';
import { formatTime, hasExplicitOffset, localTimeToInstant, zoneOffsetMinutes } from '../geo/timezone.js';
import { offsetMistake } from './offset-form.js';
import type { MilestoneWarning } from './warnings.js';

export type TypedTime =
  | { kind: 'now' }
  /** `offsetMin` when it was typed with one (`Z` is 0); a program's instant has none. */
  | { kind: 'instant'; ms: number; offsetMin?: number }
  | { kind: 'local'; text: string };

/**
 * Why a time is refused, for a reader with no command line: the driver's page (src/ui/refusal.ts)
 * and the fleet link's answers (src/fleet/refusal.ts) word each their own way, since the
 * messages name --time, --force and settings.
 */
export type TimeProblem = 'form' | 'no-zone' | 'before-floor' | 'too-far-ahead' | 'too-old' | 'ahead';

/** The rule a time broke and what it was judged on: all a front end needs to word it. */
export type TimeFacts =
  /** `why`: what reading it in the zone found (a date no calendar has), if it got that far. */
  | { problem: 'form'; text: string; why?: string }
  /** `noFix`: why no fix told the zone; `example`: the text with this device's offset. */
  | { problem: 'no-zone'; text: string; stop?: number; noFix: string; example: string; device: string }
  | { problem: 'before-floor' | 'too-far-ahead'; at: string }
  | { problem: 'too-old'; at: string; behind: number; max: number }
  | { problem: 'ahead'; at: string; aheadS: number; maxFutureS: number; appointmentCodes: readonly string[] };

export class TimeRefusal extends RangeError {
  readonly problem: TimeProblem;
  /** For `too-old`: how many days back, and the most allowed. */
  readonly days?: { behind: number; max: number };

  constructor(
    message: string,
    readonly facts: TimeFacts,
  ) {
    super(message);
    this.problem = facts.problem;
    if (facts.problem === 'too-old') this.days = { behind: facts.behind, max: facts.max };
  }
}

const EXPECTED = (text: string) =>
  `--time: expected an ISO 8601 time such as 2026-11-23T10:00:00 (read in the zone of the milestone's place), 2026-11-23T10:00:00-06:00 or 2026-11-23T16:00:00Z, got ${JSON.stringify(text)}`;

/** What `timeMs` / `timeText` say, checked for form (a RangeError with the message to show). */
export function typedTime(input: { timeMs?: number; timeText?: string }): TypedTime {
  if (input.timeMs !== undefined) return { kind: 'instant', ms: input.timeMs };
  if (input.timeText === undefined) return { kind: 'now' };
  const text = input.timeText.trim();
  const mistake = offsetMistake(text);
  if (mistake) throw new TimeRefusal(`--time: ${mistake}`, { problem: 'form', text, why: mistake });
  if (hasExplicitOffset(text)) {
    // ISO 8601 only: Date.parse also takes RFC 2822 and whatever V8 makes of the rest.
    const read = readDateTime(text);
    if (read?.kind !== 'instant') throw new TimeRefusal(EXPECTED(text), { problem: 'form', text });
    return { kind: 'instant', ms: read.ms, offsetMin: read.offsetMin };
  }
  // Not a date at all ("yesterday"): the forms it may take, not the local form's details.
  if (!/^\d{4}-\d{2}-\d{2}/.test(text)) throw new TimeRefusal(EXPECTED(text), { problem: 'form', text });
  return { kind: 'local', text };
}

/** The instant of `t` in `zone` (a RangeError for a local time no calendar has). */
export function instantIn(t: TypedTime, zone: string, nowMs: number): number {
  if (t.kind === 'now') return nowMs;
  if (t.kind === 'instant') return t.ms;
  try {
    return localTimeToInstant(t.text, zone);
  } catch (err) {
    throw new TimeRefusal(`--time: ${(err as Error).message}`, { problem: 'form', text: t.text, why: (err as Error).message });
  }
}

/**
 * What to tell the driver when a local time read in `zone` fell on a clock change, in the words
 * a stop's appointment gets (appointments.ts): the first of a repeated hour, a skipped time
 * moved forward. Said, not refused, as for the appointment; unsaid, 01:30 on fall-back night
 * went out as daylight time, an hour early if the second 01:30 was meant.
 */
export function clockChangeWarning(t: TypedTime, zone: string): MilestoneWarning | undefined {
  if (t.kind !== 'local') return undefined;
  let readings: number[];
  try {
    readings = localTimeReadings(t.text, zone);
  } catch {
    return undefined; // not a time on the calendar: instantIn refuses it
  }
  if (readings.length === 1) return undefined;
  const shown = (ms: number) => formatTime(new Date(ms), zone, 'local').dateTime.replace('.000', '');
  if (readings.length === 0) return { kind: 'clock-change', text: t.text, zone, readAs: shown(localTimeToInstant(t.text, zone)) };
  return { kind: 'clock-change', text: t.text, zone, readAs: shown(readings[0]!), second: shown(readings[1]!) };
}

/** The first of `zones` whose offset at `ms` is `offsetMin`: an offset typed for a place with several zones picks its own. */
export function zoneWithOffset(zones: readonly string[], offsetMin: number, ms: number): string | undefined {
  return zones.find((z) => zoneOffsetMinutes(z, ms) === offsetMin);
}

/** `2026-11-20T08:15-06:00`: the text with the offset `zone` has there, for a message asking for one. */
export function withOffsetOf(text: string, zone: string): string {
  let offsetMin: number;
  try {
    offsetMin = zoneOffsetMinutes(zone, localTimeToInstant(text, zone));
  } catch {
    return `${text}-06:00`; // no such date: the form is what matters
  }
  const abs = Math.abs(offsetMin);
  return `${text}${offsetMin < 0 ? '-' : '+'}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
}

const DAY_MS = 86_400_000;
/** How far ahead an appointment may be: a tender is for weeks ahead, not years. */
const APPOINTMENT_AHEAD_DAYS = 366;

/**
 * Whether a milestone's time, typed or given by a program, could be what happened: a
 * RangeError with the message to show, or a warning pushed when `force` lets it through.
 * - before 2025-01-01 (the floor readings get, `CLOCK_FLOOR_MS`), or an appointment more than
 *   a year ahead: no load this agent carried; a typo or an unset clock. Refused, `force` or not;
 * - more than `sources_time.max_past_days` behind the device's clock (the readings' bound):
 *   refused unless `force` (a correction to an old load);
 * - more than `sources_time.max_future_s` ahead, except an appointment: it has not happened.
 */
export function checkTimeAge(
  timeMs: number,
  nowMs: number,
  limits: { maxPastDays: number; maxFutureS: number; appointment: boolean; appointmentCodes: readonly string[]; force: boolean },
  warnings: MilestoneWarning[],
): void {
  const at = new Date(timeMs).toISOString().replace('.000Z', 'Z');
  if (timeMs < CLOCK_FLOOR_MS) {
    throw new TimeRefusal(`--time ${at} is before 2025-01-01, older than any load this agent carried: check the year (--force does not send it)`, { problem: 'before-floor', at });
  }
  if (limits.appointment && timeMs - nowMs > APPOINTMENT_AHEAD_DAYS * DAY_MS) {
    throw new TimeRefusal(`--time ${at} is more than a year ahead of this device's clock: no appointment is that far off; check the year (--force does not send it)`, { problem: 'too-far-ahead', at });
  }
  const behindDays = Math.floor((nowMs - timeMs) / DAY_MS);
  if (nowMs - timeMs > limits.maxPastDays * DAY_MS) {
    if (!limits.force) {
      throw new TimeRefusal(
        `--time ${at} is ${behindDays} days before this device's clock, more than sources_time.max_past_days (${limits.maxPastDays}): check the date; to record it anyway (a correction to an old load), add --force`,
        { problem: 'too-old', at, behind: behindDays, max: limits.maxPastDays },
      );
    }
    warnings.push({ kind: 'forced-old', at, behind: behindDays, max: limits.maxPastDays });
  }
  const aheadS = Math.round((timeMs - nowMs) / 1000);
  if (!limits.appointment && aheadS > limits.maxFutureS) {
    const iso = new Date(timeMs).toISOString();
    throw new TimeRefusal(
      `--time ${iso} is ${aheadS} s ahead of this device's clock (sources_time.max_future_s = ${limits.maxFutureS}): a milestone records what happened. Only appointment codes (codes.appointments: ${limits.appointmentCodes.join(', ')}) may lie in the future`,
      { problem: 'ahead', at: iso, aheadS, maxFutureS: limits.maxFutureS, appointmentCodes: limits.appointmentCodes },
    );
  }
}
