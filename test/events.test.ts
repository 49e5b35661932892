/**
 * Every event right, once: the checks a milestone passes before it is written, against the
 * real CLI and a real buffer file. Bad input (a bad code, a bad load number, a time in the
 * future) gets a message naming the rule and exit 65, and leaves the buffer as it was.
 */
import Database from 'better-sqlite3';
import { readdirSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { defaultDeviceId, loadConfig } from '../src/config/load.js';
import { createLogger } from '../src/log.js';
import { MilestoneDetector } from '../src/milestones/detector.js';
import type { Stop } from '../src/milestones/stops.js';
import type { Reading } from '../src/reading.js';
import { Sandbox } from '../src/sandbox/server.js';
import { agentConfig, ROOT, runCli, startDaemon, TEST_KEY, TEST_SCAC, waitFor, writeFile, type Daemon, cliFixture } from './helpers.js';

const CHICAGO = { lat: 41.8781, lon: -87.6298 };
const HERMOSILLO = { lat: 29.0729, lon: -110.9559 };

// Milestones typed with fixed dates of 2026 (a winter time in Chicago), recorded long after:
// the bound on how old a typed time may be (sources_time.max_past_days) is raised for them.
const fx = cliFixture('[sources_time]\nmax_past_days = 3650\n');

const cli = (args: string[], env: NodeJS.ProcessEnv = { TZ: 'UTC' }) => runCli([...args, '--config', fx.cfg], { env });

/**
 * A load on T1, started before the fixes these tests feed (`T0`): a load's window begins at
 * its start, by reading time, and a fix from before it is not the load's.
 */
async function startLoad(loadNumber = 'L1', stops: Stop[] = [{ sequence: 1, type: 'pickup', latitude: CHICAGO.lat, longitude: CHICAGO.lon }]) {
  fx.withBuffer((s) => s.startLoad({ loadNumber, resourceId: 'T1', resourceType: 'Truck', stops, nowMs: T0 - 60_000 }));
}

/** Every row of the tables a refused command must leave alone. */
function snapshot(): Record<string, unknown[]> {
  const db = new Database(fx.buffer, { readonly: true, fileMustExist: true });
  try {
    return Object.fromEntries(['loads', 'milestones', 'stop_state', 'readings', 'last_fix', 'dead_letters'].map((t) => [t, db.prepare(`SELECT * FROM ${t} ORDER BY rowid`).all()]));
  } finally {
    db.close();
  }
}

function milestones() {
  return fx.withBuffer((s) => s.listMilestones());
}

/** `Date` as a wall-clock time in `zone`, without an offset, as a driver would type it. */
function wallClock(ms: number, zone: string): string {
  return new Date(ms).toLocaleString('sv-SE', { timeZone: zone }).replace(' ', 'T');
}

describe('--time without an offset is read in the zone of the place (item 3)', () => {
  it("the stop's zone, not the machine's: printed in that zone and in UTC", async () => {
    await startLoad();
    const r = await cli(['milestone', '--load', 'L1', '--code', 'X3', '--stop', '1', '--time', '2026-01-15T10:00:00'], { TZ: 'Asia/Tokyo' });
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(
      'milestone 1 (X3 for load L1, stop 1) committed: 2026-01-15 10:00:00-06:00 CST (UTC-6) = 2026-01-15T16:00:00Z at Chicago, IL (place: stop); zone America/Chicago (of stop 1); the running agent sends it within seconds\n',
    );
    expect(milestones()[0].body.time).toEqual({ dateTime: '2026-01-15T10:00:00.000-06:00', timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' });
  });

  it("the last fix's zone when there is no stop; a typed offset is kept as typed", async () => {
    await startLoad('L1', []);
    fx.withBuffer((s) => s.insertReadings([{ resourceId: 'T1', timeMs: Date.now() - 60_000, lat: HERMOSILLO.lat, lon: HERMOSILLO.lon }]));
    // Two minutes ago on Hermosillo's clock (UTC-7 all year): the fix is a minute old, so it
    // is where the milestone happened, and its zone reads the time.
    const whenMs = Math.floor((Date.now() - 120_000) / 1000) * 1000;
    const typedLocal = wallClock(whenMs, 'America/Hermosillo');
    const local = await cli(['milestone', '--load', 'L1', '--code', 'X6', '--time', typedLocal], { TZ: 'America/Chicago' });
    expect(local.stdout).toContain(`committed: ${typedLocal.replace('T', ' ')}-07:00 MST (UTC-7) = ${new Date(whenMs).toISOString().replace('.000Z', 'Z')} at Hermosillo, SO (place: last fix)`);
    const typed = await cli(['milestone', '--load', 'L1', '--code', 'X6', '--time', `${wallClock(whenMs, 'Etc/GMT+5')}-05:00`]);
    expect(typed.stdout).toContain(`committed: ${typedLocal.replace('T', ' ')}-07:00 MST (UTC-7) = ${new Date(whenMs).toISOString().replace('.000Z', 'Z')} at Hermosillo, SO (place: last fix)`);
  });

  it('a --time that is no date names the forms it may take (exit 65)', async () => {
    await startLoad();
    const r = await cli(['milestone', '--load', 'L1', '--code', 'X3', '--stop', '1', '--time', 'yesterday']);
    expect(r).toMatchObject({
      code: 65,
      stderr: `error: --time: expected an ISO 8601 time such as 2026-11-23T10:00:00 (read in the zone of the milestone's place), 2026-11-23T10:00:00-06:00 or 2026-11-23T16:00:00Z, got "yesterday"\n`,
    });
  });

  it('a time more than sources_time.max_future_s ahead is refused (exit 65, nothing written); an appointment may lie ahead', async () => {
    await startLoad();
    // Read in UTC (the machine's zone here), this Chicago wall-clock time would lie in the past.
    const now = Date.now();
    const soon = await cli(['milestone', '--load', 'L1', '--code', 'X3', '--stop', '1', '--time', wallClock(now + 60_000, 'America/Chicago')]);
    expect(soon.code, soon.stderr).toBe(0);
    const before = snapshot();
    const later = await cli(['milestone', '--load', 'L1', '--code', 'AF', '--stop', '1', '--time', wallClock(now + 3600_000, 'America/Chicago')]);
    expect(later.code).toBe(65);
    expect(later.stderr).toMatch(
      /^error: --time \S+ is 3[56]\d\d s ahead of this device's clock \(sources_time\.max_future_s = 300\): a milestone records what happened\. Only appointment codes \(codes\.appointments: AA, AB\) may lie in the future\n$/,
    );
    expect(snapshot()).toEqual(before);

    // The next 2 January (Chicago on CST), within the year an appointment may lie ahead.
    const year = new Date(now).getUTCFullYear() + (now < Date.UTC(new Date(now).getUTCFullYear(), 0, 2) ? 0 : 1);
    const appointment = await cli(['milestone', '--load', 'L1', '--code', 'AA', '--stop', '1', '--time', `${year}-01-02T08:00:00`]);
    expect(appointment.code, appointment.stderr).toBe(0);
    expect(milestones().map((m) => [m.code, m.body.time])).toEqual([
      ['X3', expect.anything()],
      ['AA', { dateTime: `${year}-01-02T08:00:00.000-06:00`, timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' }],
    ]);
  });
});

const silent = createLogger({ level: 'silent', destination: process.stdout });
const T0 = Date.now() - 3600_000;

/** Fixes of T1 parked at the Chicago stop for 5 minutes, then driving away 5 km north. */
function arriveAndLeave(): { arrive: Reading[]; leave: Reading[] } {
  const arrive = Array.from({ length: 30 }, (_, i): Reading => ({ resourceId: 'T1', timeMs: T0 + i * 10_000, lat: CHICAGO.lat + 1e-5 * (i % 3), lon: CHICAGO.lon }));
  const leave = Array.from({ length: 5 }, (_, i): Reading => ({ resourceId: 'T1', timeMs: T0 + 300_000 + i * 10_000, lat: CHICAGO.lat + 0.05 + i * 0.001, lon: CHICAGO.lon }));
  return { arrive, leave };
}

function detect(batches: Reading[][], log = silent): void {
  const config = loadConfig(fx.cfg).config;
  fx.withBuffer((store) => {
    const d = new MilestoneDetector(
      store,
      () => config,
      log,
      () => {},
    );
    for (const b of batches) {
      store.insertReadings(b);
      d.process(b);
    }
  });
}

describe('one milestone per load, code and stop (item 4)', () => {
  it('detected first: a manual X3 for the same stop is refused naming the first one; --force records it', async () => {
    await startLoad();
    const { arrive } = arriveAndLeave();
    detect([arrive]);
    expect(milestones().map((m) => [m.code, m.stop, m.origin])).toEqual([['X3', 1, 'detected']]);
    const first = milestones()[0];
    const before = snapshot();

    const again = await cli(['milestone', '--load', 'L1', '--code', 'x3', '--stop', '1']);
    expect(again.code).toBe(65);
    expect(again.stderr).toBe(
      `error: load L1 already has X3 for stop 1: milestone ${first.id} (detected from positions, at ${String((first.body.time as { dateTime: string }).dateTime)}, waiting to be sent). One milestone per load, code and stop; to record another anyway, add --force\n`,
    );
    expect(snapshot()).toEqual(before);

    const forced = await cli(['milestone', '--load', 'L1', '--code', 'X3', '--stop', '1', '--force']);
    expect(forced.code, forced.stderr).toBe(0);
    expect(milestones().map((m) => [m.code, m.stop, m.origin])).toEqual([
      ['X3', 1, 'detected'],
      ['X3', 1, 'manual'],
    ]);
    // A repeatable code (codes.repeatable) is no repeat.
    expect((await cli(['milestone', '--load', 'L1', '--code', 'X6'])).code).toBe(0);
    expect((await cli(['milestone', '--load', 'L1', '--code', 'X6'])).code).toBe(0);
  });

  it('manual first: the detector does not report that code again, and goes on with the next', async () => {
    await startLoad();
    const manual = await cli(['milestone', '--load', 'L1', '--code', 'X3', '--stop', '1']);
    expect(manual.code, manual.stderr).toBe(0);
    const { arrive, leave } = arriveAndLeave();
    let logged = '';
    const log = createLogger({ level: 'info', destination: { write: (s: string) => ((logged += s), true) } as unknown as NodeJS.WritableStream });
    detect([arrive, leave], log);
    expect(milestones().map((m) => [m.code, m.stop, m.origin])).toEqual([
      ['X3', 1, 'manual'],
      ['AF', 1, 'detected'],
    ]);
    expect(logged).toContain('X3 for stop 1 was recorded already (milestone 1); not reported again');
    expect(fx.withBuffer((s) => s.stopStates('L1').get(1)?.state)).toBe('departed');

    const twice = await cli(['milestone', '--load', 'L1', '--code', 'X3', '--stop', '1']);
    expect(twice.code).toBe(65);
    expect(twice.stderr).toMatch(/^error: load L1 already has X3 for stop 1: milestone 1 \(recorded by hand, at \S+, waiting to be sent\)\./);
  });
});

describe('detection is atomic (item 5)', () => {
  it('a failing stop-state write takes the milestone with it; after the fault, exactly one X3', async () => {
    await startLoad();
    const db = new Database(fx.buffer);
    db.exec(`CREATE TRIGGER fail_state_insert BEFORE INSERT ON stop_state BEGIN SELECT RAISE(ABORT, 'disk error'); END;
             CREATE TRIGGER fail_state_update BEFORE UPDATE ON stop_state BEGIN SELECT RAISE(ABORT, 'disk error'); END;`);
    const { arrive, leave } = arriveAndLeave();
    let logged = '';
    const log = createLogger({ level: 'info', destination: { write: (s: string) => ((logged += s), true) } as unknown as NodeJS.WritableStream });
    detect([arrive], log);
    expect(logged).toContain('milestone detection failed for this batch');
    expect(logged).toContain('disk error');
    expect(milestones()).toEqual([]);
    expect(snapshot().stop_state).toEqual([]);

    db.exec('DROP TRIGGER fail_state_insert; DROP TRIGGER fail_state_update;');
    db.close();
    // The same fixes again (as after a restart), then more: one arrival, one departure.
    detect([arrive, arrive.map((r) => ({ ...r, timeMs: r.timeMs + 1 })), leave]);
    const rows = milestones();
    expect(rows.map((m) => m.code)).toEqual(['X3', 'AF']);
    expect(new Set(rows.map((m) => m.ref)).size).toBe(2);
  });

  it('src/milestones/ reaches the database only through the buffer (no store.db)', () => {
    const dir = join(ROOT, 'src', 'milestones');
    for (const f of readdirSync(dir)) expect(readFileSync(join(dir, f), 'utf8'), f).not.toMatch(/\.db\b(?!['"])/);
  });
});

describe('codes are checked, not just warned about (item 6)', () => {
  it('upper-cases codes, refuses an unknown event or reason code naming its list, hints at the other list; --force sends it', async () => {
    await startLoad('L1', []);
    const lower = await cli(['milestone', '--load', 'L1', '--code', 'x6', '--reason', 'ai']);
    expect(lower.code, lower.stderr).toBe(0);
    expect(milestones()[0].body).toMatchObject({ eventCode: 'X6', reasonCode: 'AI' });
    const before = snapshot();

    const zz = await cli(['milestone', '--load', 'L1', '--code', 'ZZ']);
    expect(zz.code).toBe(65);
    expect(zz.stderr).toBe(
      'error: event code ZZ is not in codes.events; the list holds X12 214 shipment status codes such as X3 arrived at pick-up, AF departed pick-up, X1 arrived at delivery, D1 unloaded, SD delayed, AA/AB appointment. If the service accepts it, add it to codes.events in the config; to send it once anyway, add --force\n',
    );
    const reasonAsEvent = await cli(['milestone', '--load', 'L1', '--code', 'NS']);
    expect(reasonAsEvent.code).toBe(65);
    expect(reasonAsEvent.stderr).toMatch(/^error: event code NS is not in codes\.events \(NS is a reason code: give it with --reason\); /);
    const badReason = await cli(['milestone', '--load', 'L1', '--code', 'X6', '--reason', 'X3']);
    expect(badReason.code).toBe(65);
    expect(badReason.stderr).toMatch(
      /^error: reason code X3 is not in codes\.reasons \(X3 is an event code: give it with --code\); .* add it to codes\.reasons in the config; to send it once anyway, add --force\n$/,
    );
    const junk = await cli(['milestone', '--load', 'L1', '--code', 'X-3']);
    expect(junk.code).toBe(65);
    expect(junk.stderr).toBe('error: event code "X-3": expected 1-10 letters and digits, such as X3\n');
    expect(snapshot()).toEqual(before);

    const forced = await cli(['milestone', '--load', 'L1', '--code', 'zz', '--force']);
    expect(forced.code).toBe(0);
    expect(forced.stderr).toContain('warning: event code ZZ is not in codes.events; recorded anyway (--force): the service may refuse it\n');
    expect(milestones().map((m) => m.body.eventCode)).toEqual(['X6', 'ZZ']);
  });

  it('a code added to codes.events in the config (any case) is accepted', async () => {
    writeFile(fx.dir, 'agent.toml', readFileSync(fx.cfg, 'utf8').replace('[delivery]', '[codes]\nevents = ["x3", "AF", "X1", "D1", "CD", "SD", "zz"]\n[delivery]'));
    expect((await cli(['validate-config'])).code).toBe(0);
    await startLoad('L1', []);
    expect((await cli(['milestone', '--load', 'L1', '--code', 'ZZ'])).code).toBe(0);
    expect((await cli(['milestone', '--load', 'L1', '--code', 'X6'])).code).toBe(65);
  });

  it('resourceType is Truck, Trailer or Driver: the case is fixed, anything else refused at load start and in the config', async () => {
    const trailer = await cli(['load', 'start', 'L1', '--resource', 'TRAILER-7', '--resource-type', 'trailer']);
    expect(trailer.stdout).toBe('load L1 started on TRAILER-7 (Trailer) with 0 stop(s)\n');
    const before = snapshot();
    const car = await cli(['load', 'start', 'L2', '--resource', 'CAR-1', '--resource-type', 'Car']);
    expect(car.code).toBe(65);
    expect(car.stderr).toBe('error: --resource-type: expected one of Truck, Trailer, Driver, got "Car"\n');
    expect(snapshot()).toEqual(before);

    // biome-ignore lint/correctness/noEmptyCharacterClassInRegex: [^] is any character, newlines included: from [[sources]] to the end.
    const bad = writeFile(fx.dir, 'bad.toml', readFileSync(fx.cfg, 'utf8').replace(/\[\[sources\]\][^]*$/, '[[sources]]\ntype = "simulator"\nresource_id = "T1"\nresource_type = "car"\n'));
    const v = await runCli(['validate-config', '--config', bad]);
    expect(v.code).toBe(78);
    expect(v.stderr).toContain(`  ${bad}:${readFileSync(bad, 'utf8').split('\n').indexOf('resource_type = "car"') + 1}: sources[0].resource_type: expected one of Truck, Trailer, Driver, got "car"\n`);
    const ok = writeFile(fx.dir, 'ok.toml', readFileSync(bad, 'utf8').replace('"car"', '"driver"'));
    const json = JSON.parse((await runCli(['validate-config', '--json', '--config', ok])).stdout) as { sources: Array<{ resource_type: string }> };
    expect(json.sources[0].resource_type).toBe('Driver');
  });
});

describe('load numbers are checked where they are typed (item 7)', () => {
  it('load start and milestone refuse a number outside api.load_number_pattern, naming it, and write nothing', async () => {
    await startLoad('L1', []);
    const before = snapshot();
    for (const bad of ['L_1', 'L 1', 'A'.repeat(36), '']) {
      const r = await cli(['load', 'start', bad, '--resource', 'T9']);
      expect(r.code, bad).toBe(65);
      expect(r.stderr).toBe(
        `error: load number ${JSON.stringify(bad)} does not match api.load_number_pattern ^[A-Za-z0-9-]{1,35}$, so the service would refuse it; check the number, or change api.load_number_pattern if the service accepts it\n`,
      );
    }
    const m = await cli(['milestone', '--load', 'L_1', '--code', 'X6']);
    expect(m.code).toBe(65);
    expect(m.stderr).toContain('does not match api.load_number_pattern ^[A-Za-z0-9-]{1,35}$');
    expect(snapshot()).toEqual(before);
    expect((await cli(['load', 'start', 'A'.repeat(35), '--resource', 'T9'])).code).toBe(0);
  });

  it('a load the buffer holds already (started before the pattern was checked) still has its arrivals detected', async () => {
    await startLoad('PO#1');
    detect([arriveAndLeave().arrive]);
    expect(milestones().map((m) => [m.loadNumber, m.code, m.origin])).toEqual([['PO#1', 'X3', 'detected']]);
    // Typed by hand, it is refused.
    const r = await cli(['milestone', '--load', 'PO#1', '--code', 'X6']);
    expect(r.code).toBe(65);
    expect(r.stderr).toContain('error: load number "PO#1" does not match api.load_number_pattern');
  });

  it('a pattern of its own: year-prefixed numbers only', async () => {
    fx.cfg = agentConfig(fx.dir, 'http://127.0.0.1:9', '', { api: "load_number_pattern = '^20\\d{2}-\\d{6}$'" });
    const r = await cli(['load', 'start', 'L1', '--resource', 'T1']);
    expect(r.code).toBe(65);
    expect(r.stderr).toContain('error: load number "L1" does not match api.load_number_pattern ^20\\d{2}-\\d{6}$');
    expect((await cli(['load', 'start', '2026-000123', '--resource', 'T1'])).code).toBe(0);
    expect((await cli(['milestone', '--load', '2026-000123', '--code', 'X6'])).code).toBe(0);
    expect((await cli(['milestone', '--load', '2026-00012', '--code', 'X6'])).code).toBe(65);

    fx.cfg = agentConfig(fx.dir, 'http://127.0.0.1:9', '', { api: 'load_number_pattern = "(["' });
    const v = await cli(['validate-config']);
    expect(v.code).toBe(78);
    expect(v.stderr).toMatch(/ {2}\S+agent\.toml:\d+: api\.load_number_pattern: expected a regular expression \(.*\)/);
  });
});

describe('device ids unique across a fleet (item 9)', () => {
  it('host name plus the first 8 hex digits of the machine id; the host name alone without one', () => {
    const id = writeFile(fx.dir, 'machine-id', '3D1219C7C4C5404AAA1F6D2A48ADFDA4\n');
    expect(defaultDeviceId('raspberrypi', id)).toBe('raspberrypi-3d1219c7');
    expect(defaultDeviceId('raspberrypi', join(fx.dir, 'none'))).toBe('raspberrypi');
    expect(defaultDeviceId('raspberrypi', writeFile(fx.dir, 'empty', ''))).toBe('raspberrypi');
    expect(defaultDeviceId('x'.repeat(80), id)).toBe(`${'x'.repeat(55)}-3d1219c7`);
    expect(readFileSync(join(ROOT, 'config', 'agent.example.toml'), 'utf8')).toMatch(/host\s+name plus the first 8 hex digits of \/etc\/machine-id/);
  });

  it("the daemon's traceIds carry the default device id", async () => {
    const sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
    const { url } = await sandbox.start();
    let daemon: Daemon | undefined;
    try {
      fx.cfg = agentConfig(fx.dir, url, '[[sources]]\ntype = "simulator"\nresource_id = "T1"\ntime_scale = 20\n', { deviceId: null, traces: '* * * * * *', sampling: 0 });
      const expected = defaultDeviceId();
      expect(expected).not.toBe(hostname()); // this machine has a machine id
      expect((await cli(['validate-config'])).stdout).toContain(`(device ${expected}, `);
      expect((await cli(['load', 'start', 'L1', '--resource', 'T1'])).code).toBe(0);
      daemon = startDaemon(['--config', fx.cfg]);
      await waitFor(() => sandbox.stats.tracePoints >= 2, 20_000, 'trace points');
      const ids = sandbox.traces.flatMap((t) => t.body.traces.map((p) => p.references!.find((r) => r.name === 'traceId')!.value));
      for (const v of ids) expect(v).toMatch(new RegExp(`^${expected.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}-\\d+$`));
    } finally {
      await daemon?.stop('SIGTERM');
      await sandbox.stop();
    }
  });
});
