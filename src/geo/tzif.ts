/**
 * Time zone rules read from the system's zoneinfo files (TZif, RFC 8536), without `Intl`.
 *
 * Why not `Intl`: the first `Intl` time-zone lookup maps about 8 MB of ICU data and code into
 * the process, for good (measured on Node 20: +7.7 MB RSS). The zoneinfo file of a zone is
 * 1-3 KB, and the same tz database every other program on the device uses.
 *
 * - Transitions come from the 64-bit (version 2+) data block; instants after the last one
 *   follow the POSIX TZ rule in the file's footer (`CST6CDT,M3.2.0,M11.1.0`), including the
 *   version 3 extensions (hours beyond 24 and negative transition times).
 * - Instants before the first transition use the first local time type, as RFC 8536 says.
 * - `loadZone` returns undefined when there is no such file or it is not a TZif file, so that
 *   the caller can fall back to `Intl` (a device without tzdata, or a zone name only ICU knows).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface LocalTimeType {
  /** Seconds east of UTC. */
  offsetS: number;
  isDst: boolean;
  /** Designation as the file gives it: `CST`, `NDT`, `-03`, `+0530`... */
  abbr: string;
}

export interface ZoneRules {
  /** The local time type in force at `ms` (milliseconds since the epoch). */
  at(ms: number): LocalTimeType;
}

/** Where zoneinfo files live: `TZDIR` (as glibc honours it), else the usual place. */
export function zoneinfoDir(): string {
  return process.env.TZDIR || '/usr/share/zoneinfo';
}

/** `America/Chicago`, `Etc/GMT+6`, `EST5EDT`: path segments of letters, digits, `_`, `+`, `-`. */
const ZONE_NAME = /^[A-Za-z][A-Za-z0-9_+-]*(?:\/[A-Za-z0-9_+-]+)*$/;

/** The rules of `zone` from `dir`, or undefined when there is no readable TZif file for it. */
export function loadZone(zone: string, dir = zoneinfoDir()): ZoneRules | undefined {
  if (!ZONE_NAME.test(zone) || zone.length > 64) return undefined;
  try {
    return parseTzif(readFileSync(join(dir, zone)));
  } catch {
    return undefined; // not there, not readable, or not a TZif file
  }
}

/** Rules that are only a POSIX TZ string (`CST6CDT,M3.2.0,M11.1.0`); throws if it is not one. */
export function posixZone(text: string): ZoneRules {
  const rule = parsePosixTz(text);
  return { at: (ms) => rule.atSecond(Math.floor(ms / 1000)) };
}

class TzifRules implements ZoneRules {
  constructor(
    /** Transition instants, seconds since the epoch, ascending. */
    private readonly times: Float64Array,
    /** Local time type index after each transition. */
    private readonly idx: Uint8Array,
    private readonly types: LocalTimeType[],
    private readonly footer: PosixRule | undefined,
  ) {}

  at(ms: number): LocalTimeType {
    const t = Math.floor(ms / 1000);
    const n = this.times.length;
    if (n === 0 || t < this.times[0]) {
      return n === 0 && this.footer ? this.footer.atSecond(t) : this.types[0];
    }
    if (t >= this.times[n - 1] && this.footer) return this.footer.atSecond(t);
    // Last transition at or before t.
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.times[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    return this.types[this.idx[lo]];
  }
}

/** Parse a TZif file (versions 1 to 4). Throws on anything malformed. */
export function parseTzif(buf: Buffer): ZoneRules {
  const header = (at: number) => {
    if (buf.length < at + 44) throw new Error(buf.length >= 4 && buf.toString('latin1', 0, 4) === 'TZif' ? 'truncated TZif file' : 'not a TZif file');
    if (buf.toString('latin1', at, at + 4) !== 'TZif') throw new Error('not a TZif file');
    return {
      version: buf[at + 4],
      isutcnt: buf.readUInt32BE(at + 20),
      isstdcnt: buf.readUInt32BE(at + 24),
      leapcnt: buf.readUInt32BE(at + 28),
      timecnt: buf.readUInt32BE(at + 32),
      typecnt: buf.readUInt32BE(at + 36),
      charcnt: buf.readUInt32BE(at + 40),
    };
  };
  const blockSize = (h: ReturnType<typeof header>, timeSize: number) => h.timecnt * timeSize + h.timecnt + h.typecnt * 6 + h.charcnt + h.leapcnt * (timeSize + 4) + h.isstdcnt + h.isutcnt;

  const v1 = header(0);
  let h = v1;
  let pos = 44;
  let timeSize = 4;
  if (v1.version >= 0x32 /* '2' */) {
    // Skip the 32-bit block; everything we read is in the 64-bit one that follows.
    pos = 44 + blockSize(v1, 4);
    h = header(pos);
    pos += 44;
    timeSize = 8;
  }
  if (h.typecnt === 0 || buf.length < pos + blockSize(h, timeSize)) throw new Error('truncated TZif file');

  const times = new Float64Array(h.timecnt);
  for (let i = 0; i < h.timecnt; i++) {
    times[i] = timeSize === 8 ? Number(buf.readBigInt64BE(pos + i * 8)) : buf.readInt32BE(pos + i * 4);
  }
  pos += h.timecnt * timeSize;
  const idx = Uint8Array.from(buf.subarray(pos, pos + h.timecnt));
  pos += h.timecnt;
  for (const i of idx) if (i >= h.typecnt) throw new Error('TZif transition names a missing type');
  const typeAt = pos;
  pos += h.typecnt * 6;
  const chars = buf.subarray(pos, pos + h.charcnt);
  pos += h.charcnt;
  const types: LocalTimeType[] = [];
  for (let i = 0; i < h.typecnt; i++) {
    const o = typeAt + i * 6;
    const start = buf[o + 5];
    const end = chars.indexOf(0, start);
    types.push({
      offsetS: buf.readInt32BE(o),
      isDst: buf[o + 4] === 1,
      abbr: chars.toString('latin1', start, end < 0 ? chars.length : end),
    });
  }
  pos += h.leapcnt * (timeSize + 4) + h.isstdcnt + h.isutcnt;

  let footer: PosixRule | undefined;
  if (timeSize === 8 && buf[pos] === 0x0a) {
    const end = buf.indexOf(0x0a, pos + 1);
    const text = buf.toString('latin1', pos + 1, end < 0 ? buf.length : end);
    if (text) footer = parsePosixTz(text);
  }
  return new TzifRules(times, idx, types, footer);
}

// ---- POSIX TZ strings (the footer) -----------------------------------------------------------

/** A date rule of a POSIX TZ string: `Jn` (1-365, no Feb 29), `n` (0-365), or `Mm.w.d`. */
type DateRule = { kind: 'J'; day: number } | { kind: 'n'; day: number } | { kind: 'M'; month: number; week: number; weekday: number };

interface Transition {
  date: DateRule;
  /** Seconds after local midnight (may be negative or beyond 24 h). */
  time: number;
}

export interface PosixRule {
  /** The local time type at `t`, in seconds since the epoch (not ms, unlike ZoneRules). */
  atSecond(t: number): LocalTimeType;
}

/**
 * Parse a POSIX TZ string such as `EST5EDT,M3.2.0,M11.1.0`, `<-03>3`, `NST3:30NDT,M3.2.0,M11.1.0`
 * or `<+1030>-10:30<+11>-11,M10.1.0,M4.1.0`. Offsets in the string count west of UTC.
 */
export function parsePosixTz(text: string): PosixRule {
  let i = 0;
  const fail = (what: string): never => {
    throw new Error(`bad POSIX TZ string ${JSON.stringify(text)}: ${what} at ${i}`);
  };
  const name = (): string => {
    if (text[i] === '<') {
      const end = text.indexOf('>', i);
      if (end < 0) fail('unterminated <name>');
      const n = text.slice(i + 1, end);
      i = end + 1;
      return n;
    }
    const m = /^[A-Za-z]{3,}/.exec(text.slice(i));
    if (!m) return fail('expected a zone name');
    i += m[0].length;
    return m[0];
  };
  /** `[+-]hh[:mm[:ss]]` in seconds. */
  const hms = (): number => {
    const m = /^([+-]?)(\d{1,3})(?::(\d{1,2}))?(?::(\d{1,2}))?/.exec(text.slice(i));
    if (!m) return fail('expected a time');
    i += m[0].length;
    const s = Number(m[2]) * 3600 + Number(m[3] ?? 0) * 60 + Number(m[4] ?? 0);
    return m[1] === '-' ? -s : s;
  };
  const transition = (): Transition => {
    let date: DateRule;
    const rest = text.slice(i);
    let m: RegExpExecArray | null;
    if ((m = /^M(\d{1,2})\.(\d)\.(\d)/.exec(rest))) {
      date = { kind: 'M', month: Number(m[1]), week: Number(m[2]), weekday: Number(m[3]) };
      if (date.month < 1 || date.month > 12 || date.week < 1 || date.week > 5 || date.weekday > 6) fail('bad Mm.w.d');
    } else if ((m = /^J(\d{1,3})/.exec(rest))) {
      date = { kind: 'J', day: Number(m[1]) };
      if (date.day < 1 || date.day > 365) fail('bad Jn');
    } else if ((m = /^(\d{1,3})/.exec(rest))) {
      date = { kind: 'n', day: Number(m[1]) };
      if (date.day > 365) fail('bad n');
    } else {
      return fail('expected a date rule');
    }
    i += m[0].length;
    let time = 7200;
    if (text[i] === '/') {
      i += 1;
      time = hms();
    }
    return { date, time };
  };

  const stdAbbr = name();
  const stdOffset = -hms() || 0; // no -0
  const std: LocalTimeType = { offsetS: stdOffset, isDst: false, abbr: stdAbbr };
  if (i === text.length) return { atSecond: () => std };

  const dstAbbr = name();
  let dstOffset = stdOffset + 3600;
  if (text[i] !== ',' && i < text.length) dstOffset = -hms() || 0;
  const dst: LocalTimeType = { offsetS: dstOffset, isDst: true, abbr: dstAbbr };
  // Without rules, POSIX leaves the dates to the implementation; the US rules are the usual choice.
  let start: Transition = { date: { kind: 'M', month: 3, week: 2, weekday: 0 }, time: 7200 };
  let end: Transition = { date: { kind: 'M', month: 11, week: 1, weekday: 0 }, time: 7200 };
  if (text[i] === ',') {
    i += 1;
    start = transition();
    if (text[i] !== ',') fail('expected the end rule');
    i += 1;
    end = transition();
  }
  if (i !== text.length) fail('unexpected text');

  return {
    atSecond(t: number): LocalTimeType {
      const year = new Date((t + stdOffset) * 1000).getUTCFullYear();
      if (!Number.isFinite(year)) return std;
      // The latest change at or before t, among the years around it: a rule's time may carry
      // a change into the year before or after (`J365/30`, `J1/-3`). Start is given in
      // standard time, end in daylight time; at a tie the start wins (`0/0,J365/25` is
      // daylight time all year).
      let latest = -Infinity;
      let type = std;
      for (let y = year - 1; y <= year + 1; y++) {
        const s = ruleDay(y, start.date) + start.time - stdOffset;
        const e = ruleDay(y, end.date) + end.time - dstOffset;
        if (s <= t && s >= latest) {
          latest = s;
          type = dst;
        }
        if (e <= t && e > latest) {
          latest = e;
          type = std;
        }
      }
      return type;
    },
  };
}

/** Seconds since the epoch of local midnight (as if UTC) of the rule's day in `year`. */
function ruleDay(year: number, r: DateRule): number {
  const jan1 = Date.UTC(year, 0, 1) / 1000;
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  if (r.kind === 'n') return jan1 + r.day * 86400;
  if (r.kind === 'J') return jan1 + (r.day - 1 + (leap && r.day >= 60 ? 1 : 0)) * 86400;
  // Mm.w.d: the w-th weekday d of month m; week 5 means the last one.
  const first = Date.UTC(year, r.month - 1, 1) / 1000;
  const firstWeekday = new Date(first * 1000).getUTCDay();
  let day = 1 + ((r.weekday - firstWeekday + 7) % 7) + (r.week - 1) * 7;
  const daysInMonth = new Date(Date.UTC(year, r.month, 0)).getUTCDate();
  while (day > daysInMonth) day -= 7;
  return first + (day - 1) * 86400;
}
