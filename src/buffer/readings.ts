/**
 * Readings: committed in batches, stored once for their resource, streamed a load at a time
 * (each load takes the readings in its window), acknowledged by cursor per load and purged
 * later, and the last fix of every resource.
 *
 * Rule: nothing is deleted that the service did not acknowledge. Readings leave only by the
 * purge, once every load whose window holds them has acknowledged them, or by a limit
 * (counted).
 *
 * Acknowledging moves a load's cursor (`loads.acked_id`); every query for what a load still
 * has to send skips what is at or below it, and `purgeAcked` (reclaim.ts) deletes rows
 * later, many chunks at a time. The cursor is one small write per chunk; deleting each chunk's rows at once
 * rewrote about a page per reading when many loads' readings share the pages.
 */
import type { Statement, Transaction } from 'better-sqlite3';
import type { Reading } from '../reading.js';
import type { DB } from './db.js';
import { type HistoryOptions, PositionHistory } from './history.js';
import { ACK_LOAD, AWAITED, BOUND_WINDOW, CLOSE_ENDED, DUE, FAR, FIRST_DUE, MARK_SENT, NEXT_READING_ID, SETTLE_LOADS, type StoredWindow, UNDONE, windowBounds } from './ledger.js';
import type { Reclaim } from './reclaim.js';
import type { FixedRequest, Requests } from './requests.js';
import { rideAlong, type Rider } from './riders.js';
import type { BufferContext } from './store.js';
import { LoadWindows } from './windows.js';
import { type Fix, MarkState, ReadingState, type LastFix, type StoredReading, type TraceRow } from './types.js';

/** Room a committed reading takes, row and index, for the free-space check (measured about 90 B; rounded up). */
export const READING_BYTES = 128;

/** Rows fetched at a time when streaming a load's readings: bounded memory, few native calls. */
const PAGE_ROWS = 256;

/** id, time_ms, lat, lon, speed, heading, odometer, temp_c, trace_id */
type RawReading = [number, number, number | null, number | null, number | null, number | null, number | null, number | null, string | null];

/**
 * The chunk query: a page of a load's readings (resource, ids after the cursor up to the
 * load's last, times in its window), one range of readings_by_resource with the times checked
 * on the rows it reads (test/loads.test.ts checks the plan). The resource is the same on
 * every row: not read (a string a row).
 */
export const CHUNK_QUERY = `SELECT id, time_ms, lat, lon, odometer, temp_c, trace_id FROM readings
  WHERE ${BOUND_WINDOW} ORDER BY id LIMIT ${PAGE_ROWS}`;

/** The chunk query's range with every column of a StoredReading but the resource and load (iterateReadings). */
const WINDOW_QUERY = CHUNK_QUERY.replace('lat, lon, odometer', 'lat, lon, speed, heading, odometer');

/** The columns of a StoredReading but the load, from `readings r`. */
const READING_COLS = 'r.id, r.resource_id, r.time_ms, r.lat, r.lon, r.speed, r.heading, r.odometer, r.temp_c, r.trace_id';

interface RawFix {
  resource_id: string;
  time_ms: number;
  lat: number;
  lon: number;
  speed: number | null;
  heading: number | null;
}

const toFix = (r: RawFix): LastFix => ({ resourceId: r.resource_id, timeMs: r.time_ms, lat: r.lat, lon: r.lon, speed: r.speed, heading: r.heading });

/** What goes with marking readings sent ahead (see markSent). */
export interface MarkAfter {
  settle?: 'newest';
  fixNext?: FixedRequest;
}

export class Readings {
  /** Where each resource was, kept after its readings go (written with them, history.ts). */
  readonly history: PositionHistory;
  /** The ids the last insertReadings gave (none kept: undefined): the daemon's own rows, not a salvage's beside it. */
  lastIds: { first: number; last: number } | undefined;
  private readonly db: DB;
  private readonly insertRow: Statement;
  private readonly nextId: Statement;
  private readonly windows: LoadWindows;
  private readonly closeEnded: Statement;
  private readonly settleLoads: Statement;
  private readonly windowOf: Statement;
  private readonly marksAbove: Statement;
  private readonly readingsInWindow: Statement;
  private readonly traceRowsInWindow: Statement;
  private readonly ack: Transaction<(loadNumber: string, upToId: number, lastSampleMs: number | null, correlationId: string | null, fix: Fix | null, fixNext: FixedRequest | undefined) => void>;
  private readonly newestDue: Statement;
  private readonly oldestDue: Statement;
  private readonly mark: Transaction<(loadNumber: string, ids: number[], after: MarkAfter) => void>;

  constructor(
    private readonly ctx: BufferContext,
    private readonly requests: Requests,
    /** The purge, told when rows join a load below where it has got to. */
    private readonly reclaim: Reclaim,
  ) {
    const db = ctx.db;
    this.db = db;
    this.history = new PositionHistory(db);
    this.nextId = db.prepare(NEXT_READING_ID).pluck();
    this.insertRow = db.prepare('INSERT INTO readings (id, resource_id, time_ms, lat, lon, speed, heading, odometer, temp_c, source, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)');
    this.windows = new LoadWindows(db);
    this.closeEnded = db.prepare(CLOSE_ENDED);
    this.settleLoads = db.prepare(SETTLE_LOADS);
    this.windowOf = db.prepare('SELECT resource_id, acked_id, end_id, window_from_ms, window_until_ms FROM loads WHERE load_number = ?');
    this.marksAbove = db.prepare('SELECT reading_id FROM load_marks WHERE load_number = ? AND reading_id > ?').pluck();
    // Arrays, not objects: better-sqlite3 builds a row object in C++ at about twice the cost.
    this.readingsInWindow = db.prepare(WINDOW_QUERY).raw();
    this.traceRowsInWindow = db.prepare(CHUNK_QUERY).raw();
    const ackStmt = db.prepare(ACK_LOAD);
    const settleLoad = db.prepare(`${SETTLE_LOADS} AND l.load_number = ?`);
    // One transaction, so one commit (and with synchronous = FULL one fsync) for an
    // acknowledgement, which is in series with every request of a drain.
    // The request that goes next is fixed in the same transaction (requests.ts).
    this.ack = db.transaction((loadNumber: string, upToId: number, lastSampleMs: number | null, correlationId: string | null, fix: Fix | null, fixNext: FixedRequest | undefined) => {
      ackStmt.run(upToId, lastSampleMs, lastSampleMs, correlationId, fix?.timeMs ?? null, fix?.lat ?? null, fix?.lon ?? null, loadNumber);
      this.requests.settleIn(loadNumber, 'chunk');
      if (fixNext) this.requests.fixIn(fixNext);
      settleLoad.run(loadNumber);
    });
    this.newestDue = db.prepare(`SELECT ${READING_COLS}, l.load_number FROM loads l JOIN readings r WHERE l.load_number = ? AND ${DUE} AND r.lat IS NOT NULL ORDER BY r.id DESC LIMIT 1`);
    // The oldest row by id, not min(time_ms): readings are committed in time order, and this
    // is one index step where min() read every row the load has to send.
    this.oldestDue = db.prepare(`SELECT r.time_ms FROM loads l JOIN readings r WHERE l.load_number = ? AND ${DUE} ORDER BY r.id LIMIT 1`).pluck();
    // Prepared once: after an outage every load's newest position is marked, one request each.
    const markStmt = db.prepare(MARK_SENT);
    this.mark = db.transaction((loadNumber: string, ids: number[], after: MarkAfter) => {
      for (const id of ids) markStmt.run(loadNumber, id);
      if (after.settle) this.requests.settleIn(loadNumber, after.settle);
      else if (ids.length > 0) this.requests.unkeyIn(loadNumber, 'chunk');
      if (after.fixNext) this.requests.fixIn(after.fixNext);
    });
  }

  /**
   * Commit a batch of validated readings in one transaction. Returns how many were kept: a
   * reading is kept when an open load of its resource, or a closed one taking late readings,
   * has its time in its window, or else (as unassigned) when `keepWithoutLoad`.
   */
  insertReadings(
    batch: ReadonlyArray<Reading & { source?: string }>,
    /** A time (epoch ms): only the readings of no load stamped at or after it are kept (`loads.keep_unassigned_s`). */
    keepWithoutLoad: boolean | number = false,
    /** The source of each reading (by index), when the readings do not carry it themselves. */
    sources?: ReadonlyArray<string | undefined>,
    /** Small writes that ride along in the same transaction (riders.ts). */
    alongside?: ReadonlyArray<Rider>,
    /**
     * Every reading admitted before this time (epoch ms) is committed with this batch or
     * before it (the daemon's ingest, when the batch empties its queue): loads ended before
     * then are closed at the highest id, so their queries and the purge stop there.
     */
    committedBefore?: number,
    /** Closed loads ended at or after this time (epoch ms) still take late readings of their window (see windows.ts). */
    lateSince?: number,
    /** `[history]`: the kept fixes' positions go into the history in the same transaction; undefined: none. */
    history?: HistoryOptions,
  ): number {
    let kept = 0;
    let ids: Readings['lastIds'];
    // IMMEDIATE: the write lock is taken before the loads are read, so a load the CLI starts
    // or ends concurrently is seen either wholly before or wholly after this batch.
    this.db
      .transaction(() => {
        // Noted in this transaction: the history's hint holds it only once the commit is in.
        this.history.begin();
        // The windows are looked up in the batch's own transaction, so a load started by the
        // CLI a moment ago applies to the very next batch.
        const windows = this.windows.batch(lateSince);
        let id = this.nextId.get() as number;
        const first = id;
        for (let i = 0; i < batch.length; i++) {
          const r = batch[i];
          const timeMs = Math.round(r.timeMs);
          const state = windows.stateOf(r.resourceId, timeMs, id);
          if (state === ReadingState.UNASSIGNED && (keepWithoutLoad === false || (keepWithoutLoad !== true && timeMs < keepWithoutLoad))) continue;
          this.insertRow.run(id++, r.resourceId, timeMs, r.lat ?? null, r.lon ?? null, r.speed ?? null, r.heading ?? null, r.odometer ?? null, r.temperatureC ?? null, sources?.[i] ?? r.source ?? null, state);
          if (typeof r.lat === 'number' && typeof r.lon === 'number') this.history.note(r.resourceId, timeMs, r.lat, r.lon, history);
          kept += 1;
        }
        ids = kept > 0 ? { first, last: id - 1 } : undefined;
        const adopted = windows.close();
        // Rows that joined a load just now may lie below where the purge has got to.
        if (adopted !== undefined) this.reclaim.rejoined(adopted);
        // No row changes (and no page is written) unless a load ended since the last commit.
        if (committedBefore !== undefined && this.closeEnded.run(committedBefore).changes > 0) this.settleLoads.run();
        rideAlong(this.db, alongside);
      })
      .immediate();
    this.lastIds = ids;
    this.history.committed();
    return kept;
  }

  /**
   * Close the loads ended before `committedBefore` (see insertReadings): the daemon at start,
   * when nothing it admitted is waiting to be committed.
   */
  closeEndedLoads(committedBefore: number): void {
    this.ctx.withReserve(() =>
      this.db
        .transaction(() => {
          if (this.closeEnded.run(committedBefore).changes > 0) this.settleLoads.run();
        })
        .immediate(),
    );
  }

  /**
   * Readings a load still has to send after `afterId`, oldest first, streamed a page at a
   * time (never the whole backlog in memory): the readings of its resource in its window,
   * above its cursor, less those sent ahead or parked for it. No statement stays open between
   * pages, so the caller may write to the buffer while it holds the iterator.
   */
  *iterateReadings(loadNumber: string, afterId = 0): IterableIterator<StoredReading> {
    for (const { rows, resourceId } of this.pagesInWindow(this.readingsInWindow, loadNumber, afterId, FAR)) {
      for (const r of rows as RawReading[]) {
        yield { id: r[0], resource_id: resourceId, load_number: loadNumber, time_ms: r[1], lat: r[2], lon: r[3], speed: r[4], heading: r[5], odometer: r[6], temp_c: r[7], trace_id: r[8] };
      }
    }
  }

  /**
   * The same readings as iterateReadings, up to `maxId`, as the pages of rows SQLite returns:
   * what a drain builds its chunks from, a million rows with no object or generator step each.
   */
  *tracePages(loadNumber: string, afterId = 0, maxId = FAR): Generator<TraceRow[]> {
    for (const { rows } of this.pagesInWindow(this.traceRowsInWindow, loadNumber, afterId, maxId)) yield rows as TraceRow[];
  }

  /** Pages of a load's due rows from a window query whose rows begin with the id (CHUNK_QUERY's parameters). */
  private *pagesInWindow(query: Statement, loadNumber: string, afterId: number, maxId: number): Generator<{ rows: Array<readonly [number, ...unknown[]]>; resourceId: string }> {
    const w = this.windowOf.get(loadNumber) as StoredWindow | undefined;
    if (w === undefined) return;
    const [resourceId, from, upTo, fromMs, untilMs] = windowBounds(w, afterId, maxId);
    let after = from;
    // Few (the newest position sent ahead after an outage, a split request's delivered part):
    // skipped here, not by a lookup per row in the query.
    const marked = new Set(this.marksAbove.all(loadNumber, after) as number[]);
    for (;;) {
      const rows = query.all(resourceId, after, upTo, fromMs, untilMs) as Array<readonly [number, ...unknown[]]>;
      if (rows.length === 0) return;
      const last = rows[rows.length - 1][0];
      yield { rows: marked.size > 0 ? rows.filter((r) => !marked.has(r[0])) : rows, resourceId };
      if (rows.length < PAGE_ROWS) return;
      after = last;
    }
  }

  /**
   * The service took the readings of this load up to `upToId`: move the load's cursor past
   * them and remember the sampling point and the fix there, in one small write. The rows go
   * at the next purge (once every other load holding them has them too). A closed load with
   * nothing left is done: its cursor goes to its last id.
   */
  ackReadings(loadNumber: string, upToId: number, lastSampleMs: number | null, correlationId?: string, fix: Fix | null = null, fixNext?: FixedRequest): void {
    this.ctx.withReserve(() => this.ack.immediate(loadNumber, upToId, lastSampleMs, correlationId ?? null, fix, fixNext));
  }

  /**
   * These readings of the load were delivered on their own, ahead of its cursor (the newest
   * position after an outage, the part of a split request that got through before a
   * failure): the load does not send them again. Other loads holding them still do. With
   * `after.settle`, the load's request of that kind has its answer; without, the points were
   * part of its fixed chunk, whose rest now goes under a key of its own. `after.fixNext`
   * fixes the request that goes next, in the same transaction.
   */
  markSent(loadNumber: string, ids: number[], after: MarkAfter = {}): void {
    if (ids.length === 0 && !after.settle && !after.fixNext) return;
    this.ctx.withReserve(() => this.mark(loadNumber, ids, after));
  }

  /**
   * Readings a retry of this load's dead letters sent (or found nothing to send from): the
   * retry is over. A reading no other dead letter or retry holds is waiting again, and goes
   * at once if every load that holds it is past it (the purge may have passed it already).
   */
  retryDone(loadNumber: string, ids: number[]): void {
    if (ids.length === 0) return;
    const cursor = this.db.prepare('SELECT acked_id FROM loads WHERE load_number = ?').pluck();
    const unmark = this.db.prepare('DELETE FROM load_marks WHERE load_number = ? AND reading_id = ?');
    const sent = this.db.prepare(`UPDATE load_marks SET state = ${MarkState.SENT} WHERE load_number = ? AND reading_id = ?`);
    const release = this.db.prepare(
      `UPDATE readings SET state = ${ReadingState.WAITING} WHERE id = ? AND state = ${ReadingState.HELD}
          AND NOT EXISTS (SELECT 1 FROM load_marks WHERE reading_id = readings.id AND state <> ${MarkState.SENT})`,
    );
    const purge = this.db.prepare(`DELETE FROM readings AS r WHERE r.id = ? AND r.state = ${ReadingState.WAITING} AND NOT ${AWAITED}`);
    this.ctx.withReserve(() =>
      this.db.transaction(() => {
        const acked = (cursor.get(loadNumber) as number | undefined) ?? Number.POSITIVE_INFINITY;
        for (const id of ids) {
          // Above the cursor (parked when it went alone, ahead of the rest): it must not go again.
          if (id > acked) sent.run(loadNumber, id);
          else unmark.run(loadNumber, id);
          release.run(id);
          purge.run(id);
        }
      })(),
    );
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

  /** Loads that have readings to send, active or already ended, the one waiting longest first. */
  loadsWithReadings(): string[] {
    return this.db
      .prepare(`SELECT load_number FROM (SELECT l.load_number, l.started_ms, ${FIRST_DUE} AS first FROM loads l WHERE ${UNDONE}) WHERE first IS NOT NULL ORDER BY first, started_ms, load_number`)
      .pluck()
      .all() as string[];
  }

  /** Readings whose dead letters were retried, oldest first, each with the load it is retried for. */
  retryReadings(limit: number): StoredReading[] {
    return this.db
      .prepare(`SELECT ${READING_COLS}, m.load_number FROM load_marks m JOIN readings r ON r.id = m.reading_id WHERE m.state = ${MarkState.RETRY} ORDER BY r.id, m.load_number LIMIT ?`)
      .all(limit) as StoredReading[];
  }

  /** Delete these readings, whatever loads hold them (tests and tools; delivery never does). */
  deleteReadings(ids: number[]): void {
    if (ids.length === 0) return;
    const del = this.db.prepare('DELETE FROM readings WHERE id = ?');
    this.ctx.withReserve(() =>
      this.db.transaction(() => {
        for (const id of ids) del.run(id);
      })(),
    );
  }

  /** Newest position a load has to send and the time span of its backlog, for "newest first" after an outage. */
  backlogOf(loadNumber: string): { newest: StoredReading | undefined; oldestMs: number | null } {
    const newest = this.newestDue.get(loadNumber) as StoredReading | undefined;
    const oldest = this.oldestDue.get(loadNumber) as number | undefined;
    return { newest, oldestMs: oldest ?? null };
  }

  /** How many readings each load still has to send (`load list`, `status`), by load number. */
  backlogs(loadNumbers: string[]): Map<string, number> {
    const count = this.db.prepare(`SELECT count(*) FROM loads l JOIN readings r WHERE l.load_number = ? AND ${DUE}`).pluck();
    return new Map(loadNumbers.map((n) => [n, count.get(n) as number]));
  }

  /** Bytes the buffer's data occupies (pages in use, not the file's high-water mark). */
  usedBytes(): number {
    const pageSize = this.db.pragma('page_size', { simple: true }) as number;
    const pages = this.db.pragma('page_count', { simple: true }) as number;
    const free = this.db.pragma('freelist_count', { simple: true }) as number;
    return (pages - free) * pageSize;
  }
}
