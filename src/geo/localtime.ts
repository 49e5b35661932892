/**
 * A local date and time typed without an offset (`milestone --time 2026-11-23T10:00:00`),
 * read in a zone: the zone of the milestone's place, not the machine's.
 */
import { zoneOffsetMinutes } from './timezone.js';

const DAY_MS = 86_400_000;

/** `YYYY-MM-DDTHH:MM[:SS[.fff]]`, `T` or a space between date and time, nothing after. */
const LOCAL_DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?$/;

/** `LOCAL_DATE_TIME`, fractions to nine digits, then `Z` or an offset (`+02:00`, `-0600`, `+05`), maybe after a space. */
const INSTANT = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?\s?([Zz]|([+-])(\d{2})(?::?(\d{2}))?)$/;

/** A time of day followed by `Z` or a numeric offset (`+02:00`, `-0600`, `+05`), maybe after a space. */
const EXPLICIT_OFFSET = /\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\s?(?:Z|[+-]\d{2}(?::?\d{2})?)$/i;

/**
 * Whether a date-time string names an instant by itself: it ends, after its time of day, in
 * `Z` or a UTC offset (`2026-11-23T16:00:00Z`, `2026-11-23T10:00:00-06:00`, `...-0600`). A CLI
 * applies a zone (`localTimeToInstant`) only to a string without one, so that a typed offset
 * is never silently replaced by the zone's.
 */
export function hasExplicitOffset(text: string): boolean {
  return EXPLICIT_OFFSET.test(text.trim());
}

/**
 * The instant (epoch ms) of a local date and time in `zone`, for times people type (a CLI's
 * `--time`), read once per command: `localTimeToInstant('2026-11-23T10:00:00', 'America/Chicago')`
 * is 2026-11-23T16:00:00Z.
 *
 * Accepts `YYYY-MM-DDTHH:MM`, `YYYY-MM-DDTHH:MM:SS` and `YYYY-MM-DDTHH:MM:SS.f` to `.fff`
 * (milliseconds), with `T` or a space; anything else is a RangeError that quotes the text, and
 * says so when the text carries an offset or `Z` (see `hasExplicitOffset`): such a text is an
 * instant already, and a zone applied to it would move it. An unknown zone is a RangeError too.
 *
 * Clock changes, as most calendar software treats them:
 * - a time that occurs twice (fall back) is its first occurrence, the one in daylight time:
 *   01:30 on 2026-11-01 in Chicago is 01:30 CDT (06:30Z), not 01:30 CST an hour later;
 * - a time that does not exist (spring forward) is moved forward by the length of the gap,
 *   that is, read with the offset in force before the change: 02:30 on 2026-03-08 in Chicago
 *   is 03:30 CDT (08:30Z).
 *
 * The zone rules are those `formatTime` uses (`zoneOffsetMinutes`: zoneinfo, else Intl), in
 * whole minutes. The offsets a day before and a day after are the only candidates, which
 * assumes at most one change of offset in any two days: true of every zone in the tz database
 * (the closest two changes are four days apart, Africa/Freetown in 1939).
 */
export function localTimeToInstant(text: string, zone: string): number {
  const readings = localTimeReadings(text, zone);
  if (readings.length > 0) return readings[0];
  // In no reading is this wall-clock time shown: a spring-forward gap.
  const local = wallClockOf(text);
  return local - zoneOffsetMinutes(zone, local - DAY_MS) * 60_000;
}

/**
 * Every instant at which the clocks of `zone` show this local date and time, earlier first:
 * one; two in the hour a fall back repeats; none in a spring-forward gap. RangeErrors as
 * `localTimeToInstant`'s. For saying which reading a time got, where it had a choice.
 */
export function localTimeReadings(text: string, zone: string): number[] {
  const local = wallClockOf(text);
  const before = zoneOffsetMinutes(zone, local - DAY_MS);
  const after = zoneOffsetMinutes(zone, local + DAY_MS);
  const out: number[] = [];
  // The larger offset gives the earlier instant: tried first, it comes first.
  for (const offset of before >= after ? [before, after] : [after, before]) {
    const t = local - offset * 60_000;
    if (zoneOffsetMinutes(zone, t) === offset && !out.includes(t)) out.push(t);
  }
  return out;
}

/**
 * A date and time as an agent reads one typed or written in a file (`milestone --time`, a
 * stop's appointment): ISO 8601 and nothing else, one grammar for every place a time is
 * typed. With `Z` or an offset it is an instant (the offset kept, it names a zone's clock);
 * without, a local time that only a zone turns into an instant (`localTimeToInstant`). Else
 * undefined: `"1"`, `"12/31/2026"`, a date alone, RFC 2822, a date not on the calendar.
 * Programs may write fractions of a second to nine digits with an offset (`.123456Z`); a time
 * typed without one keeps `localTimeToInstant`'s form.
 */
export function readDateTime(text: string): { kind: 'instant'; ms: number; offsetMin: number } | { kind: 'local'; text: string } | undefined {
  const m = INSTANT.exec(text);
  if (m) {
    const wall = wallClockParts(m.slice(1, 7), m[7]);
    const [sign, oh, om] = [m[9], Number(m[10] ?? 0), Number(m[11] ?? 0)];
    if (wall === undefined || oh > 23 || om > 59) return undefined;
    const offsetMin = sign === undefined ? 0 : (sign === '-' ? -1 : 1) * (oh * 60 + om);
    return { kind: 'instant', ms: wall - offsetMin * 60_000, offsetMin };
  }
  const l = LOCAL_DATE_TIME.exec(text);
  return l && wallClockParts(l.slice(1, 7), l[7]) !== undefined ? { kind: 'local', text } : undefined;
}

/** The wall-clock reading of a local date and time, as if it were UTC (RangeErrors quoting the text). */
function wallClockOf(text: string): number {
  const m = LOCAL_DATE_TIME.exec(text);
  if (!m) {
    throw new RangeError(
      hasExplicitOffset(text)
        ? `${JSON.stringify(text)} carries a UTC offset or Z: it is an instant already, no zone applies`
        : `expected a local date and time YYYY-MM-DDTHH:MM[:SS[.fff]] without offset, got ${JSON.stringify(text)}`,
    );
  }
  const wall = wallClockParts(m.slice(1, 7), m[7]);
  if (wall === undefined) throw new RangeError(`${JSON.stringify(text)} is not a date and time that exists on a calendar`);
  return wall;
}

/** Year to second (strings, seconds maybe absent) and a fraction's digits, as ms since the epoch read as UTC; undefined off the calendar. */
function wallClockParts(parts: Array<string | undefined>, fraction: string | undefined): number | undefined {
  const [y, mo, d, h, mi, s] = parts.map((v) => Number(v ?? 0));
  const ms = Number((fraction ?? '').slice(0, 3).padEnd(3, '0'));
  // setUTCFullYear, not Date.UTC: Date.UTC reads years 0-99 as 1900-1999.
  const date = new Date(0);
  date.setUTCFullYear(y, mo - 1, d);
  date.setUTCHours(h, mi, s, ms);
  if (mo < 1 || mo > 12 || date.getUTCMonth() !== mo - 1 || date.getUTCDate() !== d || h > 23 || mi > 59 || s > 59) return undefined;
  return date.getTime();
}
