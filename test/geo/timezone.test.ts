import { describe, it, expect } from 'vitest';
import { eventTime, formatOffset, formatTime, systemZone, systemZoneFromFiles, zoneAt, type TimeObject } from '../../src/geo/timezone.js';
import { timeSchema, timeZoneOffsetSchema } from '../../src/api/schemas.js';

const JAN = new Date('2026-01-15T20:05:03.123Z');
const JUL = new Date('2026-07-15T20:05:03.123Z');

const CHICAGO = [41.8781, -87.6298] as const;
const ST_JOHNS = [47.5615, -52.7126] as const;
const PHOENIX = [33.4484, -112.074] as const;
const REGINA = [50.4452, -104.6189] as const;
const HONOLULU = [21.3069, -157.8583] as const;
const HERMOSILLO = [29.0729, -110.9559] as const;
const MEXICO_CITY = [19.4326, -99.1332] as const;
const INDIANAPOLIS = [39.7684, -86.1581] as const;

describe('zoneAt', () => {
  it('finds the zone at positions across the continent', () => {
    expect(zoneAt(...CHICAGO)).toBe('America/Chicago');
    expect(zoneAt(...ST_JOHNS)).toBe('America/St_Johns');
    expect(zoneAt(...PHOENIX)).toBe('America/Phoenix');
    expect(zoneAt(...REGINA)).toBe('America/Regina');
    expect(zoneAt(...HONOLULU)).toBe('Pacific/Honolulu');
    expect(zoneAt(...HERMOSILLO)).toBe('America/Hermosillo');
    expect(zoneAt(...MEXICO_CITY)).toBe('America/Mexico_City');
    expect(zoneAt(...INDIANAPOLIS)).toMatch(/^America\/Indiana/);
  });

  it('rejects coordinates that are not on the globe', () => {
    expect(() => zoneAt(91, 0)).toThrow(RangeError);
    expect(() => zoneAt(0, -181)).toThrow(RangeError);
    expect(() => zoneAt(Number.NaN, 0)).toThrow(RangeError);
  });
});

describe('eventTime, local form (the spec: local time, milliseconds, offset)', () => {
  it('Chicago in January is CST, UTC-6', () => {
    expect(eventTime(JAN, ...CHICAGO, 'local')).toEqual({
      dateTime: '2026-01-15T14:05:03.123-06:00',
      timeZoneCode: 'CST',
      timeZoneOffset: 'UTC-6',
    });
  });

  it('Chicago in July is CDT, UTC-5', () => {
    expect(eventTime(JUL, ...CHICAGO, 'local')).toEqual({
      dateTime: '2026-07-15T15:05:03.123-05:00',
      timeZoneCode: 'CDT',
      timeZoneOffset: 'UTC-5',
    });
  });

  it("St. John's keeps its half hour: NST UTC-3:30 in winter, NDT UTC-2:30 in summer", () => {
    const winter = eventTime(JAN, ...ST_JOHNS, 'local');
    expect(winter).toEqual({ dateTime: '2026-01-15T16:35:03.123-03:30', timeZoneCode: 'NST', timeZoneOffset: 'UTC-3:30' });
    expect(winter.dateTime.endsWith('-03:30')).toBe(true);
    expect(eventTime(JUL, ...ST_JOHNS, 'local')).toEqual({
      dateTime: '2026-07-15T17:35:03.123-02:30',
      timeZoneCode: 'NDT',
      timeZoneOffset: 'UTC-2:30',
    });
  });

  it('Phoenix in July is MST, UTC-7 (Arizona has no DST)', () => {
    expect(eventTime(JUL, ...PHOENIX, 'local')).toEqual({
      dateTime: '2026-07-15T13:05:03.123-07:00',
      timeZoneCode: 'MST',
      timeZoneOffset: 'UTC-7',
    });
  });

  it('Regina in July is CST, UTC-6 (Saskatchewan has no DST)', () => {
    expect(eventTime(JUL, ...REGINA, 'local')).toMatchObject({ timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' });
  });

  it('Honolulu is HST, UTC-10', () => {
    for (const d of [JAN, JUL]) {
      expect(eventTime(d, ...HONOLULU, 'local')).toMatchObject({ timeZoneCode: 'HST', timeZoneOffset: 'UTC-10' });
    }
    expect(eventTime(JAN, ...HONOLULU, 'local').dateTime).toBe('2026-01-15T10:05:03.123-10:00');
  });

  it('Hermosillo is MST, UTC-7 all year (Intl says GMT-7)', () => {
    for (const d of [JAN, JUL]) {
      expect(eventTime(d, ...HERMOSILLO, 'local')).toMatchObject({ timeZoneCode: 'MST', timeZoneOffset: 'UTC-7' });
    }
  });

  it('Mexico City is CST, UTC-6, also in July (no DST since 2022)', () => {
    for (const d of [JAN, JUL]) {
      expect(eventTime(d, ...MEXICO_CITY, 'local')).toMatchObject({ timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' });
    }
  });

  it('Indianapolis is EST in winter and EDT in summer', () => {
    expect(eventTime(JAN, ...INDIANAPOLIS, 'local')).toMatchObject({ timeZoneCode: 'EST', timeZoneOffset: 'UTC-5' });
    expect(eventTime(JUL, ...INDIANAPOLIS, 'local')).toMatchObject({ timeZoneCode: 'EDT', timeZoneOffset: 'UTC-4' });
  });

  it('zones Intl names oddly come out the way carriers write them', () => {
    expect(formatTime(JAN, 'America/Adak', 'local')).toMatchObject({ timeZoneCode: 'HST', timeZoneOffset: 'UTC-10' });
    expect(formatTime(JUL, 'America/Adak', 'local')).toMatchObject({ timeZoneCode: 'HDT', timeZoneOffset: 'UTC-9' });
    expect(formatTime(JUL, 'America/Mazatlan', 'local')).toMatchObject({ timeZoneCode: 'MST', timeZoneOffset: 'UTC-7' });
    expect(formatTime(JUL, 'America/Whitehorse', 'local')).toMatchObject({ timeZoneCode: 'MST', timeZoneOffset: 'UTC-7' });
    expect(formatTime(JAN, 'America/Dawson', 'local')).toMatchObject({ timeZoneCode: 'MST', timeZoneOffset: 'UTC-7' });
    expect(formatTime(JUL, 'America/Anchorage', 'local')).toMatchObject({ timeZoneCode: 'AKDT', timeZoneOffset: 'UTC-8' });
    expect(formatTime(JAN, 'America/Halifax', 'local')).toMatchObject({ timeZoneCode: 'AST', timeZoneOffset: 'UTC-4' });
    // far offshore tz-lookup answers with a nautical zone
    expect(formatTime(JUL, 'Etc/GMT+4', 'local')).toMatchObject({ timeZoneCode: 'AST', timeZoneOffset: 'UTC-4' });
    // outside the Americas: the offset stands in for a name
    expect(formatTime(JUL, 'Asia/Kathmandu', 'local')).toMatchObject({ timeZoneCode: 'UTC+5:45', timeZoneOffset: 'UTC+5:45' });
  });

  /** The time object as a tuple, one case per line. */
  const t = (o: TimeObject) => [o.dateTime, o.timeZoneCode, o.timeZoneOffset];

  it('zero offset: timeZoneOffset is UTC+0, never a bare UTC; the code follows the zone', () => {
    expect(t(formatTime(JUL, 'Etc/UTC', 'local'))).toEqual(['2026-07-15T20:05:03.123+00:00', 'UTC', 'UTC+0']);
    expect(t(formatTime(JAN, 'UTC', 'local'))).toEqual(['2026-01-15T20:05:03.123+00:00', 'UTC', 'UTC+0']);
    expect(t(formatTime(JAN, 'Europe/London', 'local'))).toEqual(['2026-01-15T20:05:03.123+00:00', 'GMT', 'UTC+0']);
    // BST would read as a North American name: outside North America the offset stands in.
    expect(t(formatTime(JUL, 'Europe/London', 'local'))).toEqual(['2026-07-15T21:05:03.123+01:00', 'UTC+1', 'UTC+1']);
    expect(t(formatTime(JUL, 'Africa/Abidjan', 'local'))).toEqual(['2026-07-15T20:05:03.123+00:00', 'GMT', 'UTC+0']);
    // The utc form carries the same zone fields.
    expect(t(formatTime(JAN, 'Europe/London', 'utc'))).toEqual(['2026-01-15T20:05:03Z', 'GMT', 'UTC+0']);
  });

  it('zero offset through eventTime: a position in London or Abidjan, a device whose zone is UTC', () => {
    const LONDON = [51.5072, -0.1276] as const;
    const ABIDJAN = [5.36, -4.0083] as const;
    expect(t(eventTime(JAN, ...LONDON, 'local'))).toEqual(['2026-01-15T20:05:03.123+00:00', 'GMT', 'UTC+0']);
    expect(t(eventTime(JUL, ...LONDON, 'local'))).toEqual(['2026-07-15T21:05:03.123+01:00', 'UTC+1', 'UTC+1']);
    expect(t(eventTime(JUL, ...ABIDJAN, 'local'))).toEqual(['2026-07-15T20:05:03.123+00:00', 'GMT', 'UTC+0']);
    // No position: the configured zone, else the machine's (an empty TZ means UTC, as in the C library).
    expect(t(eventTime(JUL, undefined, undefined, 'local', 'UTC'))).toEqual(['2026-07-15T20:05:03.123+00:00', 'UTC', 'UTC+0']);
    expect(t(eventTime(JAN, null, null, 'utc', 'Etc/UTC'))).toEqual(['2026-01-15T20:05:03Z', 'UTC', 'UTC+0']);
    const device = systemZoneFromFiles({ TZ: '' });
    expect(device).toBe('UTC');
    expect(t(eventTime(JUL, null, null, 'local', device))).toEqual(['2026-07-15T20:05:03.123+00:00', 'UTC', 'UTC+0']);
  });

  it("half-hour and 45-minute zones keep their minutes: St. John's, Kathmandu", () => {
    expect(t(formatTime(JAN, 'America/St_Johns', 'local'))).toEqual(['2026-01-15T16:35:03.123-03:30', 'NST', 'UTC-3:30']);
    expect(t(formatTime(JUL, 'America/St_Johns', 'local'))).toEqual(['2026-07-15T17:35:03.123-02:30', 'NDT', 'UTC-2:30']);
    expect(t(formatTime(JAN, 'Asia/Kathmandu', 'local'))).toEqual(['2026-01-16T01:50:03.123+05:45', 'UTC+5:45', 'UTC+5:45']);
    expect(t(eventTime(JUL, 27.7172, 85.324, 'local'))).toEqual(['2026-07-16T01:50:03.123+05:45', 'UTC+5:45', 'UTC+5:45']);
  });

  it('keeps milliseconds, pads them, and rolls the local date over midnight', () => {
    expect(formatTime(new Date('2026-01-01T03:00:00.007Z'), 'America/Chicago', 'local').dateTime).toBe('2025-12-31T21:00:00.007-06:00');
  });
});

describe('DST change days', () => {
  const at = (iso: string, zone = 'America/Chicago') => formatTime(new Date(iso), zone, 'local');

  it('Chicago springs forward on 2026-03-08 at 08:00Z', () => {
    expect(at('2026-03-08T07:59:59.999Z')).toEqual({
      dateTime: '2026-03-08T01:59:59.999-06:00',
      timeZoneCode: 'CST',
      timeZoneOffset: 'UTC-6',
    });
    expect(at('2026-03-08T08:00:00.000Z')).toEqual({
      dateTime: '2026-03-08T03:00:00.000-05:00',
      timeZoneCode: 'CDT',
      timeZoneOffset: 'UTC-5',
    });
  });

  it('Chicago falls back on 2026-11-01 at 07:00Z (01:xx happens twice)', () => {
    expect(at('2026-11-01T06:59:59.999Z')).toEqual({
      dateTime: '2026-11-01T01:59:59.999-05:00',
      timeZoneCode: 'CDT',
      timeZoneOffset: 'UTC-5',
    });
    expect(at('2026-11-01T07:00:00.000Z')).toEqual({
      dateTime: '2026-11-01T01:00:00.000-06:00',
      timeZoneCode: 'CST',
      timeZoneOffset: 'UTC-6',
    });
  });

  it("St. John's changes in the middle of a UTC hour, and the per-hour cache does not blur it", () => {
    // 2026-03-08 02:00 NST = 05:30Z
    expect(at('2026-03-08T05:45:00.000Z', 'America/St_Johns')).toMatchObject({ timeZoneCode: 'NDT', timeZoneOffset: 'UTC-2:30' });
    expect(at('2026-03-08T05:10:00.000Z', 'America/St_Johns')).toMatchObject({ timeZoneCode: 'NST', timeZoneOffset: 'UTC-3:30' });
    expect(at('2026-03-08T05:29:59.999Z', 'America/St_Johns').dateTime).toBe('2026-03-08T01:59:59.999-03:30');
    expect(at('2026-03-08T05:30:00.000Z', 'America/St_Johns').dateTime).toBe('2026-03-08T03:00:00.000-02:30');
  });
});

describe("eventTime, 'utc' form", () => {
  it('is YYYY-MM-DDTHH:MM:SSZ without fractional seconds, zone fields still those of the position', () => {
    expect(eventTime(new Date('2026-11-22T20:05:03.999Z'), ...CHICAGO, 'utc')).toEqual({
      dateTime: '2026-11-22T20:05:03Z',
      timeZoneCode: 'CST',
      timeZoneOffset: 'UTC-6',
    });
  });
});

describe('eventTime without a usable position', () => {
  it('uses the fallback zone, else the system zone, and never throws for bad coordinates', () => {
    expect(eventTime(JUL, undefined, undefined, 'local', 'America/Denver')).toMatchObject({ timeZoneCode: 'MDT' });
    expect(eventTime(JUL, Number.NaN, -87.6, 'local', 'America/Denver')).toMatchObject({ timeZoneCode: 'MDT' });
    expect(eventTime(JUL, 123, 456, 'local', 'America/Denver')).toMatchObject({ timeZoneCode: 'MDT' });
    expect(eventTime(JUL, null, null, 'local')).toEqual(formatTime(JUL, systemZone(), 'local'));
  });

  it('rejects an invalid date and an unknown zone loudly', () => {
    expect(() => formatTime(new Date(Number.NaN), 'America/Chicago', 'local')).toThrow(RangeError);
    expect(() => formatTime(JUL, 'Mars/Olympus_Mons', 'local')).toThrow(RangeError);
  });
});

describe('output always fits the shared schema', () => {
  it('for zones and instants across the year', () => {
    const zones = [
      'America/Chicago',
      'America/New_York',
      'America/Denver',
      'America/Los_Angeles',
      'America/Anchorage',
      'America/Adak',
      'Pacific/Honolulu',
      'America/St_Johns',
      'America/Halifax',
      'America/Regina',
      'America/Phoenix',
      'America/Hermosillo',
      'America/Mazatlan',
      'America/Mexico_City',
      'America/Tijuana',
      'America/Whitehorse',
      'America/Dawson',
      'America/Puerto_Rico',
      'America/Miquelon',
      'Etc/GMT+5',
      'UTC',
      'Etc/UTC',
      'Africa/Abidjan',
      'Antarctica/Troll',
      'Atlantic/Azores',
      'Europe/London',
      'Asia/Kolkata',
      'Asia/Kathmandu',
      'Australia/Adelaide',
    ];
    for (const zone of zones) {
      for (let m = 0; m < 12; m++) {
        for (const form of ['local', 'utc'] as const) {
          const t = formatTime(new Date(Date.UTC(2026, m, 10, 17, 3, 9, 42)), zone, form);
          const parsed = timeSchema.safeParse(t);
          expect(parsed.success, `${zone} ${m} ${form} ${JSON.stringify(t)}`).toBe(true);
          expect(t.timeZoneCode).not.toMatch(/^GMT[+-]/);
        }
      }
    }
  });

  it('offsets: no zero padding, minutes only when not zero', () => {
    expect(formatOffset(-360)).toBe('UTC-6');
    expect(formatOffset(-600)).toBe('UTC-10');
    expect(formatOffset(60)).toBe('UTC+1');
    expect(formatOffset(-210)).toBe('UTC-3:30');
    expect(formatOffset(-150)).toBe('UTC-2:30');
    expect(formatOffset(345)).toBe('UTC+5:45');
    expect(formatOffset(0)).toBe('UTC+0');
    expect(formatOffset(-0)).toBe('UTC+0');
  });

  it('the schema takes UTC+0 and refuses a bare UTC, UTC-0 and padded or colon-less forms', () => {
    for (const ok of ['UTC+0', 'UTC-6', 'UTC+1', 'UTC-3:30', 'UTC-2:30', 'UTC+5:45', 'UTC+14', 'UTC-12']) {
      expect(timeZoneOffsetSchema.safeParse(ok).success, ok).toBe(true);
    }
    const refused = ['UTC', 'UTC-0', 'UTC+00', 'UTC+0:00', 'UTC+0:30', 'UTC-06', 'UTC-06:00', 'UTC-3:3', 'UTC-330'];
    for (const bad of [...refused, 'GMT', 'GMT+1', 'utc+0', 'UTC+15', '']) {
      expect(timeZoneOffsetSchema.safeParse(bad).success, bad).toBe(false);
    }
    expect(timeZoneOffsetSchema.safeParse('UTC').error?.issues[0].message).toBe('expected UTC<sign><hours>[:minutes], e.g. UTC-5 or UTC-3:30');
  });
});
