/**
 * The position history: where each resource was, one row per `history.interval_s`, kept
 * `history.keep_days` after its readings are delivered and purged, so that a milestone typed
 * hours after the event is placed where the truck was then (position-at.ts, record.ts).
 *
 * A row is written in the transaction that commits its fix (Readings.insertReadings): a power
 * cut keeps both or neither. Integers only, keyed by resource and time, no rowid (migration
 * 11 -> 12): a few bytes a row, one row for 60 readings at 1 Hz. Pruned by the purge pass
 * after a push (delivery/purge.ts).
 */
import type { Statement } from 'better-sqlite3';
import type { DB } from './db.js';

/** `[history]` of the config, as the commit of readings takes it. */
export interface HistoryOptions {
  intervalS: number;
  /** 0: no history is written, and what there is goes at the next prune. */
  keepDays: number;
}

/** Degrees are stored times this, rounded: 1e-5 degree is about 1.1 m. */
export const E5 = 100_000;

/**
 * A row unless the resource has one in the fix's interval already (a late reading of an
 * interval written earlier, a reload that changed the interval).
 */
export const INSERT_POSITION = `INSERT OR IGNORE INTO positions (resource_id, t_s, lat_e5, lon_e5) SELECT @r, @t, @lat, @lon
  WHERE NOT EXISTS (SELECT 1 FROM positions WHERE resource_id = @r AND t_s >= @from AND t_s < @until)`;

export class PositionHistory {
  private insert: Statement | undefined;
  /**
   * The interval last written (or found written) per resource, by this process: at 1 Hz 59
   * readings of 60 fall in it and cost no statement. Only a hint: the insert looks itself.
   */
  private readonly noted = new Map<string, number>();
  /** Noted in the transaction under way: joins `noted` once it commits (a rolled-back one is tried again). */
  private pending = new Map<string, number>();
  private intervalS = 0;

  constructor(private readonly db: DB) {}

  /** Inside the commit's transaction: a row for a fix that opens an interval its resource has no row in. */
  note(resourceId: string, timeMs: number, lat: number, lon: number, opts: HistoryOptions | undefined): void {
    if (!opts || opts.keepDays <= 0 || opts.intervalS <= 0) return;
    if (opts.intervalS !== this.intervalS) {
      this.noted.clear();
      this.pending.clear();
      this.intervalS = opts.intervalS;
    }
    const tS = Math.floor(timeMs / 1000);
    const slot = Math.floor(tS / opts.intervalS);
    if ((this.pending.get(resourceId) ?? this.noted.get(resourceId)) === slot) return;
    this.insert ??= this.db.prepare(INSERT_POSITION);
    this.insert.run({ r: resourceId, t: tS, lat: Math.round(lat * E5), lon: Math.round(lon * E5), from: slot * opts.intervalS, until: (slot + 1) * opts.intervalS });
    this.pending.set(resourceId, slot);
  }

  /** A commit of readings begins: what an earlier one that failed noted is not in the buffer. */
  begin(): void {
    this.pending = new Map();
  }

  /** The commit is in. */
  committed(): void {
    for (const [r, slot] of this.pending) this.noted.set(r, slot);
    this.pending = new Map();
  }

  /**
   * Delete the rows older than `keepDays` before now, or before the newest row if that is
   * earlier: a clock set years ahead must not empty the history. `keepDays` 0 deletes every
   * row (history turned off). One range of the key per resource, found by seeking: no scan of
   * the table. Returns how many rows went.
   */
  prune(nowMs: number, keepDays: number): number {
    const db = this.db;
    if (keepDays <= 0) return db.prepare('DELETE FROM positions').run().changes;
    const next = db.prepare('SELECT resource_id FROM positions WHERE resource_id > ? ORDER BY resource_id LIMIT 1').pluck();
    const newestOf = db.prepare('SELECT t_s FROM positions WHERE resource_id = ? ORDER BY t_s DESC LIMIT 1').pluck();
    const resources: string[] = [];
    let newestS = Number.NEGATIVE_INFINITY;
    for (let r = next.get('') as string | undefined; r !== undefined; r = next.get(r) as string | undefined) {
      resources.push(r);
      newestS = Math.max(newestS, newestOf.get(r) as number);
    }
    if (resources.length === 0) return 0;
    const cutoffS = Math.min(Math.floor(nowMs / 1000), newestS) - Math.round(keepDays * 86_400);
    const del = db.prepare('DELETE FROM positions WHERE resource_id = ? AND t_s < ?');
    return db.transaction(() => resources.reduce((n, r) => n + del.run(r, cutoffS).changes, 0))();
  }
}
