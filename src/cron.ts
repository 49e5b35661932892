/**
 * Cron expressions for the trace schedule, in the machine's local time.
 *
 * - 5 fields (`minute hour day-of-month month day-of-week`) or 6 with seconds first.
 * - Each field: `*`, a value, a range `a-b`, a step `*\/n`, `a-b/n` or `a/n` (from a to the
 *   end), and lists of those separated by commas. Months may be `jan`-`dec`, weekdays `sun`-`sat`
 *   (0 and 7 are both Sunday). Case does not matter.
 * - As in Vixie cron, when both day fields are restricted (neither starts with `*`) a day
 *   matches either of them; `*\/2` in a day field is not a restriction in that sense.
 * - Local time comes from the zone's rules (zoneinfo, see `src/geo/timezone.ts`). A time that
 *   does not exist on a spring-forward day is skipped; one that happens twice on a fall-back
 *   day matches twice.
 *
 * Our own instead of a library's because the ones at hand compute local time through `Intl`,
 * which maps ~8 MB of ICU data into a daemon that otherwise never needs it.
 */
import { EXIT } from './cli/exit.js';
import { AgentError } from './errors.js';
import { systemZone, zoneOffsetMinutes } from './geo/timezone.js';

interface Field {
  name: string;
  min: number;
  max: number;
  names?: readonly string[];
}

const SECOND: Field = { name: 'second', min: 0, max: 59 };
const MINUTE: Field = { name: 'minute', min: 0, max: 59 };
const HOUR: Field = { name: 'hour', min: 0, max: 23 };
const DAY_OF_MONTH: Field = { name: 'day of month', min: 1, max: 31 };
const MONTH: Field = { name: 'month', min: 1, max: 12, names: ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'] };
const DAY_OF_WEEK: Field = { name: 'day of week', min: 0, max: 7, names: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] };

/** Days in each month of a leap year: a day-of-month that fits in none of the months never comes. */
const MAX_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** How far ahead `next` looks before it gives up (a leap day on a given weekday is within 28 years). */
const HORIZON_S = 30 * 366 * 86_400;

/**
 * A cron expression that cannot be parsed. The schema refuses one in the config first
 * (cronProblem), so reaching a command it would be a configuration problem: exit 78.
 */
export class CronError extends AgentError {
  readonly code = 'ECRON';
  readonly exitCode = EXIT.CONFIG;
}

export class Cron {
  private constructor(
    private readonly seconds: boolean[],
    private readonly minutes: boolean[],
    private readonly hours: boolean[],
    private readonly days: boolean[],
    private readonly months: boolean[],
    private readonly weekdays: boolean[],
    private readonly daysRestricted: boolean,
    private readonly weekdaysRestricted: boolean,
  ) {}

  /** Parse an expression; throws a CronError naming the field that is wrong. */
  static parse(text: string): Cron {
    const parts = text.trim().split(/\s+/);
    if (parts.length !== 5 && parts.length !== 6) {
      throw new CronError(`5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, not ${parts[0] === '' ? 0 : parts.length}`);
    }
    if (parts.length === 5) parts.unshift('0');
    const [s, mi, h, dom, mon, dow] = parts;
    const weekdays = parseField(dow, DAY_OF_WEEK);
    weekdays[0] = weekdays[0] || weekdays[7];
    const cron = new Cron(parseField(s, SECOND), parseField(mi, MINUTE), parseField(h, HOUR), parseField(dom, DAY_OF_MONTH), parseField(mon, MONTH), weekdays, !dom.startsWith('*'), !dow.startsWith('*'));
    if (cron.daysRestricted && !cron.weekdaysRestricted) {
      const fits = cron.months.some((on, m) => on && cron.days.some((d, day) => d && day <= MAX_DAYS[m - 1]));
      if (!fits) throw new CronError('day of month: no selected month has such a day, so it would never run');
    }
    return cron;
  }

  /**
   * The first time after `afterMs` (exclusive, whole seconds) that matches, in ms, with local
   * time from `offsetMin(utcMs)`; undefined if none within 30 years.
   */
  next(afterMs: number, offsetMin: (utcMs: number) => number): number | undefined {
    let t = Math.floor(afterMs / 1000) + 1;
    const end = t + HORIZON_S;
    while (t < end) {
      const offsetS = offsetMin(t * 1000) * 60;
      const local = new Date((t + offsetS) * 1000);
      const mon = local.getUTCMonth() + 1;
      const day = local.getUTCDate();
      const h = local.getUTCHours();
      const mi = local.getUTCMinutes();
      const s = local.getUTCSeconds();
      const localS = t + offsetS;
      // Jump to the start of the next local unit that could match; the loop re-checks.
      let target: number;
      if (!this.months[mon] || !this.dayMatches(day, local.getUTCDay())) {
        target = localS - (h * 3600 + mi * 60 + s) + 86_400;
      } else if (!this.hours[h]) {
        target = localS - (mi * 60 + s) + 3600;
      } else if (!this.minutes[mi]) {
        target = localS - s + 60;
      } else if (!this.seconds[s]) {
        let n = s + 1;
        while (n < 60 && !this.seconds[n]) n++;
        target = localS - s + n;
      } else {
        return t * 1000;
      }
      t = Math.max(t + 1, nextLook(t, target, offsetS, offsetMin));
    }
    return undefined;
  }

  private dayMatches(day: number, weekday: number): boolean {
    if (this.daysRestricted && this.weekdaysRestricted) return this.days[day] || this.weekdays[weekday];
    return this.days[day] && this.weekdays[weekday];
  }
}

/**
 * The UTC second to look at after `t` on the way to local time `targetLocal`: the reading of
 * it with the offset at `t`, unless the offset changes before that, in which case the first
 * second of the new offset (found by bisection), so that no instant is stepped over whose
 * local time could match: after a fall-back the repeated times are looked at again (also when
 * the change is not on a whole hour, as Chatham's at 03:45), and a spring-forward gap is
 * crossed in one step.
 */
function nextLook(t: number, targetLocal: number, offsetS: number, offsetMin: (utcMs: number) => number): number {
  const candidate = targetLocal - offsetS;
  if (offsetMin(candidate * 1000) * 60 === offsetS) return candidate;
  let lo = t; // offset here is offsetS
  let hi = candidate; // offset here differs
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (offsetMin(mid * 1000) * 60 === offsetS) lo = mid;
    else hi = mid;
  }
  return hi;
}

function parseField(text: string, f: Field): boolean[] {
  const on = new Array<boolean>(f.max + 1).fill(false);
  const fail = (why: string): never => {
    throw new CronError(`${f.name}: ${why} in ${JSON.stringify(text)}`);
  };
  const value = (v: string): number => {
    const named = f.names?.indexOf(v.toLowerCase()) ?? -1;
    if (named >= 0) return named + (f === MONTH ? 1 : 0);
    if (!/^\d{1,2}$/.test(v)) return fail(`${JSON.stringify(v)} is not a number`);
    const n = Number(v);
    if (n < f.min || n > f.max) return fail(`${n} is out of range ${f.min}-${f.max}`);
    return n;
  };
  for (const item of text.split(',')) {
    const m = /^([^/]+)(?:\/(\d+))?$/.exec(item);
    if (!m) fail(`${JSON.stringify(item)} is not a value, range or step`);
    const [, range, stepText] = m!;
    const step = stepText === undefined ? 1 : Number(stepText);
    if (step < 1) fail('a step must be at least 1');
    let lo: number;
    let hi: number;
    if (range === '*') {
      lo = f.min;
      hi = f.max === 7 ? 6 : f.max;
    } else if (range.includes('-')) {
      const [a, b, ...rest] = range.split('-');
      if (rest.length) fail(`${JSON.stringify(range)} is not a range`);
      lo = value(a);
      hi = value(b);
      if (lo > hi) fail(`the range ${range} runs backwards`);
    } else {
      lo = value(range);
      // `7/2` counts from Sunday as `0/2` does.
      if (f === DAY_OF_WEEK && lo === 7 && stepText !== undefined) lo = 0;
      hi = stepText === undefined ? lo : f.max === 7 ? 6 : f.max;
    }
    for (let v = lo; v <= hi; v += step) on[v] = true;
  }
  return on;
}

/** Whether `text` is a cron expression the schedule accepts. */
export function cronProblem(text: string): string | undefined {
  try {
    Cron.parse(text);
    return undefined;
  } catch (err) {
    if (err instanceof CronError) return err.message;
    throw err;
  }
}

/**
 * Calls `onTick` at every match of a cron expression in local time.
 *
 * The device's clock may be set late (GPS, NTP after boot) or stepped: the timer wakes at
 * least once a minute and recomputes the next run from the wall clock, so a jump forward fires
 * once (not once per missed run) and a jump back does not leave the schedule hours late.
 */
export class CronSchedule {
  private timer: NodeJS.Timeout | undefined;
  private nextAt: number | undefined;
  private readonly offset: (ms: number) => number;

  constructor(
    private readonly cron: Cron,
    private readonly onTick: () => void,
    zone = systemZone(),
  ) {
    this.offset = (ms) => zoneOffsetMinutes(zone, ms);
  }

  start(): void {
    if (this.timer) return;
    this.nextAt = this.cron.next(Date.now(), this.offset);
    this.arm();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.nextAt = undefined;
  }

  /** The next `count` run times (ms), from now. */
  nextRuns(count: number, fromMs = Date.now()): number[] {
    const out: number[] = [];
    let t = fromMs;
    for (let i = 0; i < count; i++) {
      const n = this.cron.next(t, this.offset);
      if (n === undefined) break;
      out.push(n);
      t = n;
    }
    return out;
  }

  /** The next run while started. */
  get nextRun(): number | undefined {
    return this.nextAt;
  }

  private arm(): void {
    if (this.nextAt === undefined) return;
    const wait = Math.min(Math.max(this.nextAt - Date.now(), 0), 60_000);
    this.timer = setTimeout(() => this.wake(), wait);
  }

  private wake(): void {
    const now = Date.now();
    const due = this.nextAt !== undefined && now >= this.nextAt;
    // From the wall clock every time: after a step back this is earlier than the run planned.
    this.nextAt = this.cron.next(now, this.offset);
    this.arm();
    if (due) this.onTick();
  }
}
