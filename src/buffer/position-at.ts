/**
 * Where a resource was at a given time: its fix nearest to that time among the readings the
 * buffer still holds and the position history kept after they are purged (history.ts), if
 * one lies within the limit. For a milestone typed after the event (record.ts).
 *
 * The readings have no index by time, and one would cost every commit a second index to
 * write. They are committed in about time order (the time guard refuses stale ones), so the
 * time is found along readings_by_resource by bisecting the ids (some 40 index steps for any
 * backlog), and the fixes on either side of it are read from a bounded window of rows. A
 * reading committed far out of order can be missed; the history still has a position within
 * one interval of it.
 */
import type { DB } from './db.js';
import { E5 } from './history.js';

export interface PastPosition {
  timeMs: number;
  lat: number;
  lon: number;
  /** `readings`: a reading still in the buffer; `history`: the position history. */
  from: 'readings' | 'history';
}

/** Rows read on each side of the time found: a fix is looked for among them (temperature-only rows between fixes). */
const WINDOW_ROWS = 256;

/** The fix of `resourceId` nearest to `timeMs`, if one is within `withinMs` of it (a reading before a history row at the same distance). */
export function positionAt(store: { db: DB }, resourceId: string, timeMs: number, withinMs: number): PastPosition | undefined {
  const { db } = store;
  const found = [fromReadings(db, resourceId, timeMs), fromHistory(db, resourceId, timeMs)].flat();
  let best: PastPosition | undefined;
  for (const p of found) if (!best || Math.abs(p.timeMs - timeMs) < Math.abs(best.timeMs - timeMs)) best = p;
  return best && Math.abs(best.timeMs - timeMs) <= withinMs ? best : undefined;
}

function fromReadings(db: DB, resourceId: string, timeMs: number): PastPosition[] {
  const firstFrom = db.prepare('SELECT time_ms FROM readings WHERE resource_id = ? AND id >= ? ORDER BY id LIMIT 1').pluck();
  const edge = (dir: 'ASC' | 'DESC') => db.prepare(`SELECT id FROM readings WHERE resource_id = ? ORDER BY id ${dir} LIMIT 1`).pluck().get(resourceId) as number | undefined;
  const first = edge('ASC');
  const last = edge('DESC');
  if (first === undefined || last === undefined) return [];
  let lo = first;
  let hi = last;
  // The lowest id from which the resource's readings are at or after the time (its last one if none is).
  while (lo < hi) {
    const mid = lo + Math.floor((hi - lo) / 2);
    if ((firstFrom.get(resourceId, mid) as number) >= timeMs) hi = mid;
    else lo = mid + 1;
  }
  const around = (op: '>=' | '<', dir: 'ASC' | 'DESC') =>
    db
      .prepare(
        `SELECT time_ms AS timeMs, lat, lon FROM (SELECT time_ms, lat, lon FROM readings WHERE resource_id = ? AND id ${op} ? ORDER BY id ${dir} LIMIT ${WINDOW_ROWS})
          WHERE lat IS NOT NULL AND lon IS NOT NULL`,
      )
      .all(resourceId, lo) as Array<Omit<PastPosition, 'from'>>;
  return [...around('>=', 'ASC'), ...around('<', 'DESC')].map((p) => ({ ...p, from: 'readings' }));
}

function fromHistory(db: DB, resourceId: string, timeMs: number): PastPosition[] {
  const tS = timeMs / 1000;
  const row = (op: '<=' | '>', dir: 'ASC' | 'DESC') =>
    db.prepare(`SELECT t_s, lat_e5, lon_e5 FROM positions WHERE resource_id = ? AND t_s ${op} ? ORDER BY t_s ${dir} LIMIT 1`).get(resourceId, tS) as { t_s: number; lat_e5: number; lon_e5: number } | undefined;
  return [row('<=', 'DESC'), row('>', 'ASC')].flatMap((r) => (r ? [{ timeMs: r.t_s * 1000, lat: r.lat_e5 / E5, lon: r.lon_e5 / E5, from: 'history' as const }] : []));
}
