/**
 * Whether a reading is here already: one a source's peer sent again (an MQTT broker resends
 * every QoS 1 message not acknowledged when the connection was lost, flagged DUP), which was
 * committed before the PUBACK was lost, or waits in memory for its commit. The same resource,
 * time, position, temperature and source; speed, heading and odometer are not compared (the
 * GNSS odometer sets the last itself). Looked for among the resource's newest rows only
 * (by the (resource_id, id) index): a message is sent again within seconds of its first time,
 * a window of them at most.
 */
import type { Statement } from 'better-sqlite3';
import type { Reading } from '../reading.js';
import type { DB } from './db.js';

/** Rows of the resource looked at, newest first. */
const RECENT_ROWS = 2000;

const STORED = `SELECT 1 FROM (SELECT time_ms, lat, lon, temp_c, source FROM readings WHERE resource_id = ? ORDER BY id DESC LIMIT ${RECENT_ROWS})
  WHERE time_ms = ? AND lat IS ? AND lon IS ? AND temp_c IS ? AND source IS ? LIMIT 1`;

const statements = new WeakMap<DB, Statement>();

const same = (a: Reading, b: Reading) => a.resourceId === b.resourceId && Math.round(a.timeMs) === Math.round(b.timeMs) && a.lat === b.lat && a.lon === b.lon && a.temperatureC === b.temperatureC;

/**
 * Where `r` of `source` is: waiting in `queue` (with `sources` side by side, as ingest keeps
 * them; readings numbered up to `next`, the next one's number), its number; in the buffer
 * (when there is one), 'stored'; else undefined.
 */
export function findReading(store: { db?: DB }, queue: ReadonlyArray<Reading>, sources: ReadonlyArray<string | undefined>, next: number, r: Reading, source: string): number | 'stored' | undefined {
  for (let i = queue.length - 1; i >= 0; i--) if (sources[i] === source && same(queue[i]!, r)) return next - queue.length + i;
  const db = store.db;
  if (!db) return undefined;
  let stmt = statements.get(db);
  if (!stmt) statements.set(db, (stmt = db.prepare(STORED)));
  return stmt.get(r.resourceId, Math.round(r.timeMs), r.lat ?? null, r.lon ?? null, r.temperatureC ?? null, source) !== undefined ? 'stored' : undefined;
}
