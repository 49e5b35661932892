/**
 * Loads: a load number on a resource (tractor, trailer) and a window, from `load start` to
 * `load end`, its stops, and where its delivery stands (the acknowledgement cursor, the
 * sampling point, the next stop). A resource may carry several loads at once (less than
 * truckload, consolidated multi-stop routes): each takes every reading of the resource in
 * its own window (see migrations.ts, 6 -> 7).
 * Starting and ending a load are committed durably (synchronous = FULL), like a milestone:
 * `load start` beside a running daemon, then a power cut, lost the load with synchronous
 * NORMAL (test/power-cut.test.ts), and every reading of the resource after it was dropped
 * for having no load.
 */
import { DataError } from '../errors.js';
import type { Stop } from '../milestones/stops.js';
import type { DB } from './db.js';
import { EARLY_CURSOR, EARLY_FIRST, EARLY_NOT_OURS, END_LOAD, OPEN, START_LOAD, TAKE_EARLY } from './ledger.js';
import type { BufferContext } from './store.js';
import type { LoadRow } from './types.js';

export class LoadError extends DataError {
  readonly code = 'ELOAD';
}

interface RawLoad {
  load_number: string;
  resource_id: string;
  resource_type: string;
  stops: string;
  started_ms: number;
  ended_ms: number | null;
  next_stop: number | null;
  last_sample_ms: number | null;
  acked_id: number;
  correlation_id: string | null;
  window_from_ms: number;
  window_until_ms: number | null;
  end_id: number | null;
  fix_ms: number | null;
  fix_lat: number | null;
  fix_lon: number | null;
}

const toLoad = (r: RawLoad): LoadRow => ({
  loadNumber: r.load_number,
  resourceId: r.resource_id,
  resourceType: r.resource_type,
  stops: JSON.parse(r.stops) as Stop[],
  startedMs: r.started_ms,
  endedMs: r.ended_ms,
  windowFromMs: r.window_from_ms,
  windowUntilMs: r.window_until_ms,
  endId: r.end_id,
  nextStop: r.next_stop,
  lastSampleMs: r.last_sample_ms,
  ackedId: r.acked_id,
  correlationId: r.correlation_id,
  cursorFix: r.fix_ms === null || r.fix_lat === null || r.fix_lon === null ? null : { timeMs: r.fix_ms, lat: r.fix_lat, lon: r.fix_lon },
});

export class Loads {
  private readonly db: DB;

  constructor(private readonly ctx: BufferContext) {
    this.db = ctx.db;
  }

  /**
   * Start a load on a resource, whatever other loads it carries. Its window opens at `nowMs`
   * by reading time, and only readings committed from now on can join it: its cursor starts
   * at the highest id so far, so the backlog of the resource's other loads is never walked
   * for it, and a reading from before `nowMs` committed later (it waited in the daemon's
   * memory) is left out by its time. Its fix at the cursor is the resource's newest so far.
   *
   * With `fromMs` (checked by the caller: within `loads.keep_unassigned_s`, not ahead), the
   * window opens then, and the load takes the resource's readings kept unassigned since then
   * in this same transaction: a power cut leaves the load with all of them or no load.
   */
  startLoad(load: { loadNumber: string; resourceId: string; resourceType: string; stops: Stop[]; nowMs: number; fromMs?: number }): LoadRow {
    return this.ctx.durably(() => {
      const existing = this.getLoad(load.loadNumber);
      if (existing) {
        throw new LoadError(existing.endedMs === null ? `load ${load.loadNumber} is already active on ${existing.resourceId}` : `load ${load.loadNumber} existed before and has ended; use a new load number`);
      }
      const first = load.stops[0]?.sequence ?? null;
      const fromMs = load.fromMs ?? load.nowMs;
      this.db.prepare(START_LOAD).run(load.loadNumber, load.resourceId, load.resourceType, JSON.stringify(load.stops), load.nowMs, fromMs, first, load.resourceId);
      if (load.fromMs !== undefined) this.takeEarly(load.loadNumber, load.resourceId, fromMs);
      return this.getLoad(load.loadNumber)!;
    });
  }

  /** The early readings join a load just started (see ledger.ts, TAKE_EARLY). */
  private takeEarly(loadNumber: string, resourceId: string, fromMs: number): void {
    const firstId = this.db.prepare(EARLY_FIRST).pluck().get(resourceId, fromMs) as number | null;
    if (firstId === null) return;
    this.db.prepare(EARLY_NOT_OURS).run(loadNumber, resourceId, firstId, fromMs);
    this.db.prepare(TAKE_EARLY).run(resourceId, firstId, fromMs);
    this.db.prepare(EARLY_CURSOR).run(firstId - 1, loadNumber);
  }

  /**
   * End a load, and no other: its window ends at `nowMs` by reading time. What it holds is
   * still delivered, and so are the readings from before `nowMs` the daemon still held in
   * memory: the daemon closes the load (end_id) with its next commit.
   *
   * Never before a reading it already holds: a source whose clock runs ahead of the system's
   * (by up to sources_time.max_future_s), or a system clock not yet set when the command runs
   * (no RTC, no NTP), put committed readings after `nowMs`. Cut off by the window, they were
   * purged without ever being sent.
   */
  endLoad(loadNumber: string, nowMs: number): LoadRow {
    return this.ctx.durably(() => {
      const load = this.getLoad(loadNumber);
      if (!load) throw new LoadError(`no load ${loadNumber}`);
      if (load.endedMs !== null) throw new LoadError(`load ${loadNumber} has already ended`);
      this.db.prepare(END_LOAD).run(nowMs, nowMs, loadNumber);
      return this.getLoad(loadNumber)!;
    });
  }

  getLoad(loadNumber: string): LoadRow | undefined {
    const r = this.db.prepare('SELECT * FROM loads WHERE load_number = ?').get(loadNumber) as RawLoad | undefined;
    return r && toLoad(r);
  }

  /** The active loads of a resource (not ended), the oldest first. */
  activeLoadsOf(resourceId: string): LoadRow[] {
    return (this.db.prepare('SELECT * FROM loads WHERE resource_id = ? AND ended_ms IS NULL ORDER BY started_ms, load_number').all(resourceId) as RawLoad[]).map(toLoad);
  }

  /**
   * The loads a new reading of the resource may still join: active, or ended and not yet
   * closed (what the daemon held from before the end is not committed yet). The oldest first.
   */
  openLoadsOf(resourceId: string): LoadRow[] {
    return (this.db.prepare(`SELECT * FROM loads l WHERE l.resource_id = ? AND ${OPEN} ORDER BY l.started_ms, l.load_number`).all(resourceId) as RawLoad[]).map(toLoad);
  }

  /** Loads ended at or after `sinceMs` (those still taking late readings, for `status`), the first ended first. */
  endedSince(sinceMs: number): LoadRow[] {
    return (this.db.prepare('SELECT * FROM loads WHERE ended_ms >= ? ORDER BY ended_ms, load_number').all(sinceMs) as RawLoad[]).map(toLoad);
  }

  listLoads(includeEnded = false): LoadRow[] {
    const sql = includeEnded ? 'SELECT * FROM loads ORDER BY started_ms, load_number' : 'SELECT * FROM loads WHERE ended_ms IS NULL ORDER BY started_ms, load_number';
    return (this.db.prepare(sql).all() as RawLoad[]).map(toLoad);
  }

  setNextStop(loadNumber: string, next: number | null): void {
    this.db.prepare('UPDATE loads SET next_stop = ? WHERE load_number = ?').run(next, loadNumber);
  }
}
