/**
 * A stop's appointment times, read once when the load starts: the real CLI bin (with a zone
 * of its own in TZ) and the fleet link's command handler against a real buffer file, and the
 * real delay detector on what they stored. The failure these guard against: an appointment
 * typed without an offset (`2026-11-26T12:00` at a Chicago dock) was read in the device's
 * zone (UTC) by `Date.parse`, `load start` warned that it ended hours ago, and the detector
 * sent the service a false SD (delayed) a minute later; the same leniency took `"1"` for
 * 2001-01-01 and `"12/31/2026"` for a date.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type Config, configSchema } from '../src/config/schema.js';
import { Commands } from '../src/fleet/commands.js';
import { formatTime } from '../src/geo/timezone.js';
import { createLogger } from '../src/log.js';
import { MilestoneDetector } from '../src/milestones/detector.js';
import type { Stop } from '../src/milestones/stops.js';
import { agentConfig, runCli, writeFile, cliFixture } from './helpers.js';

const CHICAGO = { lat: 41.8781, lon: -87.6298 };
const UTC_DEVICE = { TZ: 'UTC' };
const silent = createLogger({ level: 'silent', destination: process.stdout });

const fx = cliFixture();
let config: Config;
beforeEach(() => {
  config = configSchema.parse({ api: { scac: 'ABCD' }, buffer: { path: fx.buffer }, sources: [{ type: 'simulator', resource_id: 'T1' }] });
});

/** `2026-11-26T13:29` for `ms` in `zone`: what a dispatcher there types. */
const wallClock = (ms: number, zone: string) => formatTime(new Date(ms), zone, 'local').dateTime.slice(0, 16);
const minute = (ms: number) => Math.floor(ms / 60_000) * 60_000;
const stopsFile = (stops: unknown) => writeFile(fx.dir, 'stops.json', JSON.stringify(stops));
const loadStart = (stops: unknown, env: NodeJS.ProcessEnv = UTC_DEVICE) => runCli(['load', 'start', 'L-3003', '--resource', 'T1', '--stops', stopsFile(stops), '--config', fx.cfg], { env });
const delivery = (appointment: Record<string, string>, at: { lat: number; lon: number } | null = CHICAGO) => [
  { sequence: 1, type: 'delivery', ...(at ? { latitude: at.lat, longitude: at.lon } : {}), city: 'Chicago', state: 'IL', appointment },
];

/**
 * The real detector fed a truck 20 km short of the stop, driving to it at 60 km/h for two
 * minutes: it arrives in about half an hour. What it records for L-3003.
 */
function driveTowardTheStop(nowMs: number): Array<{ code: string; body: Record<string, unknown> }> {
  return fx.withBuffer((store) => {
    const d = new MilestoneDetector(
      store,
      () => config,
      silent,
      () => {},
    );
    const metresPerDegree = 111_195;
    const fixes = Array.from({ length: 13 }, (_, i) => {
      const distanceM = 20_000 - i * 10 * (60 / 3.6);
      return { resourceId: 'T1', timeMs: nowMs - (12 - i) * 10_000, lat: CHICAGO.lat - distanceM / metresPerDegree, lon: CHICAGO.lon };
    });
    store.insertReadings(fixes);
    d.process(fixes);
    return store.listMilestones('L-3003').map((m) => ({ code: m.code, body: m.body }));
  });
}

describe('load start: an appointment without an offset is read in the zone of the stop', () => {
  it("on a UTC device, a Chicago dock's 2 h ahead: no stale warning, the instant stored, and no false SD from the detector", async () => {
    const endMs = minute(Date.now()) + 2 * 3_600_000;
    const start = wallClock(endMs - 3_600_000, 'America/Chicago');
    const end = wallClock(endMs, 'America/Chicago');
    const r = await loadStart(delivery({ start, end }));
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe('');
    const stored = fx.withBuffer((s) => s.getLoad('L-3003')!.stops[0].appointment!);
    // The instant itself, written with the offset of the stop's zone: nothing left to read later.
    const offset = formatTime(new Date(endMs), 'America/Chicago', 'local').dateTime.slice(-6);
    expect(stored).toEqual({ start: `${start}:00${offset}`, end: `${end}:00${offset}` });
    expect(Date.parse(stored.end!)).toBe(endMs);
    expect(driveTowardTheStop(Date.now())).toEqual([]);
  });

  it('the same file on a device in Tokyo stores the same instant: the device zone plays no part', async () => {
    const endMs = minute(Date.now()) + 2 * 3_600_000;
    const end = wallClock(endMs, 'America/Chicago');
    expect((await loadStart(delivery({ end }), { TZ: 'Asia/Tokyo' })).code).toBe(0);
    expect(Date.parse(fx.withBuffer((s) => s.getLoad('L-3003')!.stops[0].appointment!.end!))).toBe(endMs);
  });

  it('a time with Z or an offset is taken as it is, with or without coordinates', async () => {
    const r = await loadStart(delivery({ start: '2026-12-01T16:00:00Z', end: '2026-12-01T12:00:00-05:00' }, null));
    expect(r.code, r.stderr).toBe(0);
    expect(fx.withBuffer((s) => s.getLoad('L-3003')!.stops[0].appointment)).toEqual({ start: '2026-12-01T16:00:00Z', end: '2026-12-01T12:00:00-05:00' });
  });

  it('a local time at a stop without coordinates: refused (65) naming the stop and the field, nothing started', async () => {
    const r = await loadStart(delivery({ end: '2026-12-01T12:00' }, null));
    expect(r.code).toBe(65);
    expect(r.stderr).toMatch(/stop 1 appointment\.end: 2026-12-01T12:00 has no UTC offset, and the stop has no latitude\/longitude/);
    expect(r.stderr).toContain('2026-12-01T12:00-06:00');
    expect(fx.withBuffer((s) => s.getLoad('L-3003'))).toBeUndefined();
  });

  it('an appointment that ends before it starts: refused (65) naming the stop, nothing started', async () => {
    const r = await loadStart(delivery({ start: '2026-12-01T18:00Z', end: '2026-12-01T17:00Z' }));
    expect(r.code).toBe(65);
    expect(r.stderr).toContain('stop 1 appointment: its end (2026-12-01T17:00Z) is before its start (2026-12-01T18:00Z)');
    expect(fx.withBuffer((s) => s.getLoad('L-3003'))).toBeUndefined();
  });

  it.each([['1'], ['12/31/2026'], ['2026-12-31'], ['2026-02-30T10:00:00Z'], ['2026-12-31T25:00'], ['2026-12-31T12:00 CST'], ['Thu, 31 Dec 2026 12:00:00 -0600']])(
    '%j is no ISO 8601 date and time: refused (65), naming the field',
    async (text) => {
      const r = await loadStart(delivery({ end: text }));
      expect(r.code).toBe(65);
      expect(r.stderr).toContain('[0].appointment.end');
      expect(r.stderr).toContain('expected an ISO 8601 date and time');
      expect(fx.withBuffer((s) => s.getLoad('L-3003'))).toBeUndefined();
    },
  );

  it('clock changes as for a typed --time: the first of a time that occurs twice, a time that never was moved forward; each with a warning', async () => {
    config.milestones.delay.enabled = false;
    const cfgNoDelay = agentConfig(fx.dir, 'http://127.0.0.1:9', '[milestones.delay]\nenabled = false\n');
    const r = await runCli(
      [
        'load',
        'start',
        'L-3003',
        '--resource',
        'T1',
        '--stops',
        stopsFile([
          { sequence: 1, type: 'pickup', latitude: CHICAGO.lat, longitude: CHICAGO.lon, appointment: { start: '2027-03-14T02:30' } },
          { sequence: 2, type: 'delivery', latitude: CHICAGO.lat, longitude: CHICAGO.lon, appointment: { end: '2027-11-07T01:30' } },
        ]),
        '--config',
        cfgNoDelay,
      ],
      { env: UTC_DEVICE },
    );
    expect(r.code, r.stderr).toBe(0);
    const stops = fx.withBuffer((s) => s.getLoad('L-3003')!.stops);
    expect(stops[0].appointment).toEqual({ start: '2027-03-14T03:30:00-05:00' });
    expect(stops[1].appointment).toEqual({ end: '2027-11-07T01:30:00-05:00' });
    expect(r.stderr).toContain('warning: stop 1 appointment.start: 2027-03-14T02:30 does not exist in America/Chicago (the clocks skip it): read as 2027-03-14T03:30:00-05:00');
    expect(r.stderr).toContain('warning: stop 2 appointment.end: 2027-11-07T01:30 occurs twice in America/Chicago: read as the first, 2027-11-07T01:30:00-05:00');
  });
});

describe("a milestone's --time goes through the same reader", () => {
  it.each([['Thu, 26 Nov 2026 08:00:00 -0500'], ['26 Nov 2026 08:00 -05:00'], ['2026-02-30T08:00:00-05:00']])('%j: refused (65), where Date.parse took it', async (text) => {
    expect((await loadStart(delivery({}))).code).toBe(0);
    const r = await runCli(['milestone', '--load', 'L-3003', '--code', 'X6', '--stop', '1', '--time', text, '--config', fx.cfg], { env: UTC_DEVICE });
    expect(r.code).toBe(65);
    expect(r.stderr).toContain(`--time: expected an ISO 8601 time such as 2026-11-23T10:00:00`);
    expect(fx.withBuffer((s) => s.listMilestones('L-3003'))).toEqual([]);
  });
});

describe('the delay detector compares instants, also for loads an older version stored', () => {
  let tz: string | undefined;
  beforeAll(() => {
    // This process in UTC, as the daemon of the report: a plain Date.parse would read the text there.
    tz = process.env.TZ;
    process.env.TZ = 'UTC';
  });
  afterAll(() => {
    if (tz === undefined) delete process.env.TZ;
    else process.env.TZ = tz;
  });

  it("a stop holding an offset-less appointment: read in the stop's zone, no false SD", () => {
    const now = Date.now();
    const end = wallClock(minute(now) + 2 * 3_600_000, 'America/Chicago');
    const stops: Stop[] = [{ sequence: 1, type: 'delivery', latitude: CHICAGO.lat, longitude: CHICAGO.lon, appointment: { end } }];
    fx.withBuffer((s) => s.startLoad({ loadNumber: 'L-3003', resourceId: 'T1', resourceType: 'Truck', stops, nowMs: now - 600_000 }));
    expect(driveTowardTheStop(now)).toEqual([]);
  });

  it('and a real delay is still reported: an appointment that ended an hour ago in Chicago', () => {
    const now = Date.now();
    const end = wallClock(minute(now) - 3_600_000, 'America/Chicago');
    const stops: Stop[] = [{ sequence: 1, type: 'delivery', latitude: CHICAGO.lat, longitude: CHICAGO.lon, appointment: { end } }];
    fx.withBuffer((s) => s.startLoad({ loadNumber: 'L-3003', resourceId: 'T1', resourceType: 'Truck', stops, nowMs: now - 600_000 }));
    expect(driveTowardTheStop(now).map((m) => m.code)).toEqual(['SD']);
  });
});

describe('the fleet link: load-start reads stops the same way', () => {
  const send = (payload: unknown) =>
    fx.withBuffer(
      (store) =>
        new Commands(
          store,
          () => config,
          () => 65_536,
        ).handle('load-start', Buffer.from(JSON.stringify(payload))).reply,
    );

  it('a local time at a stop with coordinates: the instant stored', () => {
    const endMs = minute(Date.now()) + 2 * 3_600_000;
    const reply = send({ commandId: 'c1', loadNumber: 'L-3003', resourceId: 'T1', stops: delivery({ end: wallClock(endMs, 'America/Chicago') }) });
    expect(reply).toMatchObject({ ok: true, status: 0 });
    expect(reply.message).not.toContain('warning');
    expect(Date.parse(fx.withBuffer((s) => s.getLoad('L-3003')!.stops[0].appointment!.end!))).toBe(endMs);
  });

  it('a local time at a stop without coordinates: an error answer (65) naming the stop and field, no load', () => {
    const reply = send({ commandId: 'c2', loadNumber: 'L-3003', resourceId: 'T1', stops: delivery({ end: '2026-12-01T12:00' }, null) });
    expect(reply).toMatchObject({ ok: false, status: 65, message: expect.stringMatching(/stop 1 appointment\.end: 2026-12-01T12:00 has no UTC offset/) });
    expect(fx.withBuffer((s) => s.getLoad('L-3003'))).toBeUndefined();
  });

  it('an appointment that ends before it starts (a typo, or start and end swapped): an error answer (65) naming the stop, no load', () => {
    // Taken, the delay detector judged the truck late against the earlier end.
    const reply = send({ commandId: 'c4', loadNumber: 'L-3003', resourceId: 'T1', stops: delivery({ start: '2026-12-01T12:00', end: '2026-12-01T10:00-06:00' }) });
    expect(reply).toMatchObject({ ok: false, status: 65, message: 'stop 1 appointment: its end (2026-12-01T10:00-06:00) is before its start (2026-12-01T12:00:00-06:00); check the two times' });
    expect(fx.withBuffer((s) => s.getLoad('L-3003'))).toBeUndefined();
  });

  it('no ISO 8601 date and time: an error answer, no load', () => {
    const reply = send({ commandId: 'c3', loadNumber: 'L-3003', resourceId: 'T1', stops: delivery({ end: '12/31/2026' }) });
    expect(reply).toMatchObject({ ok: false, message: expect.stringContaining('expected an ISO 8601 date and time') });
    expect(fx.withBuffer((s) => s.getLoad('L-3003'))).toBeUndefined();
  });
});
