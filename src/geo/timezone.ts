/**
 * Time zone of a position and the `time` object of interface E, offline.
 *
 * - The zone is looked up at the event's position (a truck crosses zones), with
 *   `@photostructure/tz-lookup` (a compact embedded map, no network, ~0.1 µs a lookup).
 * - Offsets come from the zone rules at that instant (Intl `longOffset`), so DST
 *   transitions are exact.
 * - `timeZoneOffset` is `UTC-6`, `UTC+1`, `UTC-3:30`: no zero padding, minutes only when
 *   not zero, and plain `UTC` for a zero offset (the form `src/api/schemas.ts` accepts).
 * - `timeZoneCode` is the short name carriers write (`CST`, `CDT`, `NST`, `HST`...). Node's
 *   Intl gives most of them in `en-US`, but not all: `GMT-3:30` for America/St_Johns, `GMT-7`
 *   for Hermosillo/Mazatlan/Whitehorse/Dawson, `HAST`/`HADT` for America/Adak. Those go through
 *   a small table, then a table keyed by offset (North American names; zones outside the
 *   Americas fall back to `UTC+5:30` style, which is at most 9 characters).
 *
 * Called per trace point: formatters are cached per zone, and the result of the (relatively
 * expensive) Intl calls is cached per zone and UTC hour, verified at both ends of the hour
 * (an hour holding a transition is never cached), so a backlog of points from the same zone
 * costs a couple of map look-ups each. Measured (Node 20.20, x86-64): `eventTime` ~1 µs per
 * point for a truck's track in time order (zone lookup included), ~19 µs on a cache miss
 * (a new zone or hour: four Intl calls).
 */
import { createRequire } from 'node:module';

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

let systemZoneCache: string | undefined;
/** The zone of the machine (TZ or /etc/localtime), as Intl resolves it. */
export function systemZone(): string {
  return (systemZoneCache ??= Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC');
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
  const info = zoneInfo(zone, ms);
  const dateTime = form === 'utc' ? utcDateTime(ms) : localDateTime(ms, info.offsetMin);
  return { dateTime, timeZoneCode: info.code, timeZoneOffset: info.offsetText };
}

/**
 * `formatTime` at a position: the zone at (lat, lon) when both are finite and on the globe,
 * else `fallbackZone`, else the system zone. Never throws for bad coordinates.
 */
export function eventTime(
  date: Date,
  lat: number | null | undefined,
  lon: number | null | undefined,
  form: DateForm,
  fallbackZone?: string,
): TimeObject {
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

interface ZoneState {
  offsetFmt: Intl.DateTimeFormat;
  nameFmt: Intl.DateTimeFormat;
  /** UTC hour number -> info valid for that whole hour. */
  hours: Map<number, ZoneInfo>;
  /** year -> standard (non-DST) offset in minutes, for the generic naming fallback. */
  standard: Map<number, number>;
}

const HOUR_MS = 3_600_000;
const MAX_HOURS_PER_ZONE = 256;
const zones = new Map<string, ZoneState>();

function zoneState(zone: string): ZoneState {
  let s = zones.get(zone);
  if (!s) {
    // Throws RangeError for a zone Intl does not know: a configuration error worth surfacing.
    s = {
      offsetFmt: new Intl.DateTimeFormat('en-US', { timeZone: zone, timeZoneName: 'longOffset' }),
      nameFmt: new Intl.DateTimeFormat('en-US', { timeZone: zone, timeZoneName: 'short' }),
      hours: new Map(),
      standard: new Map(),
    };
    zones.set(zone, s);
  }
  return s;
}

function zoneInfo(zone: string, ms: number): ZoneInfo {
  const s = zoneState(zone);
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

function offsetMinutesAt(s: ZoneState, ms: number): number {
  return Math.round(parseGmtOffset(tzPart(s.offsetFmt, ms)) ?? 0);
}

function computeInfo(zone: string, s: ZoneState, ms: number): ZoneInfo {
  const offsetMin = offsetMinutesAt(s, ms);
  const offsetText = formatOffset(offsetMin);
  return { offsetMin, offsetText, code: zoneCode(zone, s, ms, offsetMin, offsetText) };
}

/** -360 -> `UTC-6`, -210 -> `UTC-3:30`, 0 -> `UTC`, 345 -> `UTC+5:45`. */
export function formatOffset(offsetMin: number): string {
  if (offsetMin === 0) return 'UTC';
  const abs = Math.abs(offsetMin);
  const h = Math.floor(abs / 60);
  const m = abs % 60;
  return `UTC${offsetMin < 0 ? '-' : '+'}${h}${m ? `:${String(m).padStart(2, '0')}` : ''}`;
}

/** Zones whose Intl (en-US) short name is not what carriers write: [standard, daylight]. */
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
const NA_PREFIXES = ['America/', 'US/', 'Canada/', 'Mexico/', 'Pacific/Honolulu', 'Pacific/Johnston', 'Etc/'];

function standardOffset(s: ZoneState, ms: number): number {
  const year = new Date(ms).getUTCFullYear();
  let std = s.standard.get(year);
  if (std === undefined) {
    const jan = offsetMinutesAt(s, Date.UTC(year, 0, 1));
    const jul = offsetMinutesAt(s, Date.UTC(year, 6, 1));
    std = Math.min(jan, jul); // DST always adds time, in either hemisphere
    s.standard.set(year, std);
  }
  return std;
}

function zoneCode(zone: string, s: ZoneState, ms: number, offsetMin: number, offsetText: string): string {
  const intl = tzPart(s.nameFmt, ms);
  const table = ZONE_CODES[zone];
  if (!table && intl && !/^(GMT|UTC)[+-]/.test(intl) && !/^HA[SD]T$/.test(intl)) {
    return intl.length <= 10 ? intl : offsetText; // `CST`, `EDT`, `GMT`, `UTC`...
  }
  const std = standardOffset(s, ms);
  const dst = offsetMin > std;
  if (table) return table[dst ? 1 : 0];
  if (NA_PREFIXES.some((p) => zone.startsWith(p))) {
    const names = NA_BY_STANDARD_OFFSET.get(std);
    if (names) return names[dst ? 1 : 0];
  }
  return offsetText; // `UTC+5:30`: at most 9 characters
}

function pad2(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

function ymdhms(d: Date): string {
  const y = d.getUTCFullYear();
  const year = y >= 0 && y <= 9999 ? String(y).padStart(4, '0') : String(y);
  return `${year}-${pad2(d.getUTCMonth() + 1)}-${pad2(d.getUTCDate())}T${pad2(d.getUTCHours())}:${pad2(
    d.getUTCMinutes(),
  )}:${pad2(d.getUTCSeconds())}`;
}

function utcDateTime(ms: number): string {
  return `${ymdhms(new Date(ms))}Z`;
}

function localDateTime(ms: number, offsetMin: number): string {
  const local = new Date(ms + offsetMin * 60_000);
  const frac = String(local.getUTCMilliseconds()).padStart(3, '0');
  const abs = Math.abs(offsetMin);
  const sign = offsetMin < 0 ? '-' : '+';
  return `${ymdhms(local)}.${frac}${sign}${pad2(Math.floor(abs / 60))}:${pad2(abs % 60)}`;
}
