import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { simulatorSourceSchema } from '../src/config/schema.js';
import type { Reading } from '../src/reading.js';
import { loadRoute, distanceM, RouteError } from '../src/sources/routes.js';
import { SimulatorModel, SimulatorSource, seededRandom, type SimulatorEvent } from '../src/sources/simulator.js';
import { tempDir, writeFile } from './helpers.js';
import { recorder } from './sources/support.js';

const cfg = (extra: Record<string, unknown> = {}) => simulatorSourceSchema.parse({ type: 'simulator', resource_id: 'T1', ...extra });

describe('routes', () => {
  it('reads GPX, GeoJSON and CSV files and names the bad line', () => {
    const t = tempDir();
    try {
      const gpx = writeFile(t.dir, 'r.gpx', '<gpx><trk><trkseg>\n<trkpt lat="41.0" lon="-87.0"/>\n<trkpt lat="41.1" lon="-87.1"></trkpt>\n</trkseg></trk></gpx>');
      expect(loadRoute(gpx)).toEqual([
        { lat: 41, lon: -87 },
        { lat: 41.1, lon: -87.1 },
      ]);
      const geo = writeFile(
        t.dir,
        'r.geojson',
        JSON.stringify({
          type: 'Feature',
          geometry: {
            type: 'LineString',
            coordinates: [
              [-87, 41],
              [-87.1, 41.1],
            ],
          },
        }),
      );
      expect(loadRoute(geo)).toEqual([
        { lat: 41, lon: -87 },
        { lat: 41.1, lon: -87.1 },
      ]);
      const csv = writeFile(t.dir, 'r.csv', 'lat,lon\n41,-87\n41.1,-87.1\n');
      expect(loadRoute(csv)).toEqual([
        { lat: 41, lon: -87 },
        { lat: 41.1, lon: -87.1 },
      ]);
      const bad = writeFile(t.dir, 'bad.csv', 'lat,lon\n41,-87\n141,-87.1\n');
      expect(() => loadRoute(bad)).toThrow(`${bad}:3: latitude out of range (141)`);
      expect(() => loadRoute('builtin:atlantis')).toThrow('builtin:atlantis: unknown built-in route (known: builtin:chicago-indianapolis)');
      expect(() => loadRoute(`${t.dir}/none.csv`)).toThrow(RouteError);
    } finally {
      t.cleanup();
    }
  });
});

describe('simulator model', () => {
  it('drives the whole route at the configured speed, dwelling at stops, with events at the right times', () => {
    const route = loadRoute('builtin:chicago-indianapolis');
    const c = cfg({
      speed_kmh: 90,
      stops: [
        { at_point: 0, dwell_s: 600 },
        { at_point: route.length - 1, dwell_s: 300 },
      ],
    });
    const start = Date.UTC(2026, 0, 15, 12);
    const model = new SimulatorModel(c, start, seededRandom(1));
    const events: SimulatorEvent[] = [];
    const readings: Reading[] = [];
    for (let i = 0; i < 20_000 && !model.finished; i++) {
      const r = model.step(10, 'T1');
      readings.push(r.reading);
      events.push(...r.events);
    }
    expect(events.map((e) => e.type)).toEqual(['arrive', 'depart', 'arrive', 'end']);
    const driveS = model.totalM / 25; // 90 km/h = 25 m/s
    expect(events[1].timeMs - start).toBe(600_000);
    expect((events[2].timeMs - events[1].timeMs) / 1000).toBeCloseTo(driveS, 0);
    expect((events[3].timeMs - events[2].timeMs) / 1000).toBeCloseTo(300, 0);
    expect(model.totalM / 1000).toBeCloseTo(277.1, 0); // Chicago to Indianapolis and on to the truck stop
    // Stationary while dwelling, moving at 25 m/s on the road, odometer grows with distance.
    expect(readings[10].speed).toBe(0);
    expect(readings[200].speed).toBe(25);
    const last = readings[readings.length - 1];
    expect(distanceM({ lat: last.lat!, lon: last.lon! }, route[route.length - 1])).toBeLessThan(1);
    expect(last.odometer! - readings[0].odometer!).toBeCloseTo(model.totalM / 1000, 0);
  });

  it('holds the reefer at its set point and shows the door-open excursion', () => {
    const model = new SimulatorModel(cfg({ temperature: { set_point_c: -18, noise_c: 0, door_open_at_s: 3600, door_open_duration_s: 900 } }), 0, seededRandom(2));
    const temps: number[] = [];
    for (let i = 0; i < 3 * 360; i++) temps.push(model.step(10, 'T1').reading.temperatureC!);
    expect(temps[300]).toBeCloseTo(-18, 5); // 50 min: door still shut
    const peak = Math.max(...temps.slice(360, 460));
    expect(peak).toBeGreaterThan(5); // door open 15 min towards 22 C ambient
    expect(temps[temps.length - 1]).toBeLessThan(-15); // recovered an hour and a half later
  });
});

describe('simulator source', () => {
  // Fake timers (its interval and performance.now): exact counts, whatever the machine's load.
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('emits readings against the wall clock at the time scale, and nothing after stop', async () => {
    const rec = recorder();
    const got = rec.readings;
    const src = new SimulatorSource(cfg({ time_scale: 600, interval_s: 6 }), rec.ctx);
    await src.start();
    // 6 simulated seconds at 600 times real time: a reading every 10 ms.
    vi.advanceTimersByTime(200);
    expect(got).toHaveLength(20);
    expect(got[1].timeMs - got[0].timeMs).toBe(6000);
    await src.stop();
    vi.advanceTimersByTime(1000);
    expect(got).toHaveLength(20); // nothing after stop
    expect(vi.getTimerCount()).toBe(0);
    expect(src.health()).toMatchObject({ healthy: true, readings: 20, rejected: 0, finished: false });
  });

  it('stops at the end of its route, and says it finished', async () => {
    const t = tempDir();
    try {
      // About 1.1 km: 45 s at 90 km/h, so 8 readings 6 s apart, the last at the end.
      const route = writeFile(t.dir, 'short.csv', 'lat,lon\n41.0,-87.0\n41.01,-87.0\n');
      const rec = recorder();
      const src = new SimulatorSource(cfg({ route, speed_kmh: 90, time_scale: 600, interval_s: 6 }), rec.ctx);
      await src.start();
      vi.advanceTimersByTime(1000);
      expect(rec.readings).toHaveLength(8);
      expect(src.health()).toMatchObject({ healthy: true, finished: true, detail: 'route finished', readings: 8 });
      expect(rec.readings.at(-1)!.speed).toBe(0);
      expect(vi.getTimerCount()).toBe(0); // a finished run keeps no interval
      await src.stop();
    } finally {
      t.cleanup();
    }
  });
});
