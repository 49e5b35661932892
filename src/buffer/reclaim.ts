/**
 * How rows leave the buffer and give their room back: the purge of what every load holding
 * it has acknowledged (in bulk, in id order, many chunks at a time), and the limits' drops of
 * what was never delivered (counted by their callers, bounds.ts). The purge is the only way
 * out for a delivered row; a drop never takes one (it would be counted as lost).
 */
import type { Statement } from 'better-sqlite3';
import type { DB } from './db.js';
import { AWAITED, FIRST_DUE, UNDONE } from './ledger.js';
import { READING_BYTES } from './readings.js';
import type { BufferContext } from './store.js';
import { MarkState, ReadingState } from './types.js';

/** The purge of a range of ids: rows no load has left to send (held and unassigned rows stay). */
export const PURGE_RANGE = `DELETE FROM readings AS r WHERE r.id > ? AND r.id <= ? AND r.state = ${ReadingState.WAITING} AND NOT ${AWAITED}`;

export class Reclaim {
  private readonly db: DB;
  private readonly purgeRange: Statement;
  /** No acknowledged row is left at or below this id (0 after opening: a crash may have left some anywhere). */
  private purgeFloor = 0;
  /** The loads as the last pass saw them (their count and newest start): a new one may have taken rows below the floor. */
  private loadsSeen = '';
  /** The purge pass in progress: where it has got to, where it ends, and the floor it leaves behind. */
  private purgePass: { at: number; top: number; floor: number } | null = null;

  constructor(private readonly ctx: BufferContext) {
    this.db = ctx.db;
    // In id order (neighbouring rows, neighbouring pages), each row against the cursors of the
    // loads whose windows hold it.
    this.purgeRange = this.db.prepare(PURGE_RANGE);
  }

  /** Rows kept without a load joined one from this id up (late readings, windows.ts): the purge must look there again. */
  rejoined(fromId: number): void {
    this.purgeFloor = Math.min(this.purgeFloor, fromId);
    if (this.purgePass) this.purgePass.floor = Math.min(this.purgePass.floor, fromId);
  }

  /**
   * Delete acknowledged rows (every load holding them past them; held and unassigned rows
   * stay), walking the ids in order so each page is rewritten about once for all the rows it
   * held. `budget` bounds how many ids one call covers (in transactions of at most
   * purgeSliceIds() ids), so the daemon can purge a million rows in slices between other work;
   * without it, the pass runs to the end (the limits call it that way, so delivered rows
   * make room before any reading is dropped). `done` is true when the pass has reached the
   * highest acknowledged id.
   */
  purgeAcked(budget = Number.POSITIVE_INFINITY): { deleted: number; done: boolean } {
    if (!this.purgePass) {
      // Up to the highest cursor, or the highest reading sent ahead of one (the newest
      // position after an outage, which no cursor may pass for a while).
      const top = this.db.prepare(`SELECT max(coalesce((SELECT max(acked_id) FROM loads), 0), coalesce((SELECT max(reading_id) FROM load_marks WHERE state = ${MarkState.SENT}), 0))`).pluck().get() as number;
      // Rows below the oldest one any load still has to send cannot be acknowledged later:
      // after this pass, none of them is left, and the next pass starts there.
      const waiting = this.db.prepare(`SELECT min(${FIRST_DUE}) FROM loads l WHERE ${UNDONE}`).pluck().get() as number | null;
      // Unless a row below the floor became due since (a load started `--from` took readings
      // kept unassigned, maybe in another process: the CLI): the purge looks there again, once
      // per new load. Not on every pass: a load whose first due row is far below (a salvaged
      // one) made every pass walk the whole table, and delivery stalled beside a salvage.
      const loads = this.db.prepare("SELECT count(*) || ':' || coalesce(max(started_ms), 0) FROM loads").pluck().get() as string;
      if (loads !== this.loadsSeen) {
        this.loadsSeen = loads;
        if (waiting !== null) this.purgeFloor = Math.min(this.purgeFloor, waiting - 1);
      }
      if (top <= this.purgeFloor) return { deleted: 0, done: true };
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
    // Marks of readings a cursor has passed, or that are gone, say nothing any more (those of
    // dead letters stay).
    this.ctx.withReserve(() =>
      this.db
        .prepare(
          `DELETE FROM load_marks WHERE state = ${MarkState.SENT}
              AND (reading_id <= (SELECT l.acked_id FROM loads l WHERE l.load_number = load_marks.load_number) OR NOT EXISTS (SELECT 1 FROM readings WHERE id = reading_id))`,
        )
        .run(),
    );
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

  /**
   * Drop the oldest readings not yet delivered (some load still waits for them, or none ever
   * will: unassigned); never milestones, never what a dead letter holds, never rows already
   * delivered: those are the purge's, and must not be counted as lost. Returns how many.
   */
  dropOldestReadings(count: number): number {
    return this.db
      .prepare(
        `DELETE FROM readings WHERE id IN (SELECT r.id FROM readings r
            WHERE r.state = ${ReadingState.UNASSIGNED} OR (r.state = ${ReadingState.WAITING} AND ${AWAITED}) ORDER BY r.id LIMIT ?)`,
      )
      .run(count).changes;
  }

  /**
   * Readings kept unassigned for `loads.keep_unassigned_s` that are older than the cutoff:
   * no load can take them any more (through the partial index readings_parked).
   */
  expireUnassigned(cutoffMs: number): number {
    return this.db.prepare(`DELETE FROM readings WHERE state = ${ReadingState.UNASSIGNED} AND time_ms < ?`).run(cutoffMs).changes;
  }

  /**
   * Drop readings not yet delivered that are older than the cutoff, looking only below the
   * oldest young one: readings arrive in about time order (the sources' time guard refuses
   * stale ones), so the old ones are at the front, and this runs every minute without reading
   * a week's backlog.
   */
  dropReadingsOlderThan(cutoffMs: number): number {
    return this.db
      .prepare(
        `DELETE FROM readings AS r WHERE r.time_ms < @cutoff AND (r.state = ${ReadingState.UNASSIGNED} OR (r.state = ${ReadingState.WAITING} AND ${AWAITED}))
            AND r.id < coalesce((SELECT id FROM readings WHERE state IN (${ReadingState.WAITING}, ${ReadingState.UNASSIGNED}) AND time_ms >= @cutoff ORDER BY id LIMIT 1), (SELECT max(id) FROM readings) + 1)`,
      )
      .run({ cutoff: cutoffMs }).changes;
  }
}
