/**
 * The trace schedule: node-cron, and what src/cron.ts wraps around it. The clock tests run on
 * vitest's fake clocks, which step the wall clock (`setSystemTime`) while the monotonic clock
 * and the timers (`advanceTimersByTimeAsync`) go on as a real step would leave them; node-cron
 * calls the task through promises, hence the async advances.
 */
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { createTask, getTasks } from 'node-cron';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CronError, CronSchedule, cronProblem } from '../src/cron.js';
import { splayMs, TraceSchedule } from '../src/delivery/schedule.js';
import { localTimeToInstant } from '../src/geo/timezone.js';
import { Sandbox } from '../src/sandbox/server.js';
import { TEST_KEY, TEST_SCAC, agentConfig, runCli, startDaemon, waitFor, type Daemon, tempFixture } from './helpers.js';

const at = (iso: string) => Date.parse(iso);
const isoOf = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());

/**
 * A CronSchedule started at `startIso` (fake clocks) that records the wall time of each tick,
 * to the second (a catch-up push comes in a setImmediate, which the fake clock runs 1 ms on).
 */
function started(expr: string, startIso: string, zone = 'UTC') {
  vi.setSystemTime(at(startIso));
  const fired: string[] = [];
  const schedule = new CronSchedule(expr, () => fired.push(new Date(Math.floor(Date.now() / 1000) * 1000).toISOString()), zone);
  schedule.start();
  return { schedule, fired };
}

/** Fake clocks for the tests of a describe block. */
function fakeClocks(): void {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
    vi.restoreAllMocks();
  });
}

describe('cron expressions: node-cron decides, the message names the field', () => {
  fakeClocks();

  it('accepts what node-cron schedules: 5 or 6 fields, names, ranges, lists, steps, L, nicknames', () => {
    for (const expr of ['*/15 * * * *', '*/2 * * * * *', '0 6 * * MON-FRI', '5,35 1-3 * * *', '0 0 1-10/3 jan,Jul *', '0 0 L * *', '@daily', '0 0 30 2,4 *']) {
      expect([expr, cronProblem(expr)]).toEqual([expr, undefined]);
    }
  });

  it('rejects what node-cron would not run, naming the field', () => {
    expect(cronProblem('every now and then')).toBe('5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, not 4');
    expect(cronProblem('')).toMatch(/not 0$/);
    expect(cronProblem('* * * * * * *')).toMatch(/not 7$/);
    expect(cronProblem('75 * * * *')).toBe('minute: 75 is out of range 0-59 in "75"');
    expect(cronProblem('61 0 0 * * *')).toBe('second: 61 is out of range 0-59 in "61"');
    expect(cronProblem('0 24 * * *')).toBe('hour: 24 is out of range 0-23 in "24"');
    expect(cronProblem('0 0 0 * *')).toBe('day of month: 0 is out of range 1-31 in "0"');
    expect(cronProblem('0 0 * 13 *')).toBe('month: 13 is out of range 1-12 in "13"');
    expect(cronProblem('0 0 * * 8')).toBe('day of week: 8 is out of range 0-7 in "8"');
    expect(cronProblem('0-75 * * * *')).toBe('minute: 75 is out of range 0-59 in "0-75"');
    expect(cronProblem('*/0 * * * *')).toBe('minute: a step must be at least 1 in "*/0"');
    expect(cronProblem('0 0 * * funday')).toBe('day of week: "funday" is not a value, range, step or name (0-7)');
    expect(cronProblem('1,,2 * * * *')).toBe('minute: "1,,2" is not a value, range, step or name (0-59)');
    // A step from a single start (Vixie's `10/20`) is not in node-cron's grammar.
    expect(cronProblem('10/20 * * * *')).toMatch(/^minute: "10\/20" is not a value/);
    expect(cronProblem('0 0 * * *;')).toBe('only digits, names, spaces and * / , - L W # ? may appear, in "0 0 * * *;"');
    expect(cronProblem('0 0 31 2 *')).toBe('day of month: no selected month has day 31, so it would never run');
    // Valid field by field, but the 1st of a month is never its fifth Monday.
    expect(cronProblem('0 0 1 * 1#5')).toBe('no date in the next 100 years matches it, so it would never run');
  });

  it('a schedule of a refused expression is a CronError (a configuration problem)', () => {
    expect(() => new CronSchedule('75 * * * *', () => undefined, 'UTC')).toThrow(new CronError('minute: 75 is out of range 0-59 in "75"'));
  });

  it("means what node-cron means: both day fields must match, a range may wrap, L is the month's last day", () => {
    const next = (expr: string, fromIso: string, count = 1) => {
      const { schedule } = started(expr, fromIso);
      const runs = schedule.nextRuns(count).map(isoOf);
      schedule.stop();
      return runs;
    };
    expect(next('*/15 * * * *', '2026-11-23T10:07:30Z', 2)).toEqual(['2026-11-23T10:15:00.000Z', '2026-11-23T10:30:00.000Z']);
    expect(next('30 0 12 * * *', '2026-11-23T12:00:31Z')).toEqual(['2026-11-24T12:00:30.000Z']);
    // 2026-11-21 is a Saturday.
    expect(next('0 6 * * mon-fri', '2026-11-21T00:00:00Z')).toEqual(['2026-11-23T06:00:00.000Z']);
    expect(next('0 9 * * 7', '2026-11-21T00:00:00Z')).toEqual(['2026-11-22T09:00:00.000Z']);
    // Friday the 13th (November 2026 has none; August 2027 has), not Vixie's "the 13th or a Friday".
    expect(next('0 0 13 * fri', '2026-11-23T00:00:00Z')).toEqual(['2027-08-13T00:00:00.000Z']);
    expect(next('50-10/10 * * * *', '2026-11-23T10:45:00Z', 4)).toEqual(['2026-11-23T10:50:00.000Z', '2026-11-23T11:00:00.000Z', '2026-11-23T11:10:00.000Z', '2026-11-23T11:50:00.000Z']);
    expect(next('0 0 L 2 *', '2026-11-23T00:00:00Z', 2)).toEqual(['2027-02-28T00:00:00.000Z', '2028-02-29T00:00:00.000Z']);
  });
});

describe('CronSchedule', () => {
  fakeClocks();

  it('fires on each run, reports its next runs, and stops without leaving a timer or a task behind', async () => {
    const tasksBefore = getTasks().size;
    const { schedule, fired } = started('* * * * * *', '2026-11-23T10:00:00.300Z');
    expect(isoOf(schedule.nextRun)).toBe('2026-11-23T10:00:01.000Z');
    expect(schedule.nextRuns(2).map(isoOf)).toEqual(['2026-11-23T10:00:01.000Z', '2026-11-23T10:00:02.000Z']);
    await vi.advanceTimersByTimeAsync(2300);
    expect(fired).toEqual(['2026-11-23T10:00:01.000Z', '2026-11-23T10:00:02.000Z']);
    expect(getTasks().size).toBe(tasksBefore + 1);
    schedule.stop();
    expect(schedule.nextRun).toBeUndefined();
    expect(schedule.nextRuns(2)).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
    expect(getTasks().size).toBe(tasksBefore);
    await vi.advanceTimersByTimeAsync(5000);
    expect(fired).toHaveLength(2);
  });

  it("runs in the zone's local time: 06:00 in Chicago across both DST changes, as node-cron handles them", () => {
    const runs = (expr: string, fromIso: string, count: number) => {
      const { schedule } = started(expr, fromIso, 'America/Chicago');
      const out = schedule.nextRuns(count).map(isoOf);
      schedule.stop();
      return out;
    };
    expect(runs('0 6 * * *', '2026-01-10T00:00:00Z', 1)).toEqual(['2026-01-10T12:00:00.000Z']);
    expect(runs('0 6 * * *', '2026-07-10T00:00:00Z', 1)).toEqual(['2026-07-10T11:00:00.000Z']);
    // 2026-03-08: 02:30 does not exist in Chicago; the next 02:30 is the day after, in CDT.
    expect(runs('30 2 * * *', '2026-03-08T07:00:00Z', 1)).toEqual(['2026-03-09T07:30:00.000Z']);
    // 2026-11-01: 01:30 happens twice (CDT, then CST); node-cron runs the first only, and a
    // quarter-hour schedule skips the repeated hour (one 75-minute gap a year; not wrapped).
    expect(runs('30 1 * * *', '2026-11-01T05:00:00Z', 2)).toEqual(['2026-11-01T06:30:00.000Z', '2026-11-02T07:30:00.000Z']);
    expect(runs('*/15 * * * *', '2026-11-01T06:40:00Z', 3)).toEqual(['2026-11-01T06:45:00.000Z', '2026-11-01T08:00:00.000Z', '2026-11-01T08:15:00.000Z']);
  });

  /** Counts what node-cron itself reports missed for the schedule's task (the last one made). */
  const missedRuns = () => {
    const task = [...getTasks().values()].at(-1)!;
    const counter = { n: 0 };
    task.on('execution:missed', () => void counter.n++);
    return counter;
  };

  it('a clock stepped forward gives one push within a minute, then the schedule goes on from the new time', async () => {
    const warn = vi.spyOn(console, 'warn');
    const { schedule, fired } = started('*/15 * * * *', '2026-11-23T10:00:30Z');
    const missed = missedRuns();
    await vi.advanceTimersByTimeAsync(90_000);
    // NTP steps the clock two hours ahead at 10:02:00; node-cron's timer waits for what is
    // 12:15 now. The guard looks at 12:02:30: one push for the eight runs skipped, not eight.
    vi.setSystemTime(at('2026-11-23T12:02:00Z'));
    await vi.advanceTimersByTimeAsync(30_000);
    expect(fired).toEqual(['2026-11-23T12:02:30.000Z']);
    expect(isoOf(schedule.nextRun)).toBe('2026-11-23T12:15:00.000Z');
    await vi.advanceTimersByTimeAsync(13 * 60_000);
    expect(fired).toEqual(['2026-11-23T12:02:30.000Z', '2026-11-23T12:15:00.000Z']);
    expect(missed.n).toBe(0);
    expect(warn).not.toHaveBeenCalled();
    schedule.stop();
  });

  it('a day ahead on a per-second schedule: one push, and node-cron never walks the 86,400 runs skipped', async () => {
    // Walked, they would stall the event loop for seconds (minutes for 31 days).
    const { schedule, fired } = started('* * * * * *', '2026-11-23T10:00:00.300Z');
    const missed = missedRuns();
    await vi.advanceTimersByTimeAsync(1200);
    expect(fired).toEqual(['2026-11-23T10:00:01.000Z']);
    vi.setSystemTime(at('2026-11-24T10:00:01.500Z'));
    // The guard looks 2 ms before node-cron's timer (aimed at what was 10:00:02).
    await vi.advanceTimersByTimeAsync(1600);
    expect(fired).toEqual(['2026-11-23T10:00:01.000Z', '2026-11-24T10:00:01.000Z', '2026-11-24T10:00:02.000Z', '2026-11-24T10:00:03.000Z']);
    expect(missed.n).toBe(0);
    schedule.stop();
  });

  it.each([
    { what: 'the runs it reports missed', to: '2026-11-23T12:01:09.999Z', reported: 121, first: '2026-11-23T12:01:10.000Z' },
    { what: 'the runs it reports missed and the one it runs', to: '2026-11-23T12:00:59.999Z', reported: 120, first: '2026-11-23T12:01:00.000Z' },
  ])('a step in the last milliseconds before a run reaches node-cron first: $what are one push', async ({ to, reported, first }) => {
    const warn = vi.spyOn(console, 'warn');
    const { schedule, fired } = started('0 * * * * *', '2026-11-23T10:00:30Z');
    const missed = missedRuns();
    // Just past the guard's look at 10:00:59.998, two hours ahead.
    await vi.advanceTimersByTimeAsync(29_999);
    vi.setSystemTime(at(to));
    await vi.advanceTimersByTimeAsync(1001);
    expect(missed.n).toBe(reported);
    expect(fired).toEqual([first]);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(fired).toEqual([first, '2026-11-23T12:02:00.000Z']);
    // Listening to the missed runs also keeps node-cron's warning for each off the console.
    expect(warn).not.toHaveBeenCalled();
    schedule.stop();
  });

  it('a clock stepped back is followed within a minute, not hours later', async () => {
    const { schedule, fired } = started('*/15 * * * *', '2026-11-23T10:00:30Z');
    await vi.advanceTimersByTimeAsync(90_000);
    // Stepped back three hours at 10:02:00: node-cron's timer still waits for 10:15.
    vi.setSystemTime(at('2026-11-23T07:02:00Z'));
    await vi.advanceTimersByTimeAsync(30_000);
    expect(isoOf(schedule.nextRun)).toBe('2026-11-23T07:15:00.000Z');
    await vi.advanceTimersByTimeAsync(13 * 60_000);
    expect(fired).toEqual(['2026-11-23T07:15:00.000Z']);
    schedule.stop();
  });
});

describe('node-cron 4 alone (why src/cron.ts wraps it)', () => {
  fakeClocks();

  /** node-cron's own task, every minute at :00 (UTC), started at 10:00:30 and run once, at 10:01. */
  async function ranOnce() {
    vi.setSystemTime(at('2026-11-23T10:00:30Z'));
    const ran: string[] = [];
    const missed = { n: 0 };
    const task = createTask('0 * * * * *', () => void ran.push(new Date().toISOString()), { timezone: 'UTC' });
    task.on('execution:missed', () => void missed.n++);
    task.start();
    await vi.advanceTimersByTimeAsync(30_000);
    expect(ran).toEqual(['2026-11-23T10:01:00.000Z']);
    return { task, ran, missed };
  }

  it('after a forward step: no run for the skipped hours, each reported missed', async () => {
    const { task, ran, missed } = await ranOnce();
    vi.setSystemTime(at('2026-11-23T12:01:10Z'));
    await vi.advanceTimersByTimeAsync(60_000);
    // 10:02 to 12:02 (10 s late is past its 1 s tolerance): 121 missed, none run.
    expect([ran, missed.n]).toEqual([['2026-11-23T10:01:00.000Z'], 121]);
    task.destroy();
  });

  it('after a backward step: no run until the wall clock is back where it was', async () => {
    const { task, ran } = await ranOnce();
    vi.setSystemTime(at('2026-11-23T07:01:10Z'));
    await vi.advanceTimersByTimeAsync(60_000);
    // It answers from the new clock, but its timer is aimed at 10:02:00.
    expect(task.getNextRun()?.toISOString()).toBe('2026-11-23T07:03:00.000Z');
    await vi.advanceTimersByTimeAsync(3 * 3600_000 - 11_000);
    expect(ran).toEqual(['2026-11-23T10:01:00.000Z']);
    await vi.advanceTimersByTimeAsync(1000);
    expect(ran).toEqual(['2026-11-23T10:01:00.000Z', '2026-11-23T10:02:00.000Z']);
    task.destroy();
  });
});

describe('TraceSchedule on the cron', () => {
  fakeClocks();

  it('each tick makes a push due after the splay; a reload follows the new expression from then on', async () => {
    vi.setSystemTime(at('2026-11-23T10:00:00Z'));
    const due: string[] = [];
    const s = new TraceSchedule('*/10 * * * * *', 1500);
    s.onDue = () => {
      due.push(new Date().toISOString());
      s.completed();
    };
    s.start();
    expect(isoOf(s.nextPushMs() ?? undefined)).toBe('2026-11-23T10:00:11.500Z');
    expect(s.intervalMs()).toBe(10_000);
    await vi.advanceTimersByTimeAsync(21_600);
    expect(due).toEqual(['2026-11-23T10:00:11.500Z', '2026-11-23T10:00:21.500Z']);
    // At 10:00:21.600: every 3 s now, and this device's share of a 1 s splay.
    const splay = splayMs('dev', 1);
    s.reconfigure({ traces: '*/3 * * * * *', splay_s: 1 }, 'dev');
    expect(s.expression).toBe('*/3 * * * * *');
    expect(s.intervalMs()).toBe(3000);
    expect(s.nextPushMs()).toBe(at('2026-11-23T10:00:24Z') + splay);
    await vi.advanceTimersByTimeAsync(7000);
    expect(due.slice(2)).toEqual([isoOf(at('2026-11-23T10:00:24Z') + splay), isoOf(at('2026-11-23T10:00:27Z') + splay)]);
    s.stop();
    expect(s.nextPushMs()).toBeNull();
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe("the daemon's schedule in the machine's local time", () => {
  const tmp = tempFixture();
  let daemon: Daemon | undefined;
  afterEach(async () => {
    await daemon?.stop('SIGKILL');
    daemon = undefined;
  });

  /** The next push of a daemon with `0 6 * * *` under this TZ (from `status`), and its log. */
  async function nextSixOClock(TZ: string): Promise<{ next: number; from: number; output: string }> {
    const sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
    try {
      const { url } = await sandbox.start();
      const dir = mkdtempSync(join(tmp.dir, 'tz-'));
      const cfg = agentConfig(dir, url, '', { traces: '0 6 * * *' });
      const from = Date.now();
      const d = startDaemon(['--config', cfg], { TZ });
      daemon = d;
      const next = await waitFor(
        async () => {
          const r = await runCli(['status', '--json', '--config', cfg]);
          const next = r.code === 0 ? (JSON.parse(r.stdout).nextTracePushMs as number | null) : null;
          return next ?? undefined;
        },
        15_000,
        'the next push in status',
      );
      expect((await d.stop('SIGTERM')).code).toBe(0);
      daemon = undefined;
      return { next, from, output: d.output() };
    } finally {
      await sandbox.stop();
    }
  }

  /** The first two 06:00 in `zone` after `fromMs`, from the zoneinfo rules. */
  function sixOClocks(zone: string, fromMs: number): number[] {
    const out: number[] = [];
    for (let day = -1; out.length < 2; day++) {
      const date = new Date(fromMs + day * 86_400_000).toISOString().slice(0, 10);
      const t = localTimeToInstant(`${date}T06:00:00`, zone);
      if (t > fromMs && !out.includes(t)) out.push(t);
    }
    return out;
  }

  it('follows TZ by name and as a zoneinfo path (which ICU alone would read without DST)', async () => {
    for (const TZ of ['America/Chicago', '/usr/share/zoneinfo/America/Chicago']) {
      const { next, from, output } = await nextSixOClock(TZ);
      // The first 06:00 after start, or the one after if 06:00 passed while it started.
      expect(sixOClocks('America/Chicago', from)).toContain(next);
      expect(output).not.toContain('is no zone name');
    }
  });

  it('says so when TZ is a POSIX rule, which Intl cannot read (the schedule then runs in UTC)', async () => {
    const { next, from, output } = await nextSixOClock('CST6CDT,M3.2.0,M11.1.0');
    expect(sixOClocks('UTC', from)).toContain(next);
    const warning = output.split('\n').find((l) => l.includes('is no zone name'));
    expect(JSON.parse(warning!)).toMatchObject({ level: 40, timeZone: 'CST6CDT,M3.2.0,M11.1.0' });
  });
});
