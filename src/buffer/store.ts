/**
 * Everything the agent keeps, behind one class: readings, loads, milestones, daemon state.
 * The daemon and short-lived CLI commands open the same file; WAL lets them work side by side.
 *
 * Rule: nothing is deleted that the service did not acknowledge. Readings leave only via
 * `ackReadings` (after a 2xx), milestones are marked sent only via `markMilestoneSent`.
 *
 * Acknowledging moves a cursor (`loads.acked_id`); every query for waiting readings skips
 * what is at or below it, and `purgeAcked` deletes those rows later, many chunks at a time.
 * The cursor is one small write per chunk; deleting each chunk's rows at once rewrote about
 * a page per reading when many loads' readings share the pages.
 */
import { randomUUID } from 'node:crypto';
import type { Statement } from 'better-sqlite3';
import { DataError } from '../errors.js';
import type { Stop } from '../milestones/stops.js';
import type { Reading } from '../sources/types.js';
import { openDatabase, walSalts, type DB, type OpenOptions } from './db.js';
import { DiskRoom, diskPlan, isDiskFull } from './disk.js';

export interface LoadRow {
  loadNumber: string;
  resourceId: string;
  resourceType: string;
  stops: Stop[];
  startedMs: number;
  endedMs: number | null;
  nextStop: number | null;
  lastSampleMs: number | null;
  /** Readings of this load with an id up to this one are delivered (or sampled away). */
  ackedId: number;
  /** The correlation id the service gave the last trace request of this load. */
  correlationId: string | null;
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

export type MilestoneOrigin = 'detected' | 'manual';

export interface MilestoneRow {
  id: number;
  loadNumber: string;
  ref: string;
  body: Record<string, unknown>;
  createdMs: number;
  attempts: number;
  lastError: string | null;
  sentMs: number | null;
  parkedMs: number | null;
  code: string;
  stop: number | null;
  /** Null for milestones recorded before the origin was kept. */
  origin: MilestoneOrigin | null;
  /** Recorded without a position: the daemon fills the place in from its newest fix when it sends. */
  needsPlace: boolean;
  lastStatus: number | null;
  correlationId: string | null;
}

/** A milestone about to be committed. */
export interface NewMilestone {
  loadNumber: string;
  ref: string;
  body: Record<string, unknown>;
  origin: MilestoneOrigin;
  needsPlace?: boolean;
  /**
   * One per load, code and stop: an earlier one makes a detected milestone be skipped and a
   * manual one be refused (DuplicateEventError), checked inside the commit's transaction.
   */
  unique?: boolean;
}

/** A manual milestone for an event the load already has. */
export class DuplicateEventError extends Error {
  readonly code = 'EDUPLICATE';
  constructor(
    readonly existing: MilestoneRow,
    readonly attempted: NewMilestone,
  ) {
    super(`load ${existing.loadNumber} already has ${existing.code}${existing.stop === null ? '' : ` for stop ${existing.stop}`} (milestone ${existing.id})`);
  }
}

/** The newest known position of a resource, kept when its readings are purged. */
export interface LastFix {
  resourceId: string;
  timeMs: number;
  lat: number;
  lon: number;
  speed: number | null;
  heading: number | null;
}

/** What the service said when it took a record. */
export interface Receipt {
  status: number;
  correlationId?: string;
  /** 409: the service already had it. */
  duplicate?: boolean;
}

/** Geofence and delay state of one stop of a load (see milestones/detector.ts). */
export interface StopState {
  state: 'outside' | 'entering' | 'inside' | 'departed';
  firstInsideMs: number | null;
  lastInsideMs: number | null;
  insideFixes: number;
  outsideFixes: number;
  arrivedMs: number | null;
  departedMs: number | null;
  delayReportedS: number | null;
}

export interface DeadLetter {
  id: number;
  kind: 'milestone' | 'trace';
  loadNumber: string;
  /** Milestone id or reading id. */
  recordId: number;
  status: number | null;
  response: string | null;
  /** The answer's headers, when there was an answer. */
  headers: Record<string, string> | null;
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
  headers: string | null;
  body: string;
  created_ms: number;
}

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

interface RawMilestone {
  id: number;
  load_number: string;
  ref: string;
  body: string;
  created_ms: number;
  attempts: number;
  last_error: string | null;
  sent_ms: number | null;
  parked_ms: number | null;
  code: string | null;
  stop_seq: number | null;
  origin: MilestoneOrigin | null;
  needs_place: number;
  last_status: number | null;
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

interface RawStopState {
  stop_sequence: number;
  state: StopState['state'];
  first_inside_ms: number | null;
  last_inside_ms: number | null;
  inside_fixes: number;
  outside_fixes: number;
  arrived_ms: number | null;
  departed_ms: number | null;
  delay_reported_s: number | null;
}

interface RawFix {
  resource_id: string;
  time_ms: number;
  lat: number;
  lon: number;
  speed: number | null;
  heading: number | null;
}

const toFix = (r: RawFix): LastFix => ({ resourceId: r.resource_id, timeMs: r.time_ms, lat: r.lat, lon: r.lon, speed: r.speed, heading: r.heading });

const toMilestone = (r: RawMilestone): MilestoneRow => ({
  id: r.id,
  loadNumber: r.load_number,
  ref: r.ref,
  body: JSON.parse(r.body) as Record<string, unknown>,
  createdMs: r.created_ms,
  attempts: r.attempts,
  lastError: r.last_error,
  sentMs: r.sent_ms,
  parkedMs: r.parked_ms,
  code: r.code ?? String((JSON.parse(r.body) as { eventCode?: unknown }).eventCode),
  stop: r.stop_seq,
  origin: r.origin,
  needsPlace: r.needs_place === 1,
  lastStatus: r.last_status,
  correlationId: r.correlation_id,
});

/** What a dead letter keeps of an answer: all of it up to this size. */
export const MAX_ANSWER_CHARS = 65_536;

/** `buffer.reserve_kb` when none is given. */
export const DEFAULT_RESERVE_KB = 2048;

/** Room a committed reading takes, row and index, for the free-space check (measured about 90 B; rounded up). */
const READING_BYTES = 128;

/** Rows fetched at a time when streaming a load's readings: bounded memory, few native calls. */
const PAGE_ROWS = 256;

/** id, time_ms, lat, lon, speed, heading, odometer, temp_c */
type RawReading = [number, number, number | null, number | null, number | null, number | null, number | null, number | null];

/** A row of `readings` not yet acknowledged (unassigned rows never are). */
const NOT_ACKED = 'id > coalesce((SELECT l.acked_id FROM loads l WHERE l.load_number = readings.load_number), 0)';

/** Waiting readings of a load: not parked, not retried, and above its acknowledgement cursor. */
const WAITING = 'r.state = 0 AND r.id > l.acked_id';

/** The id of a load's oldest waiting reading (NULL when none waits), for a query over `loads l`. */
const FIRST_WAITING = `(SELECT min(r.id) FROM readings r WHERE r.load_number = l.load_number AND ${WAITING})`;

/** The columns of a StoredReading, from `readings r`. */
const READING_COLS = 'r.id, r.resource_id, r.load_number, r.time_ms, r.lat, r.lon, r.speed, r.heading, r.odometer, r.temp_c';

export interface StoreOptions extends OpenOptions {
  /** `buffer.reserve_kb`: room kept for delivery on a full disk (see disk.ts). */
  reserveKb?: number;
}

export class Store {
  readonly db: DB;
  /** Room on the disk for delivery writes; undefined for an in-memory buffer. */
  readonly disk: DiskRoom | undefined;
  private readonly insertRow: Statement;
  private readonly upsertFix: Statement;
  private readonly activeLoadNumber: Statement;
  private readonly resourceOfLoad: Statement;
  private readonly readingsOfLoad: Statement;
  private readonly ackStmt: Statement;
  private readonly purgeRange: Statement;
  /** No acknowledged row is left at or below this id (0 after opening: a crash may have left some anywhere). */
  private purgeFloor = 0;
  /** The purge pass in progress: where it has got to, where it ends, and the floor it leaves behind. */
  private purgePass: { at: number; top: number; floor: number } | null = null;

  constructor(db: DB, disk?: DiskRoom) {
    this.db = db;
    this.disk = disk;
    // One row per resource, moved only forward in time: a late reading never replaces a newer fix.
    this.upsertFix = db.prepare(
      `INSERT INTO last_fix (resource_id, time_ms, lat, lon, speed, heading) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (resource_id) DO UPDATE SET time_ms = excluded.time_ms, lat = excluded.lat, lon = excluded.lon,
           speed = excluded.speed, heading = excluded.heading WHERE excluded.time_ms >= last_fix.time_ms`,
    );
    this.insertRow = db.prepare(
      'INSERT INTO readings (resource_id, load_number, time_ms, lat, lon, speed, heading, odometer, temp_c, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
    );
    this.activeLoadNumber = db.prepare('SELECT load_number FROM loads WHERE resource_id = ? AND ended_ms IS NULL').pluck();
    this.resourceOfLoad = db.prepare('SELECT resource_id FROM loads WHERE load_number = ?').pluck();
    // Arrays, not objects: better-sqlite3 builds a row object in C++ at about twice the cost.
    // The resource and load are the same on every row of a load: not read (two strings a row).
    this.readingsOfLoad = db
      .prepare(
        `SELECT r.id, r.time_ms, r.lat, r.lon, r.speed, r.heading, r.odometer, r.temp_c
           FROM loads l JOIN readings r ON r.load_number = l.load_number
          WHERE l.load_number = ? AND r.id > ? AND ${WAITING} ORDER BY r.id LIMIT ${PAGE_ROWS}`,
      )
      .raw();
    this.ackStmt = db.prepare(
      'UPDATE loads SET acked_id = max(acked_id, ?), last_sample_ms = CASE WHEN ? IS NULL THEN last_sample_ms ELSE max(coalesce(last_sample_ms, 0), ?) END WHERE load_number = ?',
    );
    // In id order (neighbouring rows, neighbouring pages), each row against its own load's cursor.
    this.purgeRange = db.prepare(
      `DELETE FROM readings WHERE id > ? AND id <= ? AND state = 0
          AND id <= (SELECT l.acked_id FROM loads l WHERE l.load_number = readings.load_number)`,
    );
  }

  static open(path: string, opts: StoreOptions = {}): Store {
    if (path === ':memory:' || opts.readonly) return new Store(openDatabase(path, opts));
    const plan = diskPlan(path, opts.reserveKb ?? DEFAULT_RESERVE_KB);
    return new Store(openDatabase(path, { walLimitBytes: plan.walLimitBytes, ...opts }), new DiskRoom(path, plan));
  }

  /**
   * Run a write that delivery cannot do without (acknowledging, marking sent, parking,
   * purging, the daemon's state). On a full disk the reserve is given up for it once: the
   * WAL is folded back into the file and the write tried again.
   */
  withReserve<T>(write: () => T): T {
    try {
      return write();
    } catch (err) {
      if (!isDiskFull(err) || !this.disk?.releaseReserve()) throw err;
      this.onReserveReleased?.();
      try {
        this.db.pragma('wal_checkpoint(PASSIVE)');
      } catch {
        // The write below says whether there is room now.
      }
      return write();
    }
  }

  /** Told when a write gave up the reserve (the daemon logs it and writes it again later). */
  onReserveReleased: (() => void) | undefined;

  /**
   * Whether a batch of `n` readings may be committed without taking the room that
   * acknowledging and purging need (see disk.ts).
   */
  roomForReadings(n: number): boolean {
    if (!this.disk) return true;
    const pageSize = this.db.pragma('page_size', { simple: true }) as number;
    const free = (this.db.pragma('freelist_count', { simple: true }) as number) * pageSize;
    return this.disk.roomFor(n * READING_BYTES, free);
  }

  /**
   * Fold the WAL back into the file and cut it to nothing: after a purge, so the WAL gives
   * its room back instead of keeping its high-water mark. Skipped quietly while a reader
   * (the CLI) holds a snapshot.
   */
  truncateWal(): void {
    try {
      this.db.pragma('wal_checkpoint(TRUNCATE)');
    } catch {
      // Busy or full: the next purge tries again.
    }
  }

  /**
   * A transaction committed with synchronous = FULL, whatever the buffer's level: with NORMAL
   * a power cut can roll back the last commits, and a milestone is an event someone will ask
   * about. Readings keep the cheaper level (there are many of them and they are sampled).
   */
  durably<T>(fn: () => T): T {
    const previous = this.db.pragma('synchronous', { simple: true }) as number;
    this.db.pragma('synchronous = FULL');
    try {
      return this.db.transaction(fn).immediate();
    } finally {
      this.db.pragma(`synchronous = ${previous}`);
    }
  }

  /** The WAL generation (its salts) known to hold the header page with the buffer's identity. */
  private identityInWal: string | undefined;

  /**
   * Write the header page, which holds the buffer's identity, into the WAL's current
   * generation if it is not there yet. SQLite puts a page into the WAL only when the page
   * changes, and the header page changes only when the file grows or its free list moves:
   * the WAL of an idle daemon, or of a few small writes, did not hold it, so the check at
   * open (db.ts, checkWalIdentity) saw this file's identity through another database's WAL
   * and let that WAL replace the loads. The daemon calls this every second: an 8-byte read,
   * and one page written per WAL generation.
   */
  keepIdentityInWal(): void {
    if (this.db.memory || this.db.readonly || !this.db.open) return;
    const salts = walSalts(this.db.name);
    if (salts === undefined || salts === this.identityInWal) return;
    const identity = this.db.pragma('application_id', { simple: true }) as number;
    if (identity === 0) return;
    try {
      // Setting it to the value it has still writes the page.
      this.db.pragma(`application_id = ${identity}`);
    } catch {
      // Busy or no room: the next call tries again.
      return;
    }
    // This write may itself have started a new generation: remember the one it is in.
    this.identityInWal = walSalts(this.db.name);
  }

  close(): void {
    if (this.db.open) this.db.close();
  }

  // ---- readings -------------------------------------------------------------------------

  /**
   * Commit a batch of validated readings in one transaction. Returns how many were kept:
   * unless `keepWithoutLoad`, readings of resources with no active load are not stored.
   */
  insertReadings(
    batch: ReadonlyArray<Reading & { source?: string }>,
    keepWithoutLoad = false,
    /** The source of each reading (by index), when the readings do not carry it themselves. */
    sources?: ReadonlyArray<string | undefined>,
  ): number {
    let kept = 0;
    // IMMEDIATE: the write lock is taken before the load is read, so a load the CLI starts or
    // ends concurrently is seen either wholly before or wholly after this batch.
    this.db
      .transaction(() => {
        // The active load is looked up in the batch's own transaction, once per resource, so a
        // load started by the CLI a moment ago applies to the very next batch.
        const loads = new Map<string, string | null>();
        const fixes = new Map<string, Reading>();
        for (let i = 0; i < batch.length; i++) {
          const r = batch[i];
          let load = loads.get(r.resourceId);
          if (load === undefined) {
            load = (this.activeLoadNumber.get(r.resourceId) as string | undefined) ?? null;
            loads.set(r.resourceId, load);
          }
          if (load === null && !keepWithoutLoad) continue;
          this.insertRow.run(
            r.resourceId,
            load,
            Math.round(r.timeMs),
            r.lat ?? null,
            r.lon ?? null,
            r.speed ?? null,
            r.heading ?? null,
            r.odometer ?? null,
            r.temperatureC ?? null,
            sources?.[i] ?? r.source ?? null,
          );
          kept += 1;
          if (r.lat !== undefined && r.lon !== undefined) {
            const f = fixes.get(r.resourceId);
            if (!f || r.timeMs >= f.timeMs) fixes.set(r.resourceId, r);
          }
        }
        // The last fix of each resource in the batch: what a milestone recorded after the
        // readings are delivered and purged still knows.
        for (const f of fixes.values()) this.upsertFix.run(f.resourceId, Math.round(f.timeMs), f.lat, f.lon, f.speed ?? null, f.heading ?? null);
      })
      .immediate();
    return kept;
  }

  /**
   * Waiting readings of a load after `afterId`, oldest first, streamed a page at a time (never
   * the whole backlog in memory). No statement stays open between pages, so the caller may
   * write to the buffer while it holds the iterator.
   */
  *iterateReadings(loadNumber: string, afterId = 0): IterableIterator<StoredReading> {
    const resourceId = this.resourceOfLoad.get(loadNumber) as string | undefined;
    if (resourceId === undefined) return;
    let after = afterId;
    for (;;) {
      const rows = this.readingsOfLoad.all(loadNumber, after) as RawReading[];
      for (const r of rows) {
        yield { id: r[0], resource_id: resourceId, load_number: loadNumber, time_ms: r[1], lat: r[2], lon: r[3], speed: r[4], heading: r[5], odometer: r[6], temp_c: r[7] };
      }
      if (rows.length < PAGE_ROWS) return;
      after = rows[rows.length - 1][0];
    }
  }

  /**
   * The service took the readings of this load up to `upToId`: move the load's cursor past
   * them and remember the sampling point, in one small write. The rows go at the next purge.
   */
  ackReadings(loadNumber: string, upToId: number, lastSampleMs: number | null, correlationId?: string): void {
    this.withReserve(() => {
      this.ackStmt.run(upToId, lastSampleMs, lastSampleMs, loadNumber);
      if (correlationId !== undefined) this.db.prepare('UPDATE loads SET correlation_id = ? WHERE load_number = ?').run(correlationId, loadNumber);
    });
  }

  /**
   * Delete acknowledged rows (at or below their load's cursor; parked, retried and unassigned
   * rows stay), walking the ids in order so each page is rewritten about once for all the
   * rows it held. `budget` bounds how many ids one call covers (in transactions of at most
   * purgeSliceIds() ids), so the daemon can purge a million rows in slices between other work;
   * without it, the pass runs to the end (the limits call it that way, so delivered rows
   * make room before any reading is dropped). `done` is true when the pass has reached the
   * highest acknowledged id.
   */
  purgeAcked(budget = Number.POSITIVE_INFINITY): { deleted: number; done: boolean } {
    if (!this.purgePass) {
      const top = this.db.prepare('SELECT coalesce(max(acked_id), 0) FROM loads').pluck().get() as number;
      if (top <= this.purgeFloor) return { deleted: 0, done: true };
      // Rows below the oldest waiting one cannot be acknowledged later: after this pass, none
      // of them is left, and the next pass starts there.
      const waiting = this.db
        .prepare(`SELECT min(${FIRST_WAITING}) FROM loads l`)
        .pluck()
        .get() as number | null;
      // From the oldest row, not from id 0: after a restart the floor is 0, and walking a
      // month of ids that are long gone costs a transaction per slice.
      const oldest = (this.db.prepare('SELECT coalesce(min(id), 1) FROM readings').pluck().get() as number) - 1;
      this.purgePass = { at: Math.max(this.purgeFloor, oldest), top, floor: Math.min(top, waiting === null ? top : waiting - 1) };
    }
    const pass = this.purgePass;
    const end = Math.min(pass.top, pass.at + budget);
    let deleted = 0;
    const slice = this.purgeSliceIds();
    while (pass.at < end) {
      const to = Math.min(end, pass.at + slice);
      const at = pass.at;
      deleted += this.withReserve(() => this.db.transaction(() => this.purgeRange.run(at, to).changes)());
      pass.at = to;
    }
    if (pass.at < pass.top) return { deleted, done: false };
    this.purgeFloor = Math.max(this.purgeFloor, pass.floor);
    this.purgePass = null;
    return { deleted, done: true };
  }

  /**
   * Ids one purge transaction may cover: any number while the file system has room for the
   * WAL that takes, else a quarter of the WAL limit's worth, which the room kept free for the
   * WAL always holds. A WAL keeps every page a transaction touches until it commits: on a
   * 4 MB tmpfs full of readings, a purge of 20,000 ids in one transaction grew the WAL to
   * 1.1 MB against a 256 KB limit, took the whole reserve and failed with SQLITE_FULL, so
   * the rows never went and the room never came back. Not small slices always: with 200
   * loads' readings interleaved, each slice rewrites the same index pages again, and a 1M
   * drain wrote 1.2 GB instead of 0.3 GB.
   */
  private purgeSliceIds(): number {
    if (!this.disk) return Number.POSITIVE_INFINITY;
    const walSlice = Math.max(256, Math.floor(this.disk.plan.walLimitBytes / 4 / READING_BYTES));
    const spare = this.disk.freeBytes() - this.disk.plan.walLimitBytes;
    return Math.max(walSlice, Math.floor(spare / (2 * READING_BYTES)));
  }

  /** The newest fix of a resource ever committed (never purged with the readings). */
  lastFix(resourceId: string): LastFix | undefined {
    const r = this.db.prepare('SELECT * FROM last_fix WHERE resource_id = ?').get(resourceId) as RawFix | undefined;
    return r && toFix(r);
  }

  /** The last fix of every resource, the newest first (for `status`). */
  lastFixes(): LastFix[] {
    return (this.db.prepare('SELECT * FROM last_fix ORDER BY time_ms DESC').all() as RawFix[]).map(toFix);
  }

  /** The time of the newest reading committed and still in the buffer (by id: one index step). */
  newestReadingTime(): number | undefined {
    return (this.db.prepare('SELECT time_ms FROM readings ORDER BY id DESC LIMIT 1').pluck().get() as number | undefined) ?? undefined;
  }

  /** The id of the newest reading committed (0 when none ever was). */
  lastReadingId(): number {
    return this.db.prepare('SELECT coalesce(max(id), 0) FROM readings').pluck().get() as number;
  }

  /** Loads that have readings waiting, active or already ended, the one waiting longest first. */
  loadsWithReadings(): string[] {
    return this.db
      .prepare(
        `SELECT load_number FROM (SELECT l.load_number, ${FIRST_WAITING} AS first FROM loads l) WHERE first IS NOT NULL ORDER BY first`,
      )
      .pluck()
      .all() as string[];
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

  /**
   * Commit milestones (and the stop states that go with a detection) in one durable
   * transaction: a detection commits its milestone and the state that says it happened
   * together, or neither, so a failed write can never produce the same arrival twice.
   * `guard` runs inside the transaction before anything is written (the one-per-event check).
   */
  commitMilestones(
    items: ReadonlyArray<NewMilestone>,
    nowMs: number,
    extra?: { stopStates?: ReadonlyArray<{ loadNumber: string; stop: number; state: StopState }>; nextStop?: { loadNumber: string; next: number | null } },
  ): { rows: MilestoneRow[]; skipped: Array<{ item: NewMilestone; existing: MilestoneRow }> } {
    const insert = this.db.prepare(
      'INSERT INTO milestones (load_number, ref, body, created_ms, code, stop_seq, origin, needs_place) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    );
    const run = () => {
      const rows: MilestoneRow[] = [];
      const skipped: Array<{ item: NewMilestone; existing: MilestoneRow }> = [];
      for (const m of items) {
        const code = String(m.body.eventCode);
        const stop = typeof m.body.stopsequenceNumber === 'number' ? m.body.stopsequenceNumber : null;
        if (m.unique) {
          const existing = this.findMilestone(m.loadNumber, code, stop);
          if (existing && m.origin === 'detected') {
            skipped.push({ item: m, existing });
            continue;
          }
          if (existing) throw new DuplicateEventError(existing, m);
        }
        const info = insert.run(m.loadNumber, m.ref, JSON.stringify(m.body), nowMs, code, stop, m.origin, m.needsPlace ? 1 : 0);
        rows.push({
          id: Number(info.lastInsertRowid),
          loadNumber: m.loadNumber,
          ref: m.ref,
          body: m.body,
          createdMs: nowMs,
          attempts: 0,
          lastError: null,
          sentMs: null,
          parkedMs: null,
          code,
          stop,
          origin: m.origin,
          needsPlace: m.needsPlace ?? false,
          lastStatus: null,
          correlationId: null,
        });
      }
      for (const st of extra?.stopStates ?? []) this.saveStopState(st.loadNumber, st.stop, st.state);
      if (extra?.nextStop) this.setNextStop(extra.nextStop.loadNumber, extra.nextStop.next);
      return { rows, skipped };
    };
    // Only a milestone needs the fsync; states alone change with every fix at a stop.
    return items.length > 0 ? this.durably(run) : this.db.transaction(run).immediate();
  }

  /** Commit one milestone; it is durable when this returns. The ref is its idempotency reference. */
  insertMilestone(loadNumber: string, body: Record<string, unknown>, nowMs: number, ref: string = randomUUID(), origin: MilestoneOrigin = 'manual'): MilestoneRow {
    return this.commitMilestones([{ loadNumber, ref, body, origin }], nowMs).rows[0];
  }

  /** The first milestone of a load with this code at this stop (null: no stop), if any. */
  findMilestone(loadNumber: string, code: string, stop: number | null): MilestoneRow | undefined {
    const r = this.db
      .prepare('SELECT * FROM milestones WHERE load_number = ? AND code = ? AND stop_seq IS ? ORDER BY id LIMIT 1')
      .get(loadNumber, code, stop) as RawMilestone | undefined;
    return r && toMilestone(r);
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

  /** The body a milestone goes out with, once the daemon has filled in its place. */
  setMilestoneBody(id: number, body: Record<string, unknown>): void {
    this.withReserve(() => this.db.prepare('UPDATE milestones SET body = ?, needs_place = 0 WHERE id = ?').run(JSON.stringify(body), id));
  }

  markMilestoneSent(id: number, nowMs: number, receipt?: Receipt): void {
    this.withReserve(() =>
      this.db
        .prepare('UPDATE milestones SET sent_ms = ?, attempts = attempts + 1, last_error = ?, last_status = ?, correlation_id = ? WHERE id = ?')
        .run(nowMs, receipt?.duplicate ? `HTTP ${receipt.status}: the service already had it` : null, receipt?.status ?? null, receipt?.correlationId ?? null, id),
    );
  }

  markMilestoneFailed(id: number, error: string, status: number | null = null): void {
    this.withReserve(() =>
      this.db.prepare('UPDATE milestones SET attempts = attempts + 1, last_error = ?, last_status = ? WHERE id = ?').run(error.slice(0, 500), status, id),
    );
  }

  // ---- stop state -----------------------------------------------------------------------

  /** The saved state of each stop of a load (absent: never seen, i.e. outside). */
  stopStates(loadNumber: string): Map<number, StopState> {
    const rows = this.db.prepare('SELECT * FROM stop_state WHERE load_number = ?').all(loadNumber) as RawStopState[];
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

  saveStopState(loadNumber: string, seq: number, s: StopState): void {
    this.db
      .prepare(
        `INSERT INTO stop_state (load_number, stop_sequence, state, first_inside_ms, last_inside_ms, inside_fixes, outside_fixes, arrived_ms, departed_ms, delay_reported_s)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (load_number, stop_sequence) DO UPDATE SET state = excluded.state, first_inside_ms = excluded.first_inside_ms,
           last_inside_ms = excluded.last_inside_ms, inside_fixes = excluded.inside_fixes, outside_fixes = excluded.outside_fixes,
           arrived_ms = excluded.arrived_ms, departed_ms = excluded.departed_ms, delay_reported_s = excluded.delay_reported_s`,
      )
      .run(loadNumber, seq, s.state, s.firstInsideMs, s.lastInsideMs, s.insideFixes, s.outsideFixes, s.arrivedMs, s.departedMs, s.delayReportedS);
  }

  /** Save stop states alone (fixes that moved a state machine without an event). */
  saveStopStates(loadNumber: string, states: ReadonlyArray<[number, StopState]>): void {
    if (states.length === 0) return;
    this.db.transaction(() => {
      for (const [seq, st] of states) this.saveStopState(loadNumber, seq, st);
    })();
  }

  // ---- dead letters ---------------------------------------------------------------------

  /** The service refused this milestone: park it with the answer, so the queue moves on. */
  parkMilestone(m: MilestoneRow, status: number | null, response: string, nowMs: number, headers?: Record<string, string>): void {
    this.withReserve(() =>
      this.db.transaction(() => {
        this.db
          .prepare('UPDATE milestones SET parked_ms = ?, attempts = attempts + 1, last_error = ?, last_status = ? WHERE id = ?')
          .run(nowMs, response.slice(0, 500), status, m.id);
        this.db
          .prepare('INSERT INTO dead_letters (kind, load_number, record_id, status, response, headers, body, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
          .run('milestone', m.loadNumber, m.id, status, response.slice(0, MAX_ANSWER_CHARS), headers ? JSON.stringify(headers) : null, JSON.stringify(m.body), nowMs);
      })(),
    );
  }

  /** The service refused the trace point built from this reading: park the reading. */
  parkReading(readingId: number, loadNumber: string, status: number | null, response: string, body: unknown, nowMs: number, headers?: Record<string, string>): void {
    this.withReserve(() =>
      this.db.transaction(() => {
        this.db.prepare('UPDATE readings SET state = 1 WHERE id = ?').run(readingId);
        this.db
          .prepare('INSERT INTO dead_letters (kind, load_number, record_id, status, response, headers, body, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
          .run('trace', loadNumber, readingId, status, response.slice(0, MAX_ANSWER_CHARS), headers ? JSON.stringify(headers) : null, JSON.stringify(body), nowMs);
      })(),
    );
  }

  listDeadLetters(): DeadLetter[] {
    return (this.db.prepare('SELECT * FROM dead_letters ORDER BY id').all() as RawDeadLetter[]).map((r) => ({
      id: r.id,
      kind: r.kind,
      loadNumber: r.load_number,
      recordId: r.record_id,
      status: r.status,
      response: r.response,
      headers: r.headers === null ? null : (JSON.parse(r.headers) as Record<string, string>),
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
    if (ids.length === 0) return;
    const del = this.db.prepare('DELETE FROM readings WHERE id = ?');
    this.withReserve(() =>
      this.db.transaction(() => {
        for (const id of ids) del.run(id);
      })(),
    );
  }

  /** Newest position of a load and the time span of its backlog, for "newest first" after an outage. */
  backlogOf(loadNumber: string): { newest: StoredReading | undefined; oldestMs: number | null } {
    const newest = this.db
      .prepare(
        `SELECT ${READING_COLS} FROM loads l JOIN readings r ON r.load_number = l.load_number
          WHERE l.load_number = ? AND ${WAITING} AND r.lat IS NOT NULL ORDER BY r.id DESC LIMIT 1`,
      )
      .get(loadNumber) as StoredReading | undefined;
    // The oldest waiting row by id, not min(time_ms): readings are committed in time order,
    // and this is one index step where min() read every waiting row of the load.
    const oldest = this.db
      .prepare(`SELECT r.time_ms FROM loads l JOIN readings r ON r.load_number = l.load_number WHERE l.load_number = ? AND ${WAITING} ORDER BY r.id LIMIT 1`)
      .pluck()
      .get(loadNumber) as number | undefined;
    return { newest, oldestMs: oldest ?? null };
  }

  // ---- bounds ---------------------------------------------------------------------------

  /** Bytes the buffer's data occupies (pages in use, not the file's high-water mark). */
  usedBytes(): number {
    const pageSize = this.db.pragma('page_size', { simple: true }) as number;
    const pages = this.db.pragma('page_count', { simple: true }) as number;
    const free = this.db.pragma('freelist_count', { simple: true }) as number;
    return (pages - free) * pageSize;
  }

  /**
   * Drop the oldest waiting readings (never milestones, never dead letters, never rows already
   * delivered: those are the purge's, and must not be counted as lost). Returns how many.
   */
  dropOldestReadings(count: number): number {
    return this.db
      .prepare(`DELETE FROM readings WHERE id IN (SELECT id FROM readings WHERE state = 0 AND ${NOT_ACKED} ORDER BY id LIMIT ?)`)
      .run(count).changes;
  }

  /**
   * Drop waiting readings older than the cutoff, looking only below the oldest young one:
   * readings arrive in about time order (the sources' time guard refuses stale ones), so the
   * old ones are at the front, and this runs every minute without reading a week's backlog.
   */
  dropReadingsOlderThan(cutoffMs: number): number {
    return this.db
      .prepare(
        `DELETE FROM readings WHERE state = 0 AND time_ms < @cutoff AND ${NOT_ACKED}
            AND id < coalesce((SELECT id FROM readings WHERE state = 0 AND time_ms >= @cutoff ORDER BY id LIMIT 1), (SELECT max(id) FROM readings) + 1)`,
      )
      .run({ cutoff: cutoffMs }).changes;
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
    this.withReserve(() =>
      this.db
        .prepare(
          'INSERT INTO state (key, value, updated_ms) VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms',
        )
        .run(key, JSON.stringify(value), nowMs),
    );
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
           (SELECT count(*) FROM loads l JOIN readings r ON r.load_number = l.load_number WHERE ${WAITING}) AS readings,
           (SELECT count(*) FROM readings WHERE load_number IS NULL) AS unassigned,
           (SELECT min(r.time_ms) FROM loads l JOIN readings r ON r.load_number = l.load_number WHERE ${WAITING}) AS oldest,
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
