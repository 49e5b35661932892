/**
 * Time zone of a position and the `time` object of interface E, offline.
 *
 * - The zone is looked up at the event's position (a truck crosses zones), with
 *   `@photostructure/tz-lookup` (a compact embedded map, no network, ~0.1 µs a lookup).
 * - Offsets come from the zone rules at that instant, so DST transitions are exact. The rules
 *   are read from the system's zoneinfo file (`src/geo/tzif.ts`), which the system keeps
 *   fresh: ICU's copy inside Node lags (tzdata 2026f puts Alberta on UTC-6 all year from
 *   November 2026, Node 20's ICU 2025c does not: test/geo/calgary-2026.test.ts). `Intl` is
 *   the fallback when there is no file.
 *   The reader is checked against the C library's `zdump` on the same files, and against
 *   Intl wherever ICU's copy of the tz database agrees (test/geo/tzif.test.ts).
 * - `timeZoneOffset` is always `UTC<sign><hours>`: `UTC-6`, `UTC+1`, `UTC-3:30`, `UTC+5:45`; no
 *   zero padding, minutes only when not zero, and `UTC+0` for a zero offset (the spec's form is
 *   `UTC<sign><hours>`; a bare `UTC` is a zone name, not an offset, and `src/api/schemas.ts`
 *   refuses it).
 * - `timeZoneCode` is the short name carriers write (`CST`, `CDT`, `NST`, `HST`...): the zone's
 *   own designation in North American zones (`CST`), `GMT`/`UTC` as the zone names it (`GMT` in
 *   Europe/London in winter and Africa/Abidjan, `UTC` in Etc/UTC), else `UTC+5:30` style (at
 *   most 9 characters; designations elsewhere are ambiguous: `IST` is India, Ireland and Israel,
 *   and London's `BST` would read as a North American name, so London in summer is `UTC+1`).
 *   A few zones go through a table: Intl says `GMT-3:30` for America/St_Johns and `HAST` for
 *   America/Adak; tzdb says `CST` (Cuba) for America/Havana. Then a table keyed by standard
 *   offset covers North American zones without a usable name (`-05` in America/Bogota).
 * - `localTimeToInstant` goes the other way, for times people type without an offset (a CLI's
 *   `--time`), with the same rules.
 *
 * Called per trace point: rules are cached per zone, and the result is cached per zone and UTC
 * hour, verified at both ends of the hour (an hour holding a transition is never cached), so a
 * backlog of points from the same zone costs a couple of map look-ups each. Measured (Node 20.20,
 * x86-64): `eventTime` ~1 µs per point for a truck's track in time order (zone lookup included).
 */
import { createRequire } from 'node:module';
import { loadZone, type ZoneRules } from './tzif.js';
import { systemZone } from './device-zone.js';
import { localDateTime, utcDateTime } from './iso-text.js';

const require = createRequire(import.meta.url);
// CJS `module.exports = function tzlookup(lat, lon)`; createRequire keeps this independent
// of esModuleInterop and of how a bundler would treat the default export.
const tzlookup = require('@photostructure/tz-lookup') as (lat: number, lon: number) => string;

export type DateForm = 'local' | 'utc';

export interface TimeObject {
  dateTime: string;
  timeZoneCode: string;
  timeZoneOffset: string;
}

/** IANA zone at a position. Throws a RangeError for coordinates that are not on the globe. */
export function zoneAt(lat: number, lon: number): string {
  if (!Number.isFinite(lat) || !Number.isFinite(lon) || lat < -90 || lat > 90 || lon < -180 || lon > 180) {
    throw new RangeError(`invalid coordinates: ${lat}, ${lon}`);
  }
  return tzlookup(lat, lon);
}

/**
 * The `time` object for an event at `date` in `zone`.
 * - `local`: `2026-11-22T14:05:03.123-06:00` (milliseconds and offset; `+00:00` at UTC+0)
 * - `utc`: `2026-11-22T20:05:03Z` (no fractional seconds), for deployments that want only that.
 * `timeZoneCode` and `timeZoneOffset` describe the zone at that instant in both forms.
 */
export function formatTime(date: Date, zone: string, form: DateForm): TimeObject {
  const ms = date.getTime();
  if (!Number.isFinite(ms)) throw new RangeError('invalid date');
  // Local time is up to a day either side: it must stay inside what a Date can hold.
  if (Math.abs(ms) > MAX_DATE_MS - DAY_MS) throw new RangeError('date out of range');
  const info = zoneInfo(zone, ms);
  const dateTime = form === 'utc' ? utcDateTime(ms) : localDateTime(ms, info.offsetMin);
  return { dateTime, timeZoneCode: info.code, timeZoneOffset: info.offsetText };
}

/**
 * `formatTime` at a position: the zone at (lat, lon) when both are finite and on the globe,
 * else `fallbackZone`, else the system zone. Never throws for bad coordinates.
 */
export function eventTime(date: Date, lat: number | null | undefined, lon: number | null | undefined, form: DateForm, fallbackZone?: string): TimeObject {
  let zone: string | undefined;
  if (typeof lat === 'number' && typeof lon === 'number') {
    try {
      zone = zoneAt(lat, lon);
    } catch {
      zone = undefined;
    }
  }
  return formatTime(date, zone ?? fallbackZone ?? systemZone(), form);
}

// ---------------------------------------------------------------------------------------------

interface ZoneInfo {
  offsetMin: number;
  offsetText: string;
  code: string;
}

/**
 * Where a zone's rules come from: the system's zoneinfo file (TZif) when there is one, else
 * `Intl`. Both answer the offset at an instant and the zone's own name for it: the TZif
 * designation (`CST`, `-03`) or Intl's en-US short name (`CST`, `GMT-3`).
 */
interface RuleSource {
  kind: 'tzif' | 'intl';
  offsetMinutes(ms: number): number;
  name(ms: number): string;
}

interface ZoneState {
  rules: RuleSource;
  /** UTC hour number -> info valid for that whole hour. */
  hours: Map<number, ZoneInfo>;
  /** year -> standard (non-DST) offset in minutes, for the generic naming fallback. */
  standard: Map<number, number>;
}

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
const MAX_DATE_MS = 8.64e15;
const MAX_HOURS_PER_ZONE = 256;
const zones = new Map<string, ZoneState>();

function tzifSource(rules: ZoneRules): RuleSource {
  return {
    kind: 'tzif',
    offsetMinutes: (ms) => Math.round(rules.at(ms).offsetS / 60),
    name: (ms) => rules.at(ms).abbr,
  };
}

/** Throws RangeError for a zone Intl does not know. */
export function intlSource(zone: string): RuleSource {
  const offsetFmt = new Intl.DateTimeFormat('en-US', { timeZone: zone, timeZoneName: 'longOffset' });
  const nameFmt = new Intl.DateTimeFormat('en-US', { timeZone: zone, timeZoneName: 'short' });
  return {
    kind: 'intl',
    offsetMinutes: (ms) => Math.round(parseGmtOffset(tzPart(offsetFmt, ms)) ?? 0),
    name: (ms) => tzPart(nameFmt, ms),
  };
}

function newState(rules: RuleSource): ZoneState {
  return { rules, hours: new Map(), standard: new Map() };
}

function zoneState(zone: string): ZoneState {
  let s = zones.get(zone);
  if (!s) {
    // Unknown to both: Intl throws a RangeError, a configuration error worth surfacing.
    const tzif = loadZone(zone);
    s = newState(tzif ? tzifSource(tzif) : intlSource(zone));
    zones.set(zone, s);
  }
  return s;
}

/** Make `rules` the rules of `name` (a `TZ` that is a POSIX rule or a file, a fixed offset). */
export function registerZone(name: string, rules: ZoneRules): void {
  zones.set(name, newState(tzifSource(rules)));
}

/**
 * A zone that is only a UTC offset, for a time typed with an offset and no place to take a
 * zone from: `timeZoneCode` and `timeZoneOffset` are both the offset (`UTC-5`, `UTC+5:30`);
 * offset 0 is `UTC`. Named with a space (`offset UTC-5`) so that no zone name and no POSIX
 * `TZ` rule (where `UTC-5` means five hours east) can take its place.
 */
export function fixedOffsetZone(offsetMin: number): string {
  if (offsetMin === 0) return 'UTC';
  const text = formatOffset(offsetMin);
  const name = `offset ${text}`;
  if (!zones.has(name)) registerZone(name, { at: () => ({ offsetS: offsetMin * 60, isDst: false, abbr: text }) });
  return name;
}

function zoneInfo(zone: string, ms: number, s = zoneState(zone)): ZoneInfo {
  const hour = Math.floor(ms / HOUR_MS);
  const cached = s.hours.get(hour);
  if (cached) return cached;
  const start = computeInfo(zone, s, hour * HOUR_MS);
  const end = computeInfo(zone, s, hour * HOUR_MS + HOUR_MS - 1);
  if (start.offsetMin === end.offsetMin && start.code === end.code) {
    if (s.hours.size >= MAX_HOURS_PER_ZONE) s.hours.clear();
    s.hours.set(hour, start);
    return start;
  }
  // A transition inside this hour: answer exactly, do not cache.
  return computeInfo(zone, s, ms);
}

/**
 * `timeZoneCode` and `timeZoneOffset` of `zone` at `ms` from the given rules, uncached: for
 * checking the zoneinfo reader against Intl.
 */
export function zoneFieldsVia(source: RuleSource, zone: string, ms: number): { code: string; offsetText: string; offsetMin: number } {
  return zoneInfo(zone, ms, newState(source));
}

/** Offset of `zone` from UTC at `ms`, in minutes (throws a RangeError for an unknown zone). */
export function zoneOffsetMinutes(zone: string, ms: number): number {
  // Straight from the rules: localTimeToInstant looks at instants days apart, which would
  // only flush the per-hour cache that trace points use.
  return zoneState(zone).rules.offsetMinutes(ms);
}

/** The rules `formatTime` uses for `zone`: `tzif` when its zoneinfo file was read, else `intl`. */
export function ruleSourceOf(zone: string): 'tzif' | 'intl' {
  return zoneState(zone).rules.kind;
}

function tzPart(fmt: Intl.DateTimeFormat, ms: number): string {
  for (const p of fmt.formatToParts(ms)) if (p.type === 'timeZoneName') return p.value;
  return '';
}

/** `GMT-06:00` -> -360, `GMT` -> 0, `GMT+05:45` -> 345. */
function parseGmtOffset(text: string): number | undefined {
  if (text === 'GMT' || text === 'UTC') return 0;
  const m = /^(?:GMT|UTC)([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?$/.exec(text);
  if (!m) return undefined;
  const min = Number(m[2]) * 60 + Number(m[3] ?? 0) + Number(m[4] ?? 0) / 60;
  return m[1] === '-' ? -min : min;
}

function computeInfo(zone: string, s: ZoneState, ms: number): ZoneInfo {
  const offsetMin = s.rules.offsetMinutes(ms);
  const offsetText = formatOffset(offsetMin);
  return { offsetMin, offsetText, code: zoneCode(zone, s, ms, offsetMin, offsetText) };
}

/** -360 -> `UTC-6`, -210 -> `UTC-3:30`, 0 -> `UTC+0` (never a bare `UTC`), 345 -> `UTC+5:45`. */
export function formatOffset(offsetMin: number): string {
  const abs = Math.abs(offsetMin);
  const h = Math.floor(abs / 60);
  const m = abs % 60;
  return `UTC${offsetMin < 0 ? '-' : '+'}${h}${m ? `:${String(m).padStart(2, '0')}` : ''}`;
}

/** Zones whose own short name (Intl en-US or zoneinfo) is not what carriers write: [standard, daylight]. */
const ZONE_CODES: Record<string, readonly [string, string]> = {
  'America/St_Johns': ['NST', 'NDT'],
  'Canada/Newfoundland': ['NST', 'NDT'],
  'America/Adak': ['HST', 'HDT'],
  'America/Atka': ['HST', 'HDT'],
  'US/Aleutian': ['HST', 'HDT'],
  'America/Hermosillo': ['MST', 'MDT'],
  'America/Mazatlan': ['MST', 'MDT'],
  'Mexico/BajaSur': ['MST', 'MDT'],
  'America/Whitehorse': ['MST', 'MDT'],
  'Canada/Yukon': ['MST', 'MDT'],
  'America/Dawson': ['MST', 'MDT'],
  // tzdb writes CST/CDT (Cuba Standard Time), which a North American reader takes for UTC-6.
  'America/Havana': ['EST', 'EDT'],
  Cuba: ['EST', 'EDT'],
};

/** North American names by standard offset (minutes): [standard, daylight]. */
const NA_BY_STANDARD_OFFSET = new Map<number, readonly [string, string]>([
  [-600, ['HST', 'HDT']],
  [-540, ['AKST', 'AKDT']],
  [-480, ['PST', 'PDT']],
  [-420, ['MST', 'MDT']],
  [-360, ['CST', 'CDT']],
  [-300, ['EST', 'EDT']],
  [-240, ['AST', 'ADT']],
  [-210, ['NST', 'NDT']],
]);

/** Prefixes of zone names for which the North American offset table is a fair guess. */
const NA_PREFIXES = ['America/', 'US/', 'Canada/', 'Mexico/', 'Pacific/Honolulu', 'Pacific/Johnston', 'Atlantic/Bermuda', 'Etc/'];

function standardOffset(s: ZoneState, ms: number): number {
  const year = new Date(ms).getUTCFullYear();
  let std = s.standard.get(year);
  if (std === undefined) {
    const jan = s.rules.offsetMinutes(Date.UTC(year, 0, 1));
    const jul = s.rules.offsetMinutes(Date.UTC(year, 6, 1));
    std = Math.min(jan, jul); // DST always adds time, in either hemisphere
    s.standard.set(year, std);
  }
  return std;
}

function zoneCode(zone: string, s: ZoneState, ms: number, offsetMin: number, offsetText: string): string {
  const table = ZONE_CODES[zone];
  if (!table) {
    const name = s.rules.name(ms);
    if (s.rules.kind === 'intl' ? intlNameUsable(name) : tzifNameUsable(zone, name)) {
      return name.length <= 10 ? name : offsetText; // `CST`, `EDT`, `GMT`, `UTC`...
    }
  }
  const std = standardOffset(s, ms);
  const dst = offsetMin > std;
  if (table) return table[dst ? 1 : 0];
  if (isNorthAmerican(zone)) {
    const names = NA_BY_STANDARD_OFFSET.get(std);
    if (names) return names[dst ? 1 : 0];
  }
  return offsetText; // `UTC+5:30`: at most 9 characters
}

/** Intl's en-US short names are letters for North American zones and GMT/UTC, else `GMT+1`. */
function intlNameUsable(name: string): boolean {
  return name !== '' && !/^(GMT|UTC)[+-]/.test(name) && !/^HA[SD]T$/.test(name);
}

/**
 * A zoneinfo designation is used where Intl's en-US name would be: letters, in a North
 * American zone, or GMT/UTC anywhere. Elsewhere designations are ambiguous (`IST` is India,
 * Ireland and Israel), so other zones get the offset form, as with Intl.
 */
function tzifNameUsable(zone: string, name: string): boolean {
  if (name === 'GMT' || name === 'UTC') return true;
  return /^[A-Z]{3,5}$/.test(name) && isNorthAmerican(zone);
}

function isNorthAmerican(zone: string): boolean {
  return NA_PREFIXES.some((p) => zone.startsWith(p));
}

export { hasExplicitOffset, localTimeToInstant } from './localtime.js';
export { systemZone, systemZoneFromFiles } from './device-zone.js';
