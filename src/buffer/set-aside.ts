/**
 * Readings of this run whose receiver's time turned out garbled once GNSS time was known
 * (src/admission/garbled-fixes.ts): they go as a reading refused at admission goes, counted
 * (COUNTER_DROPPED_GARBLED, shown by `status` and /metrics with the other drops) and named in
 * the log by the caller. Kept, a reading dated a year ahead was the truck's newest fix (status,
 * the driver's page, a milestone's position) and went out in its traces until that date passed.
 */
import type { DB } from './db.js';
import { decodeIds } from './requests.js';
import { ReadingState } from './types.js';

/** Counter of readings set aside for a garbled receiver date (see garbled-fixes.ts). */
export const COUNTER_DROPPED_GARBLED = 'readings_dropped_garbled_date';

export interface SetAsideQuery {
  /**
   * Only readings with ids in these ranges (first, last; ascending): those this run's ingest committed.
   * A salvage beside the daemon (`buffer salvage`) copies in an earlier run's readings, under
   * the same source's name, with ids among them.
   */
  ranges: ReadonlyArray<readonly [number, number]>;
  /** Only the rows of these sources (those stamped with the receiver's own time). */
  sources: string[];
  /** Rows timed before or after this window go. */
  fromMs: number;
  untilMs: number;
}

export interface SetAsideRow {
  id: number;
  resourceId: string;
  timeMs: number;
  source: string;
}

/**
 * Delete the readings the query finds, in one transaction with what they left elsewhere: a
 * load's marks, their position in the history, the resource's last fix where it is theirs
 * (taken again from the newest reading or position left), and the count. One range of the
 * primary key (this run's rows). Readings a dead letter holds stay with it, and so do those
 * a trace request fixed and not yet answered holds (requests.ts): it may be at the service,
 * and goes again with the same points under its key (one fewer made a new key, and a service
 * that had the first took the rest twice).
 */
export function setAsideReadings(db: DB, q: SetAsideQuery): SetAsideRow[] {
  if (q.sources.length === 0 || q.ranges.length === 0) return [];
  const ours = (id: number) => q.ranges.some(([first, last]) => id >= first && id <= last);
  return db
    .transaction(() => {
      const found = db
        .prepare(
          `SELECT id, resource_id AS resourceId, time_ms AS timeMs, source, lat IS NOT NULL AND lon IS NOT NULL AS fix FROM readings
            WHERE id >= ? AND id <= ? AND (time_ms < ? OR time_ms > ?) AND state <> ${ReadingState.HELD} AND source IN (SELECT value FROM json_each(?)) ORDER BY id`,
        )
        .all(q.ranges[0]![0], q.ranges.at(-1)![1], q.fromMs, q.untilMs, JSON.stringify(q.sources))
        .filter((r) => ours((r as SetAsideRow).id)) as Array<SetAsideRow & { fix: number }>;
      // One row per load and kind: few to read.
      const inRequest = new Set((db.prepare('SELECT point_ids FROM requests').pluck().all() as string[]).flatMap(decodeIds));
      const rows = found.filter((r) => !inRequest.has(r.id));
      if (rows.length === 0) return [];
      // The position first: the delete trigger (readings_keep_fix) would keep it as the last fix.
      const unfix = db.prepare('UPDATE readings SET lat = NULL, lon = NULL WHERE id = ?');
      const del = db.prepare('DELETE FROM readings WHERE id = ?');
      const unmark = db.prepare('DELETE FROM load_marks WHERE reading_id = ?');
      const unplace = db.prepare('DELETE FROM positions WHERE resource_id = ? AND t_s = ?');
      const unlast = db.prepare('DELETE FROM last_fix WHERE resource_id = ? AND time_ms = ?');
      let lastGone = false;
      for (const r of rows) {
        unfix.run(r.id);
        del.run(r.id);
        unmark.run(r.id);
        if (!r.fix) continue;
        unplace.run(r.resourceId, Math.floor(r.timeMs / 1000));
        lastGone = unlast.run(r.resourceId, r.timeMs).changes > 0 || lastGone;
      }
      // A last fix brought forward from them (Readings.flushFixes): the newest left below its
      // mark (newest_fix adds those above), else the history's.
      if (lastGone) {
        db.prepare(
          `INSERT OR IGNORE INTO last_fix (resource_id, time_ms, lat, lon, speed, heading)
             SELECT resource_id, max(time_ms), lat, lon, speed, heading FROM readings
              WHERE resource_id IN (SELECT value FROM json_each(?)) AND lat IS NOT NULL AND lon IS NOT NULL
                AND id <= (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'last_fix_upto') GROUP BY resource_id`,
        ).run(JSON.stringify([...new Set(rows.map((r) => r.resourceId))]));
        db.prepare(
          `INSERT OR IGNORE INTO last_fix (resource_id, time_ms, lat, lon)
             SELECT resource_id, max(t_s) * 1000, lat_e5 / 100000.0, lon_e5 / 100000.0 FROM positions
              WHERE resource_id IN (SELECT value FROM json_each(?)) GROUP BY resource_id`,
        ).run(JSON.stringify([...new Set(rows.map((r) => r.resourceId))]));
      }
      db.prepare('INSERT INTO counters (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value').run(COUNTER_DROPPED_GARBLED, rows.length);
      return rows.map(({ fix: _, ...r }) => r);
    })
    .immediate();
}
