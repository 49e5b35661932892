import { describe, it, expect } from 'vitest';
import { formatTime, hasExplicitOffset, localTimeToInstant, systemZoneFromFiles } from '../../src/geo/timezone.js';
import { loadZone } from '../../src/geo/tzif.js';
import { zdump, zdumpChanges } from './zdump.js';

/** The instant as ISO UTC, so that a failure reads as a time, not as a number. */
const utc = (text: string, zone: string) => new Date(localTimeToInstant(text, zone)).toISOString();
/** Where the instant lands in the zone: `2026-03-08T03:30:00.000-05:00`. */
const back = (text: string, zone: string) => formatTime(new Date(localTimeToInstant(text, zone)), zone, 'local').dateTime;

describe('localTimeToInstant: ordinary times', () => {
  it('reads a wall-clock time in the zone given', () => {
    expect(utc('2026-11-23T10:00:00', 'America/Chicago')).toBe('2026-11-23T16:00:00.000Z');
    expect(utc('2026-07-15T10:00:00', 'America/Chicago')).toBe('2026-07-15T15:00:00.000Z');
    expect(utc('2026-11-23T10:00:00', 'America/New_York')).toBe('2026-11-23T15:00:00.000Z');
    expect(utc('2026-07-15T10:00:00', 'America/Los_Angeles')).toBe('2026-07-15T17:00:00.000Z');
    expect(utc('2026-07-15T10:00:00', 'America/Phoenix')).toBe('2026-07-15T17:00:00.000Z');
    expect(utc('2026-07-15T10:00:00', 'Pacific/Honolulu')).toBe('2026-07-15T20:00:00.000Z');
    expect(utc('2026-07-15T10:00:00', 'America/Mexico_City')).toBe('2026-07-15T16:00:00.000Z');
    expect(utc('2026-01-15T10:00:00', 'America/Halifax')).toBe('2026-01-15T14:00:00.000Z');
    expect(utc('2026-01-15T10:00:00', 'Europe/London')).toBe('2026-01-15T10:00:00.000Z');
    expect(utc('2026-07-15T10:00:00', 'Europe/Berlin')).toBe('2026-07-15T08:00:00.000Z');
    expect(utc('2026-07-15T10:00:00', 'Asia/Tokyo')).toBe('2026-07-15T01:00:00.000Z');
    expect(utc('2026-01-15T10:00:00', 'Australia/Sydney')).toBe('2026-01-14T23:00:00.000Z');
    expect(utc('2026-07-15T10:00:00', 'UTC')).toBe('2026-07-15T10:00:00.000Z');
  });

  it('Newfoundland: NST UTC-3:30 in winter, NDT UTC-2:30 in summer', () => {
    expect(utc('2026-01-15T12:00:00', 'America/St_Johns')).toBe('2026-01-15T15:30:00.000Z');
    expect(utc('2026-07-15T12:00:00', 'America/St_Johns')).toBe('2026-07-15T14:30:00.000Z');
  });

  it('a 45-minute offset: Kathmandu, UTC+5:45', () => {
    expect(utc('2026-07-16T01:50:03.123', 'Asia/Kathmandu')).toBe('2026-07-15T20:05:03.123Z');
    expect(utc('2026-01-01T00:00', 'Asia/Kathmandu')).toBe('2025-12-31T18:15:00.000Z');
    // Nepal went from +5:30 to +5:45 at 1986-01-01 00:00: 15 minutes that never were.
    expect(utc('1985-12-31T23:59:59', 'Asia/Kathmandu')).toBe('1985-12-31T18:29:59.000Z');
    expect(utc('1986-01-01T00:10', 'Asia/Kathmandu')).toBe('1985-12-31T18:40:00.000Z');
    expect(back('1986-01-01T00:10', 'Asia/Kathmandu')).toBe('1986-01-01T00:25:00.000+05:45');
    expect(utc('1986-01-01T00:15', 'Asia/Kathmandu')).toBe('1985-12-31T18:30:00.000Z');
  });

  it('accepts minutes, seconds and milliseconds, with T or a space', () => {
    expect(utc('2026-11-23T10:00', 'America/Chicago')).toBe('2026-11-23T16:00:00.000Z');
    expect(utc('2026-11-23 10:00', 'America/Chicago')).toBe('2026-11-23T16:00:00.000Z');
    expect(utc('2026-11-23 10:00:07', 'America/Chicago')).toBe('2026-11-23T16:00:07.000Z');
    expect(utc('2026-11-23T10:00:07.5', 'America/Chicago')).toBe('2026-11-23T16:00:07.500Z');
    expect(utc('2026-11-23T10:00:07.05', 'America/Chicago')).toBe('2026-11-23T16:00:07.050Z');
    expect(utc('2026-11-23T10:00:07.123', 'America/Chicago')).toBe('2026-11-23T16:00:07.123Z');
    expect(utc('2024-02-29T23:59:59.999', 'America/Chicago')).toBe('2024-03-01T05:59:59.999Z');
  });

  it('a year below 100 is that year, not 19xx', () => {
    expect(utc('0050-06-01T00:00', 'UTC')).toBe('0050-06-01T00:00:00.000Z');
  });
});

describe('localTimeToInstant: refusals', () => {
  const FORMAT = /^expected a local date and time YYYY-MM-DDTHH:MM\[:SS\[\.fff\]\] without offset, got /;

  it('anything but YYYY-MM-DDTHH:MM[:SS[.fff]]', () => {
    for (const text of [
      '',
      '2026-11-23',
      '2026-11-23T10',
      '2026-11-23T1000',
      '26-11-23T10:00',
      '2026-1-23T10:00',
      '2026/11/23 10:00',
      '2026-11-23t10:00',
      '2026-11-23  10:00',
      ' 2026-11-23T10:00',
      '2026-11-23T10:00 ',
      '2026-11-23T10:00:00.1234',
      '2026-11-23T10:00:00.',
      '2026-11-23T10:00:00,5',
      '2026-11-23T10:00 UTC',
      'tomorrow 10am',
      '1763913600000',
    ]) {
      expect(() => localTimeToInstant(text, 'America/Chicago'), text).toThrow(RangeError);
      expect(() => localTimeToInstant(text, 'America/Chicago'), text).toThrow(FORMAT);
    }
    expect(() => localTimeToInstant('2026-11-23', 'America/Chicago')).toThrow('expected a local date and time YYYY-MM-DDTHH:MM[:SS[.fff]] without offset, got "2026-11-23"');
  });

  it('a time with an offset or Z: it is an instant already', () => {
    for (const text of ['2026-11-23T16:00:00Z', '2026-11-23T10:00:00-06:00', '2026-11-23T10:00-0600', '2026-11-23T17:00:00.000+01:00']) {
      expect(() => localTimeToInstant(text, 'America/Chicago'), text).toThrow(RangeError);
    }
    expect(() => localTimeToInstant('2026-11-23T16:00:00Z', 'America/Chicago')).toThrow('"2026-11-23T16:00:00Z" carries a UTC offset or Z: it is an instant already, no zone applies');
  });

  it('dates and times that are not on the calendar', () => {
    for (const text of ['2026-02-29T10:00', '2026-02-30T10:00', '2026-04-31T10:00', '2026-13-01T10:00', '2026-00-10T10:00', '2026-11-00T10:00', '2026-11-23T24:00', '2026-11-23T10:60', '2026-11-23T10:00:60']) {
      const message = `${JSON.stringify(text)} is not a date and time that exists on a calendar`;
      expect(() => localTimeToInstant(text, 'America/Chicago'), text).toThrow(message);
    }
  });

  it('an unknown zone', () => {
    expect(() => localTimeToInstant('2026-11-23T10:00', 'Mars/Olympus_Mons')).toThrow(RangeError);
  });
});

describe('localTimeToInstant: clock changes', () => {
  it('US spring forward (Chicago, 2026-03-08 02:00 CST -> 03:00 CDT): the gap moves forward', () => {
    expect(utc('2026-03-08T01:59:59', 'America/Chicago')).toBe('2026-03-08T07:59:59.000Z');
    expect(utc('2026-03-08T02:00', 'America/Chicago')).toBe('2026-03-08T08:00:00.000Z');
    expect(utc('2026-03-08T02:30', 'America/Chicago')).toBe('2026-03-08T08:30:00.000Z');
    expect(back('2026-03-08T02:30', 'America/Chicago')).toBe('2026-03-08T03:30:00.000-05:00');
    expect(utc('2026-03-08T02:59:59.999', 'America/Chicago')).toBe('2026-03-08T08:59:59.999Z');
    expect(utc('2026-03-08T03:00', 'America/Chicago')).toBe('2026-03-08T08:00:00.000Z');
    expect(utc('2026-03-08T03:30', 'America/Chicago')).toBe('2026-03-08T08:30:00.000Z');
  });

  it('US fall back (Chicago, 2026-11-01 02:00 CDT -> 01:00 CST): a repeated time is the first, daylight one', () => {
    expect(utc('2026-11-01T00:59:59', 'America/Chicago')).toBe('2026-11-01T05:59:59.000Z');
    expect(utc('2026-11-01T01:00', 'America/Chicago')).toBe('2026-11-01T06:00:00.000Z');
    expect(utc('2026-11-01T01:30', 'America/Chicago')).toBe('2026-11-01T06:30:00.000Z');
    expect(back('2026-11-01T01:30', 'America/Chicago')).toBe('2026-11-01T01:30:00.000-05:00');
    expect(utc('2026-11-01T01:59:59.999', 'America/Chicago')).toBe('2026-11-01T06:59:59.999Z');
    expect(utc('2026-11-01T02:00', 'America/Chicago')).toBe('2026-11-01T08:00:00.000Z');
    expect(back('2026-11-01T02:00', 'America/Chicago')).toBe('2026-11-01T02:00:00.000-06:00');
  });

  it('EU changes at 01:00 UTC (Berlin, London, 2026-03-29 and 2026-10-25)', () => {
    expect(utc('2026-03-29T01:59:59', 'Europe/Berlin')).toBe('2026-03-29T00:59:59.000Z');
    expect(utc('2026-03-29T02:30', 'Europe/Berlin')).toBe('2026-03-29T01:30:00.000Z');
    expect(back('2026-03-29T02:30', 'Europe/Berlin')).toBe('2026-03-29T03:30:00.000+02:00');
    expect(utc('2026-03-29T03:00', 'Europe/Berlin')).toBe('2026-03-29T01:00:00.000Z');
    expect(utc('2026-10-25T01:59:59', 'Europe/Berlin')).toBe('2026-10-24T23:59:59.000Z');
    expect(utc('2026-10-25T02:30', 'Europe/Berlin')).toBe('2026-10-25T00:30:00.000Z');
    expect(back('2026-10-25T02:30', 'Europe/Berlin')).toBe('2026-10-25T02:30:00.000+02:00');
    expect(utc('2026-10-25T03:00', 'Europe/Berlin')).toBe('2026-10-25T02:00:00.000Z');

    expect(utc('2026-03-29T00:59:59', 'Europe/London')).toBe('2026-03-29T00:59:59.000Z');
    expect(utc('2026-03-29T01:30', 'Europe/London')).toBe('2026-03-29T01:30:00.000Z');
    expect(back('2026-03-29T01:30', 'Europe/London')).toBe('2026-03-29T02:30:00.000+01:00');
    expect(utc('2026-10-25T01:30', 'Europe/London')).toBe('2026-10-25T00:30:00.000Z');
    expect(utc('2026-10-25T02:00', 'Europe/London')).toBe('2026-10-25T02:00:00.000Z');
  });

  it('Newfoundland changes at 02:00 local, half an hour off the UTC hour', () => {
    expect(utc('2026-03-08T01:59:59', 'America/St_Johns')).toBe('2026-03-08T05:29:59.000Z');
    expect(utc('2026-03-08T02:30', 'America/St_Johns')).toBe('2026-03-08T06:00:00.000Z');
    expect(back('2026-03-08T02:30', 'America/St_Johns')).toBe('2026-03-08T03:30:00.000-02:30');
    expect(utc('2026-03-08T03:00', 'America/St_Johns')).toBe('2026-03-08T05:30:00.000Z');
    expect(utc('2026-11-01T01:30', 'America/St_Johns')).toBe('2026-11-01T04:00:00.000Z');
    expect(back('2026-11-01T01:30', 'America/St_Johns')).toBe('2026-11-01T01:30:00.000-02:30');
    expect(utc('2026-11-01T02:00', 'America/St_Johns')).toBe('2026-11-01T05:30:00.000Z');
  });

  it('southern hemisphere, a half-hour DST step, and a skipped day', () => {
    // Sydney falls back on 2026-04-05 03:00 AEDT -> 02:00 AEST.
    expect(utc('2026-04-05T02:30', 'Australia/Sydney')).toBe('2026-04-04T15:30:00.000Z');
    expect(utc('2026-10-04T02:30', 'Australia/Sydney')).toBe('2026-10-03T16:30:00.000Z');
    // Lord Howe moves its clocks by 30 minutes.
    expect(utc('2026-04-05T01:45', 'Australia/Lord_Howe')).toBe('2026-04-04T14:45:00.000Z');
    expect(utc('2026-10-04T02:15', 'Australia/Lord_Howe')).toBe('2026-10-03T15:45:00.000Z');
    expect(back('2026-10-04T02:15', 'Australia/Lord_Howe')).toBe('2026-10-04T02:45:00.000+11:00');
    // Samoa went from UTC-10 to UTC+14 after 2011-12-29: 30 December did not happen there.
    expect(utc('2011-12-30T12:00', 'Pacific/Apia')).toBe('2011-12-30T22:00:00.000Z');
    expect(back('2011-12-30T12:00', 'Pacific/Apia')).toBe('2011-12-31T12:00:00.000+14:00');
  });

  it('a device whose TZ is a POSIX rule (BusyBox, OpenWrt): the rule is the zone', () => {
    const rule = systemZoneFromFiles({ TZ: 'CST6CDT,M3.2.0,M11.1.0' })!;
    expect(utc('2026-11-23T10:00', rule)).toBe('2026-11-23T16:00:00.000Z');
    expect(utc('2026-03-08T02:30', rule)).toBe('2026-03-08T08:30:00.000Z');
    expect(utc('2026-11-01T01:30', rule)).toBe('2026-11-01T06:30:00.000Z');
  });
});

describe('localTimeToInstant against zdump', () => {
  const ZONES = Intl.supportedValuesOf('timeZone').filter((z) => loadZone(z) !== undefined);

  it('at both sides of every change, every zone, 1970 to 2045, and inside every gap and overlap', () => {
    const wrong: string[] = [];
    let checked = 0;
    let gaps = 0;
    let overlaps = 0;
    let skipped = 0;
    const check = (zone: string, local: string, want: number) => {
      checked++;
      const got = localTimeToInstant(local, zone);
      if (got !== want && wrong.length < 10) {
        wrong.push(`${zone} ${local}: ${new Date(got).toISOString()}, want ${new Date(want).toISOString()}`);
      }
    };
    for (const { before, after } of zdumpChanges(zdump(ZONES, 1970, 2046))) {
      const zone = before.zone;
      // Offsets with seconds (local mean time, before 1972 in Liberia): the module works in minutes.
      if (before.offsetS % 60 !== 0 || after.offsetS % 60 !== 0) {
        skipped++;
        continue;
      }
      const step = (after.offsetS - before.offsetS) * 1000; // > 0 spring forward, < 0 fall back
      // The last second before the change is always its first occurrence.
      check(zone, before.local, before.ms);
      // The first second after: in a fall back it was first seen before the change.
      check(zone, after.local, step < 0 ? after.ms + step : after.ms);
      // Halfway through the wall-clock times the change skips or repeats: from the new reading
      // of the change's instant to the old one (overlap), or the other way round (gap).
      const from = after.ms + Math.min(before.offsetS, after.offsetS) * 1000;
      const midLocal = new Date(from + Math.abs(step) / 2).toISOString().slice(0, 23);
      if (step > 0) {
        gaps++;
        check(zone, midLocal, after.ms + step / 2); // moved forward by the gap
      } else if (step < 0) {
        overlaps++;
        check(zone, midLocal, after.ms + step / 2); // the first, before-the-change reading
      }
    }
    expect(wrong).toEqual([]);
    expect(checked).toBeGreaterThan(60_000);
    expect(gaps).toBeGreaterThan(10_000);
    expect(overlaps).toBeGreaterThan(10_000);
    expect(skipped).toBeLessThan(5);
  });

  it('round trip: the local time formatTime gives reads back to the same instant, or its first occurrence', () => {
    const zones = ['America/Chicago', 'America/St_Johns', 'Asia/Kathmandu', 'Australia/Lord_Howe', 'Europe/London', 'Pacific/Apia'];
    for (const zone of zones) {
      for (let ms = Date.UTC(2010, 0, 1); ms < Date.UTC(2030, 0, 1); ms += 19 * 3_600_000 + 13 * 60_000 + 17_001) {
        const local = formatTime(new Date(ms), zone, 'local').dateTime.slice(0, 23);
        const t = localTimeToInstant(local, zone);
        // Equal, or an hour (at most) earlier when `local` comes round twice.
        if (t !== ms) expect([zone, local, ms - t > 0 && ms - t <= 3_600_000]).toEqual([zone, local, true]);
        expect(formatTime(new Date(t), zone, 'local').dateTime.slice(0, 23)).toBe(local);
      }
    }
  });
});

describe('hasExplicitOffset', () => {
  it('Z or a numeric offset after the time of day', () => {
    for (const text of [
      '2026-11-23T16:00:00Z',
      '2026-11-23T16:00:00z',
      '2026-11-23T16:00Z',
      '2026-11-23T16:00:00.123456Z',
      '2026-11-23T10:00:00-06:00',
      '2026-11-23T10:00:00.000-06:00',
      '2026-11-23T10:00:00-0600',
      '2026-11-23T10:00:00-06',
      '2026-11-23T16:00:00+00:00',
      '2026-11-23 10:00:00 -06:00',
      '2026-11-23T21:45:00+05:45',
    ]) {
      expect([text, hasExplicitOffset(text)]).toEqual([text, true]);
    }
  });

  it('not for a local time, a date alone or text that is no date-time', () => {
    for (const text of ['2026-11-23T10:00:00', '2026-11-23T10:00', '2026-11-23 10:00:00.123', '2026-11-23', '2026-11-23T10', '', 'tomorrow', '2026-11-23T10:00 UTC', 'UTC+0', '-06:00']) {
      expect([text, hasExplicitOffset(text)]).toEqual([text, false]);
    }
  });
});
