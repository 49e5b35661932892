/**
 * Everything the agent keeps, behind one class: readings, loads, milestones, daemon state.
 * The daemon and short-lived CLI commands open the same file; WAL lets them work side by side.
 *
 * Rule: nothing is deleted that the service did not acknowledge. Readings leave only via
 * `ackReadings` (after a 2xx), milestones are marked sent only via `markMilestoneSent`.
 */
import { randomUUID } from 'node:crypto';
import type { Statement } from 'better-sqlite3';
import type { Stop } from '../milestones/stops.js';
import type { Reading } from '../sources/types.js';
import { openDatabase, type DB, type OpenOptions } from './db.js';

export interface LoadRow {
  loadNumber: string;
  resourceId: string;
  resourceType: string;
  stops: Stop[];
  startedMs: number;
  endedMs: number | null;
  nextStop: number | null;
  lastSampleMs: number | null;
}

export interface StoredReading {
  id: number;
  resource_id: string;
  load_number: string | null;
  time_ms: number;
  lat: number | null;
  lon: number | null;
  speed: number | null;
  heading: number | null;
  odometer: number | null;
  temp_c: number | null;
}

export interface MilestoneRow {
  id: number;
  loadNumber: string;
  ref: string;
  body: Record<string, unknown>;
  createdMs: number;
  attempts: number;
  lastError: string | null;
  sentMs: number | null;
}

export class LoadError extends Error {
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
}

interface RawMilestone {
  id: number;
  load_number: string;
  ref: string;
  body: string;
  created_ms: number;
  attempts: number;
  last_error: string | null;
  sent_ms: number | null;
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
});

const toMilestone = (r: RawMilestone): MilestoneRow => ({
  id: r.id,
  loadNumber: r.load_number,
  ref: r.ref,
  body: JSON.parse(r.body) as Record<string, unknown>,
  createdMs: r.created_ms,
  attempts: r.attempts,
  lastError: r.last_error,
  sentMs: r.sent_ms,
});

export class Store {
  readonly db: DB;
  private readonly insertWithLoad: Statement;
  private readonly insertAny: Statement;
  private readonly readingsOfLoad: Statement;

  constructor(db: DB) {
    this.db = db;
    const cols = 'resource_id, load_number, time_ms, lat, lon, speed, heading, odometer, temp_c, source';
    const activeLoad = '(SELECT load_number FROM loads WHERE resource_id = @resourceId AND ended_ms IS NULL)';
    const values = `@resourceId, ${activeLoad}, @timeMs, @lat, @lon, @speed, @heading, @odometer, @temperatureC, @source`;
    // The active load is looked up inside the insert, so a load started by the CLI a moment
    // ago applies to the very next batch without the daemon having to notice first.
    this.insertWithLoad = db.prepare(
      `INSERT INTO readings (${cols}) SELECT ${values} WHERE EXISTS ${activeLoad.replace('SELECT load_number', 'SELECT 1')}`,
    );
    this.insertAny = db.prepare(`INSERT INTO readings (${cols}) VALUES (${values})`);
    this.readingsOfLoad = db.prepare(
      'SELECT id, resource_id, load_number, time_ms, lat, lon, speed, heading, odometer, temp_c FROM readings WHERE load_number = ? AND id > ? ORDER BY id',
    );
  }

  static open(path: string, opts?: OpenOptions): Store {
    return new Store(openDatabase(path, opts));
  }

  close(): void {
    if (this.db.open) this.db.close();
  }

  // ---- readings -------------------------------------------------------------------------

  /**
   * Commit a batch of validated readings in one transaction. Returns how many were kept:
   * unless `keepWithoutLoad`, readings of resources with no active load are not stored.
   */
  insertReadings(batch: ReadonlyArray<Reading & { source?: string }>, keepWithoutLoad = false): number {
    const stmt = keepWithoutLoad ? this.insertAny : this.insertWithLoad;
    let kept = 0;
    this.db.transaction(() => {
      for (const r of batch) {
        const info = stmt.run({
          resourceId: r.resourceId,
          timeMs: Math.round(r.timeMs),
          lat: r.lat ?? null,
          lon: r.lon ?? null,
          speed: r.speed ?? null,
          heading: r.heading ?? null,
          odometer: r.odometer ?? null,
          temperatureC: r.temperatureC ?? null,
          source: r.source ?? null,
        });
        kept += info.changes;
      }
    })();
    return kept;
  }

  /** Readings of a load after `afterId`, oldest first, streamed (never the whole backlog in memory). */
  iterateReadings(loadNumber: string, afterId = 0): IterableIterator<StoredReading> {
    return this.readingsOfLoad.iterate(loadNumber, afterId) as IterableIterator<StoredReading>;
  }

  /** The service took the readings of this load up to `upToId`: drop them and remember the sampling point. */
  ackReadings(loadNumber: string, upToId: number, lastSampleMs: number | null): void {
    this.db.transaction(() => {
      this.db.prepare('DELETE FROM readings WHERE load_number = ? AND id <= ?').run(loadNumber, upToId);
      if (lastSampleMs !== null) {
        this.db
          .prepare('UPDATE loads SET last_sample_ms = max(coalesce(last_sample_ms, 0), ?) WHERE load_number = ?')
          .run(lastSampleMs, loadNumber);
      }
    })();
  }

  latestPosition(resourceId: string): StoredReading | undefined {
    return this.db
      .prepare(
        'SELECT id, resource_id, load_number, time_ms, lat, lon, speed, heading, odometer, temp_c FROM readings WHERE resource_id = ? AND lat IS NOT NULL ORDER BY id DESC LIMIT 1',
      )
      .get(resourceId) as StoredReading | undefined;
  }

  /** Loads that have readings waiting, active or already ended. */
  loadsWithReadings(): string[] {
    return (
      this.db
        .prepare('SELECT DISTINCT load_number FROM readings WHERE load_number IS NOT NULL ORDER BY load_number')
        .all() as { load_number: string }[]
    ).map((r) => r.load_number);
  }

  // ---- loads ----------------------------------------------------------------------------

  startLoad(load: { loadNumber: string; resourceId: string; resourceType: string; stops: Stop[]; nowMs: number }): LoadRow {
    return this.db
      .transaction(() => {
        const existing = this.getLoad(load.loadNumber);
        if (existing) {
          throw new LoadError(
            existing.endedMs === null
              ? `load ${load.loadNumber} is already active on ${existing.resourceId}`
              : `load ${load.loadNumber} existed before and has ended; use a new load number`,
          );
        }
        const busy = this.activeLoadOf(load.resourceId);
        if (busy) throw new LoadError(`resource ${load.resourceId} already has active load ${busy.loadNumber}; end it first`);
        const first = load.stops[0]?.sequence ?? null;
        this.db
          .prepare(
            'INSERT INTO loads (load_number, resource_id, resource_type, stops, started_ms, next_stop) VALUES (?, ?, ?, ?, ?, ?)',
          )
          .run(load.loadNumber, load.resourceId, load.resourceType, JSON.stringify(load.stops), load.nowMs, first);
        return this.getLoad(load.loadNumber)!;
      })
      .immediate();
  }

  endLoad(loadNumber: string, nowMs: number): LoadRow {
    const load = this.getLoad(loadNumber);
    if (!load) throw new LoadError(`no load ${loadNumber}`);
    if (load.endedMs !== null) throw new LoadError(`load ${loadNumber} has already ended`);
    this.db.prepare('UPDATE loads SET ended_ms = ? WHERE load_number = ?').run(nowMs, loadNumber);
    return { ...load, endedMs: nowMs };
  }

  getLoad(loadNumber: string): LoadRow | undefined {
    const r = this.db.prepare('SELECT * FROM loads WHERE load_number = ?').get(loadNumber) as RawLoad | undefined;
    return r && toLoad(r);
  }

  activeLoadOf(resourceId: string): LoadRow | undefined {
    const r = this.db.prepare('SELECT * FROM loads WHERE resource_id = ? AND ended_ms IS NULL').get(resourceId) as
      | RawLoad
      | undefined;
    return r && toLoad(r);
  }

  listLoads(includeEnded = false): LoadRow[] {
    const sql = includeEnded
      ? 'SELECT * FROM loads ORDER BY started_ms, load_number'
      : 'SELECT * FROM loads WHERE ended_ms IS NULL ORDER BY started_ms, load_number';
    return (this.db.prepare(sql).all() as RawLoad[]).map(toLoad);
  }

  setNextStop(loadNumber: string, next: number | null): void {
    this.db.prepare('UPDATE loads SET next_stop = ? WHERE load_number = ?').run(next, loadNumber);
  }

  // ---- milestones -----------------------------------------------------------------------

  /** Commit a milestone; it is durable when this returns. The ref is its idempotency reference. */
  insertMilestone(loadNumber: string, body: Record<string, unknown>, nowMs: number, ref: string = randomUUID()): MilestoneRow {
    const info = this.db
      .prepare('INSERT INTO milestones (load_number, ref, body, created_ms) VALUES (?, ?, ?, ?)')
      .run(loadNumber, ref, JSON.stringify(body), nowMs);
    return { id: Number(info.lastInsertRowid), loadNumber, ref, body, createdMs: nowMs, attempts: 0, lastError: null, sentMs: null };
  }

  pendingMilestones(limit = 100): MilestoneRow[] {
    return (
      this.db.prepare('SELECT * FROM milestones WHERE sent_ms IS NULL ORDER BY id LIMIT ?').all(limit) as RawMilestone[]
    ).map(toMilestone);
  }

  hasPendingMilestones(): boolean {
    return this.db.prepare('SELECT 1 FROM milestones WHERE sent_ms IS NULL LIMIT 1').get() !== undefined;
  }

  listMilestones(loadNumber?: string): MilestoneRow[] {
    const rows = loadNumber
      ? this.db.prepare('SELECT * FROM milestones WHERE load_number = ? ORDER BY id').all(loadNumber)
      : this.db.prepare('SELECT * FROM milestones ORDER BY id').all();
    return (rows as RawMilestone[]).map(toMilestone);
  }

  markMilestoneSent(id: number, nowMs: number): void {
    this.db.prepare('UPDATE milestones SET sent_ms = ?, attempts = attempts + 1, last_error = NULL WHERE id = ?').run(nowMs, id);
  }

  markMilestoneFailed(id: number, error: string): void {
    this.db.prepare('UPDATE milestones SET attempts = attempts + 1, last_error = ? WHERE id = ?').run(error.slice(0, 500), id);
  }

  // ---- state and counts -----------------------------------------------------------------

  setState(key: string, value: unknown, nowMs: number): void {
    this.db
      .prepare(
        'INSERT INTO state (key, value, updated_ms) VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms',
      )
      .run(key, JSON.stringify(value), nowMs);
  }

  getState<T>(key: string): { value: T; updatedMs: number } | undefined {
    const r = this.db.prepare('SELECT value, updated_ms FROM state WHERE key = ?').get(key) as
      | { value: string; updated_ms: number }
      | undefined;
    return r && { value: JSON.parse(r.value) as T, updatedMs: r.updated_ms };
  }

  counts(): { readings: number; unassignedReadings: number; oldestReadingMs: number | null; pendingMilestones: number; sentMilestones: number } {
    const r = this.db
      .prepare(
        `SELECT
           (SELECT count(*) FROM readings WHERE load_number IS NOT NULL) AS readings,
           (SELECT count(*) FROM readings WHERE load_number IS NULL) AS unassigned,
           (SELECT min(time_ms) FROM readings WHERE load_number IS NOT NULL) AS oldest,
           (SELECT count(*) FROM milestones WHERE sent_ms IS NULL) AS pending,
           (SELECT count(*) FROM milestones WHERE sent_ms IS NOT NULL) AS sent`,
      )
      .get() as { readings: number; unassigned: number; oldest: number | null; pending: number; sent: number };
    return {
      readings: r.readings,
      unassignedReadings: r.unassigned,
      oldestReadingMs: r.oldest,
      pendingMilestones: r.pending,
      sentMilestones: r.sent,
    };
  }
}
