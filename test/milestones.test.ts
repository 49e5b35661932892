import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Ingest } from '../src/admission/ingest.js';
import { Store } from '../src/buffer/store.js';
import { configSchema, simulatorSourceSchema, type Config } from '../src/config/schema.js';
import { createLogger } from '../src/log.js';
import { MilestoneDetector } from '../src/milestones/detector.js';
import { recordMilestone } from '../src/milestones/record.js';
import type { Stop } from '../src/milestones/stops.js';
import type { Reading } from '../src/reading.js';
import { BUILTIN_ROUTES } from '../src/sources/routes.js';
import { SimulatorModel, seededRandom } from '../src/sources/simulator.js';
import { tempFixture } from './helpers.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });
const route = BUILTIN_ROUTES['chicago-indianapolis'];
const PICKUP = route[0];
const DELIVERY = route[route.length - 2];
const T0 = Date.UTC(2026, 2, 10, 14); // 09:00 CDT in Chicago, the week DST started

const tmp = tempFixture();
let store: Store;
let config: Config;
beforeEach(() => {
  store = Store.open(join(tmp.dir, 'b.db'));
  config = configSchema.parse({ api: { scac: 'ABCD' }, sources: [{ type: 'simulator', resource_id: 'TRUCK-1' }] });
});
afterEach(() => {
  store.close();
});

function startLoad(stops: Stop[]) {
  store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops, nowMs: T0 });
}
const stops = (appointmentEnd?: string): Stop[] => [
  { sequence: 1, type: 'pickup', latitude: PICKUP.lat, longitude: PICKUP.lon, radiusM: 300 },
  { sequence: 2, type: 'delivery', latitude: DELIVERY.lat, longitude: DELIVERY.lon, radiusM: 300, ...(appointmentEnd ? { appointment: { end: appointmentEnd } } : {}) },
];
function detector(s = store) {
  let kicks = 0;
  const d = new MilestoneDetector(
    s,
    () => config,
    silent,
    () => (kicks += 1),
  );
  return { d, kicks: () => kicks };
}
function drive(speedKmh: number, stepS = 10): { readings: Reading[]; events: ReturnType<SimulatorModel['step']>['events'] } {
  const cfg = simulatorSourceSchema.parse({
    type: 'simulator',
    resource_id: 'T1',
    speed_kmh: speedKmh,
    stops: [
      { at_point: 0, dwell_s: 1200 },
      { at_point: route.length - 2, dwell_s: 1800 },
    ],
  });
  const model = new SimulatorModel(cfg, T0, seededRandom(7));
  const readings: Reading[] = [];
  const events: ReturnType<SimulatorModel['step']>['events'] = [];
  while (!model.finished) {
    const r = model.step(stepS, 'T1');
    readings.push(r.reading);
    events.push(...r.events);
  }
  return { readings, events };
}
const feed = (d: MilestoneDetector, readings: Reading[], batch = 100) => {
  for (let i = 0; i < readings.length; i += batch) d.process(readings.slice(i, i + batch));
};
const codes = () => store.listMilestones().map((m) => m.body.eventCode);

describe('arrival and departure', () => {
  it('a drive through pick-up and delivery yields exactly X3, AF, X1, D1 in order, at the times they happened', () => {
    startLoad(stops());
    const { readings, events } = drive(88);
    const { d, kicks } = detector();
    feed(d, readings);
    expect(codes()).toEqual(['X3', 'AF', 'X1', 'D1']);
    const ms = store.listMilestones().map((m) => m.body as { time: { dateTime: string }; stopsequenceNumber: number; eventCity?: string; eventState?: string });
    const at = (i: number) => Date.parse(ms[i].time.dateTime);
    const sim = { arrivePickup: events[0].timeMs, departPickup: events[1].timeMs, arriveDelivery: events[2].timeMs };
    // Arrival: the first fix inside the radius, not the moment it was confirmed (dwell later).
    expect(Math.abs(at(0) - sim.arrivePickup)).toBeLessThanOrEqual(10_000);
    // Departure: the last fix inside the exit radius (450 m at 88 km/h: within ~20 s of leaving).
    expect(at(1) - sim.departPickup).toBeGreaterThanOrEqual(0);
    expect(at(1) - sim.departPickup).toBeLessThanOrEqual(30_000);
    expect(at(2) - sim.arriveDelivery).toBeLessThanOrEqual(0); // entered the 300 m radius before reaching the point
    expect(sim.arriveDelivery - at(2)).toBeLessThanOrEqual(20_000);
    expect(ms.map((m) => m.stopsequenceNumber)).toEqual([1, 1, 2, 2]);
    expect(ms[0].time.dateTime).toMatch(/-05:00$/); // Chicago, CDT
    expect(ms[3].time.dateTime).toMatch(/-04:00$/); // Indianapolis, EDT
    expect([ms[0].eventCity, ms[0].eventState]).toEqual(['Chicago', 'IL']);
    expect(ms[3].eventState).toBe('IN');
    expect(kicks()).toBe(4);
  });

  it('GPS jitter on the fence edge gives one arrival and no departure; a pass-by gives nothing', () => {
    startLoad(stops());
    const { d } = detector();
    const at = (m: number, bearingDeg: number, t: number): Reading => {
      const dLat = (m * Math.cos((bearingDeg * Math.PI) / 180)) / 111_320;
      const dLon = (m * Math.sin((bearingDeg * Math.PI) / 180)) / (111_320 * Math.cos((PICKUP.lat * Math.PI) / 180));
      return { resourceId: 'T1', timeMs: T0 + t * 1000, lat: PICKUP.lat + dLat, lon: PICKUP.lon + dLon };
    };
    const fixes: Reading[] = [];
    let t = 0;
    // 20 minutes hovering across the 300 m radius (280..330 m), then parked inside,
    // then 20 minutes hovering at the 450 m exit radius with single fixes beyond it.
    for (let i = 0; i < 120; i++) fixes.push(at(i % 2 ? 280 : 330, i * 7, (t += 10)));
    for (let i = 0; i < 30; i++) fixes.push(at(50, i, (t += 10)));
    for (let i = 0; i < 120; i++) fixes.push(at(i % 3 === 0 ? 470 : 430, i * 11, (t += 10)));
    feed(d, fixes, 7);
    expect(codes()).toEqual(['X3']);
    expect(store.stopStates('L1').get(1)?.state).toBe('inside');

    // A second load passing the delivery stop at speed, never 3 fixes inside: no arrival.
    store.endLoad('L1', T0);
    store.startLoad({ loadNumber: 'L2', resourceId: 'T1', resourceType: 'Truck', stops: stops(), nowMs: T0 });
    const pass = [-600, -300, -100, 100, 300, 600].map((m, i): Reading => ({ resourceId: 'T1', timeMs: T0 + i * 10_000, lat: DELIVERY.lat + m / 111_320, lon: DELIVERY.lon }));
    d.process(pass);
    expect(store.listMilestones('L2')).toEqual([]);
  });

  it('keeps its state across a restart: each milestone once, nothing lost', () => {
    startLoad(stops());
    const { readings } = drive(88);
    const half = Math.floor(readings.length / 2);
    feed(detector().d, readings.slice(0, half));
    store.close();
    store = Store.open(join(tmp.dir, 'b.db'));
    feed(detector().d, readings.slice(half));
    expect(codes()).toEqual(['X3', 'AF', 'X1', 'D1']);
    // Feeding the whole drive again changes nothing: the milestones were emitted once.
    feed(detector().d, readings);
    expect(codes()).toEqual(['X3', 'AF', 'X1', 'D1']);
  });
});

describe('delay', () => {
  it('a slow drive against a tight appointment yields one SD, with the predicted arrival', () => {
    // At 88 km/h the delivery is reached about 3 h after leaving; the appointment ends 3.5 h after T0.
    startLoad(stops(new Date(T0 + 3.5 * 3600_000).toISOString()));
    const { readings } = drive(45);
    feed(detector().d, readings);
    expect(codes()).toEqual(['X3', 'AF', 'SD', 'X1', 'D1']);
    const sd = store.listMilestones().find((m) => m.body.eventCode === 'SD')!;
    expect(sd.body).toMatchObject({ reasonCode: 'NS', stopsequenceNumber: 2 });
    const eta = (sd.body.references as { name: string; value: string }[]).find((r) => r.name === 'estimatedArrival')!.value;
    expect(Date.parse(eta)).toBeGreaterThan(T0 + 3.5 * 3600_000 + 900_000);
  });

  it('a drive at normal speed against the same appointment yields no SD', () => {
    startLoad(stops(new Date(T0 + 5 * 3600_000).toISOString()));
    feed(detector().d, drive(88).readings);
    expect(codes()).toEqual(['X3', 'AF', 'X1', 'D1']);
  });

  it('predicts no delay for a stop the driver reported reaching by hand; the next one is watched', () => {
    // The same tight appointment for both stops; the pickup's fence is never crossed.
    const tight = new Date(T0 + 2 * 3600_000).toISOString();
    startLoad(stops(tight).map((s) => ({ ...s, appointment: { end: tight } })));
    const slow = (fromKm: number, stop: { lat: number; lon: number }, t0: number): Reading[] =>
      Array.from({ length: 30 }, (_, min) => ({ resourceId: 'T1', timeMs: t0 + min * 60_000, lat: stop.lat + (fromKm - min * 0.5) / 111.32, lon: stop.lon }));
    recordMilestone(store, config, { loadNumber: 'L1', code: 'X3', stop: 1, timeMs: T0 - 60_000 }, T0);
    feed(detector().d, slow(200, DELIVERY, T0), 10);
    const sds = store.listMilestones().filter((m) => m.body.eventCode === 'SD');
    expect(sds.map((m) => m.body.stopsequenceNumber)).toEqual([2]);
  });

  it('reports again only when the delay grew by the step', () => {
    config.milestones.delay.step_s = 1800;
    startLoad(stops(new Date(T0 + 2 * 3600_000).toISOString()).slice(1)); // picked up already: only the delivery
    // Heading south to the delivery stop from 200 km north: an hour at 60 km/h, then a
    // slow hour at 32 km/h, one fix a minute.
    const fixes: Reading[] = [];
    let km = 200;
    for (let min = 0; min < 120; min++) {
      km -= (min < 60 ? 60 : 32) / 60;
      fixes.push({ resourceId: 'T1', timeMs: T0 + min * 60_000, lat: DELIVERY.lat + km / 111.32, lon: DELIVERY.lon });
    }
    feed(detector().d, fixes, 10);
    const sds = store.listMilestones().filter((m) => m.body.eventCode === 'SD');
    const eta = sds.map((m) => Date.parse((m.body.references as { value: string }[])[0].value));
    // Once when the delay first passed the grace period, then again each time the slow hour
    // made it grow by the step (30 min): the ~2.5 h it grew allow at most 5 more, not one a minute.
    expect(sds.length).toBeGreaterThanOrEqual(2);
    expect(sds.length).toBeLessThanOrEqual(6);
    for (let i = 1; i < eta.length; i++) expect(eta[i] - eta[i - 1]).toBeGreaterThanOrEqual(1800_000 - 1000);
  });
});

describe("stop states at a stop, with the daemon's Ingest", () => {
  it('wait for the next commit of readings instead of a commit of their own; an arrival takes them with it', () => {
    startLoad(stops());
    const ingest = new Ingest(store, { batchSize: 10_000, flushIntervalMs: 60_000, keepWithoutLoad: false }, silent);
    const d = new MilestoneDetector(
      store,
      () => config,
      silent,
      () => undefined,
      (write) => ingest.writeWithNextCommit('stop-states', write),
    );
    ingest.onAdmitted((batch) => d.process(batch));
    ingest.onCommit(() => d.committed());
    const counted = () => store.db.prepare('SELECT coalesce(sum(inside_fixes), 0) FROM stop_state').pluck().get() as number;
    const { readings } = drive(88, 5);
    // The truck waits at the pick-up: fixes inside the fence, the arrival not yet due (dwell).
    const atStop = readings.filter((r) => r.timeMs - T0 < 60_000);
    ingest.admit(atStop[0]); // committed at once, with the stop state it made
    const first = counted();
    expect(first).toBeGreaterThan(0);
    for (const r of atStop.slice(1)) ingest.admit(r);
    ingest.handOver();
    // Counted in memory, not written: no commit of their own.
    expect(counted()).toBe(first);
    ingest.flush();
    expect(counted()).toBe(first + atStop.length - 1);
    // Driving on: the arrival, then the departure, each with the states that waited.
    for (const r of readings.filter((r) => r.timeMs - T0 >= 60_000)) ingest.admit(r);
    ingest.stop();
    expect(codes().slice(0, 2)).toEqual(['X3', 'AF']);
  });

  it('a stop-state write that fails in its commit is logged with its cause and written with the next commit', () => {
    startLoad(stops());
    const lines: Array<{ level: number; msg: string; err?: string; owner?: string }> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => (lines.push(JSON.parse(s)), true) } as unknown as NodeJS.WritableStream });
    const ingest = new Ingest(store, { batchSize: 10_000, flushIntervalMs: 60_000, keepWithoutLoad: false }, log);
    const d = new MilestoneDetector(
      store,
      () => config,
      silent,
      () => undefined,
      (write) => ingest.writeWithNextCommit('stop-states', write),
    );
    ingest.onAdmitted((batch) => d.process(batch));
    ingest.onCommit(() => d.committed());
    const counted = () => store.db.prepare('SELECT coalesce(sum(inside_fixes), 0) FROM stop_state').pluck().get() as number;
    const atStop = drive(88, 5).readings.filter((r) => r.timeMs - T0 < 60_000);
    // A real SQLite error inside the commit, for this commit only: the stop_state table refuses rows.
    store.db.exec("CREATE TRIGGER refuse_stop_state BEFORE INSERT ON stop_state BEGIN SELECT RAISE(ABORT, 'stop_state refuses rows'); END");
    ingest.admit(atStop[0]); // committed at once; the stop state it made is not
    expect(store.counts().readings).toBe(1);
    expect(counted()).toBe(0);
    const failed = lines.find((l) => l.level >= 40 && l.owner === 'stop-states');
    expect(failed, JSON.stringify(lines)).toBeDefined();
    expect(failed!.err).toMatch(/stop_state refuses rows/);
    store.db.exec('DROP TRIGGER refuse_stop_state');
    // The next commit (a reading of another truck: no stop state changes) takes it along.
    ingest.admit({ resourceId: 'T2', timeMs: T0, lat: 40, lon: -86 });
    ingest.flush();
    expect(counted()).toBe(1);
    expect(lines.filter((l) => l.level >= 40)).toHaveLength(1);
    ingest.stop();
  });
});
