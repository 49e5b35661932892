/**
 * Where and in which zone a milestone happened, end to end: the real daemon with an exec
 * source printing positions, the real CLI with a zone of its own (TZ), the real sandbox on
 * port 0 and the real buffer file. The failures these guard against: after a push had
 * delivered and purged a load's readings, a milestone went out with no city and the
 * device's zone (a truck in Querétaro reported in Chicago's CST, no city); one recorded
 * right after `load start`, before the first commit, went out in the device's zone too.
 */
import Database from 'better-sqlite3';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { Store } from '../src/buffer/store.js';
import { completePlace } from '../src/milestones/record.js';
import type { Stop } from '../src/milestones/stops.js';
import { configSchema } from '../src/config/schema.js';
import type { MilestoneRow } from '../src/buffer/types.js';
import { agentConfig, runCli, startDaemon, waitFor, writeFile, daemonFixture } from './helpers.js';

/** Santiago de Querétaro (America/Mexico_City) and Hermosillo (America/Hermosillo, MST all year). */
const QUERETARO = { lat: 20.5888, lon: -100.3899 };
const HERMOSILLO = { lat: 29.0729, lon: -110.9559 };
const CHICAGO_CLI = { TZ: 'America/Chicago' };

// SIGTERM, not SIGKILL: the daemon stops its exec source's process group on the way out.
const fx = daemonFixture({ stop: 'SIGTERM' });

/**
 * An exec source command: prints `count` positions of `resource` (0: for ever), 100 ms apart,
 * creating `marker` after the first, then stays quiet until the agent stops it (or its parent
 * is gone).
 */
function positions(resource: string, at: { lat: number; lon: number }, count: number, marker: string): string {
  const script = writeFile(
    fx.tmp.dir,
    `positions-${resource}.mjs`,
    `import { writeFileSync } from 'node:fs';
const parent = process.ppid;
let n = 0;
const timer = setInterval(() => {
  process.stdout.write(JSON.stringify({ resourceId: ${JSON.stringify(resource)}, latitude: ${at.lat} + n * 1e-5, longitude: ${at.lon}, speed: 12.5 }) + '\\n');
  n += 1;
  if (n === 1) writeFileSync(${JSON.stringify(marker)}, '');
  if (${count} > 0 && n >= ${count}) clearInterval(timer);
}, 100);
setInterval(() => { if (process.ppid !== parent) process.exit(0); }, 500);
`,
  );
  return `[[sources]]\ntype = "exec"\nname = "gps-${resource}"\ncommand = [${JSON.stringify(process.execPath)}, ${JSON.stringify(script)}]\n`;
}

/** One value from the daemon's buffer, read beside it (WAL: the daemon keeps writing). */
function query<T>(dir: string, sql: string): T {
  const db = new Database(join(dir, 'buffer.db'), { readonly: true, fileMustExist: true });
  try {
    return db.prepare(sql).pluck().get() as T;
  } finally {
    db.close();
  }
}

type Body = { eventCity?: string; eventState?: string; time: { dateTime: string; timeZoneCode: string; timeZoneOffset: string } };

describe('the place of a milestone recorded from the command line, end to end', () => {
  it('after a push delivered and purged the readings: the last fix gives the city, state and zone', async () => {
    const { url } = await fx.sandbox.start();
    const marker = join(fx.tmp.dir, 'printed');
    const cfg = agentConfig(fx.tmp.dir, url, positions('T1', QUERETARO, 5, marker), { traces: '* * * * * *', sampling: 0 });
    expect((await runCli(['load', 'start', 'L-QRO', '--resource', 'T1', '--config', cfg])).code).toBe(0);
    fx.daemon = startDaemon(['--config', cfg], CHICAGO_CLI);

    // Every reading delivered, and deleted from the buffer: nothing left to take a position from.
    await waitFor(() => fx.sandbox.stats.tracePoints >= 5, 20_000, 'the five positions at the sandbox');
    await waitFor(() => query<number>(fx.tmp.dir, 'SELECT count(*) FROM readings') === 0, 10_000, 'the delivered readings purged');

    const m = await runCli(['milestone', '--load', 'L-QRO', '--code', 'X6', '--config', cfg], { env: CHICAGO_CLI });
    expect(m.stderr).toBe('');
    expect(m.code).toBe(0);
    expect(m.stdout).toMatch(/ CST \(UTC-6\) = .* at Santiago de Querétaro, QE \(place: last fix\);/);
    await waitFor(() => fx.sandbox.milestones.length === 1, 10_000, 'the milestone at the sandbox');
    const body = fx.sandbox.milestones[0].body as Body;
    expect(body).toMatchObject({ eventCode: 'X6', eventCity: 'Santiago de Querétaro', eventState: 'QE' });
    expect(body.time).toMatchObject({ timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' });
    expect(body.time.dateTime).toMatch(/-06:00$/);

    // status shows the fix that outlived its readings, and how old it is.
    const status = JSON.parse((await runCli(['status', '--json', '--config', cfg])).stdout) as { lastFixes: Array<{ resourceId: string; lat: number; lon: number; speed: number; ageS: number }> };
    expect(status.lastFixes).toHaveLength(1);
    expect(status.lastFixes[0]).toMatchObject({ resourceId: 'T1', lon: QUERETARO.lon, speed: 12.5 });
    expect(status.lastFixes[0].lat).toBeCloseTo(QUERETARO.lat + 4e-5, 6);
    expect(status.lastFixes[0].ageS).toBeGreaterThanOrEqual(0);
    expect(status.lastFixes[0].ageS).toBeLessThan(60);
    const text = (await runCli(['status', '--config', cfg])).stdout;
    expect(text).toMatch(/last fix:\s+T1 20\.58884, -100\.38990 at \S+ \S+ \(\d+ s ago\)/);
  });

  it('right after load start, before the first commit: the daemon places it from its newest fix when it sends it', async () => {
    const { url } = await fx.sandbox.start();
    const marker = join(fx.tmp.dir, 'printed');
    // A minute between commits: the milestone is recorded long before any fix of T2 is committed.
    // /metrics on a free port says when the daemon holds a fix in memory. No fix of T2 kept
    // from before the load either (loads.keep_unassigned_s): the buffer has none to place it.
    const cfg = agentConfig(fx.tmp.dir, url, `[health]\nlisten = "127.0.0.1:0"\n[loads]\nkeep_unassigned_s = 0\n${positions('T2', HERMOSILLO, 0, marker)}`, { flushMs: 60_000 });
    fx.daemon = startDaemon(['--config', cfg], CHICAGO_CLI);
    await waitFor(() => existsSync(marker), 15_000, 'the exec source printing');
    const started = await fx.daemon.started<{ health: number }>('the agent started');
    const metrics = `http://127.0.0.1:${started.health}/metrics`;
    // The start log says which zone the device is in, and where it came from.
    expect(started).toMatchObject({ timeZone: 'America/Chicago', timeZoneFrom: 'TZ' });
    await waitFor(async () => /^telematics_readings_pending [1-9]/m.test(await (await fetch(metrics)).text()), 10_000, "a fix of T2 in the daemon's memory");

    expect((await runCli(['load', 'start', 'L-HMO', '--resource', 'T2', '--config', cfg])).code).toBe(0);
    const m = await runCli(['milestone', '--load', 'L-HMO', '--code', 'X6', '--config', cfg], { env: CHICAGO_CLI });
    expect(m.code).toBe(0);
    // The CLI cannot know the place: it says so, and why.
    expect(m.stderr).toBe(
      "warning: no position for this milestone (no fix of T2 is in the buffer yet; no --lat/--lon or --city/--state; no --stop): it is recorded in this device's zone (America/Chicago) without a city and state; the running agent fills them in from its newest fix when it sends it, if it has one by then\n",
    );
    expect(m.stdout).toMatch(/ CST \(UTC-6\) = (\S+) \(place: none\);/);
    const printedUtc = Date.parse(/ = (\S+) \(place/.exec(m.stdout)![1]);

    await waitFor(() => fx.sandbox.milestones.length === 1, 10_000, 'the milestone at the sandbox');
    const body = fx.sandbox.milestones[0].body as Body;
    expect(body).toMatchObject({ eventCode: 'X6', eventCity: 'Hermosillo', eventState: 'SO' });
    expect(body.time).toMatchObject({ timeZoneCode: 'MST', timeZoneOffset: 'UTC-7' });
    // The same instant, written in the truck's zone instead of the device's.
    expect(body.time.dateTime).toMatch(/-07:00$/);
    expect(Math.abs(Date.parse(body.time.dateTime) - printedUtc)).toBeLessThan(1000);
    expect(fx.daemon.output()).toContain('milestone recorded without a position: place and zone taken from the newest fix');
    // Nothing of T2 committed yet: the place came from the daemon's memory.
    expect(query<number>(fx.tmp.dir, "SELECT count(*) FROM last_fix WHERE resource_id = 'T2'")).toBe(0);
  });

  it('with no position anywhere: no city and state, the device zone (UTC+0 on a UTC device), a warning from the CLI and in the log', async () => {
    const { url } = await fx.sandbox.start();
    const cfg = agentConfig(fx.tmp.dir, url);
    const utc = { TZ: 'UTC' };
    fx.daemon = startDaemon(['--config', cfg], utc);
    expect((await runCli(['load', 'start', 'L-NOWHERE', '--resource', 'T3', '--config', cfg])).code).toBe(0);
    const m = await runCli(['milestone', '--load', 'L-NOWHERE', '--code', 'X6', '--config', cfg], { env: utc });
    expect(m.code).toBe(0);
    expect(m.stderr).toContain('warning: no position for this milestone (no fix of T3 is in the buffer yet;');
    expect(m.stderr).toContain("recorded in this device's zone (UTC) without a city and state");
    expect(m.stdout).toMatch(/ UTC \(UTC\+0\) = \S+ \(place: none\);/);
    await waitFor(() => fx.sandbox.milestones.length === 1, 10_000, 'the milestone at the sandbox');
    const body = fx.sandbox.milestones[0].body as Body;
    expect(body.eventCity).toBeUndefined();
    expect(body.eventState).toBeUndefined();
    expect(body.time).toMatchObject({ timeZoneCode: 'UTC', timeZoneOffset: 'UTC+0' });
    expect(body.time.dateTime).toMatch(/\+00:00$/);
    await waitFor(() => fx.daemon!.output().includes('goes out without a city and state'), 5000, 'the daemon logging why');
  });
});

describe('the place rule, first match wins (CLI against a buffer file)', () => {
  let cfg: string;
  const stopsFile = (stops: unknown) => writeFile(fx.tmp.dir, 'stops.json', JSON.stringify(stops));
  beforeEach(() => {
    // Fixed dates of January 2026 (winter in London and Seattle), recorded long after: the
    // bound on how old a typed time may be (sources_time.max_past_days) is raised for them.
    cfg = agentConfig(fx.tmp.dir, 'http://127.0.0.1:9', '[sources_time]\nmax_past_days = 3650\n');
  });
  const bodyOf = (id: number) => {
    const store = Store.open(join(fx.tmp.dir, 'buffer.db'));
    try {
      return store.listMilestones().find((m) => m.id === id)!.body as Body & { stopsequenceNumber?: number };
    } finally {
      store.close();
    }
  };
  /** L1 on T1, started an hour ago: the fixes fixAt gives (minutes old) are in its window. */
  const startLoadBefore = (stops: Stop[] = []) => {
    const store = Store.open(join(fx.tmp.dir, 'buffer.db'));
    try {
      store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops, nowMs: Date.now() - 3_600_000 });
    } finally {
      store.close();
    }
  };
  const fixAt = (at: { lat: number; lon: number }, ageS: number) => {
    const store = Store.open(join(fx.tmp.dir, 'buffer.db'));
    try {
      store.insertReadings([{ resourceId: 'T1', timeMs: Date.now() - ageS * 1000, lat: at.lat, lon: at.lon }]);
    } finally {
      store.close();
    }
  };
  const record = async (args: string[]) => {
    const r = await runCli(['milestone', '--load', 'L1', ...args, '--json', '--config', cfg], { env: CHICAGO_CLI });
    expect(r.code, r.stderr).toBe(0);
    return { id: (JSON.parse(r.stdout) as { id: number }).id, stderr: r.stderr };
  };

  it('command line, then the stop (its coordinates, else its city), then the last fix', async () => {
    // Stop 1 in Hermosillo with coordinates; stop 2 named only (Chicago, from the gazetteer); stop 3 neither.
    startLoadBefore([
      { sequence: 1, type: 'pickup', latitude: HERMOSILLO.lat, longitude: HERMOSILLO.lon },
      { sequence: 2, type: 'delivery', city: 'Chicago', state: 'IL' },
      { sequence: 3, type: 'other' },
    ]);
    fixAt(QUERETARO, 60);

    // --lat/--lon beat the stop and the fix.
    const given = bodyOf((await record(['--code', 'X3', '--stop', '1', '--lat', '47.6062', '--lon', '-122.3321', '--time', '2026-01-15T10:00:00Z'])).id);
    expect(given).toMatchObject({ eventCity: 'Seattle', eventState: 'WA', time: { dateTime: '2026-01-15T02:00:00.000-08:00', timeZoneCode: 'PST', timeZoneOffset: 'UTC-8' } });
    // --city/--state beat the stop and the fix; the zone is the named place's.
    const named = bodyOf((await record(['--code', 'AF', '--stop', '1', '--city', 'Chicago', '--state', 'IL'])).id);
    expect(named).toMatchObject({ eventCity: 'Chicago', eventState: 'IL', time: { timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' } });
    // The stop's coordinates beat the last fix.
    const stop = bodyOf((await record(['--code', 'X1', '--stop', '1'])).id);
    expect(stop).toMatchObject({ eventCity: 'Hermosillo', eventState: 'SO', time: { timeZoneCode: 'MST', timeZoneOffset: 'UTC-7' } });
    // A stop with only a city and state: that place.
    const cityStop = bodyOf((await record(['--code', 'X1', '--stop', '2'])).id);
    expect(cityStop).toMatchObject({ eventCity: 'Chicago', eventState: 'IL', time: { timeZoneCode: 'CST' } });
    // A stop without either: the last fix (a minute old).
    const fix = bodyOf((await record(['--code', 'X1', '--stop', '3'])).id);
    expect(fix).toMatchObject({ eventCity: 'Santiago de Querétaro', eventState: 'QE', time: { timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' } });
    expect(fix.time.dateTime).toMatch(/-06:00$/);
  });

  it("a city without its state is sent as typed, in the zone of the stop; one the gazetteer lacks, in its state's zone; the warning says which", async () => {
    const stops = stopsFile([{ sequence: 1, type: 'pickup', latitude: HERMOSILLO.lat, longitude: HERMOSILLO.lon }]);
    expect((await runCli(['load', 'start', 'L1', '--resource', 'T1', '--stops', stops, '--config', cfg])).code).toBe(0);
    const r = await runCli(['milestone', '--load', 'L1', '--code', 'X3', '--stop', '1', '--city', 'Chicago', '--config', cfg], { env: CHICAGO_CLI });
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('warning: Chicago cannot be looked up in the gazetteer without --state: sent as typed, with the zone of stop 1 (America/Hermosillo)\n');
    expect(r.stdout).toMatch(/ MST \(UTC-7\) = \S+ at Chicago \(place: stop\);/);
    const typo = await runCli(['milestone', '--load', 'L1', '--code', 'AF', '--stop', '1', '--city', 'Chicagoo', '--state', 'IL', '--config', cfg], { env: CHICAGO_CLI });
    expect(typo.stderr).toBe('warning: Chicagoo, IL is not in the gazetteer: sent as typed, in the zone of IL (America/Chicago)\n');
    expect(typo.stdout).toMatch(/ CST \(UTC-6\) = \S+ at Chicagoo, IL \(place: command line\); zone America\/Chicago \(of IL\);/);
  });

  it('a last fix older than milestones.max_fix_age_s is not used, and the warning says how old it is', async () => {
    writeFile(fx.tmp.dir, 'agent.toml', `${readFileSync(cfg, 'utf8')}\n[milestones]\nmax_fix_age_s = 600\n`);
    startLoadBefore();
    fixAt(QUERETARO, 700);
    const old = await record(['--code', 'X6']);
    expect(old.stderr).toMatch(
      /^warning: no position for this milestone \(the last fix of T1 is 70\d s old \(milestones\.max_fix_age_s = 600\); no --lat\/--lon or --city\/--state; no --stop\): it is recorded in the zone of the last fix of T1, 70\d s old \(America\/Mexico_City\) without a city and state/,
    );
    expect(bodyOf(old.id).eventCity).toBeUndefined();
    fixAt(QUERETARO, 500);
    const recent = await record(['--code', 'X6']);
    expect(recent.stderr).toBe('');
    expect(bodyOf(recent.id)).toMatchObject({ eventCity: 'Santiago de Querétaro' });
  });

  it("a milestone typed hours after the event does not take the truck's position now; an appointment does", async () => {
    writeFile(fx.tmp.dir, 'agent.toml', `${readFileSync(cfg, 'utf8')}\n[milestones]\nmax_fix_age_s = 600\n`);
    startLoadBefore();
    fixAt(QUERETARO, 30);
    const threeHoursAgo = new Date(Date.now() - 3 * 3_600_000).toISOString();
    const late = await record(['--code', 'X1', '--time', threeHoursAgo]);
    expect(late.stderr).toMatch(
      /^warning: no position for this milestone \(the last fix of T1 is 107\d\d s from the milestone's time, and no position of T1 in its readings or history is that close to it \(milestones\.max_fix_age_s = 600\);/,
    );
    expect(bodyOf(late.id).eventCity).toBeUndefined();
    // Within the limit of the event's time, the fix is where it happened.
    const recent = await record(['--code', 'X3', '--time', new Date(Date.now() - 300_000).toISOString()]);
    expect(recent.stderr).toBe('');
    expect(bodyOf(recent.id)).toMatchObject({ eventCity: 'Santiago de Querétaro' });
    // An appointment's time is when it is set for, not where the truck was: judged against now.
    const appointment = await record(['--code', 'AB', '--time', new Date(Date.now() + 2 * 86_400_000).toISOString()]);
    expect(appointment.stderr).toBe('');
    expect(bodyOf(appointment.id)).toMatchObject({ eventCity: 'Santiago de Querétaro' });
  });

  it("timeZoneOffset is UTC<sign><hours> at the place: UTC+0 with GMT in London in winter, UTC-3:30 in St. John's; UTC+0 for a Z time with no place", async () => {
    expect((await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', cfg])).code).toBe(0);
    const london = bodyOf((await record(['--code', 'X6', '--lat', '51.5074', '--lon', '-0.1278', '--time', '2026-01-15T10:00:00Z'])).id);
    expect(london.time).toEqual({ dateTime: '2026-01-15T10:00:00.000+00:00', timeZoneCode: 'GMT', timeZoneOffset: 'UTC+0' });
    const stJohns = bodyOf((await record(['--code', 'X6', '--lat', '47.5615', '--lon', '-52.7126', '--time', '2026-01-15T10:00:00Z'])).id);
    expect(stJohns.time).toEqual({ dateTime: '2026-01-15T06:30:00.000-03:30', timeZoneCode: 'NST', timeZoneOffset: 'UTC-3:30' });
    expect(stJohns.eventState).toBe('NL');
    // No position and no fix: a time with Z is UTC, whatever the device's zone; one without an
    // offset has no zone to be read in, and is refused rather than read in the device's.
    for (const TZ of ['Europe/London', 'Etc/UTC', 'America/Chicago']) {
      const r = await runCli(['milestone', '--load', 'L1', '--code', 'X6', '--time', '2026-01-15T10:00:00Z', '--json', '--config', cfg], { env: { TZ } });
      expect((JSON.parse(r.stdout) as { body: Body }).body.time, TZ).toEqual({ dateTime: '2026-01-15T10:00:00.000+00:00', timeZoneCode: 'UTC', timeZoneOffset: 'UTC+0' });
      const local = await runCli(['milestone', '--load', 'L1', '--code', 'X6', '--time', '2026-01-15T10:00:00', '--config', cfg], { env: { TZ } });
      expect(local.code, TZ).toBe(65);
    }
  });
});

describe("the daemon's fill-in of a milestone recorded without a place", () => {
  const config = configSchema.parse({ api: { scac: 'ABCD' }, sources: [{ type: 'simulator', resource_id: 'T1' }], milestones: { max_fix_age_s: 600 } });
  const nowMs = Date.UTC(2026, 10, 24, 18, 0);
  const row = (code: string, timeMs: number): MilestoneRow =>
    ({
      id: 1,
      loadNumber: 'L1',
      ref: 'r',
      body: {
        eventCode: code,
        reasonCode: 'NS',
        loadNumber: 'L1',
        references: [{ name: 'milestoneId', value: 'r' }],
        time: { dateTime: new Date(timeMs).toISOString().replace('Z', '+00:00'), timeZoneCode: 'UTC', timeZoneOffset: 'UTC+0' },
      },
      createdMs: nowMs,
      attempts: 0,
      lastError: null,
      sentMs: null,
      parkedMs: null,
      code,
      stop: null,
      origin: 'manual',
      needsPlace: true,
      lastStatus: null,
      correlationId: null,
    }) satisfies MilestoneRow;
  const fix = { timeMs: nowMs - 30_000, ...QUERETARO };

  it("takes the newest fix only if it was taken within max_fix_age_s of the milestone's time (of its recording for an appointment)", () => {
    expect(completePlace(row('X1', nowMs - 3 * 3_600_000), fix, config)).toBeUndefined();
    expect(completePlace(row('X1', nowMs - 300_000), fix, config)).toMatchObject({ eventCity: 'Santiago de Querétaro' });
    expect(completePlace(row('AB', nowMs + 2 * 86_400_000), fix, config)).toMatchObject({ eventCity: 'Santiago de Querétaro' });
  });
});
