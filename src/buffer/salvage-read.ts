/**
 * Reading a buffer that was set aside, for `buffer salvage`: whatever is still readable,
 * row by row, and what the old file said about its loads (their windows and cursors), its
 * marks and dead letters, its identity and the device that wrote it. Only reads.
 */
import type Database from 'better-sqlite3';
import { isCorruption } from '../errors.js';
import { bufferIdentity } from './db.js';
import { FAR } from './ledger.js';

export type Row = Record<string, unknown>;

/** Ids (or whole tables) that could not be read, by table. */
export type Unreadable = Record<string, number | 'table'>;

/** A load of the old file: where its delivery stood, and its window. */
export interface OldLoad {
  n: string;
  resource: string;
  acked: number;
  endId: number;
  from: number;
  until: number;
  ended: number | null;
}

/**
 * The highest id a table of the old file ever held. When the table's root is damaged the
 * sequence still says how far ids went. For readings it moves only when the newest are
 * deleted (migration 5 -> 6): the other records of how far they went count too, each as far
 * as it can be read. Undefined when nothing says.
 */
export function highestId(db: Database.Database, table: string): number | undefined {
  try {
    const max = (db.prepare(`SELECT max(id) FROM ${table}`).pluck().get() as number | null) ?? 0;
    if (table !== 'readings') return max;
    let seq = 0;
    try {
      seq = (db.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'readings'").pluck().get() as number | undefined) ?? 0;
    } catch {
      // The rows say how far ids went.
    }
    return Math.max(max, seq);
  } catch (err) {
    if (!isCorruption(err)) throw err;
  }
  const bounds = [`SELECT seq FROM sqlite_sequence WHERE name = '${table}'`];
  if (table === 'readings') {
    bounds.push(
      "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'last_fix_upto'",
      'SELECT max(acked_id) FROM loads',
      'SELECT max(id) FROM readings INDEXED BY readings_by_load',
      'SELECT max(id) FROM readings INDEXED BY readings_by_resource',
    );
  }
  const known = bounds.flatMap((sql) => {
    try {
      return [(db.prepare(sql).pluck().get() as number | null | undefined) ?? 0];
    } catch {
      return [];
    }
  });
  return known.length === 0 ? undefined : Math.max(...known);
}

/**
 * Rows of a table by id from `afterId` on, in windows, fencing damaged pages off down to
 * single ids (counted in `unreadable`).
 */
export function* readable(db: Database.Database, table: string, unreadable: Unreadable, afterId = 0): Generator<Row> {
  const max = highestId(db, table);
  if (max === undefined) {
    unreadable[table] = 'table';
    return;
  }
  const window = db.prepare(`SELECT * FROM ${table} WHERE id >= ? AND id < ? ORDER BY id`);
  const bad = (n: number) => {
    unreadable[table] = ((unreadable[table] as number | undefined) ?? 0) + n;
  };
  const read = function* (from: number, to: number): Generator<Row> {
    let rows: Row[];
    try {
      rows = window.all(from, to) as Row[];
    } catch (err) {
      if (!isCorruption(err)) throw err;
      if (to - from <= 1) {
        bad(1);
        return;
      }
      const mid = Math.floor((from + to) / 2);
      yield* read(from, mid);
      yield* read(mid, to);
      return;
    }
    yield* rows;
  };
  for (let from = afterId + 1; from <= max; from += 1000) yield* read(from, Math.min(from + 1000, max + 1));
}

export function columns(db: Database.Database, table: string): Set<string> {
  try {
    return new Set((db.prepare(`PRAGMA table_info(${table})`).all() as Array<{ name: string }>).map((c) => c.name));
  } catch {
    return new Set();
  }
}

/** What a whole table holds, or nothing (and the table named unreadable) when it cannot be read. */
export function allRows(db: Database.Database, sql: string, table: string, unreadable: Unreadable): Row[] {
  try {
    return db.prepare(sql).all() as Row[];
  } catch (err) {
    if (!isCorruption(err)) throw err;
    unreadable[table] = 'table';
    return [];
  }
}

/**
 * The old file's identity, which names its salvage in the buffer it goes to: its `meta`
 * record, else its header's application_id, else (a file older than both) its path.
 */
export function identityOf(db: Database.Database, file: string): { key: string; identity: string | undefined } {
  let identity: string | undefined;
  try {
    identity = bufferIdentity(db);
    if (identity === undefined) {
      const app = db.pragma('application_id', { simple: true }) as number;
      if (app !== 0) identity = String(app);
    }
  } catch {
    identity = undefined;
  }
  return { key: identity ?? file, identity };
}

/** The device the old file's daemon ran as (its traceIds begin with it), when its state row says. */
export function deviceOf(db: Database.Database): string | undefined {
  try {
    const value = db.prepare("SELECT value FROM state WHERE key = 'daemon'").pluck().get() as string | undefined;
    const device = value === undefined ? undefined : (JSON.parse(value) as { deviceId?: unknown }).deviceId;
    return typeof device === 'string' && device !== '' ? device : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Where each load of the old file stood, and its window: as the old file kept it (schema 7
 * and later), or, before schema 7 where a reading named its load, wide enough for the load's
 * readings.
 */
export function oldLoads(db: Database.Database, loads: Row[], windowed: boolean, hasAcked: boolean): Map<string, OldLoad> {
  const old = new Map<string, OldLoad>();
  for (const l of loads) {
    const ended = (l.ended_ms as number | null) ?? null;
    old.set(String(l.load_number), {
      n: String(l.load_number),
      resource: String(l.resource_id),
      acked: hasAcked ? Number(l.acked_id) : 0,
      endId: windowed && l.end_id !== null ? Number(l.end_id) : FAR,
      from: windowed ? Number(l.window_from_ms) : Number(l.started_ms),
      until: windowed ? ((l.window_until_ms as number | null) ?? FAR) : ended === null ? FAR : ended,
      ended,
    });
  }
  if (!windowed) {
    for (const r of readable(db, 'readings', {})) {
      const o = r.load_number === null ? undefined : old.get(String(r.load_number));
      if (!o) continue;
      o.from = Math.min(o.from, Number(r.time_ms));
      if (o.ended !== null) o.until = Math.max(o.until, Number(r.time_ms) + 1);
    }
  }
  return old;
}
