/**
 * One reading of a typed time, and zones from what was typed: the real CLI bin (with a zone
 * of its own in TZ) against a real buffer file, the committed body read back from it. The
 * failures these guard against: a `--time` without an offset read in Chicago's zone, then
 * read again in the device's (UTC) once the truck's fix proved too old to place it, and sent
 * six hours early; a typed city missing from the gazetteer sent in the zone of a fix in
 * another state; an explicit `-05:00` with no place sent as `UTC` / `UTC+0`; a misspelt TZ
 * taken for UTC without a word.
 */
import { describe, expect, it } from 'vitest';
import type { Store } from '../src/buffer/store.js';
import { formatTime } from '../src/geo/timezone.js';
import { runCli, cliFixture } from './helpers.js';

const CHICAGO = { lat: 41.8781, lon: -87.6298 };
const PHOENIX = { lat: 33.4484, lon: -112.074 };
const HERMOSILLO = { lat: 29.0729, lon: -110.9559 };
const UTC_DEVICE = { TZ: 'UTC' };

type Body = { eventCity?: string; eventState?: string; time: { dateTime: string; timeZoneCode: string; timeZoneOffset: string } };

// Fixed dates of November 2026, typed long after once time passes: the bound on how old a
// typed time may be (sources_time.max_past_days) is raised for them.
const fx = cliFixture('[sources_time]\nmax_past_days = 3650\n');

/** Load L1 on T1, started a day ago, with these stops. */
const startLoad = (stops: Parameters<Store['startLoad']>[0]['stops'] = []) =>
  fx.withBuffer((s) => s.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops, nowMs: Date.now() - 86_400_000 }));
const fixAt = (at: { lat: number; lon: number }, timeMs: number) => fx.withBuffer((s) => s.insertReadings([{ resourceId: 'T1', timeMs, lat: at.lat, lon: at.lon }]));
const bodyOf = (id: number) => fx.withBuffer((s) => s.listMilestones().find((m) => m.id === id)!.body as unknown as Body);
const milestone = (args: string[], env: NodeJS.ProcessEnv = UTC_DEVICE) => runCli(['milestone', '--load', 'L1', ...args, '--config', fx.cfg], { env });
const idOf = (stdout: string) => Number(/^milestone (\d+) /.exec(stdout)![1]);
/** `2026-11-25T22:53` for `ms` in `zone`: what a driver reads off a clock there. */
const wallClock = (ms: number, zone: string) => formatTime(new Date(ms), zone, 'local').dateTime.slice(0, 16);

describe('an offset-less --time is read in one zone, chosen once', () => {
  it("on a UTC device, a truck whose last fix (too old to place it) is in Chicago: read in Chicago's zone, not six hours early", async () => {
    startLoad();
    const eventMs = Math.floor((Date.now() - 40 * 60_000) / 60_000) * 60_000; // 40 minutes ago
    fixAt(CHICAGO, eventMs - 2 * 3_600_000); // more than max_fix_age_s (1800 s) before it
    const typed = wallClock(eventMs, 'America/Chicago');
    const r = await milestone(['--code', 'AF', '--time', typed]);
    expect(r.code, r.stderr).toBe(0);
    const body = bodyOf(idOf(r.stdout));
    const chicago = formatTime(new Date(eventMs), 'America/Chicago', 'local');
    expect(body.time).toEqual(chicago);
    expect(body.time.dateTime).toBe(`${typed}:00.000${chicago.dateTime.slice(-6)}`);
    expect(body.eventCity).toBeUndefined(); // the fix is too old to say where it happened
    // The CLI prints the instant it recorded, in UTC and in the zone used, and where that zone came from.
    expect(r.stdout).toContain(`= ${new Date(eventMs).toISOString().replace('.000Z', 'Z')}`);
    expect(r.stdout).toContain(`${typed.replace('T', ' ')}:00${chicago.dateTime.slice(-6)} ${chicago.timeZoneCode} (${chicago.timeZoneOffset})`);
    expect(r.stdout).toMatch(/zone America\/Chicago \(of the last fix of T1, \d+ s old\)/);
  });

  it("the stop's zone comes first: a stop in Hermosillo reads the time there, whatever the last fix says", async () => {
    startLoad([{ sequence: 1, type: 'pickup', latitude: HERMOSILLO.lat, longitude: HERMOSILLO.lon }]);
    fixAt(CHICAGO, Date.now() - 60_000);
    const r = await milestone(['--code', 'X3', '--stop', '1', '--time', '2026-11-20T08:15']);
    expect(r.code, r.stderr).toBe(0);
    expect(bodyOf(idOf(r.stdout)).time).toEqual({ dateTime: '2026-11-20T08:15:00.000-07:00', timeZoneCode: 'MST', timeZoneOffset: 'UTC-7' });
    expect(r.stdout).toContain('zone America/Hermosillo (of stop 1)');
  });

  it('with no stop and no fix of the resource: refused (65), asking for an offset, never read in the device zone', async () => {
    startLoad();
    const r = await milestone(['--code', 'X6', '--time', '2026-11-20T08:15'], { TZ: 'America/Chicago' });
    expect(r.code).toBe(65);
    expect(r.stderr).toContain('--time 2026-11-20T08:15 has no UTC offset');
    expect(r.stderr).toContain('2026-11-20T08:15-06:00');
    expect(fx.withBuffer((s) => s.listMilestones())).toHaveLength(0);
  });
});

describe('zones from what was typed', () => {
  it('a city the gazetteer lacks in a multi-zone state is refused without an offset (never the zone of a fix in Phoenix); with one, the matching zone', async () => {
    startLoad();
    fixAt(PHOENIX, Date.now() - 60_000);
    const refused = await milestone(['--code', 'X6', '--city', 'Smallville', '--state', 'KS']);
    expect(refused.code).toBe(65);
    expect(refused.stderr).toContain('Smallville, KS is not in the gazetteer');
    expect(refused.stderr).toContain('more than one time zone');
    const offset = await milestone(['--code', 'X6', '--city', 'Smallville', '--state', 'KS', '--time', '2026-11-20T08:15-06:00']);
    expect(offset.code, offset.stderr).toBe(0);
    expect(bodyOf(idOf(offset.stdout))).toMatchObject({
      eventCity: 'Smallville',
      eventState: 'KS',
      time: { dateTime: '2026-11-20T08:15:00.000-06:00', timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' },
    });
    // A city the gazetteer knows gives its own zone: Goodland is on Mountain time, most of Kansas on Central.
    const goodland = await milestone(['--code', 'X6', '--city', 'Goodland', '--state', 'KS', '--time', '2026-11-20T08:15']);
    expect(goodland.code, goodland.stderr).toBe(0);
    expect(bodyOf(idOf(goodland.stdout)).time).toEqual({ dateTime: '2026-11-20T08:15:00.000-07:00', timeZoneCode: 'MST', timeZoneOffset: 'UTC-7' });
  });

  it("--state of a single-zone state gives that state's zone, and reads the typed time in it", async () => {
    startLoad();
    fixAt(PHOENIX, Date.now() - 60_000);
    const r = await milestone(['--code', 'X6', '--city', 'Smallville', '--state', 'IA', '--time', '2026-11-20T08:15']);
    expect(r.code, r.stderr).toBe(0);
    expect(bodyOf(idOf(r.stdout))).toMatchObject({
      eventCity: 'Smallville',
      eventState: 'IA',
      time: { dateTime: '2026-11-20T08:15:00.000-06:00', timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' },
    });
    expect(r.stderr).toContain('Smallville, IA is not in the gazetteer: sent as typed, in the zone of IA (America/Chicago)');
  });

  it("an explicit offset with no place: the zone fields from that offset (UTC-5), never the device's zone", async () => {
    startLoad();
    const r = await milestone(['--code', 'X6', '--time', '2026-11-25T22:53-05:00'], { TZ: 'America/Los_Angeles' });
    expect(r.code, r.stderr).toBe(0);
    expect(bodyOf(idOf(r.stdout)).time).toEqual({ dateTime: '2026-11-25T22:53:00.000-05:00', timeZoneCode: 'UTC-5', timeZoneOffset: 'UTC-5' });
    expect(r.stdout).toContain('= 2026-11-26T03:53:00Z');
  });
});

describe("the device's zone", () => {
  it('a misspelt TZ is a config problem (78) naming TZ', async () => {
    const r = await runCli(['validate-config', '--config', fx.cfg], { env: { TZ: 'America/Chicgo' } });
    expect(r.code).toBe(78);
    expect(r.stderr).toContain('TZ: "America/Chicgo"');
  });

  it('validate-config and status say which zone the device is in and where it came from', async () => {
    const ok = await runCli(['validate-config', '--config', fx.cfg], { env: { TZ: 'America/Chicago' } });
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toContain('device zone America/Chicago (from TZ)');
    const status = await runCli(['status', '--config', fx.cfg], { env: { TZ: 'America/Chicago' } });
    expect(status.stdout).toMatch(/device zone:\s+America\/Chicago \(from TZ\)/);
    const json = JSON.parse((await runCli(['status', '--json', '--config', fx.cfg], { env: { TZ: 'America/Chicago' } })).stdout) as { deviceZone: unknown };
    expect(json.deviceZone).toEqual({ zone: 'America/Chicago', from: 'TZ' });
  });
});
