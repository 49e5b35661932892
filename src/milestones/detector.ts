/**
 * Milestones that detect themselves: arrival and departure at a load's stops from positions,
 * and a predicted delay against the next stop's appointment.
 *
 * Per (load, stop) a small state machine, kept in SQLite so it survives a restart:
 *
 *   outside --fix within radius--> entering --inside for dwell_s and min_fixes fixes--> inside
 *   entering --fix beyond the exit radius--> outside        (a pass-by is not an arrival)
 *   inside --min_fixes fixes in a row beyond the exit radius--> departed (final)
 *
 * The exit radius (radius x exit_radius_factor) is larger than the arrival radius, and fixes
 * between the two neither arrive nor depart: GPS jitter at the fence edge cannot flap.
 * Event times are when it happened: arrival at the first fix inside, departure at the last
 * fix inside the exit radius, not when it was detected.
 *
 * Delay (documented formula): for the next stop not yet reached, with an appointment end,
 *   remaining = great-circle distance to the stop x road_factor
 *   speed     = distance driven over the last speed_window_s / that time, or planning_speed_kmh
 *               when that is below min_speed_kmh (a fuel stop or a jam must not predict days)
 *   eta       = time of the fix + remaining / speed
 *   delay     = eta - appointment end
 * A delay milestone goes out when delay > grace_s, and again only when it grew by step_s.
 * No prediction while the truck is at a stop (loading is not driving) or with less than a
 * minute of fixes.
 */
import type { Logger } from 'pino';
import type { LoadRow, Store } from '../buffer/store.js';
import type { Config } from '../config/schema.js';
import { distanceM } from '../sources/routes.js';
import type { Reading } from '../sources/types.js';
import { recordMilestone } from './record.js';
import type { Stop } from './stops.js';

export type StopPhase = 'outside' | 'entering' | 'inside' | 'departed';

export interface StopState {
  state: StopPhase;
  firstInsideMs: number | null;
  lastInsideMs: number | null;
  insideFixes: number;
  outsideFixes: number;
  arrivedMs: number | null;
  departedMs: number | null;
  delayReportedS: number | null;
}

export interface Fix {
  timeMs: number;
  lat: number;
  lon: number;
}

export interface FenceParams {
  radiusM: number;
  exitRadiusFactor: number;
  dwellS: number;
  minFixes: number;
}

export const INITIAL_STATE: StopState = {
  state: 'outside',
  firstInsideMs: null,
  lastInsideMs: null,
  insideFixes: 0,
  outsideFixes: 0,
  arrivedMs: null,
  departedMs: null,
  delayReportedS: null,
};

/** One fix through one stop's state machine. Pure: returns the new state and any event. */
export function stepStop(st: StopState, fix: Fix, stop: Stop, p: FenceParams): { state: StopState; event?: { type: 'arrive' | 'depart'; timeMs: number } } {
  if (stop.latitude === undefined || stop.longitude === undefined || st.state === 'departed') return { state: st };
  const d = distanceM(fix, { lat: stop.latitude, lon: stop.longitude });
  const r = stop.radiusM ?? p.radiusM;
  const exit = r * p.exitRadiusFactor;
  const s = { ...st };
  switch (s.state) {
    case 'outside':
      if (d <= r) Object.assign(s, { state: 'entering', firstInsideMs: fix.timeMs, lastInsideMs: fix.timeMs, insideFixes: 1 });
      break;
    case 'entering':
      if (d <= r) {
        s.insideFixes += 1;
        s.lastInsideMs = fix.timeMs;
      } else if (d > exit) {
        // Drove past without stopping.
        return { state: { ...INITIAL_STATE, delayReportedS: s.delayReportedS } };
      }
      break;
    case 'inside':
      if (d <= exit) {
        s.lastInsideMs = fix.timeMs;
        s.outsideFixes = 0;
      } else {
        s.outsideFixes += 1;
        if (s.outsideFixes >= p.minFixes) {
          s.state = 'departed';
          s.departedMs = s.lastInsideMs;
          return { state: s, event: { type: 'depart', timeMs: s.departedMs! } };
        }
      }
      break;
  }
  if (s.state === 'entering' && s.insideFixes >= p.minFixes && fix.timeMs - s.firstInsideMs! >= p.dwellS * 1000) {
    s.state = 'inside';
    s.arrivedMs = s.firstInsideMs;
    s.outsideFixes = 0;
    return { state: s, event: { type: 'arrive', timeMs: s.arrivedMs! } };
  }
  return { state: s };
}

interface RawStopState {
  stop_sequence: number;
  state: StopPhase;
  first_inside_ms: number | null;
  last_inside_ms: number | null;
  inside_fixes: number;
  outside_fixes: number;
  arrived_ms: number | null;
  departed_ms: number | null;
  delay_reported_s: number | null;
}

/** The saved state of each stop of a load (absent: never seen, i.e. outside). */
export function stopStates(store: Store, loadNumber: string): Map<number, StopState> {
  const rows = store.db.prepare('SELECT * FROM stop_state WHERE load_number = ?').all(loadNumber) as RawStopState[];
  return new Map(
    rows.map((r) => [
      r.stop_sequence,
      {
        state: r.state,
        firstInsideMs: r.first_inside_ms,
        lastInsideMs: r.last_inside_ms,
        insideFixes: r.inside_fixes,
        outsideFixes: r.outside_fixes,
        arrivedMs: r.arrived_ms,
        departedMs: r.departed_ms,
        delayReportedS: r.delay_reported_s,
      },
    ]),
  );
}

function saveState(store: Store, loadNumber: string, seq: number, s: StopState): void {
  store.db
    .prepare(
      `INSERT INTO stop_state (load_number, stop_sequence, state, first_inside_ms, last_inside_ms, inside_fixes, outside_fixes, arrived_ms, departed_ms, delay_reported_s)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (load_number, stop_sequence) DO UPDATE SET state = excluded.state, first_inside_ms = excluded.first_inside_ms,
         last_inside_ms = excluded.last_inside_ms, inside_fixes = excluded.inside_fixes, outside_fixes = excluded.outside_fixes,
         arrived_ms = excluded.arrived_ms, departed_ms = excluded.departed_ms, delay_reported_s = excluded.delay_reported_s`,
    )
    .run(loadNumber, seq, s.state, s.firstInsideMs, s.lastInsideMs, s.insideFixes, s.outsideFixes, s.arrivedMs, s.departedMs, s.delayReportedS);
}

/** Average speed (m/s) over recent fixes, or undefined with less than a minute of data. */
function recentSpeed(fixes: Fix[]): number | undefined {
  if (fixes.length < 2) return undefined;
  const span = fixes[fixes.length - 1].timeMs - fixes[0].timeMs;
  if (span < 60_000) return undefined;
  let d = 0;
  for (let i = 1; i < fixes.length; i++) d += distanceM(fixes[i - 1], fixes[i]);
  return d / (span / 1000);
}

export class MilestoneDetector {
  /** Recent fixes per resource, for the speed used in delay prediction. */
  private readonly recent = new Map<string, Fix[]>();

  constructor(
    private readonly store: Store,
    private readonly config: () => Config,
    private readonly log: Logger,
    /** Called when milestones were recorded, so the sender goes at once. */
    private readonly onMilestone: () => void,
  ) {}

  /** Feed a committed batch of readings. Never throws: detection must not stop ingest. */
  process(batch: ReadonlyArray<Reading>): void {
    const cfg = this.config().milestones;
    if (!cfg.detect) return;
    const byResource = new Map<string, Fix[]>();
    for (const r of batch) {
      if (r.lat === undefined || r.lon === undefined) continue;
      const list = byResource.get(r.resourceId) ?? [];
      list.push({ timeMs: r.timeMs, lat: r.lat, lon: r.lon });
      byResource.set(r.resourceId, list);
    }
    let recorded = 0;
    for (const [resourceId, fixes] of byResource) {
      try {
        const load = this.store.activeLoadOf(resourceId);
        if (!load || !load.stops.some((s) => s.latitude !== undefined)) continue;
        fixes.sort((a, b) => a.timeMs - b.timeMs);
        recorded += this.processLoad(load, resourceId, fixes);
      } catch (err) {
        this.log.error({ resource: resourceId, err: (err as Error).message }, 'milestone detection failed for this batch');
      }
    }
    if (recorded > 0) this.onMilestone();
  }

  private processLoad(load: LoadRow, resourceId: string, fixes: Fix[]): number {
    const config = this.config();
    const m = config.milestones;
    const params: FenceParams = { radiusM: m.radius_m, exitRadiusFactor: m.exit_radius_factor, dwellS: m.dwell_s, minFixes: m.min_fixes };
    const states = stopStates(this.store, load.loadNumber);
    const dirty = new Set<number>();
    let recorded = 0;
    const window = this.recent.get(resourceId) ?? [];
    for (const fix of fixes) {
      window.push(fix);
      while (window.length > 1 && fix.timeMs - window[0].timeMs > m.delay.speed_window_s * 1000) window.shift();
      for (const stop of load.stops) {
        const before = states.get(stop.sequence) ?? INITIAL_STATE;
        const { state, event } = stepStop(before, fix, stop, params);
        if (state !== before) {
          states.set(stop.sequence, state);
          dirty.add(stop.sequence);
        }
        if (event) {
          const code = m.codes[`${stop.type}_${event.type}` as keyof typeof m.codes];
          recordMilestone(this.store, config, { loadNumber: load.loadNumber, code, stop: stop.sequence, timeMs: event.timeMs, lat: stop.latitude, lon: stop.longitude }, Date.now(), this.log);
          this.log.info({ load: load.loadNumber, stop: stop.sequence, code, at: new Date(event.timeMs).toISOString() }, `${event.type === 'arrive' ? 'arrival' : 'departure'} detected`);
          recorded += 1;
          // Speed while loading is not driving speed: measure afresh from here.
          if (event.type === 'depart') window.splice(0, window.length - 1);
        }
      }
      if (m.delay.enabled) recorded += this.checkDelay(load, fix, window, states, dirty);
    }
    this.recent.set(resourceId, window);
    for (const seq of dirty) saveState(this.store, load.loadNumber, seq, states.get(seq)!);
    return recorded;
  }

  private checkDelay(load: LoadRow, fix: Fix, window: Fix[], states: Map<number, StopState>, dirty: Set<number>): number {
    const config = this.config();
    const d = config.milestones.delay;
    const atStop = load.stops.some((s) => {
      const st = states.get(s.sequence)?.state;
      return st === 'inside' || st === 'entering';
    });
    if (atStop) return 0;
    const next = load.stops.find((s) => {
      const st = states.get(s.sequence)?.state ?? 'outside';
      return st === 'outside' || st === 'entering';
    });
    const end = next?.appointment?.end ? Date.parse(next.appointment.end) : NaN;
    if (!next || next.latitude === undefined || next.longitude === undefined || Number.isNaN(end)) return 0;
    const measured = recentSpeed(window);
    if (measured === undefined) return 0;
    const speed = measured < d.min_speed_kmh / 3.6 ? d.planning_speed_kmh / 3.6 : measured;
    const remaining = distanceM(fix, { lat: next.latitude, lon: next.longitude }) * d.road_factor;
    const eta = fix.timeMs + (remaining / speed) * 1000;
    const delayS = Math.round((eta - end) / 1000);
    if (delayS <= d.grace_s) return 0;
    const st = states.get(next.sequence) ?? INITIAL_STATE;
    if (st.delayReportedS !== null && delayS - st.delayReportedS < d.step_s) return 0;
    states.set(next.sequence, { ...st, delayReportedS: delayS });
    dirty.add(next.sequence);
    recordMilestone(
      this.store,
      config,
      {
        loadNumber: load.loadNumber,
        code: d.code,
        reason: d.reason,
        stop: next.sequence,
        timeMs: fix.timeMs,
        lat: fix.lat,
        lon: fix.lon,
        references: [{ name: 'estimatedArrival', value: new Date(Math.round(eta / 1000) * 1000).toISOString() }],
      },
      Date.now(),
      this.log,
    );
    this.log.warn({ load: load.loadNumber, stop: next.sequence, delayMin: Math.round(delayS / 60), eta: new Date(eta).toISOString() }, 'delay predicted');
    return 1;
  }
}
