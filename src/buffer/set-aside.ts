/**
 * Readings of this run whose receiver's time turned out garbled once GNSS time was known
 * (src/admission/garbled-fixes.ts): they go as a reading refused at admission goes, counted
 * (COUNTER_DROPPED_GARBLED, shown by `status` and /metrics with the other drops) and named in
 * the log by the caller. Kept, a reading dated a year ahead was the truck's newest fix (status,
 * the driver's page, a milestone's position) and went out in its traces until that date passed.
 */
import type { DB } from './db.js';
import { ReadingState } from './types.js';

/** Counter of readings set aside for a garbled receiver date (see garbled-fixes.ts). */
export const COUNTER_DROPPED_GARBLED = 'readings_dropped_garbled_date';

export interface SetAsideQuery {
  /** Only readings above this id: this run's (the newest id when it started). */
  afterId: number;
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
 * primary key (this run's rows). Readings a dead letter holds stay with it.
 */
export function setAsideReadings(db: DB, q: SetAsideQuery): SetAsideRow[] {
  if (q.sources.length === 0) return [];
  return db
    .transaction(() => {
      const rows = db
        .prepare(
          `SELECT id, resource_id AS resourceId, time_ms AS timeMs, source, lat IS NOT NULL AND lon IS NOT NULL AS fix FROM readings
            WHERE id > ? AND (time_ms < ? OR time_ms > ?) AND state <> ${ReadingState.HELD} AND source IN (SELECT value FROM json_each(?)) ORDER BY id`,
        )
        .all(q.afterId, q.fromMs, q.untilMs, JSON.stringify(q.sources)) as Array<SetAsideRow & { fix: number }>;
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
