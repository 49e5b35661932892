/**
 * Which loads a reading committed now joins: the open loads of its resource whose window
 * holds its time (active, or ended and not yet closed), and the closed ones still taking
 * late readings (`loads.late_readings_s`: ended at or after `lateSince`) whose window holds
 * it. A late reading is one the daemon got after the load was closed: an MQTT persistent
 * session replayed after a restart, a gateway uploading its backlog.
 *
 * A closed load takes ids up to its end_id only. One that takes a late reading has its
 * end_id raised to it: its cursor, where it stays, is then short of its last id, so the load
 * is undone again (loads_undone) and sends the reading in its next request; once that is
 * acknowledged it settles as before. Nothing at or below the cursor is sent again, and the
 * rows between the old end and the new one are the resource's readings committed since the
 * close: those of the window are late readings the load took already, or readings kept
 * without a load while the load took none (late readings off, an older version), which
 * join it now as it holds them by time.
 */
import type { Statement } from 'better-sqlite3';
import type { DB } from './db.js';
import { BOUND_WINDOW, FAR, holdsTime, OPEN, RAISE_END } from './ledger.js';
import { ReadingState } from './types.js';

/** A window by reading time: from, until (null: open). */
type Window = [number, number | null];

/** A closed load still taking late readings, and the highest id it took in this batch. */
interface LateLoad {
  loadNumber: string;
  resourceId: string;
  fromMs: number;
  untilMs: number;
  endId: number;
  took: number;
}

export class LoadWindows {
  readonly open: Statement;
  readonly late: Statement;
  readonly raise: Statement;
  readonly adopt: Statement;

  constructor(db: DB) {
    this.open = db.prepare(`SELECT l.window_from_ms, l.window_until_ms FROM loads l WHERE l.resource_id = ? AND ${OPEN}`).raw();
    // Once per batch, not per resource: the loads table is small, and a resource of the batch
    // seldom has a load ended in the last hours.
    this.late = db.prepare(`SELECT load_number, resource_id, window_from_ms, coalesce(window_until_ms, ${FAR}), end_id FROM loads WHERE end_id IS NOT NULL AND ended_ms >= ?`).raw();
    this.raise = db.prepare(RAISE_END);
    this.adopt = db.prepare(`UPDATE readings SET state = ${ReadingState.WAITING} WHERE ${BOUND_WINDOW} AND state = ${ReadingState.UNASSIGNED}`);
  }

  /** The windows of one batch, looked up in its own transaction (`lateSince` undefined: no late readings). */
  batch(lateSince: number | undefined): BatchWindows {
    return new BatchWindows(this, lateSince);
  }
}

export class BatchWindows {
  private readonly open = new Map<string, Window[]>();
  private late: Map<string, LateLoad[]> | undefined;

  constructor(
    private readonly q: LoadWindows,
    private readonly lateSince: number | undefined,
  ) {}

  /** The state reading `id` of the resource, stamped `timeMs`, is stored in: WAITING when some load takes it. */
  stateOf(resourceId: string, timeMs: number, id: number): number {
    let open = this.open.get(resourceId);
    if (open === undefined) {
      open = this.q.open.all(resourceId) as Window[];
      this.open.set(resourceId, open);
    }
    let state: number = ReadingState.UNASSIGNED;
    for (const [from, until] of open) {
      if (holdsTime(from, until, timeMs)) {
        state = ReadingState.WAITING;
        break;
      }
    }
    const late = this.lateLoads().get(resourceId);
    if (late === undefined) return state;
    for (const l of late) {
      if (holdsTime(l.fromMs, l.untilMs, timeMs)) {
        l.took = id;
        state = ReadingState.WAITING;
      }
    }
    return state;
  }

  /**
   * Once the batch's rows are in: each load that took late readings takes ids up to the
   * last of them. Returns the lowest id a row kept without a load may have joined a load at
   * (undefined: none did), below which the purge must look again.
   */
  close(): number | undefined {
    let lowest: number | undefined;
    for (const loads of this.late?.values() ?? []) {
      for (const l of loads) {
        if (l.took <= l.endId) continue;
        if (this.q.adopt.run(l.resourceId, l.endId, l.took, l.fromMs, l.untilMs).changes > 0) lowest = Math.min(lowest ?? l.endId, l.endId);
        this.q.raise.run(l.took, l.loadNumber, l.took);
      }
    }
    return lowest;
  }

  private lateLoads(): Map<string, LateLoad[]> {
    if (this.late) return this.late;
    this.late = new Map();
    if (this.lateSince === undefined) return this.late;
    for (const [loadNumber, resourceId, fromMs, untilMs, endId] of this.q.late.all(this.lateSince) as Array<[string, string, number, number, number]>) {
      const list = this.late.get(resourceId) ?? [];
      list.push({ loadNumber, resourceId, fromMs, untilMs, endId, took: 0 });
      this.late.set(resourceId, list);
    }
    return this.late;
  }
}
