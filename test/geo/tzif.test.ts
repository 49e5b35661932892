import { describe, it, expect } from 'vitest';
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadZone, parsePosixTz, parseTzif, zoneinfoDir } from '../../src/geo/tzif.js';
import { formatTime, intlSource, ruleSourceOf, systemZoneFromFiles, zoneFieldsVia } from '../../src/geo/timezone.js';
import { zdump } from './zdump.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** Offset in seconds from Intl's `longOffset` (`GMT-05:00`, `GMT+05:45`, `GMT-04:56:02`). */
const intlOffset = (fmt: Intl.DateTimeFormat, ms: number): number => {
  const text = fmt.formatToParts(ms).find((p) => p.type === 'timeZoneName')!.value;
  if (text === 'GMT') return 0;
  const m = /^GMT([+-])(\d{2}):(\d{2})(?::(\d{2}))?$/.exec(text)!;
  const s = Number(m[2]) * 3600 + Number(m[3]) * 60 + Number(m[4] ?? 0);
  return m[1] === '-' ? -s : s;
};
const longOffset = (zone: string) => new Intl.DateTimeFormat('en-US', { timeZone: zone, timeZoneName: 'longOffset' });

/** Every zone Intl knows that has a zoneinfo file here. */
const ZONES = Intl.supportedValuesOf('timeZone').filter((z) => loadZone(z) !== undefined);

const NORTH_AMERICA = [
  'America/Chicago',
  'America/New_York',
  'America/Denver',
  'America/Los_Angeles',
  'America/Phoenix',
  'America/Anchorage',
  'America/Adak',
  'Pacific/Honolulu',
  'America/Halifax',
  'America/St_Johns',
  'America/Regina',
  'America/Winnipeg',
  'America/Toronto',
  'America/Vancouver',
  'America/Edmonton',
  'America/Mexico_City',
  'America/Tijuana',
  'America/Hermosillo',
  'America/Indiana/Indianapolis',
  'America/Kentucky/Louisville',
  'America/Boise',
  'America/Havana',
  'America/Goose_Bay',
  'America/Whitehorse',
];

describe('zoneinfo rules against Intl (the same tz database, read two ways)', () => {
  it('the machine has zoneinfo files for nearly every zone Intl knows', () => {
    expect(zoneinfoDir()).toBe(process.env.TZDIR || '/usr/share/zoneinfo');
    expect(ZONES.length).toBeGreaterThan(400);
    for (const z of NORTH_AMERICA) expect([z, loadZone(z) !== undefined]).toEqual([z, true]);
  });

  it('gives the offset, DST flag and name the C library gives at every change, every zone, 1990 to 2045', () => {
    // zdump reads the same files through glibc: an oracle of the same tz version, unlike Intl
    // (ICU carries its own copy, often a release or more apart from the system's).
    const rules = new Map(ZONES.map((z) => [z, loadZone(z)!]));
    let checked = 0;
    const wrong: string[] = [];
    for (const { zone, ms, offsetS, isDst, abbr } of zdump(ZONES, 1990, 2046)) {
      const got = rules.get(zone)!.at(ms);
      const want = { offsetS, isDst, abbr };
      checked++;
      if ((got.offsetS !== want.offsetS || got.isDst !== want.isDst || got.abbr !== want.abbr) && wrong.length < 10) {
        wrong.push(`${zone} ${new Date(ms).toISOString()}: ${JSON.stringify(got)} vs ${JSON.stringify(want)}`);
      }
    }
    expect(wrong).toEqual([]);
    // Both sides of each change: tens of thousands across the zones.
    expect(checked).toBeGreaterThan(20_000);
  });

  it('names zones as the Intl path does, wherever the two databases agree on the offset', () => {
    // Where they disagree, the system's tzdata and ICU's copy are different releases (2026:
    // Morocco, Alberta); those instants are counted, and must stay a small part of the whole.
    const wrong: string[] = [];
    let compared = 0;
    let differ = 0;
    for (const zone of ZONES) {
      const rules = loadZone(zone)!;
      const tzif = { kind: 'tzif' as const, offsetMinutes: (ms: number) => Math.round(rules.at(ms).offsetS / 60), name: (ms: number) => rules.at(ms).abbr };
      const intl = intlSource(zone);
      const fmt = longOffset(zone);
      // 9 days, 5 hours and a minute apart: every hour of the day and day of the week comes up.
      for (let ms = Date.UTC(1990, 0, 1); ms < Date.UTC(2045, 0, 1); ms += 9 * DAY + 5 * HOUR + 60_000) {
        if (rules.at(ms).offsetS !== intlOffset(fmt, ms)) {
          differ++;
          continue;
        }
        compared++;
        // Names over past years only: a newer tzdata renames future times too (2026f: Alberta
        // keeps UTC-6 all year from November 2026 and calls it CST, where ICU's copy has MDT).
        if (ms < Date.UTC(2018, 0, 1) || ms >= Date.UTC(2026, 0, 1)) continue;
        const a = zoneFieldsVia(tzif, zone, ms);
        const b = zoneFieldsVia(intl, zone, ms);
        if ((a.code !== b.code || a.offsetText !== b.offsetText) && wrong.length < 10) wrong.push(`${zone} ${new Date(ms).toISOString()}: ${a.code} ${a.offsetText} vs ${b.code} ${b.offsetText}`);
      }
    }
    // The one difference: Antarctica/Troll is `+00` in tzdb (so `UTC+0`), `GMT` in Intl.
    expect(wrong.filter((w) => !w.startsWith('Antarctica/Troll '))).toEqual([]);
    expect(compared).toBeGreaterThan(800_000);
    expect(differ / (compared + differ)).toBeLessThan(0.01);
  });

  it('formatTime refuses instants whose local time a Date cannot hold', () => {
    expect(() => formatTime(new Date(8.64e15), 'Australia/Sydney', 'local')).toThrow(/out of range/);
    expect(() => formatTime(new Date(-8.64e15), 'America/Chicago', 'utc')).toThrow(/out of range/);
    expect(loadZone('Australia/Sydney')!.at(8.64e15).offsetS).toBe(36000);
  });

  it('formatTime reads zoneinfo, not Intl, where the file is there', () => {
    expect(ruleSourceOf('America/Chicago')).toBe('tzif');
    expect(formatTime(new Date('2026-03-08T08:00:00Z'), 'America/Chicago', 'local')).toEqual({
      dateTime: '2026-03-08T03:00:00.000-05:00',
      timeZoneCode: 'CDT',
      timeZoneOffset: 'UTC-5',
    });
    expect(formatTime(new Date('2026-07-01T12:00:00Z'), 'America/Havana', 'local').timeZoneCode).toBe('EDT');
    expect(formatTime(new Date('2026-07-01T12:00:00Z'), 'Atlantic/Bermuda', 'local').timeZoneCode).toBe('ADT');
    expect(formatTime(new Date('2026-07-01T12:00:00Z'), 'Asia/Kolkata', 'local').timeZoneCode).toBe('UTC+5:30');
    expect(formatTime(new Date('2026-01-01T12:00:00Z'), 'Europe/London', 'local').timeZoneCode).toBe('GMT');
    expect(formatTime(new Date('2026-07-01T12:00:00Z'), 'Europe/London', 'local').timeZoneCode).toBe('UTC+1');
  });
});

describe('a device without tzdata', () => {
  it('falls back to Intl for a zone with no file, with the same answers', () => {
    const saved = process.env.TZDIR;
    process.env.TZDIR = mkdtempSync(join(tmpdir(), 'no-zoneinfo-'));
    try {
      expect(loadZone('America/Regina')).toBeUndefined();
      const july = formatTime(new Date('2026-07-15T20:05:03.123Z'), 'America/Regina', 'local');
      expect(ruleSourceOf('America/Regina')).toBe('intl');
      expect(july).toEqual({ dateTime: '2026-07-15T14:05:03.123-06:00', timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' });
      // Zero offset: Intl names it as the zoneinfo files do, and the offset is UTC+0 either way
      // (zones not looked up earlier in this file, so that they do come from Intl).
      const jan = new Date('2026-01-15T20:05:03.123Z');
      const jul = new Date('2026-07-15T20:05:03.123Z');
      expect(formatTime(jan, 'Europe/Jersey', 'local')).toMatchObject({ timeZoneCode: 'GMT', timeZoneOffset: 'UTC+0' });
      expect(formatTime(jul, 'Europe/Jersey', 'local')).toMatchObject({ timeZoneCode: 'UTC+1', timeZoneOffset: 'UTC+1' });
      expect(formatTime(jan, 'Africa/Dakar', 'local')).toMatchObject({ timeZoneCode: 'GMT', timeZoneOffset: 'UTC+0' });
      expect(formatTime(jan, 'Etc/UTC', 'local')).toMatchObject({ timeZoneCode: 'UTC', timeZoneOffset: 'UTC+0' });
      for (const z of ['Europe/Jersey', 'Africa/Dakar', 'Etc/UTC']) expect([z, ruleSourceOf(z)]).toEqual([z, 'intl']);
      expect(() => formatTime(new Date(), 'Mars/Olympus_Mons', 'local')).toThrow(RangeError);
    } finally {
      if (saved === undefined) delete process.env.TZDIR;
      else process.env.TZDIR = saved;
    }
  });
});

describe('POSIX TZ rules (the footer of a zoneinfo file)', () => {
  const at = (rule: string, iso: string) => {
    const t = parsePosixTz(rule).atSecond(Date.parse(iso) / 1000);
    return [t.abbr, t.offsetS / 3600, t.isDst];
  };

  it('US rules: second Sunday of March 02:00 local standard, first Sunday of November 02:00 local daylight', () => {
    const chicago = 'CST6CDT,M3.2.0,M11.1.0';
    expect(at(chicago, '2031-03-09T07:59:59Z')).toEqual(['CST', -6, false]);
    expect(at(chicago, '2031-03-09T08:00:00Z')).toEqual(['CDT', -5, true]);
    expect(at(chicago, '2031-11-02T06:59:59Z')).toEqual(['CDT', -5, true]);
    expect(at(chicago, '2031-11-02T07:00:00Z')).toEqual(['CST', -6, false]);
  });

  it('a half-hour zone, and a name in angle brackets with no DST', () => {
    expect(at('NST3:30NDT,M3.2.0,M11.1.0', '2031-07-01T00:00:00Z')).toEqual(['NDT', -2.5, true]);
    expect(at('<-03>3', '2031-07-01T00:00:00Z')).toEqual(['-03', -3, false]);
    expect(at('<+0545>-5:45', '2031-07-01T00:00:00Z')).toEqual(['+0545', 5.75, false]);
  });

  it('southern hemisphere: DST spans the new year; a DST step of 30 minutes', () => {
    const lordHowe = '<+1030>-10:30<+11>-11,M10.1.0,M4.1.0';
    expect(at(lordHowe, '2031-01-15T00:00:00Z')).toEqual(['+11', 11, true]);
    expect(at(lordHowe, '2031-07-15T00:00:00Z')).toEqual(['+1030', 10.5, false]);
    const sydney = 'AEST-10AEDT,M10.1.0,M4.1.0/3';
    // First Sunday of April 2031 is the 6th: 03:00 AEDT = 16:00Z on the 5th.
    expect(at(sydney, '2031-04-05T15:59:59Z')).toEqual(['AEDT', 11, true]);
    expect(at(sydney, '2031-04-05T16:00:00Z')).toEqual(['AEST', 10, false]);
  });

  it('version 3 times (beyond 24 h, negative), Jn and zero-based n dates, last week of the month', () => {
    // Israel: Friday before the last Sunday of March at 02:00 = "Thursday 26:00".
    const israel = 'IST-2IDT,M3.4.4/26,M10.5.0';
    expect(at(israel, '2031-03-27T23:59:59Z')).toEqual(['IST', 2, false]);
    expect(at(israel, '2031-03-28T00:00:00Z')).toEqual(['IDT', 3, true]);
    // Greenland: last Sunday of March (the 30th in 2031) at -01:00 local standard time.
    const nuuk = '<-02>2<-01>,M3.5.0/-1,M10.5.0/0';
    expect(at(nuuk, '2031-03-30T00:59:59Z')).toEqual(['-02', -2, false]);
    expect(at(nuuk, '2031-03-30T01:00:00Z')).toEqual(['-01', -1, true]);
    // J60 is 1 March in every year; zero-based 59 is 29 February in a leap year.
    expect(at('XST5XDT,J60/0,J300/0', '2032-03-01T04:59:59Z')).toEqual(['XST', -5, false]);
    expect(at('XST5XDT,J60/0,J300/0', '2032-03-01T05:00:00Z')).toEqual(['XDT', -4, true]);
    expect(at('XST5XDT,59/0,300/0', '2032-02-29T05:00:00Z')).toEqual(['XDT', -4, true]);
    expect(at('XST5XDT,59/0,300/0', '2032-02-29T04:59:59Z')).toEqual(['XST', -5, false]);
    // Daylight all year (the version 3 idiom).
    expect(at('EST5EDT,0/0,J365/25', '2031-07-01T00:00:00Z')).toEqual(['EDT', -4, true]);
    expect(at('EST5EDT,0/0,J365/25', '2031-12-31T23:00:00Z')).toEqual(['EDT', -4, true]);
  });

  it('a change carried into the next or the previous year by its time', () => {
    // Daylight time ends on 31 December at 30:00, i.e. 1 January 05:00 local daylight time.
    expect(at('AAA5BBB,M3.2.0,J365/30', '2026-01-01T06:00:00Z')).toEqual(['BBB', -4, true]);
    expect(at('AAA5BBB,M3.2.0,J365/30', '2026-01-01T10:00:00Z')).toEqual(['AAA', -5, false]);
    // Daylight time starts on 1 January at -03:00, i.e. 31 December 21:00 local standard time.
    expect(at('AAA5BBB,J1/-3,J300', '2026-01-01T03:00:00Z')).toEqual(['BBB', -4, true]);
    expect(at('AAA5BBB,J1/-3,J300', '2026-01-01T01:59:59Z')).toEqual(['AAA', -5, false]);
  });

  it('rejects what is not a TZ string, naming where', () => {
    expect(() => parsePosixTz('')).toThrow(/expected a zone name at 0/);
    expect(() => parsePosixTz('CST6CDT,M13.1.0,M11.1.0')).toThrow(/bad Mm\.w\.d/);
    expect(() => parsePosixTz('CST6CDT,M3.2.0')).toThrow(/expected the end rule/);
    expect(() => parsePosixTz('<CST6')).toThrow(/unterminated/);
  });
});

/** A TZif file: version 1 (32-bit only) or 2 (32-bit block, 64-bit block, footer). */
function tzif(version: 1 | 2, transitions: number[], idx: number[], types: Array<[number, number, number]>, chars: string, footer = ''): Buffer {
  const block = (size: 4 | 8) => {
    const head = Buffer.alloc(44);
    head.write('TZif', 0, 'latin1');
    head[4] = version === 1 ? 0 : 0x32;
    [0, 0, 0, transitions.length, types.length, chars.length].forEach((n, i) => head.writeUInt32BE(n, 20 + i * 4));
    const times = Buffer.alloc(transitions.length * size);
    transitions.forEach((t, i) => (size === 8 ? times.writeBigInt64BE(BigInt(t), i * 8) : times.writeInt32BE(t, i * 4)));
    const tt = Buffer.alloc(types.length * 6);
    types.forEach(([off, dst, ai], i) => {
      tt.writeInt32BE(off, i * 6);
      tt[i * 6 + 4] = dst;
      tt[i * 6 + 5] = ai;
    });
    return Buffer.concat([head, times, Buffer.from(idx), tt, Buffer.from(chars, 'latin1')]);
  };
  return version === 1 ? block(4) : Buffer.concat([block(4), block(8), Buffer.from(`\n${footer}\n`, 'latin1')]);
}

describe('TZif files', () => {
  const types: Array<[number, number, number]> = [
    [-21600, 0, 0],
    [-18000, 1, 4],
  ];
  const chars = 'CST\0CDT\0';
  const t1 = Date.UTC(2030, 2, 10, 8) / 1000;
  const t2 = Date.UTC(2030, 10, 3, 7) / 1000;

  it('reads transitions from a version 2 file and follows its footer after the last one', () => {
    const rules = parseTzif(tzif(2, [t1, t2], [1, 0], types, chars, 'CST6CDT,M3.2.0,M11.1.0'));
    expect(rules.at(t1 * 1000 - 1000)).toEqual({ offsetS: -21600, isDst: false, abbr: 'CST' });
    expect(rules.at(t1 * 1000)).toEqual({ offsetS: -18000, isDst: true, abbr: 'CDT' });
    expect(rules.at(t2 * 1000)).toEqual({ offsetS: -21600, isDst: false, abbr: 'CST' });
    expect(rules.at(Date.UTC(2031, 6, 1))).toEqual({ offsetS: -18000, isDst: true, abbr: 'CDT' });
  });

  it('reads a version 1 file (no footer: the last type stays)', () => {
    const rules = parseTzif(tzif(1, [t1, t2], [1, 0], types, chars));
    expect(rules.at(t1 * 1000).abbr).toBe('CDT');
    expect(rules.at(Date.UTC(2031, 6, 1)).abbr).toBe('CST');
    expect(rules.at(0).abbr).toBe('CST');
  });

  it('a file without transitions follows its footer', () => {
    const rules = parseTzif(tzif(2, [], [], [[0, 0, 0]], 'UTC\0', 'UTC0'));
    expect(rules.at(Date.UTC(2031, 0, 1))).toEqual({ offsetS: 0, isDst: false, abbr: 'UTC' });
  });

  it('refuses truncated and foreign files, and zone names that leave the directory', () => {
    const good = tzif(2, [t1, t2], [1, 0], types, chars, 'CST6CDT,M3.2.0,M11.1.0');
    expect(() => parseTzif(good.subarray(0, 60))).toThrow(/truncated/);
    expect(() => parseTzif(Buffer.from('#!/bin/sh\necho hello\n'))).toThrow(/not a TZif file/);
    expect(() => parseTzif(tzif(2, [t1], [5], types, chars))).toThrow(/missing type/);
    const dir = mkdtempSync(join(tmpdir(), 'zoneinfo-'));
    mkdirSync(join(dir, 'America'));
    writeFileSync(join(dir, 'America', 'Chicago'), good);
    writeFileSync(join(dir, 'America', 'Junk'), 'not a zone');
    expect(loadZone('America/Chicago', dir)?.at(t1 * 1000).abbr).toBe('CDT');
    expect(loadZone('America/Junk', dir)).toBeUndefined();
    expect(loadZone('America/Nowhere', dir)).toBeUndefined();
    expect(loadZone('../etc/passwd', dir)).toBeUndefined();
    expect(loadZone('/etc/passwd', dir)).toBeUndefined();
    expect(loadZone('America/../../x', dir)).toBeUndefined();
  });
});

describe('the machine zone without Intl', () => {
  // The zone name is what follows `zoneinfo/` in the link's target, as with /usr/share/zoneinfo.
  const dir = join(mkdtempSync(join(tmpdir(), 'tz-')), 'zoneinfo');
  mkdirSync(join(dir, 'America'), { recursive: true });
  writeFileSync(join(dir, 'America', 'Chicago'), tzif(2, [], [], [[-21600, 0, 0]], 'CST\0', 'CST6CDT,M3.2.0,M11.1.0'));
  writeFileSync(join(dir, 'UTC'), tzif(2, [], [], [[0, 0, 0]], 'UTC\0', 'UTC0'));
  const etc = mkdtempSync(join(tmpdir(), 'etc-'));
  symlinkSync(join(dir, 'America', 'Chicago'), join(etc, 'localtime'));
  writeFileSync(join(etc, 'timezone'), 'UTC\n');
  const none = join(etc, 'none');

  it('TZ first (with or without the colon, or a path), empty TZ is UTC', () => {
    expect(systemZoneFromFiles({ TZ: 'America/Chicago' }, none, none, dir)).toBe('America/Chicago');
    expect(systemZoneFromFiles({ TZ: ':America/Chicago' }, none, none, dir)).toBe('America/Chicago');
    expect(systemZoneFromFiles({ TZ: '/usr/share/zoneinfo/America/Chicago' }, none, none, dir)).toBe('America/Chicago');
    expect(systemZoneFromFiles({ TZ: '' }, none, none, dir)).toBe('UTC');
    // A TZ naming no file: undefined, so that Intl decides, as the C library would for TZ.
    expect(systemZoneFromFiles({ TZ: 'Mars/Olympus' }, join(etc, 'localtime'), none, dir)).toBeUndefined();
  });

  it('a POSIX rule or a file path in TZ becomes a zone of its own', () => {
    const rule = 'CST6CDT,M3.2.0,M11.1.0';
    expect(systemZoneFromFiles({ TZ: rule }, none, none, dir)).toBe(rule);
    expect(formatTime(new Date('2026-07-15T20:00:00Z'), rule, 'local').dateTime).toBe('2026-07-15T15:00:00.000-05:00');
    expect(formatTime(new Date('2026-01-15T20:00:00Z'), rule, 'local').timeZoneOffset).toBe('UTC-6');
    const file = join(etc, 'mytz');
    writeFileSync(file, tzif(2, [], [], [[-21600, 0, 0]], 'CST\0', 'CST6CDT,M3.2.0,M11.1.0'));
    expect(systemZoneFromFiles({ TZ: `:${file}` }, none, none, dir)).toBe(file);
    expect(formatTime(new Date('2026-07-15T20:00:00Z'), file, 'local').timeZoneOffset).toBe('UTC-5');
  });

  it('then the /etc/localtime link, then /etc/timezone', () => {
    expect(systemZoneFromFiles({}, join(etc, 'localtime'), join(etc, 'timezone'), dir)).toBe('America/Chicago');
    expect(systemZoneFromFiles({}, none, join(etc, 'timezone'), dir)).toBe('UTC');
    expect(systemZoneFromFiles({}, none, none, dir)).toBeUndefined();
  });
});
