/**
 * A truck driving a route, with a reefer: the default source of the demo and a stand-in
 * for hardware in tests. The model (`SimulatorModel`) is pure and steps in simulated time;
 * the source (`SimulatorSource`) runs it against the wall clock at `time_scale`.
 */
import { readDateTime } from '../geo/localtime.js';
import type { SimulatorSourceConfig } from '../config/schema.js';
import type { Reading } from '../reading.js';
import { bearingDeg, distanceM, loadRoute, type RoutePoint } from './routes.js';
import type { Source, SourceContext, SourceHealth } from './types.js';

export type SimulatorEvent =
  | { type: 'arrive'; pointIndex: number; timeMs: number; lat: number; lon: number }
  | { type: 'depart'; pointIndex: number; timeMs: number; lat: number; lon: number }
  | { type: 'end'; timeMs: number };

/** Standard normal draw (Box-Muller), from a seedable uniform source. */
function gaussian(random: () => number): number {
  const u = Math.max(random(), 1e-12);
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
}

/** Small deterministic PRNG so a seeded simulation repeats exactly (mulberry32). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class SimulatorModel {
  readonly route: RoutePoint[];
  private readonly cumulative: number[];
  readonly totalM: number;
  timeMs: number;
  private distance = 0;
  private dwellLeftS = 0;
  private readonly stops: Map<number, number>;
  private visited = new Set<number>();
  private tempC: number;
  private ended = false;

  constructor(
    private readonly cfg: SimulatorSourceConfig,
    private readonly startMs: number,
    private readonly random: () => number = Math.random,
    route?: RoutePoint[],
  ) {
    this.route = route ?? loadRoute(cfg.route);
    this.cumulative = [0];
    for (let i = 1; i < this.route.length; i++) this.cumulative.push(this.cumulative[i - 1] + distanceM(this.route[i - 1], this.route[i]));
    this.totalM = this.cumulative[this.cumulative.length - 1];
    this.stops = new Map(cfg.stops.map((s) => [Math.min(s.at_point, this.route.length - 1), s.dwell_s]));
    this.timeMs = startMs;
    this.tempC = cfg.temperature.set_point_c;
  }

  /** Simulated seconds a full run takes: driving plus dwell at the stops. */
  static durationS(cfg: SimulatorSourceConfig, route = loadRoute(cfg.route)): number {
    let m = 0;
    for (let i = 1; i < route.length; i++) m += distanceM(route[i - 1], route[i]);
    return m / (cfg.speed_kmh / 3.6) + cfg.stops.reduce((s, x) => s + x.dwell_s, 0);
  }

  private pointIndexAt(distance: number): number {
    return this.cumulative.findIndex((c) => c >= distance - 1e-6);
  }

  private positionAt(distance: number): { lat: number; lon: number; heading: number } {
    let i = 1;
    while (i < this.cumulative.length - 1 && this.cumulative[i] < distance) i++;
    const a = this.route[i - 1];
    const b = this.route[i];
    const seg = this.cumulative[i] - this.cumulative[i - 1];
    const f = seg > 0 ? Math.min(1, Math.max(0, (distance - this.cumulative[i - 1]) / seg)) : 0;
    return { lat: a.lat + (b.lat - a.lat) * f, lon: a.lon + (b.lon - a.lon) * f, heading: bearingDeg(a, b) };
  }

  /** Advance by dt simulated seconds; returns the reading at the new time and any events. */
  step(dtS: number, resourceId: string): { reading: Reading; events: SimulatorEvent[] } {
    const events: SimulatorEvent[] = [];
    this.timeMs += dtS * 1000;
    const elapsedS = (this.timeMs - this.startMs) / 1000;
    let speed = 0;
    let left = dtS;
    // A stop at the very first point starts with its dwell.
    if (!this.visited.has(0) && this.stops.has(0)) {
      this.visited.add(0);
      this.dwellLeftS = this.stops.get(0)!;
      events.push({ type: 'arrive', pointIndex: 0, timeMs: this.startMs, ...this.route[0] });
    }
    while (left > 1e-9 && !this.ended) {
      if (this.dwellLeftS > 0) {
        const d = Math.min(left, this.dwellLeftS);
        this.dwellLeftS -= d;
        left -= d;
        if (this.dwellLeftS <= 1e-9) {
          const idx = this.pointIndexAt(this.distance);
          if (idx < this.route.length - 1) {
            events.push({ type: 'depart', pointIndex: idx, timeMs: this.timeMs - left * 1000, ...this.route[idx] });
          }
        }
        continue;
      }
      const v = this.cfg.speed_kmh / 3.6;
      // Next stop ahead, so the truck halts exactly there.
      let target = this.totalM;
      let targetIdx = this.route.length - 1;
      for (const [idx] of [...this.stops].sort((a, b) => a[0] - b[0])) {
        if (!this.visited.has(idx) && this.cumulative[idx] > this.distance - 1e-6) {
          target = this.cumulative[idx];
          targetIdx = idx;
          break;
        }
      }
      const need = (target - this.distance) / v;
      if (need > left) {
        this.distance += v * left;
        speed = v;
        left = 0;
      } else {
        this.distance = target;
        left -= need;
        speed = need > 0 ? v : 0;
        const at = this.timeMs - left * 1000;
        if (this.stops.has(targetIdx) && !this.visited.has(targetIdx)) {
          this.visited.add(targetIdx);
          this.dwellLeftS = this.stops.get(targetIdx)!;
          events.push({ type: 'arrive', pointIndex: targetIdx, timeMs: at, ...this.route[targetIdx] });
        }
        if (targetIdx === this.route.length - 1 && this.dwellLeftS <= 0) {
          if (this.cfg.loop) {
            this.distance = 0;
            this.visited = new Set();
          } else {
            this.ended = true;
            events.push({ type: 'end', timeMs: at });
          }
        }
      }
      if (this.dwellLeftS > 0) speed = 0;
    }
    if (this.ended && this.dwellLeftS <= 0) speed = 0;
    // After unloading at the last stop the run is over.
    if (!this.ended && this.dwellLeftS <= 0 && this.distance >= this.totalM - 1e-6 && this.visited.has(this.route.length - 1)) {
      this.ended = true;
      events.push({ type: 'end', timeMs: this.timeMs });
    }

    const t = this.cfg.temperature;
    const doorOpen = t.door_open_at_s >= 0 && elapsedS >= t.door_open_at_s && elapsedS < t.door_open_at_s + t.door_open_duration_s;
    const target = doorOpen ? t.ambient_c : t.set_point_c;
    const k = 1 - (1 - t.response_per_min) ** (dtS / 60);
    this.tempC += (target - this.tempC) * k;
    const pos = this.positionAt(this.distance);
    const reading: Reading = {
      resourceId,
      timeMs: Math.round(this.timeMs),
      lat: pos.lat,
      lon: pos.lon,
      speed: Math.round(speed * 100) / 100,
      heading: Math.round(pos.heading * 10) / 10,
      odometer: Math.round((this.cfg.odometer_start_km + this.distance / 1000) * 100) / 100,
      temperatureC: Math.round((this.tempC + gaussian(this.random) * t.noise_c) * 100) / 100,
    };
    return { reading, events };
  }

  get finished(): boolean {
    return this.ended;
  }
}

export class SimulatorSource implements Source {
  readonly type = 'simulator';
  readonly name: string;
  private timer: NodeJS.Timeout | undefined;
  private model: SimulatorModel;
  private wallStart = 0;
  private steps = 0;
  private readonly listeners: Array<(e: SimulatorEvent) => void> = [];

  constructor(
    private readonly cfg: SimulatorSourceConfig,
    private readonly ctx: SourceContext,
    random: () => number = Math.random,
  ) {
    this.name = cfg.name ?? `simulator:${cfg.resource_id}`;
    // Read as every typed time is (the schema checked it): with an offset or Z an instant,
    // without one this device's local time.
    const read = cfg.start_time === 'now' ? undefined : readDateTime(cfg.start_time);
    const start = cfg.start_time === 'now' ? Date.now() : read === undefined ? Number.NaN : read.kind === 'instant' ? read.ms : Date.parse(cfg.start_time);
    if (Number.isNaN(start)) throw new Error(`simulator ${this.name}: start_time: expected "now" or an ISO 8601 time`);
    this.model = new SimulatorModel(cfg, start, random);
  }

  onEvent(fn: (e: SimulatorEvent) => void): void {
    this.listeners.push(fn);
  }

  get finished(): boolean {
    return this.model.finished;
  }

  async start(): Promise<void> {
    this.wallStart = performance.now();
    const tickMs = Math.max(20, Math.min(1000, (this.cfg.interval_s * 1000) / this.cfg.time_scale));
    this.timer = setInterval(() => this.tick(), tickMs);
  }

  private tick(): void {
    const simElapsedS = ((performance.now() - this.wallStart) / 1000) * this.cfg.time_scale;
    const due = Math.floor(simElapsedS / this.cfg.interval_s);
    // Bound the work of one tick (a suspended process must not wake into a million steps).
    const n = Math.min(due - this.steps, 10_000);
    for (let i = 0; i < n; i++) {
      const { reading, events } = this.model.step(this.cfg.interval_s, this.cfg.resource_id);
      this.steps += 1;
      this.ctx.emit(reading);
      for (const e of events) for (const fn of this.listeners) fn(e);
      if (this.model.finished) break;
    }
    if (due - this.steps > 0) this.steps = due;
    // The route is driven: a finished simulation sends nothing more (unless it loops).
    if (this.model.finished && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  health(): SourceHealth {
    const c = this.ctx.counts;
    return { healthy: true, readings: c.readings, rejected: c.rejected, lastReadingMs: c.lastReadingMs, detail: this.model.finished ? 'route finished' : undefined, finished: this.model.finished };
  }
}
