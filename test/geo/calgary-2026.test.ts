/**
 * Why event times come from the system's zoneinfo and not from Node's Intl: freshness. tzdata
 * 2026f puts Alberta on UTC-6 all year from 2026-11-01 (CST); the ICU inside Node 20 carries
 * an older tz release that still has MST, UTC-7, for the winter. A trace point or milestone
 * in Calgary that winter must say what the device's own C library says: `zdump` reads the
 * same files through glibc.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { eventTime, formatOffset, zoneAt } from '../../src/geo/timezone.js';
import { zoneinfoDir } from '../../src/geo/tzif.js';
import { zdump } from './zdump.js';

const CALGARY = [51.0447, -114.0719] as const;
const INSTANT = new Date('2026-12-15T18:00:00.000Z');

/** The zdump line in effect at `ms`: the last change at or before it. */
function zdumpAt(zone: string, ms: number) {
  const probe = spawnSync('zdump', ['--version'], { encoding: 'utf8' });
  if (probe.error) throw new Error(`zdump not found (${probe.error.message}): install libc-bin (it ships zdump) and tzdata`);
  const year = new Date(ms).getUTCFullYear();
  const lines = zdump([zone], year - 1, year + 1).filter((l) => l.ms <= ms);
  if (lines.length === 0) throw new Error(`zdump printed no change of ${zone} before ${new Date(ms).toISOString()}: is tzdata installed?`);
  return lines[lines.length - 1];
}

/** The tz release of the system's zoneinfo (`# version 2026f` in tzdata.zi), for the log. */
function systemTzVersion(): string {
  try {
    return /^# version (\S+)/m.exec(readFileSync(`${zoneinfoDir()}/tzdata.zi`, 'utf8'))?.[1] ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

describe('Calgary, December 2026, against zdump', () => {
  it("gives the offset and zone name the system's zoneinfo gives, through the path milestones and traces take", () => {
    const zone = zoneAt(...CALGARY);
    expect(zone).toBe('America/Edmonton');
    const want = zdumpAt(zone, INSTANT.getTime());
    const got = eventTime(INSTANT, ...CALGARY, 'local');

    const offsetMin = want.offsetS / 60;
    const sign = offsetMin < 0 ? '-' : '+';
    const hhmm = `${String(Math.floor(Math.abs(offsetMin) / 60)).padStart(2, '0')}:${String(Math.abs(offsetMin) % 60).padStart(2, '0')}`;
    const wallClock = new Date(INSTANT.getTime() + want.offsetS * 1000).toISOString().slice(0, 19);
    expect(got).toEqual({ dateTime: `${wallClock}.000${sign}${hhmm}`, timeZoneCode: want.abbr, timeZoneOffset: formatOffset(offsetMin) });

    // Node's Intl may be a tz release behind (ICU's own copy): logged, not asserted, since
    // it differs from machine to machine.
    const intl = new Intl.DateTimeFormat('en-US', { timeZone: zone, timeZoneName: 'longOffset' }).formatToParts(INSTANT).find((p) => p.type === 'timeZoneName')?.value;
    const intlName = new Intl.DateTimeFormat('en-US', { timeZone: zone, timeZoneName: 'short' }).formatToParts(INSTANT).find((p) => p.type === 'timeZoneName')?.value;
    console.log(
      `Calgary ${INSTANT.toISOString()}: agent ${got.timeZoneCode} ${got.timeZoneOffset}, zdump ${want.abbr} gmtoff=${want.offsetS} (zoneinfo ${systemTzVersion()}), ` +
        `Node's Intl ${intlName} ${intl} (ICU tz ${process.versions.tz ?? 'unknown'})${intl === `GMT${sign}${hhmm}` ? '' : ': Intl is stale here'}`,
    );
  });
});
