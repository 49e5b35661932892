/**
 * The C library's reading of the zoneinfo files, through `zdump -v`: an oracle of the same tz
 * version as the files the agent reads (Intl carries ICU's own copy, often a release apart).
 */
import { execFileSync } from 'node:child_process';

export interface ZdumpLine {
  zone: string;
  /** The instant, epoch ms. */
  ms: number;
  /** The local wall-clock time zdump shows for it, `YYYY-MM-DDTHH:MM:SS`. */
  local: string;
  abbr: string;
  isDst: boolean;
  /** Seconds east of UTC. */
  offsetS: number;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
// `America/Chicago  Sun Mar  8 07:59:59 2026 UT = Sun Mar  8 01:59:59 2026 CST isdst=0 gmtoff=-21600`
const LINE = /^(\S+)\s+\w{3} (\w{3})\s+(\d+) (\d\d:\d\d:\d\d) (\d{4}) UT = \w{3} (\w{3})\s+(\d+) (\d\d:\d\d:\d\d) (\d{4}) (\S+) isdst=(\d) gmtoff=(-?\d+)$/;

const ymd = (year: string, mon: string, day: string) => `${year}-${String(MONTHS.indexOf(mon) + 1).padStart(2, '0')}-${day.padStart(2, '0')}`;

/**
 * Every line of `zdump -v -c FROM,TO` for the zones, in zdump's order: two lines per change of
 * rules (the last second before it and the first second of it), zone by zone, in time order.
 */
export function zdump(zones: readonly string[], fromYear: number, toYear: number): ZdumpLine[] {
  const out = execFileSync('zdump', ['-v', '-c', `${fromYear},${toYear}`, ...zones], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  const lines: ZdumpLine[] = [];
  for (const text of out.split('\n')) {
    const m = LINE.exec(text);
    if (!m) continue; // the `= NULL` lines at the ends of time
    const [, zone, mon, day, time, year, lmon, lday, ltime, lyear, abbr, isdst, gmtoff] = m;
    lines.push({
      zone,
      ms: Date.parse(`${ymd(year, mon, day)}T${time}Z`),
      local: `${ymd(lyear, lmon, lday)}T${ltime}`,
      abbr,
      isDst: isdst === '1',
      offsetS: Number(gmtoff),
    });
  }
  return lines;
}

/** The changes among zdump's lines: each pair of lines one second apart in the same zone. */
export function zdumpChanges(lines: readonly ZdumpLine[]): Array<{ before: ZdumpLine; after: ZdumpLine }> {
  const changes: Array<{ before: ZdumpLine; after: ZdumpLine }> = [];
  for (let i = 1; i < lines.length; i++) {
    const [a, b] = [lines[i - 1], lines[i]];
    if (a.zone === b.zone && b.ms - a.ms === 1000) changes.push({ before: a, after: b });
  }
  return changes;
}
