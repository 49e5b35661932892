import { afterEach, describe, expect, it, vi } from 'vitest';
import { Cron, CronSchedule, cronProblem } from '../src/cron.js';
import { zoneOffsetMinutes } from '../src/geo/timezone.js';

const UTC = () => 0;
const chicago = (ms: number) => zoneOffsetMinutes('America/Chicago', ms);
const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());
const next = (expr: string, after: string, offset: (ms: number) => number = UTC) => iso(Cron.parse(expr).next(Date.parse(after), offset));

describe('cron expressions', () => {
  it('every 15 minutes, on the quarter hour, strictly after the given time', () => {
    expect(next('*/15 * * * *', '2026-11-23T10:07:30Z')).toBe('2026-11-23T10:15:00.000Z');
    expect(next('*/15 * * * *', '2026-11-23T10:15:00Z')).toBe('2026-11-23T10:30:00.000Z');
    expect(next('*/15 * * * *', '2026-12-31T23:59:59.500Z')).toBe('2027-01-01T00:00:00.000Z');
  });

  it('six fields: seconds first', () => {
    expect(next('*/2 * * * * *', '2026-11-23T10:00:00.100Z')).toBe('2026-11-23T10:00:02.000Z');
    expect(next('30 0 12 * * *', '2026-11-23T12:00:31Z')).toBe('2026-11-24T12:00:30.000Z');
  });

  it('ranges, lists, steps from a start, names in any case, 7 as Sunday', () => {
    // 2026-11-21 is a Saturday.
    expect(next('0 6 * * mon-fri', '2026-11-21T00:00:00Z')).toBe('2026-11-23T06:00:00.000Z');
    expect(next('0 6 * * MON-FRI', '2026-11-23T06:00:00Z')).toBe('2026-11-24T06:00:00.000Z');
    expect(next('0 9 * * 7', '2026-11-21T00:00:00Z')).toBe('2026-11-22T09:00:00.000Z');
    expect(next('0 9 * * 0', '2026-11-21T00:00:00Z')).toBe('2026-11-22T09:00:00.000Z');
    expect(next('5,35 1-3 * * *', '2026-11-23T01:35:00Z')).toBe('2026-11-23T02:05:00.000Z');
    expect(next('10/20 * * * *', '2026-11-23T10:51:00Z')).toBe('2026-11-23T11:10:00.000Z');
    expect(next('0 0 1 jan,Jul *', '2026-11-23T00:00:00Z')).toBe('2027-01-01T00:00:00.000Z');
    expect(next('0 0 1-10/3 * *', '2026-11-05T00:00:00Z')).toBe('2026-11-07T00:00:00.000Z');
  });

  it('7/2 in the day-of-week field counts from Sunday', () => {
    // From Monday 2026-11-23: Sunday, Tuesday, Thursday, Saturday.
    expect(next('0 0 * * 7/2', '2026-11-23T00:00:00Z')).toBe('2026-11-24T00:00:00.000Z');
    expect(next('0 0 * * 7/2', '2026-11-24T00:00:00Z')).toBe('2026-11-26T00:00:00.000Z');
  });

  it('a day field starting with * is no restriction for the either-day rule (as in Vixie cron)', () => {
    // Odd dates that are Mondays: 2026-11-23 is one; next 2026-12-07.
    expect(next('0 0 */2 * mon', '2026-11-23T00:00:00Z')).toBe('2026-12-07T00:00:00.000Z');
    expect(cronProblem('* * 31 2 */1')).toMatch(/never run/);
  });

  it('both day fields restricted: either matches (as in Vixie cron)', () => {
    // Friday the 27th comes before the next 13th (December).
    expect(next('0 0 13 * fri', '2026-11-23T00:00:00Z')).toBe('2026-11-27T00:00:00.000Z');
    expect(next('0 0 13 * fri', '2026-12-11T00:00:00Z')).toBe('2026-12-13T00:00:00.000Z');
  });

  it('a leap day, and days some months lack', () => {
    expect(next('0 0 29 2 *', '2026-11-23T00:00:00Z')).toBe('2028-02-29T00:00:00.000Z');
    expect(next('0 0 31 * *', '2026-11-23T00:00:00Z')).toBe('2026-12-31T00:00:00.000Z');
  });

  it('local time with the zone rules: 06:00 in Chicago, across both DST changes', () => {
    expect(next('0 6 * * *', '2026-01-10T00:00:00Z', chicago)).toBe('2026-01-10T12:00:00.000Z');
    expect(next('0 6 * * *', '2026-07-10T00:00:00Z', chicago)).toBe('2026-07-10T11:00:00.000Z');
    // 2026-03-08: 02:30 does not exist in Chicago; the next 02:30 is the day after, in CDT.
    expect(next('30 2 * * *', '2026-03-08T07:00:00Z', chicago)).toBe('2026-03-09T07:30:00.000Z');
    // 2026-11-01: 01:30 happens twice (CDT, then CST).
    expect(next('30 1 * * *', '2026-11-01T05:00:00Z', chicago)).toBe('2026-11-01T06:30:00.000Z');
    expect(next('30 1 * * *', '2026-11-01T06:30:00Z', chicago)).toBe('2026-11-01T07:30:00.000Z');
    expect(next('*/15 * * * *', '2026-03-08T07:50:00Z', chicago)).toBe('2026-03-08T08:00:00.000Z');
  });

  it('agrees with a minute-by-minute search on random expressions, in zones with odd DST changes', () => {
    // A plain oracle: walk every minute, take local fields from the same offsets, match sets.
    let seed = 0x2f6b1a3d; // mulberry32
    const rand = (n: number) => {
      seed = (seed + 0x6d2b79f5) | 0;
      let x = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
      return Math.floor((((x ^ (x >>> 14)) >>> 0) / 2 ** 32) * n);
    };
    const pick = (min: number, max: number, starBias: number) => {
      const kind = rand(4 + starBias);
      if (kind >= 4) return { text: '*', has: () => true, star: true };
      const a = min + rand(max - min + 1);
      if (kind === 0) return { text: String(a), has: (v: number) => v === a, star: false };
      const b = a + rand(max - a + 1);
      if (kind === 1) return { text: `${a}-${b}`, has: (v: number) => v >= a && v <= b, star: false };
      if (kind === 2) return { text: `${a},${b}`, has: (v: number) => v === a || v === b, star: false };
      const step = 1 + rand(Math.max(1, Math.floor((max - min) / 2)));
      return { text: `*/${step}`, has: (v: number) => (v - min) % step === 0, star: true };
    };
    // Chatham changes at 02:45/03:45, St. John's had changes at 00:01, Lord Howe moves 30
    // minutes, Dublin's winter time is its negative DST.
    const zones = ['America/Chicago', 'Pacific/Chatham', 'America/St_Johns', 'Australia/Lord_Howe', 'Europe/Dublin'];
    const starts = [Date.UTC(2026, 3, 4, 12), Date.UTC(2026, 8, 26, 12), Date.UTC(2026, 2, 7, 12), Date.UTC(2026, 10, 1), Date.UTC(2007, 2, 10), Date.UTC(2026, 9, 3)];
    const HORIZON = 40 * 86_400_000;
    let found = 0;
    for (let i = 0; i < 90; i++) {
      const zone = zones[i % zones.length];
      const offset = (ms: number) => zoneOffsetMinutes(zone, ms);
      const f = [pick(0, 59, 1), pick(0, 23, 2), pick(1, 28, 4), pick(1, 12, 8), pick(0, 6, 3)];
      const expr = f.map((x) => x.text).join(' ');
      const from = starts[rand(starts.length)] + rand(3 * 86_400) * 1000;
      const got = Cron.parse(expr).next(from, offset);
      let want: number | undefined;
      for (let t = Math.floor(from / 60_000) * 60_000 + 60_000; t < from + HORIZON; t += 60_000) {
        const l = new Date(t + offset(t) * 60_000);
        const dayOk = !f[2].star && !f[4].star ? f[2].has(l.getUTCDate()) || f[4].has(l.getUTCDay()) : f[2].has(l.getUTCDate()) && f[4].has(l.getUTCDay());
        if (f[0].has(l.getUTCMinutes()) && f[1].has(l.getUTCHours()) && dayOk && f[3].has(l.getUTCMonth() + 1)) {
          want = t;
          break;
        }
      }
      if (want === undefined) {
        expect([zone, expr, got === undefined || got >= from + HORIZON]).toEqual([zone, expr, true]);
      } else {
        found++;
        expect([zone, expr, iso(from), iso(got)]).toEqual([zone, expr, iso(from), iso(want)]);
      }
    }
    expect(found).toBeGreaterThan(45);
  });

  it('does not step over the times a fall-back repeats when the change is off the hour (Chatham)', () => {
    const chatham = (ms: number) => zoneOffsetMinutes('Pacific/Chatham', ms);
    // 2026-04-05 03:45 +1345 becomes 02:45 +1245 at 14:00Z: 02:45 happens twice.
    expect(next('45 2 * * 0', '2026-04-04T13:00:00Z', chatham)).toBe('2026-04-04T14:00:00.000Z');
    expect(next('*/5 2 * * *', '2026-04-04T13:30:00Z', chatham)).toBe('2026-04-04T14:00:00.000Z');
  });

  it('rejects what cron would not run, naming the field', () => {
    expect(cronProblem('*/15 * * * *')).toBeUndefined();
    expect(cronProblem('every now and then')).toMatch(/^5 fields .* not 4$/);
    expect(cronProblem('')).toMatch(/not 0$/);
    expect(cronProblem('75 * * * *')).toBe('minute: 75 is out of range 0-59 in "75"');
    expect(cronProblem('0 24 * * *')).toBe('hour: 24 is out of range 0-23 in "24"');
    expect(cronProblem('0 0 0 * *')).toMatch(/^day of month: 0 is out of range 1-31/);
    expect(cronProblem('0 0 * 13 *')).toMatch(/^month: 13 is out of range/);
    expect(cronProblem('0 0 * * 8')).toMatch(/^day of week: 8 is out of range 0-7/);
    expect(cronProblem('0 0 * * funday')).toMatch(/^day of week: "funday" is not a number/);
    expect(cronProblem('*/0 * * * *')).toMatch(/^minute: a step must be at least 1/);
    expect(cronProblem('30-10 * * * *')).toMatch(/^minute: the range 30-10 runs backwards/);
    expect(cronProblem('0 0 31 2 *')).toMatch(/never run/);
    expect(cronProblem('0 0 30 2,4 *')).toBeUndefined();
    expect(cronProblem('1,,2 * * * *')).toMatch(/^minute: "" is not a value/);
  });
});

describe('CronSchedule', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('fires on each second, reports its next runs, and stops', () => {
    vi.useFakeTimers();
    vi.setSystemTime(Date.parse('2026-11-23T10:00:00.300Z'));
    const fired: string[] = [];
    const s = new CronSchedule(Cron.parse('* * * * * *'), () => fired.push(new Date().toISOString()), 'UTC');
    s.start();
    expect(s.nextRun).toBe(Date.parse('2026-11-23T10:00:01Z'));
    expect(s.nextRuns(2)).toEqual([Date.parse('2026-11-23T10:00:01Z'), Date.parse('2026-11-23T10:00:02Z')]);
    vi.advanceTimersByTime(2300);
    expect(fired).toEqual(['2026-11-23T10:00:01.000Z', '2026-11-23T10:00:02.000Z']);
    s.stop();
    expect(s.nextRun).toBeUndefined();
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(5000);
    expect(fired).toHaveLength(2);
    expect(new CronSchedule(Cron.parse('*/15 * * * *'), () => undefined, 'UTC').nextRuns(3).map((t, i, a) => (i ? t - a[i - 1] : 0))).toEqual([0, 900_000, 900_000]);
  });

  it('a clock stepped forward fires once; a clock stepped back does not leave it hours late', () => {
    vi.useFakeTimers();
    vi.setSystemTime(Date.parse('2026-11-23T10:00:30Z'));
    const fired: string[] = [];
    const s = new CronSchedule(Cron.parse('0 * * * * *'), () => fired.push(new Date().toISOString()), 'UTC');
    s.start();
    vi.advanceTimersByTime(30_000);
    expect(fired).toEqual(['2026-11-23T10:01:00.000Z']);
    // NTP steps the clock two hours ahead: one run, not 120.
    vi.setSystemTime(Date.parse('2026-11-23T12:01:10Z'));
    vi.advanceTimersByTime(60_000);
    expect(fired.length).toBe(2);
    expect(s.nextRun).toBe(Date.parse('2026-11-23T12:03:00Z'));
    // Stepped back three hours: the next run follows the new clock within a minute.
    vi.setSystemTime(Date.parse('2026-11-23T09:02:20Z'));
    vi.advanceTimersByTime(60_000);
    expect(s.nextRun).toBe(Date.parse('2026-11-23T09:04:00Z'));
    vi.advanceTimersByTime(60_000);
    expect(fired.length).toBe(3);
    expect(fired.at(-1)).toBe('2026-11-23T09:04:00.000Z');
    s.stop();
  });
});
