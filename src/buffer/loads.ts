/**
 * Loads: a load number on a resource (tractor, trailer) from `load start` to `load end`, its
 * stops, and where its delivery stands (the acknowledgement cursor, the sampling point).
 * Starting and ending a load are committed durably (synchronous = FULL), like a milestone:
 * `load start` beside a running daemon, then a power cut, lost the load with synchronous
 * NORMAL (test/power-cut.test.ts), and every reading of the resource after it was dropped
 * for having no load.
 */
import { DataError } from '../errors.js';
import type { Stop } from '../milestones/stops.js';
import type { DB } from './db.js';
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
}

const toLoad = (r: RawLoad): LoadRow => ({
  loadNumber: r.load_number,
  resourceId: r.resource_id,
  resourceType: r.resource_type,
  stops: JSON.parse(r.stops) as Stop[],
  startedMs: r.started_ms,
  endedMs: r.ended_ms,
  nextStop: r.next_stop,
  lastSampleMs: r.last_sample_ms,
  ackedId: r.acked_id,
  correlationId: r.correlation_id,
});

export class Loads {
  private readonly db: DB;

  constructor(private readonly ctx: BufferContext) {
    this.db = ctx.db;
  }

  startLoad(load: { loadNumber: string; resourceId: string; resourceType: string; stops: Stop[]; nowMs: number }): LoadRow {
    return this.ctx.durably(() => {
      const existing = this.getLoad(load.loadNumber);
      if (existing) {
        throw new LoadError(existing.endedMs === null ? `load ${load.loadNumber} is already active on ${existing.resourceId}` : `load ${load.loadNumber} existed before and has ended; use a new load number`);
      }
      const busy = this.activeLoadOf(load.resourceId);
      if (busy) throw new LoadError(`resource ${load.resourceId} already has active load ${busy.loadNumber}; end it first`);
      const first = load.stops[0]?.sequence ?? null;
      this.db
        .prepare('INSERT INTO loads (load_number, resource_id, resource_type, stops, started_ms, next_stop) VALUES (?, ?, ?, ?, ?, ?)')
        .run(load.loadNumber, load.resourceId, load.resourceType, JSON.stringify(load.stops), load.nowMs, first);
      return this.getLoad(load.loadNumber)!;
    });
  }

  endLoad(loadNumber: string, nowMs: number): LoadRow {
    const load = this.getLoad(loadNumber);
    if (!load) throw new LoadError(`no load ${loadNumber}`);
    if (load.endedMs !== null) throw new LoadError(`load ${loadNumber} has already ended`);
    this.ctx.durably(() => this.db.prepare('UPDATE loads SET ended_ms = ? WHERE load_number = ?').run(nowMs, loadNumber));
    return { ...load, endedMs: nowMs };
  }

  getLoad(loadNumber: string): LoadRow | undefined {
    const r = this.db.prepare('SELECT * FROM loads WHERE load_number = ?').get(loadNumber) as RawLoad | undefined;
    return r && toLoad(r);
  }

  activeLoadOf(resourceId: string): LoadRow | undefined {
    const r = this.db.prepare('SELECT * FROM loads WHERE resource_id = ? AND ended_ms IS NULL').get(resourceId) as RawLoad | undefined;
    return r && toLoad(r);
  }

  listLoads(includeEnded = false): LoadRow[] {
    const sql = includeEnded ? 'SELECT * FROM loads ORDER BY started_ms, load_number' : 'SELECT * FROM loads WHERE ended_ms IS NULL ORDER BY started_ms, load_number';
    return (this.db.prepare(sql).all() as RawLoad[]).map(toLoad);
  }

  setNextStop(loadNumber: string, next: number | null): void {
    this.db.prepare('UPDATE loads SET next_stop = ? WHERE load_number = ?').run(next, loadNumber);
  }
}
