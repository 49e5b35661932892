/**
 * Readings: committed in batches, streamed a load at a time, acknowledged by cursor and
 * purged later, and the last fix of every resource.
 *
 * Rule: nothing is deleted that the service did not acknowledge. Readings leave only via
 * `ackReadings` (after a 2xx), or by a limit (counted).
 *
 * Acknowledging moves a cursor (`loads.acked_id`); every query for waiting readings skips
 * what is at or below it, and `purgeAcked` deletes those rows later, many chunks at a time.
 * The cursor is one small write per chunk; deleting each chunk's rows at once rewrote about
 * a page per reading when many loads' readings share the pages.
 */
import type { Statement } from 'better-sqlite3';
import type { Reading } from '../sources/types.js';
import type { DB } from './db.js';
import { NEXT_READING_ID } from './migrations.js';
import type { BufferContext } from './store.js';
import { ReadingState, type LastFix, type StoredReading } from './types.js';

/** Room a committed reading takes, row and index, for the free-space check (measured about 90 B; rounded up). */
export const READING_BYTES = 128;

/** Rows fetched at a time when streaming a load's readings: bounded memory, few native calls. */
const PAGE_ROWS = 256;

/** id, time_ms, lat, lon, speed, heading, odometer, temp_c */
type RawReading = [number, number, number | null, number | null, number | null, number | null, number | null, number | null];

/** A row of `readings` not yet acknowledged (unassigned rows never are). */
export const NOT_ACKED = 'id > coalesce((SELECT l.acked_id FROM loads l WHERE l.load_number = readings.load_number), 0)';

/** Waiting readings of a load: not parked, not retried, and above its acknowledgement cursor. */
export const WAITING = `r.state = ${ReadingState.WAITING} AND r.id > l.acked_id`;

/** The id of a load's oldest waiting reading (NULL when none waits), for a query over `loads l`. */
export const FIRST_WAITING = `(SELECT min(r.id) FROM readings r WHERE r.load_number = l.load_number AND ${WAITING})`;

/**
 * Rows whose dead letters were retried. The `state <> 0` lets SQLite use the partial index
 * readings_parked: with `state = 2` alone it walked the whole table in id order (170 ms for a
 * million readings, on every delivery cycle of a drain).
 */
export const IN_RETRY = `state = ${ReadingState.RETRY} AND state <> ${ReadingState.WAITING}`;

/** The columns of a StoredReading, from `readings r`. */
const READING_COLS = 'r.id, r.resource_id, r.load_number, r.time_ms, r.lat, r.lon, r.speed, r.heading, r.odometer, r.temp_c';

interface RawFix {
  resource_id: string;
  time_ms: number;
  lat: number;
  lon: number;
  speed: number | null;
  heading: number | null;
}

const toFix = (r: RawFix): LastFix => ({ resourceId: r.resource_id, timeMs: r.time_ms, lat: r.lat, lon: r.lon, speed: r.speed, heading: r.heading });

export class Readings {
  private readonly db: DB;
  private readonly insertRow: Statement;
  private readonly nextId: Statement;
  private readonly activeLoadNumber: Statement;
  private readonly resourceOfLoad: Statement;
  private readonly readingsOfLoad: Statement;
  private readonly ackStmt: Statement;
  private readonly purgeRange: Statement;
  /** No acknowledged row is left at or below this id (0 after opening: a crash may have left some anywhere). */
  private purgeFloor = 0;
  /** The purge pass in progress: where it has got to, where it ends, and the floor it leaves behind. */
  private purgePass: { at: number; top: number; floor: number } | null = null;

  constructor(private readonly ctx: BufferContext) {
    const db = ctx.db;
    this.db = db;
    this.nextId = db.prepare(NEXT_READING_ID).pluck();
    this.insertRow = db.prepare('INSERT INTO readings (id, resource_id, load_number, time_ms, lat, lon, speed, heading, odometer, temp_c, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)');
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
    this.ackStmt = db.prepare('UPDATE loads SET acked_id = max(acked_id, ?), last_sample_ms = CASE WHEN ? IS NULL THEN last_sample_ms ELSE max(coalesce(last_sample_ms, 0), ?) END WHERE load_number = ?');
    // In id order (neighbouring rows, neighbouring pages), each row against its own load's cursor.
    this.purgeRange = db.prepare(
      `DELETE FROM readings WHERE id > ? AND id <= ? AND state = ${ReadingState.WAITING}
          AND id <= (SELECT l.acked_id FROM loads l WHERE l.load_number = readings.load_number)`,
    );
  }

  /**
   * Commit a batch of validated readings in one transaction. Returns how many were kept:
   * unless `keepWithoutLoad`, readings of resources with no active load are not stored.
   */
  insertReadings(
    batch: ReadonlyArray<Reading & { source?: string }>,
    keepWithoutLoad = false,
    /** The source of each reading (by index), when the readings do not carry it themselves. */
    sources?: ReadonlyArray<string | undefined>,
    /**
     * Small writes that ride along in the same transaction (the daemon's state row, stop
     * states): one commit, one sync, where two cost twice the flash. One that throws has its
     * writes undone and the readings still commit.
     */
    alongside?: ReadonlyArray<() => void>,
  ): number {
    let kept = 0;
    // IMMEDIATE: the write lock is taken before the load is read, so a load the CLI starts or
    // ends concurrently is seen either wholly before or wholly after this batch.
    this.db
      .transaction(() => {
        // The active load is looked up in the batch's own transaction, once per resource, so a
        // load started by the CLI a moment ago applies to the very next batch.
        const loads = new Map<string, string | null>();
        let id = this.nextId.get() as number;
        for (let i = 0; i < batch.length; i++) {
          const r = batch[i];
          let load = loads.get(r.resourceId);
          if (load === undefined) {
            load = (this.activeLoadNumber.get(r.resourceId) as string | undefined) ?? null;
            loads.set(r.resourceId, load);
          }
          if (load === null && !keepWithoutLoad) continue;
          this.insertRow.run(
            id++,
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
        }
        for (const write of alongside ?? []) {
          try {
            // A savepoint: what it wrote goes if it throws.
            this.db.transaction(write)();
          } catch (err) {
            // An error that ended the whole transaction (a full disk, an I/O error) fails the
            // commit, readings and all (they stay queued); any other undid only its own writes.
            if (!this.db.inTransaction) throw err;
          }
        }
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
    this.ctx.withReserve(() => {
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
      const waiting = this.db.prepare(`SELECT min(${FIRST_WAITING}) FROM loads l`).pluck().get() as number | null;
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
      deleted += this.ctx.withReserve(() => this.db.transaction(() => this.purgeRange.run(at, to).changes)());
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
    if (!this.ctx.disk) return Number.POSITIVE_INFINITY;
    const walSlice = Math.max(256, Math.floor(this.ctx.disk.plan.walLimitBytes / 4 / READING_BYTES));
    const spare = this.ctx.disk.freeBytes() - this.ctx.disk.plan.walLimitBytes;
    return Math.max(walSlice, Math.floor(spare / (2 * READING_BYTES)));
  }

  /** The newest fix of a resource ever committed (never purged with the readings). */
  lastFix(resourceId: string): LastFix | undefined {
    const r = this.db.prepare('SELECT * FROM newest_fix WHERE resource_id = ?').get(resourceId) as RawFix | undefined;
    return r && toFix(r);
  }

  /** The last fix of every resource, the newest first (for `status`). */
  lastFixes(): LastFix[] {
    return (this.db.prepare('SELECT * FROM newest_fix ORDER BY time_ms DESC').all() as RawFix[]).map(toFix);
  }

  /**
   * Bring last_fix up to the newest reading (the daemon, once a minute): what `newest_fix`
   * reads from the readings table stays a minute of rows. A commit of readings no longer
   * writes last_fix (see migration 5 -> 6); with nothing new, this writes nothing.
   */
  flushFixes(): void {
    this.ctx.withReserve(() =>
      this.db
        .transaction(() => {
          const upto = (this.db.prepare("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'last_fix_upto'").pluck().get() as number | undefined) ?? 0;
          const newest = this.lastReadingId();
          if (newest <= upto) return;
          this.db
            .prepare(
              `INSERT INTO last_fix (resource_id, time_ms, lat, lon, speed, heading)
                 SELECT resource_id, max(time_ms), lat, lon, speed, heading FROM readings
                  WHERE id > ? AND id <= ? AND lat IS NOT NULL AND lon IS NOT NULL GROUP BY resource_id
                 ON CONFLICT (resource_id) DO UPDATE SET time_ms = excluded.time_ms, lat = excluded.lat, lon = excluded.lon,
                   speed = excluded.speed, heading = excluded.heading WHERE excluded.time_ms >= last_fix.time_ms`,
            )
            .run(upto, newest);
          this.db.prepare("INSERT INTO meta (key, value) VALUES ('last_fix_upto', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value").run(String(newest));
        })
        .immediate(),
    );
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
    return this.db.prepare(`SELECT load_number FROM (SELECT l.load_number, ${FIRST_WAITING} AS first FROM loads l) WHERE first IS NOT NULL ORDER BY first`).pluck().all() as string[];
  }

  /** Readings whose dead letters were retried, oldest first. */
  retryReadings(limit: number): StoredReading[] {
    return this.db.prepare(`SELECT id, resource_id, load_number, time_ms, lat, lon, speed, heading, odometer, temp_c FROM readings WHERE ${IN_RETRY} ORDER BY id LIMIT ?`).all(limit) as StoredReading[];
  }

  deleteReadings(ids: number[]): void {
    if (ids.length === 0) return;
    const del = this.db.prepare('DELETE FROM readings WHERE id = ?');
    this.ctx.withReserve(() =>
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
    const oldest = this.db.prepare(`SELECT r.time_ms FROM loads l JOIN readings r ON r.load_number = l.load_number WHERE l.load_number = ? AND ${WAITING} ORDER BY r.id LIMIT 1`).pluck().get(loadNumber) as
      | number
      | undefined;
    return { newest, oldestMs: oldest ?? null };
  }

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
    return this.db.prepare(`DELETE FROM readings WHERE id IN (SELECT id FROM readings WHERE state = ${ReadingState.WAITING} AND ${NOT_ACKED} ORDER BY id LIMIT ?)`).run(count).changes;
  }

  /**
   * Drop waiting readings older than the cutoff, looking only below the oldest young one:
   * readings arrive in about time order (the sources' time guard refuses stale ones), so the
   * old ones are at the front, and this runs every minute without reading a week's backlog.
   */
  dropReadingsOlderThan(cutoffMs: number): number {
    return this.db
      .prepare(
        `DELETE FROM readings WHERE state = ${ReadingState.WAITING} AND time_ms < @cutoff AND ${NOT_ACKED}
            AND id < coalesce((SELECT id FROM readings WHERE state = ${ReadingState.WAITING} AND time_ms >= @cutoff ORDER BY id LIMIT 1), (SELECT max(id) FROM readings) + 1)`,
      )
      .run({ cutoff: cutoffMs }).changes;
  }
}
