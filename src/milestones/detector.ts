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
 *
 * A resource may carry several loads at once: each of its open loads sees the fixes in its
 * own window (a load started at 10:00 is not driven by a fix from 09:59) against its own
 * stops, with its own state, speed and next stop. A stop two loads share (two deliveries at
 * one dock) gives each load its own arrival and departure.
 *
 * Each batch's milestones and the stop states that record them are committed in one
 * transaction (`Store.commitMilestones`): a state write that fails takes the milestone with
 * it, so a retry cannot report the same arrival twice. A code already recorded for the stop
 * (by hand, say) is not reported again.
 */
import type { Logger } from 'pino';
import type { LoadRow, NewMilestone, StopState, Store } from '../buffer/store.js';
import type { Config } from '../config/schema.js';
import type { Reading } from '../reading.js';
import { distanceM } from '../geo/distance.js';
import { appointmentMs } from './appointments.js';
import { nextStopAfter, prepareMilestone, type MilestoneInput } from './record.js';
import type { Stop } from './stops.js';

export type { StopState };
export type StopPhase = StopState['state'];

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
  /** Recent fixes per resource and load, for the speed used in delay prediction (those of loads no longer open are let go). */
  private readonly recent = new Map<string, Map<string, Fix[]>>();
  /**
   * Stop states changed without an event (the fixes counted at a stop), per load: written
   * with the next commit of readings (deferWrite), or with the next event, whichever first.
   */
  private readonly pending = new Map<string, Map<number, StopState>>();
  /** What the last write of `pending` held (see committed). */
  private written: Map<string, Map<number, StopState>> | undefined;

  constructor(
    private readonly store: Store,
    private readonly config: () => Config,
    private readonly log: Logger,
    /** Called when milestones were recorded, so the sender goes at once. */
    private readonly onMilestone: () => void,
    /**
     * Hands a write to the next commit of readings (Ingest.writeWithNextCommit): at a stop
     * the states change with every fix, and a commit of their own every 5 s cost more flash
     * than the readings. Without it they are committed at once.
     */
    private readonly deferWrite?: (write: () => void) => void,
  ) {}

  /** A commit of readings went through: the stop states written in it are on the disk. */
  committed(): void {
    const written = this.written;
    this.written = undefined;
    if (!written) return;
    for (const [load, states] of written) {
      const now = this.pending.get(load);
      if (!now) continue;
      for (const [seq, st] of states) if (now.get(seq) === st) now.delete(seq);
      if (now.size === 0) this.pending.delete(load);
    }
    if (this.pending.size > 0) this.deferPending();
  }

  private deferPending(): void {
    this.deferWrite?.(() => {
      const snapshot = new Map([...this.pending].map(([load, states]) => [load, new Map(states)]));
      for (const [load, states] of snapshot) this.store.saveStopStates(load, [...states]);
      this.written = snapshot;
    });
  }

  /** The stop states of a load as the detector knows them: the buffer's, and those not yet written. */
  private statesOf(loadNumber: string): Map<number, StopState> {
    const states = this.store.stopStates(loadNumber);
    for (const [seq, st] of this.pending.get(loadNumber) ?? []) states.set(seq, st);
    return states;
  }

  /** Feed a committed batch of readings. Never throws: detection must not stop ingest. */
  process(batch: ReadonlyArray<Reading>): void {
    const cfg = this.config().milestones;
    if (!cfg.detect) return;
    const byResource = new Map<string, Fix[]>();
    for (const r of batch) {
      // A fix whose time cannot be judged yet (the first, before GNSS time): a garbled date
      // a year ahead held the stop "entering" since then, and no arrival came while parked.
      if (r.lat === undefined || r.lon === undefined || r.untimed) continue;
      const list = byResource.get(r.resourceId) ?? [];
      list.push({ timeMs: r.timeMs, lat: r.lat, lon: r.lon });
      byResource.set(r.resourceId, list);
    }
    let recorded = 0;
    for (const [resourceId, fixes] of byResource) {
      let loads: LoadRow[];
      try {
        loads = this.store.openLoadsOf(resourceId).filter((l) => l.stops.some((s) => s.latitude !== undefined));
      } catch (err) {
        this.log.error({ resource: resourceId, err: (err as Error).message }, 'milestone detection failed for this batch');
        continue;
      }
      const before = this.recent.get(resourceId);
      const recent = new Map<string, Fix[]>();
      for (const l of loads) {
        const kept = before?.get(l.loadNumber);
        if (kept) recent.set(l.loadNumber, kept);
      }
      this.recent.set(resourceId, recent);
      if (loads.length === 0) continue;
      fixes.sort((a, b) => a.timeMs - b.timeMs);
      for (const load of loads) {
        const mine = fixes.filter((f) => f.timeMs >= load.windowFromMs && (load.windowUntilMs === null || f.timeMs < load.windowUntilMs));
        if (mine.length === 0) continue;
        try {
          recorded += this.processLoad(load, mine, recent);
        } catch (err) {
          // One load's failure (its commit) does not keep the others from their milestones.
          this.log.error({ resource: resourceId, load: load.loadNumber, err: (err as Error).message }, 'milestone detection failed for this batch');
        }
      }
    }
    if (recorded > 0) this.onMilestone();
  }

  private processLoad(load: LoadRow, fixes: Fix[], recent: Map<string, Fix[]>): number {
    const config = this.config();
    const m = config.milestones;
    const params: FenceParams = { radiusM: m.radius_m, exitRadiusFactor: m.exit_radius_factor, dwellS: m.dwell_s, minFixes: m.min_fixes };
    const states = this.statesOf(load.loadNumber);
    const dirty = new Set<number>();
    const events: Array<{ item: NewMilestone; input: MilestoneInput; log: () => void }> = [];
    const window = (recent.get(load.loadNumber) ?? []).slice();
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
          // The place is the detector's own fix: where the truck was when it completed the event.
          const input: MilestoneInput = { loadNumber: load.loadNumber, code, stop: stop.sequence, timeMs: event.timeMs, lat: fix.lat, lon: fix.lon, origin: 'detected' };
          const type = event.type === 'arrive' ? 'arrival' : 'departure';
          events.push({
            item: prepareMilestone(this.store, config, input).item,
            input,
            log: () => this.log.info({ load: load.loadNumber, stop: stop.sequence, code, at: new Date(event.timeMs).toISOString() }, `${type} detected`),
          });
          // Speed while loading is not driving speed: measure afresh from here.
          if (event.type === 'depart') window.splice(0, window.length - 1);
        }
      }
      if (m.delay.enabled) this.checkDelay(load, fix, window, states, dirty, events);
    }
    if (events.length === 0 && dirty.size === 0) {
      recent.set(load.loadNumber, window);
      return 0;
    }
    if (events.length === 0 && this.deferWrite) {
      // Counting fixes at a stop: with the next commit of readings, not in a commit of its own.
      const waiting = this.pending.get(load.loadNumber) ?? new Map<number, StopState>();
      for (const seq of dirty) waiting.set(seq, states.get(seq)!);
      this.pending.set(load.loadNumber, waiting);
      recent.set(load.loadNumber, window);
      this.deferPending();
      return 0;
    }
    // With an event, every state of the load not yet written goes in its commit.
    for (const seq of this.pending.get(load.loadNumber)?.keys() ?? []) dirty.add(seq);
    // Milestones and the states that record them: one transaction, or nothing at all.
    const last = [...events].reverse().find((e) => nextStopAfter(load, String(e.item.body.eventCode), e.input.stop, config));
    const { rows, skipped } = this.store.commitMilestones(
      events.map((e) => e.item),
      Date.now(),
      {
        stopStates: [...dirty].map((seq) => ({ loadNumber: load.loadNumber, stop: seq, state: states.get(seq)! })),
        nextStop: last && nextStopAfter(load, String(last.item.body.eventCode), last.input.stop, config),
      },
    );
    // Only once committed: the window, the states that waited, and the log lines.
    recent.set(load.loadNumber, window);
    this.pending.delete(load.loadNumber);
    for (const e of events) {
      const skip = skipped.find((x) => x.item === e.item);
      if (skip) {
        this.log.info(
          { load: load.loadNumber, stop: e.input.stop, code: e.item.body.eventCode, first: skip.existing.id, origin: skip.existing.origin },
          `${String(e.item.body.eventCode)} for stop ${e.input.stop} was recorded already (milestone ${skip.existing.id}); not reported again`,
        );
      } else {
        e.log();
      }
    }
    return rows.length;
  }

  private checkDelay(load: LoadRow, fix: Fix, window: Fix[], states: Map<number, StopState>, dirty: Set<number>, events: Array<{ item: NewMilestone; input: MilestoneInput; log: () => void }>): void {
    const config = this.config();
    const d = config.milestones.delay;
    const atStop = load.stops.some((s) => {
      const st = states.get(s.sequence)?.state;
      return st === 'inside' || st === 'entering';
    });
    if (atStop) return;
    // A stop reached or left is not waited for, whether the fence saw it or the driver
    // reported it (a manual X3 for a stop whose fence the truck never crossed).
    const candidates = load.stops.filter((s) => {
      const st = states.get(s.sequence)?.state ?? 'outside';
      return st === 'outside' || st === 'entering';
    });
    if (!candidates.some((s) => s.appointment?.end)) return;
    const reported = this.store.stopsWithCodes(load.loadNumber, Object.values(config.milestones.codes));
    const next = candidates.find((s) => !reported.has(s.sequence));
    const end = next ? appointmentMs(next, 'end') : Number.NaN;
    if (!next || next.latitude === undefined || next.longitude === undefined || Number.isNaN(end)) return;
    const measured = recentSpeed(window);
    if (measured === undefined) return;
    const speed = measured < d.min_speed_kmh / 3.6 ? d.planning_speed_kmh / 3.6 : measured;
    const remaining = distanceM(fix, { lat: next.latitude, lon: next.longitude }) * d.road_factor;
    const eta = fix.timeMs + (remaining / speed) * 1000;
    const delayS = Math.round((eta - end) / 1000);
    if (delayS <= d.grace_s) return;
    const st = states.get(next.sequence) ?? INITIAL_STATE;
    if (st.delayReportedS !== null && delayS - st.delayReportedS < d.step_s) return;
    states.set(next.sequence, { ...st, delayReportedS: delayS });
    dirty.add(next.sequence);
    const input: MilestoneInput = {
      loadNumber: load.loadNumber,
      code: d.code,
      reason: d.reason,
      stop: next.sequence,
      timeMs: fix.timeMs,
      lat: fix.lat,
      lon: fix.lon,
      origin: 'detected',
      references: [{ name: 'estimatedArrival', value: new Date(Math.round(eta / 1000) * 1000).toISOString() }],
    };
    events.push({
      item: prepareMilestone(this.store, config, input).item,
      input,
      log: () => this.log.warn({ load: load.loadNumber, stop: next.sequence, delayMin: Math.round(delayS / 60), eta: new Date(eta).toISOString() }, 'delay predicted'),
    });
  }
}
