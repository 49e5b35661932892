/**
 * The GNSS odometer (src/admission/odometer.ts): fixes of a source with `odometer = "gnss"`
 * go through the real admission into a real buffer file, and each stored row carries the
 * resource's total in km.
 */
import { describe, expect, it } from 'vitest';
import { Ingest } from '../src/admission/ingest.js';
import type { OdometerOptions } from '../src/admission/odometer.js';
import { Store } from '../src/buffer/store.js';
import { TrustedClock } from '../src/clock.js';
import { parseConfigText } from '../src/config/load.js';
import { simulatorSourceSchema } from '../src/config/schema.js';
import { distanceM } from '../src/geo/distance.js';
import type { Reading } from '../src/reading.js';
import { horizontalErrorM } from '../src/sources/gpsd.js';
import { RunningSources } from '../src/sources/running.js';
import { SimulatorModel, seededRandom } from '../src/sources/simulator.js';
import { logFixture, tempFixture, waitFor } from './helpers.js';
import { NMEA_LOG } from './sources/support.js';

const T0 = Date.parse('2026-03-02T14:00:00Z');
/** The schema's defaults ([odometer] min_speed_kmh and max_speed_kmh). */
const LIMITS = { minSpeedKmh: 3, maxSpeedKmh: 200 };
const GNSS: OdometerOptions = { ...LIMITS };

const tmp = tempFixture();
const logs = logFixture();
const logger = logs.logger;

/** A buffer and its admission, as the daemon has them (readings kept without a load unless said). */
function agent(opts: { keepWithoutLoad?: boolean; now?: () => number } = {}) {
  const store = Store.open(tmp.buffer);
  logs.open.push(store);
  const log = logger();
  const ingest = new Ingest(store, { batchSize: 500, flushIntervalMs: 60_000, keepWithoutLoad: opts.keepWithoutLoad ?? true }, log, opts.now);
  return { store, ingest, log };
}

/** The odometer of every stored row of the resource, in order. */
function storedOdometers(store: Store, resourceId = 'TRUCK-1'): Array<number | null> {
  return store.db.prepare('SELECT odometer FROM readings WHERE resource_id = ? ORDER BY id').pluck().all(resourceId) as Array<number | null>;
}

/** A point `m` metres away from (lat, lon), on a bearing in radians. */
function offset(lat: number, lon: number, m: number, bearing: number): { lat: number; lon: number } {
  const dLat = (m * Math.cos(bearing)) / 111_195;
  const dLon = (m * Math.sin(bearing)) / (111_195 * Math.cos((lat * Math.PI) / 180));
  return { lat: lat + dLat, lon: lon + dLon };
}

/** The simulator's truck driven along its built-in route at 1 Hz, its own odometer taken out, with a receiver's scatter. */
function drive(seed = 7): { fixes: Reading[]; routeM: number } {
  const cfg = simulatorSourceSchema.parse({
    type: 'simulator',
    resource_id: 'TRUCK-1',
    // Loading at the start and unloading in Indianapolis: 40 minutes standing still.
    stops: [
      { at_point: 0, dwell_s: 900 },
      { at_point: 15, dwell_s: 1500 },
    ],
  });
  const random = seededRandom(seed);
  const model = new SimulatorModel(cfg, T0, random);
  const fixes: Reading[] = [];
  while (!model.finished) {
    const { reading } = model.step(1, 'TRUCK-1');
    const { odometer: _own, temperatureC: _t, ...fix } = reading;
    // Some 1.5 m of scatter, as a receiver with a clear sky has it.
    const p = offset(fix.lat!, fix.lon!, random() * 1.5, random() * 2 * Math.PI);
    fixes.push({ ...fix, ...p });
  }
  return { fixes, routeM: model.totalM };
}

describe('GNSS odometer', () => {
  it("adds up the simulator's route to its length within 1 %, stationary time included", () => {
    const { store, ingest } = agent();
    const intake = ingest.intake('nmea:TRUCK-1', logger(), undefined, GNSS);
    const { fixes, routeM } = drive();
    expect(fixes.length).toBeGreaterThan(11_000 + 2400);
    for (const f of fixes) expect(ingest.admit(f, intake)).toBeUndefined();
    ingest.flush();
    const km = storedOdometers(store);
    expect(km).toHaveLength(fixes.length);
    expect(km.every((v) => typeof v === 'number')).toBe(true);
    // Never backwards.
    for (let i = 1; i < km.length; i++) expect(km[i]!).toBeGreaterThanOrEqual(km[i - 1]!);
    const total = km.at(-1)! * 1000;
    expect(Math.abs(total - routeM) / routeM).toBeLessThan(0.01);
    // Not nothing either: the route is some 280 km.
    expect(routeM).toBeGreaterThan(270_000);
  });

  it('a parked truck: fixes scattered within 5 m for 10 minutes add less than 10 m, at speed 0 or within the reported error', () => {
    const { store, ingest } = agent();
    const intake = ingest.intake('gpsd:TRUCK-1', logger(), undefined, GNSS);
    const random = seededRandom(3);
    const at = { lat: 41.8781, lon: -87.6298 };
    // Speed 0 from the receiver; then a receiver with no speed but its error estimate (gpsd's eph, 95 %).
    for (const [i, extra] of [{ speed: 0 }, { errorM: 5 }].entries()) {
      for (let s = 0; s < 600; s++) {
        const p = offset(at.lat, at.lon, random() * 5, random() * 2 * Math.PI);
        expect(ingest.admit({ resourceId: 'TRUCK-1', timeMs: T0 + (i * 600 + s) * 1000, ...p, ...extra }, intake)).toBeUndefined();
      }
    }
    ingest.flush();
    const km = storedOdometers(store);
    expect(km).toHaveLength(1200);
    expect(km.at(-1)! * 1000).toBeLessThan(10);
    // The same scatter with neither: counted (what the rules above keep out).
    const plain = agent();
    const naive = plain.ingest.intake('gpsd:TRUCK-2', logger(), undefined, GNSS);
    for (let s = 0; s < 600; s++) plain.ingest.admit({ resourceId: 'TRUCK-2', timeMs: T0 + s * 1000, ...offset(at.lat, at.lon, random() * 5, random() * 2 * Math.PI) }, naive);
    plain.ingest.flush();
    expect(storedOdometers(plain.store, 'TRUCK-2').at(-1)! * 1000).toBeGreaterThan(500);
  });

  it('a gap of an hour with a 300 km jump adds nothing, said once; the count goes on from the new fix', () => {
    const { store, ingest } = agent();
    const intake = ingest.intake('gpsd:TRUCK-1', logger(), undefined, GNSS);
    const a = { lat: 41.0, lon: -87.0 };
    // 60 s north at 25 m/s: 1.5 km.
    const leg = (from: { lat: number; lon: number }, t0: number) => {
      for (let s = 0; s <= 60; s++) ingest.admit({ resourceId: 'TRUCK-1', timeMs: t0 + s * 1000, ...offset(from.lat, from.lon, s * 25, 0), speed: 25 }, intake);
    };
    leg(a, T0);
    const far = offset(a.lat, a.lon, 300_000, Math.PI / 2);
    expect(distanceM(a, far)).toBeGreaterThan(299_000);
    leg(far, T0 + 60_000 + 3_600_000);
    // And again: logged at debug only.
    leg(a, T0 + 2 * (60_000 + 3_600_000));
    ingest.flush();
    const km = storedOdometers(store);
    expect(km.at(60)).toBeCloseTo(1.5, 2);
    expect(km.at(61)).toBeCloseTo(1.5, 2);
    expect(km.at(121)).toBeCloseTo(3.0, 2);
    expect(km.at(-1)).toBeCloseTo(4.5, 2);
    const jumps = logs.lines.filter((l) => l.msg.startsWith('GNSS odometer: a jump'));
    expect(jumps.map((l) => l.level)).toEqual([30, 20]);
    expect(jumps[0]).toMatchObject({ resourceId: 'TRUCK-1', gapS: 3600, maxKmh: 200 });
    // A plausible gap is the straight line: 10 minutes without a fix, 10 km on.
    const b = offset(a.lat, a.lon, 1500, 0);
    ingest.admit({ resourceId: 'TRUCK-1', timeMs: T0 + 3 * (60_000 + 3_600_000), ...offset(b.lat, b.lon, 10_000, 0), speed: 17 }, intake);
    ingest.flush();
    expect(storedOdometers(store).at(-1)).toBeCloseTo(14.5, 1);
  });

  it('goes on after a restart from the last committed fix, and starts at odometer_start_km', () => {
    const { fixes } = drive(11);
    const half = Math.floor(fixes.length / 2);
    let run = agent();
    let intake = run.ingest.intake('nmea:TRUCK-1', logger(), undefined, { ...GNSS, startKm: 120_000 });
    for (const f of fixes.slice(0, half)) run.ingest.admit({ ...f }, intake);
    run.ingest.stop();
    run.store.close();
    logs.open.length = 0;
    const atStop = logs.lines.find((l) => l.msg === 'GNSS odometer starts');
    expect(atStop).toMatchObject({ km: 120_000 });
    // A new process on the same file: no start again, the count goes on.
    run = agent();
    intake = run.ingest.intake('nmea:TRUCK-1', logger(), undefined, { ...GNSS, startKm: 120_000 });
    for (const f of fixes.slice(half)) run.ingest.admit({ ...f }, intake);
    run.ingest.flush();
    const restarted = storedOdometers(run.store);
    expect(restarted).toHaveLength(fixes.length);
    // The same as one run through.
    const once = new Ingest({ roomForReadings: () => true, insertReadings: (b) => b.length, bump: () => undefined }, { batchSize: 500, flushIntervalMs: 60_000, keepWithoutLoad: true }, logger());
    const onceIntake = once.intake('nmea:TRUCK-1', logger(), undefined, { ...GNSS, startKm: 120_000 });
    const through = fixes.map((f) => ({ ...f }));
    for (const f of through) once.admit(f, onceIntake);
    expect(restarted.at(-1)).toBeCloseTo(through.at(-1)!.odometer!, 3);
    expect(restarted.at(-1)! - 120_000).toBeGreaterThan(270);
    for (let i = 1; i < restarted.length; i++) expect(restarted[i]!).toBeGreaterThanOrEqual(restarted[i - 1]!);
  });

  it('goes on after a power cut when the rows were not kept (no load): from the total written with a commit, at most a minute behind', () => {
    let now = T0;
    let run = agent({ keepWithoutLoad: false, now: () => now });
    let intake = run.ingest.intake('gpsd:TRUCK-1', logger(), undefined, GNSS);
    const a = { lat: 41.0, lon: -87.0 };
    // 10.5 minutes north at 25 m/s, a commit every 30 s, the process killed at the end (no stop):
    // the total was last written at 10 minutes.
    for (let s = 0; s <= 630; s++) {
      now = T0 + s * 1000;
      run.ingest.admit({ resourceId: 'TRUCK-1', timeMs: now, ...offset(a.lat, a.lon, s * 25, 0), speed: 25 }, intake);
      if (s % 30 === 0) run.ingest.flush();
    }
    expect(storedOdometers(run.store)).toEqual([]);
    run.store.close();
    logs.open.length = 0;
    run = agent({ keepWithoutLoad: true, now: () => now });
    intake = run.ingest.intake('gpsd:TRUCK-1', logger(), undefined, GNSS);
    // Back on the road 20 minutes later, 45 km further on (135 km/h since the last total written).
    now = T0 + 1800_000;
    run.ingest.admit({ resourceId: 'TRUCK-1', timeMs: now, ...offset(a.lat, a.lon, 60_000, 0), speed: 25 }, intake);
    run.ingest.flush();
    // The straight line from the last total written to the new fix: the whole 60 km.
    expect(storedOdometers(run.store)).toEqual([expect.closeTo(60, 1)]);
  });

  it('leaves alone readings with their own odometer, without a position, or from a source with odometer = "none"', () => {
    const { store, ingest } = agent();
    const gnss = ingest.intake('exec:x', logger(), undefined, GNSS);
    const none = ingest.intake('exec:y', logger());
    ingest.admit({ resourceId: 'TRUCK-1', timeMs: T0, lat: 41, lon: -87, odometer: 5000 }, gnss);
    ingest.admit({ resourceId: 'TRUCK-1', timeMs: T0 + 1000, temperatureC: 4 }, gnss);
    ingest.admit({ resourceId: 'TRUCK-3', timeMs: T0, lat: 41, lon: -87 }, none);
    ingest.flush();
    expect(storedOdometers(store)).toEqual([5000, null]);
    expect(storedOdometers(store, 'TRUCK-3')).toEqual([null]);
  });
});

describe('GNSS odometer of a configured source', () => {
  it('gpsd and nmea count by default, the others do not; [odometer] sets the limits', () => {
    const c = parseConfigText(
      `[api]
scac = "ABCD"
[odometer]
min_speed_kmh = 5
[[sources]]
type = "gpsd"
resource_id = "T1"
[[sources]]
type = "nmea"
resource_id = "T1"
device = "/dev/ttyUSB0"
odometer = "none"
[[sources]]
type = "exec"
command = "reader"
odometer = "gnss"
odometer_start_km = 1200.5
[[sources]]
type = "mqtt"
url = "mqtt://localhost"
topics = ["a/#"]
`,
      'agent.toml',
      '/etc/telematics-agent',
    );
    expect(c.odometer).toEqual({ min_speed_kmh: 5, max_speed_kmh: 200 });
    expect(c.sources.map((s) => ('odometer' in s ? [s.odometer, s.odometer_start_km] : undefined))).toEqual([
      ['gnss', undefined],
      ['none', undefined],
      ['gnss', 1200.5],
      ['none', undefined],
    ]);
  });

  it("takes gpsd's error estimate from eph, else from epx and epy", () => {
    expect(horizontalErrorM({ eph: 7.5, epx: 30, epy: 40 })).toBe(7.5);
    expect(horizontalErrorM({ epx: 3, epy: 4 })).toBe(5);
    expect(horizontalErrorM({ epx: 3 })).toBeUndefined();
    expect(horizontalErrorM({ eph: 'x' })).toBeUndefined();
  });

  it('an NMEA file of a drive on I-65 gives its rows an odometer that grows with the drive', async () => {
    const config = parseConfigText(
      `[api]
scac = "ABCD"
[sources_time]
max_past_days = 36500
[[sources]]
type = "nmea"
resource_id = "TRUCK-1"
device = "${NMEA_LOG}"
odometer_start_km = 1000
`,
      'agent.toml',
      tmp.dir,
    );
    const { store, ingest, log } = agent();
    const running = new RunningSources(ingest, new TrustedClock(), log);
    await running.build(config);
    await running.start();
    await waitFor(() => running.states()[0]?.finished, 5000, 'end of the NMEA file');
    await running.stop();
    ingest.flush();
    const km = storedOdometers(store) as number[];
    expect(km).toHaveLength(60);
    expect(km[0]).toBe(1000);
    for (let i = 1; i < km.length; i++) expect(km[i]).toBeGreaterThan(km[i - 1]);
    // A minute at some 90 km/h.
    const fixes = store.db.prepare('SELECT lat, lon FROM readings ORDER BY id').all() as Array<{ lat: number; lon: number }>;
    let m = 0;
    for (let i = 1; i < fixes.length; i++) m += distanceM(fixes[i - 1], fixes[i]);
    expect(m).toBeGreaterThan(1000);
    expect((km.at(-1)! - 1000) * 1000).toBeCloseTo(m, -1);
  });
});
