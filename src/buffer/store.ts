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

export interface DeadLetter {
  id: number;
  kind: 'milestone' | 'trace';
  loadNumber: string;
  /** Milestone id or reading id. */
  recordId: number;
  status: number | null;
  response: string | null;
  body: unknown;
  createdMs: number;
}

interface RawDeadLetter {
  id: number;
  kind: 'milestone' | 'trace';
  load_number: string;
  record_id: number;
  status: number | null;
  response: string | null;
  body: string;
  created_ms: number;
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
      'SELECT id, resource_id, load_number, time_ms, lat, lon, speed, heading, odometer, temp_c FROM readings WHERE load_number = ? AND id > ? AND state = 0 ORDER BY id',
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
      this.db.prepare('DELETE FROM readings WHERE load_number = ? AND id <= ? AND state = 0').run(loadNumber, upToId);
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
        .prepare('SELECT DISTINCT load_number FROM readings WHERE load_number IS NOT NULL AND state = 0 ORDER BY load_number')
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
      this.db.prepare('SELECT * FROM milestones WHERE sent_ms IS NULL AND parked_ms IS NULL ORDER BY id LIMIT ?').all(limit) as RawMilestone[]
    ).map(toMilestone);
  }

  hasPendingMilestones(): boolean {
    return this.db.prepare('SELECT 1 FROM milestones WHERE sent_ms IS NULL AND parked_ms IS NULL LIMIT 1').get() !== undefined;
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

  // ---- dead letters ---------------------------------------------------------------------

  /** The service refused this milestone: park it with the answer, so the queue moves on. */
  parkMilestone(m: MilestoneRow, status: number | null, response: string, nowMs: number): void {
    this.db.transaction(() => {
      this.db.prepare('UPDATE milestones SET parked_ms = ?, attempts = attempts + 1, last_error = ? WHERE id = ?').run(nowMs, response.slice(0, 500), m.id);
      this.db
        .prepare('INSERT INTO dead_letters (kind, load_number, record_id, status, response, body, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?)')
        .run('milestone', m.loadNumber, m.id, status, response.slice(0, 4000), JSON.stringify(m.body), nowMs);
    })();
  }

  /** The service refused the trace point built from this reading: park the reading. */
  parkReading(readingId: number, loadNumber: string, status: number | null, response: string, body: unknown, nowMs: number): void {
    this.db.transaction(() => {
      this.db.prepare('UPDATE readings SET state = 1 WHERE id = ?').run(readingId);
      this.db
        .prepare('INSERT INTO dead_letters (kind, load_number, record_id, status, response, body, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?)')
        .run('trace', loadNumber, readingId, status, response.slice(0, 4000), JSON.stringify(body), nowMs);
    })();
  }

  listDeadLetters(): DeadLetter[] {
    return (this.db.prepare('SELECT * FROM dead_letters ORDER BY id').all() as RawDeadLetter[]).map((r) => ({
      id: r.id,
      kind: r.kind,
      loadNumber: r.load_number,
      recordId: r.record_id,
      status: r.status,
      response: r.response,
      body: JSON.parse(r.body) as unknown,
      createdMs: r.created_ms,
    }));
  }

  /**
   * Put dead letters back in the queue after the operator fixed the cause. Milestones return
   * to their place (oldest first); readings are sent again as their own trace points.
   * Returns how many were put back.
   */
  retryDeadLetters(ids: number[] | 'all'): number {
    return this.db.transaction(() => {
      const rows = (ids === 'all'
        ? this.db.prepare('SELECT * FROM dead_letters').all()
        : ids.map((id) => this.db.prepare('SELECT * FROM dead_letters WHERE id = ?').get(id)).filter(Boolean)) as RawDeadLetter[];
      for (const r of rows) {
        if (r.kind === 'milestone') this.db.prepare('UPDATE milestones SET parked_ms = NULL, last_error = NULL WHERE id = ?').run(r.record_id);
        else this.db.prepare('UPDATE readings SET state = 2 WHERE id = ?').run(r.record_id);
        this.db.prepare('DELETE FROM dead_letters WHERE id = ?').run(r.id);
      }
      return rows.length;
    })();
  }

  /** Readings whose dead letters were retried, oldest first. */
  retryReadings(limit: number): StoredReading[] {
    return this.db
      .prepare('SELECT id, resource_id, load_number, time_ms, lat, lon, speed, heading, odometer, temp_c FROM readings WHERE state = 2 ORDER BY id LIMIT ?')
      .all(limit) as StoredReading[];
  }

  deleteReadings(ids: number[]): void {
    const del = this.db.prepare('DELETE FROM readings WHERE id = ?');
    this.db.transaction(() => {
      for (const id of ids) del.run(id);
    })();
  }

  /** Newest position of a load and the time span of its backlog, for "newest first" after an outage. */
  backlogOf(loadNumber: string): { newest: StoredReading | undefined; oldestMs: number | null } {
    const newest = this.db
      .prepare(
        'SELECT id, resource_id, load_number, time_ms, lat, lon, speed, heading, odometer, temp_c FROM readings WHERE load_number = ? AND state = 0 AND lat IS NOT NULL ORDER BY id DESC LIMIT 1',
      )
      .get(loadNumber) as StoredReading | undefined;
    const oldest = this.db.prepare('SELECT min(time_ms) AS t FROM readings WHERE load_number = ? AND state = 0').get(loadNumber) as { t: number | null };
    return { newest, oldestMs: oldest.t };
  }

  // ---- bounds ---------------------------------------------------------------------------

  /** Bytes the buffer's data occupies (pages in use, not the file's high-water mark). */
  usedBytes(): number {
    const pageSize = this.db.pragma('page_size', { simple: true }) as number;
    const pages = this.db.pragma('page_count', { simple: true }) as number;
    const free = this.db.pragma('freelist_count', { simple: true }) as number;
    return (pages - free) * pageSize;
  }

  /** Drop the oldest waiting readings (never milestones, never dead letters). Returns how many. */
  dropOldestReadings(count: number): number {
    return this.db
      .prepare('DELETE FROM readings WHERE id IN (SELECT id FROM readings WHERE state = 0 ORDER BY id LIMIT ?)')
      .run(count).changes;
  }

  dropReadingsOlderThan(cutoffMs: number): number {
    return this.db.prepare('DELETE FROM readings WHERE state = 0 AND time_ms < ?').run(cutoffMs).changes;
  }

  bump(counter: string, by: number): void {
    if (by === 0) return;
    this.db
      .prepare('INSERT INTO counters (name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value')
      .run(counter, by);
  }

  counters(): Record<string, number> {
    return Object.fromEntries((this.db.prepare('SELECT name, value FROM counters ORDER BY name').all() as { name: string; value: number }[]).map((r) => [r.name, r.value]));
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

  counts(): {
    readings: number;
    unassignedReadings: number;
    oldestReadingMs: number | null;
    pendingMilestones: number;
    sentMilestones: number;
    deadLetters: number;
    retryReadings: number;
  } {
    const r = this.db
      .prepare(
        `SELECT
           (SELECT count(*) FROM readings WHERE load_number IS NOT NULL AND state = 0) AS readings,
           (SELECT count(*) FROM readings WHERE load_number IS NULL) AS unassigned,
           (SELECT min(time_ms) FROM readings WHERE load_number IS NOT NULL AND state = 0) AS oldest,
           (SELECT count(*) FROM milestones WHERE sent_ms IS NULL AND parked_ms IS NULL) AS pending,
           (SELECT count(*) FROM milestones WHERE sent_ms IS NOT NULL) AS sent,
           (SELECT count(*) FROM dead_letters) AS dead,
           (SELECT count(*) FROM readings WHERE state = 2) AS retry`,
      )
      .get() as { readings: number; unassigned: number; oldest: number | null; pending: number; sent: number; dead: number; retry: number };
    return {
      readings: r.readings,
      unassignedReadings: r.unassigned,
      oldestReadingMs: r.oldest,
      pendingMilestones: r.pending,
      sentMilestones: r.sent,
      deadLetters: r.dead,
      retryReadings: r.retry,
    };
  }

}
