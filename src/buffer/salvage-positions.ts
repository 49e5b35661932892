/**
 * The position history of a buffer set aside, for `buffer salvage`: where each resource was
 * (table `positions`, schema 12, src/buffer/history.ts), which places a milestone typed after
 * the event once its readings are gone. Without it a salvaged truck's last two weeks could
 * place no late milestone.
 *
 * Copied as the old file holds it; where it has no such table (older than schema 12, or read
 * page by page: a table without rowids is not among what the page reader rebuilds), one
 * position a minute is taken from its readings, as the migration to schema 12 did. An
 * interval this buffer has a row in already keeps it. Batches of 5,000 rows, each
 * its own IMMEDIATE transaction (the daemon commits beside); a run cut off and started again
 * copies them again, which changes nothing. The next purge drops what is older than
 * history.keep_days.
 */
import type Database from 'better-sqlite3';
import { isCorruption } from '../errors.js';
import { type HistoryOptions, INSERT_POSITION } from './history.js';
import { columns, type Unreadable } from './salvage-read.js';

const FROM_TABLE = 'SELECT resource_id, t_s, lat_e5, lon_e5 FROM positions';
const FROM_READINGS = `SELECT resource_id, min(time_ms) / 1000 AS t_s, CAST(round(lat * 100000) AS INTEGER) AS lat_e5, CAST(round(lon * 100000) AS INTEGER) AS lon_e5
  FROM readings WHERE lat IS NOT NULL AND lon IS NOT NULL GROUP BY resource_id, time_ms / 60000`;
const BATCH = 5000;

interface Position {
  resource_id: string;
  t_s: number;
  lat_e5: number;
  lon_e5: number;
}

/**
 * Copies the old file's positions into `db` (`pageByPage`: `src` is the page reader's copy),
 * one a `history.interval_s` at most as the history writes them; none with `keep_days = 0`.
 * Returns how many rows were new here.
 */
export function copyPositions(src: Database.Database, db: Database.Database, unreadable: Unreadable, pageByPage: boolean, history: HistoryOptions): number {
  if (history.keepDays <= 0 || history.intervalS <= 0) return 0;
  const hasTable = !pageByPage && columns(src, 'positions').has('t_s');
  if (!hasTable && !columns(src, 'readings').has('lat')) return 0;
  const insert = db.prepare(INSERT_POSITION);
  const iv = history.intervalS;
  const write = db.transaction((rows: Position[]) =>
    rows.reduce((n, r) => {
      const slot = Math.floor(r.t_s / iv);
      return n + insert.run({ r: r.resource_id, t: r.t_s, lat: r.lat_e5, lon: r.lon_e5, from: slot * iv, until: (slot + 1) * iv }).changes;
    }, 0),
  );
  let copied = 0;
  let batch: Position[] = [];
  try {
    for (const row of src.prepare(hasTable ? FROM_TABLE : FROM_READINGS).iterate() as Iterable<Position>) {
      batch.push(row);
      if (batch.length < BATCH) continue;
      copied += write.immediate(batch);
      batch = [];
    }
  } catch (err) {
    if (!isCorruption(err)) throw err;
    // What was read before the damage is copied; the rest of the table is named unreadable.
    unreadable[hasTable ? 'positions' : 'readings (positions)'] = 'table';
  }
  if (batch.length > 0) copied += write.immediate(batch);
  return copied;
}
