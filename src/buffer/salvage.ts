/**
 * `telematics-agent buffer salvage FILE`: copy everything still readable of a buffer that was
 * set aside (corrupt, or from another device) into the running buffer, so its milestones
 * and undelivered readings still reach the service.
 *
 * The old file is only read (a read-only connection: nothing is written to it or its WAL).
 * Rows are read by id in windows; a window that hits a damaged page is halved until the
 * damage is fenced off to single ids, which are counted as unreadable. What is copied:
 * - loads the running buffer does not have, active or ended as they were, each with its
 *   window;
 * - every milestone, sent or not, with its idempotency reference (one already here is
 *   skipped); pending ones go out within seconds, and the service sees the same reference;
 * - readings some load had not yet delivered, with new ids, each to the loads here whose
 *   windows hold it, less those that had it already; parked ones with their dead letters;
 *   geofence state of the loads copied; the last fix of each resource if newer.
 * A file is salvaged once: its identity is recorded, and a second run needs `--force`.
 */
import Database from 'better-sqlite3';
import { BufferError, isCorruption } from '../errors.js';
import { bufferIdentity } from './db.js';
import { FAR, HIGHEST_READING_ID, NEXT_READING_ID, SETTLE_LOADS } from './migrations.js';
import type { Store } from './store.js';
import { MarkState, ReadingState } from './types.js';

export interface SalvageReport {
  file: string;
  loads: number;
  milestones: number;
  pendingMilestones: number;
  readings: number;
  deadLetters: number;
  skippedDelivered: number;
  /** Readings of a load that is here already and whose window here does not hold them. */
  skippedNoLoad: number;
  /** Ids (or whole tables) that could not be read. */
  unreadable: Record<string, number | 'table'>;
}

type Row = Record<string, unknown>;

/** Rows of a table by id, in windows, fencing damaged pages off down to single ids. */
function* readable(db: Database.Database, table: string, report: SalvageReport): Generator<Row> {
  let max: number;
  try {
    max = (db.prepare(`SELECT max(id) FROM ${table}`).pluck().get() as number | null) ?? 0;
  } catch (err) {
    if (!isCorruption(err)) throw err;
    // The table's root is damaged: the sequence still says how far ids went. For readings
    // it moves only when the newest are deleted (migration 5 -> 6): the other records of how
    // far they went count too, each as far as it can be read.
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
    if (known.length === 0) {
      report.unreadable[table] = 'table';
      return;
    }
    max = Math.max(...known);
  }
  const window = db.prepare(`SELECT * FROM ${table} WHERE id >= ? AND id < ? ORDER BY id`);
  const bad = (n: number) => {
    report.unreadable[table] = ((report.unreadable[table] as number | undefined) ?? 0) + n;
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
  for (let from = 0; from <= max; from += 1000) yield* read(from, from + 1000);
}

function columns(db: Database.Database, table: string): Set<string> {
  try {
    return new Set((db.prepare(`PRAGMA table_info(${table})`).all() as Array<{ name: string }>).map((c) => c.name));
  } catch {
    return new Set();
  }
}

export function salvage(file: string, target: Store, opts: { force?: boolean; nowMs?: number } = {}): SalvageReport {
  const nowMs = opts.nowMs ?? Date.now();
  let src: Database.Database;
  try {
    src = new Database(file, { readonly: true, fileMustExist: true });
    src.pragma('schema_version'); // reads the header and the schema page: not a database fails here
  } catch (err) {
    throw new BufferError('corrupt', file, `${file}: cannot be read as a buffer at all (${(err as Error).message}); nothing was copied`);
  }
  const report: SalvageReport = { file, loads: 0, milestones: 0, pendingMilestones: 0, readings: 0, deadLetters: 0, skippedDelivered: 0, skippedNoLoad: 0, unreadable: {} };
  try {
    let identity: string | undefined;
    try {
      identity = bufferIdentity(src);
    } catch {
      identity = undefined;
    }
    const mark = `salvaged:${identity ?? file}`;
    const db = target.db;
    const done = db.prepare('SELECT value FROM meta WHERE key = ?').pluck().get(mark) as string | undefined;
    if (done && !opts.force) {
      throw new BufferError('corrupt', file, `${file} was salvaged into this buffer already (${done}); copying it again would send its readings twice. Add --force to copy it anyway`);
    }
    if (identity !== undefined && identity === bufferIdentity(db)) {
      throw new BufferError('corrupt', file, `${file} is this buffer itself (same identity ${identity}); nothing to copy`);
    }

    // Loads first: readings and milestones refer to them.
    const copiedLoads = new Set<string>();
    const loadCols = columns(src, 'loads');
    // Schema 7 and later: loads have windows, and a reading is each load's whose window holds it.
    const windowed = loadCols.has('window_from_ms');
    let loads: Row[] = [];
    try {
      loads = src.prepare('SELECT * FROM loads').all() as Row[];
    } catch (err) {
      if (!isCorruption(err)) throw err;
      report.unreadable.loads = 'table';
    }
    const readingCols = columns(src, 'readings');
    const milestoneCols = columns(src, 'milestones');
    const insertLoad = db.prepare(
      `INSERT INTO loads (load_number, resource_id, resource_type, stops, started_ms, ended_ms, window_from_ms, window_until_ms, next_stop, last_sample_ms, acked_id)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (${HIGHEST_READING_ID}))`,
    );
    // Ids past every one the buffer ever gave (the table is not AUTOINCREMENT: migration 5 -> 6).
    const insertReading = db.prepare(`INSERT INTO readings (id, resource_id, time_ms, lat, lon, speed, heading, odometer, temp_c, source, state) VALUES ((${NEXT_READING_ID}), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    const insertMark = db.prepare('INSERT INTO load_marks (load_number, reading_id, state) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET state = excluded.state');
    const insertMilestone = db.prepare(
      `INSERT INTO milestones (load_number, ref, body, created_ms, attempts, last_error, sent_ms, parked_ms, code, stop_seq, origin, last_status, correlation_id)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    const insertDead = db.prepare('INSERT INTO dead_letters (kind, load_number, record_id, record_ids, status, response, headers, body, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)');
    const addRecord = db.prepare("UPDATE dead_letters SET record_ids = json_insert(record_ids, '$[#]', ?) WHERE id = ?");
    const upsertFix = db.prepare(
      `INSERT INTO last_fix (resource_id, time_ms, lat, lon, speed, heading) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (resource_id) DO UPDATE SET time_ms = excluded.time_ms, lat = excluded.lat, lon = excluded.lon,
           speed = excluded.speed, heading = excluded.heading WHERE excluded.time_ms > last_fix.time_ms`,
    );

    // Dead letters of the old file, by what they park (a trace point: for which load).
    // A trace request refused whole (schema 8) parks each of its readings.
    const deadByRecord = new Map<string, Row>();
    for (const d of readable(src, 'dead_letters', report)) {
      const ids = typeof d.record_ids === 'string' ? (JSON.parse(d.record_ids) as number[]) : [d.record_id];
      for (const id of ids) deadByRecord.set(`${String(d.kind)}:${String(id)}${d.kind === 'trace' ? `:${String(d.load_number)}` : ''}`, d);
    }
    // The copy of each request refused whole, which the new id of each of its readings joins.
    const copiedWhole = new Map<Row, number>();
    const copyDead = (d: Row | undefined, recordId: number) => {
      if (!d) return;
      const whole = typeof d.record_ids === 'string';
      const copy = copiedWhole.get(d);
      if (copy !== undefined) return void addRecord.run(recordId, copy);
      const info = insertDead.run(d.kind, d.load_number, recordId, whole ? JSON.stringify([recordId]) : null, d.status ?? null, d.response ?? null, d.headers ?? null, d.body, d.created_ms);
      if (whole) copiedWhole.set(d, Number(info.lastInsertRowid));
      report.deadLetters += 1;
    };

    // Where each load of the old file stood, and its window: as the old file kept it, or
    // (before schema 7, where a reading named its load) wide enough for the load's readings.
    interface Old {
      n: string;
      resource: string;
      acked: number;
      endId: number;
      from: number;
      until: number;
      ended: number | null;
    }
    const old = new Map<string, Old>();
    for (const l of loads) {
      const ended = (l.ended_ms as number | null) ?? null;
      old.set(String(l.load_number), {
        n: String(l.load_number),
        resource: String(l.resource_id),
        acked: loadCols.has('acked_id') ? Number(l.acked_id) : 0,
        endId: windowed && l.end_id !== null ? Number(l.end_id) : FAR,
        from: windowed ? Number(l.window_from_ms) : Number(l.started_ms),
        until: windowed ? ((l.window_until_ms as number | null) ?? FAR) : ended === null ? FAR : ended,
        ended,
      });
    }
    if (!windowed) {
      for (const r of readable(src, 'readings', { ...report, unreadable: {} })) {
        const o = r.load_number === null ? undefined : old.get(String(r.load_number));
        if (!o) continue;
        o.from = Math.min(o.from, Number(r.time_ms));
        if (o.ended !== null) o.until = Math.max(o.until, Number(r.time_ms) + 1);
      }
    }
    const oldMarks = new Map<string, number>();
    if (windowed) {
      try {
        for (const m of src.prepare('SELECT * FROM load_marks').all() as Row[]) oldMarks.set(`${String(m.load_number)}:${String(m.reading_id)}`, Number(m.state));
      } catch (err) {
        if (!isCorruption(err)) throw err;
        report.unreadable.load_marks = 'table';
      }
    }
    const oldByResource = new Map<string, Old[]>();
    for (const o of old.values()) oldByResource.set(o.resource, [...(oldByResource.get(o.resource) ?? []), o]);
    const holds = (o: { from: number; until: number }, timeMs: number) => timeMs >= o.from && timeMs < o.until;

    db.transaction(() => {
      for (const l of loads) {
        const n = String(l.load_number);
        if (target.getLoad(n)) continue;
        const o = old.get(n)!;
        insertLoad.run(n, l.resource_id, l.resource_type, l.stops, l.started_ms, o.ended, o.from, o.ended === null ? null : o.until, l.next_stop ?? null, l.last_sample_ms ?? null);
        copiedLoads.add(n);
        report.loads += 1;
      }
      // Geofence state of the loads copied, so arrivals are not detected a second time.
      try {
        for (const st of src.prepare('SELECT * FROM stop_state').all() as Row[]) {
          if (!copiedLoads.has(String(st.load_number))) continue;
          db.prepare(
            `INSERT OR IGNORE INTO stop_state (load_number, stop_sequence, state, first_inside_ms, last_inside_ms, inside_fixes, outside_fixes, arrived_ms, departed_ms, delay_reported_s)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
          ).run(st.load_number, st.stop_sequence, st.state, st.first_inside_ms, st.last_inside_ms, st.inside_fixes, st.outside_fixes, st.arrived_ms, st.departed_ms, st.delay_reported_s);
        }
      } catch (err) {
        if (!isCorruption(err)) throw err;
        report.unreadable.stop_state = 'table';
      }
    }).immediate();

    // Every write transaction here is IMMEDIATE: the daemon may be committing to this buffer
    // meanwhile, and a deferred one that read first could not take the write lock after the
    // daemon's commit ("database is locked" at once, whatever busy_timeout says).
    // Milestones, each in the same transaction as its dead letter.
    const haveRef = db.prepare('SELECT 1 FROM milestones WHERE ref = ?');
    const copyMilestones = db.transaction((rows: Row[]) => {
      for (const m of rows) {
        if (haveRef.get(m.ref)) continue;
        const load = String(m.load_number);
        if (!target.getLoad(load)) continue;
        const body = JSON.parse(String(m.body)) as Record<string, unknown>;
        const info = insertMilestone.run(
          load,
          m.ref,
          m.body,
          m.created_ms,
          m.attempts ?? 0,
          m.last_error ?? null,
          m.sent_ms ?? null,
          milestoneCols.has('parked_ms') ? (m.parked_ms ?? null) : null,
          milestoneCols.has('code') && m.code ? m.code : String(body.eventCode),
          milestoneCols.has('stop_seq') ? (m.stop_seq ?? null) : typeof body.stopsequenceNumber === 'number' ? body.stopsequenceNumber : null,
          milestoneCols.has('origin') ? (m.origin ?? null) : null,
          milestoneCols.has('last_status') ? (m.last_status ?? null) : null,
          milestoneCols.has('correlation_id') ? (m.correlation_id ?? null) : null,
        );
        report.milestones += 1;
        if (m.sent_ms === null && (m.parked_ms ?? null) === null) report.pendingMilestones += 1;
        if ((m.parked_ms ?? null) !== null) copyDead(deadByRecord.get(`milestone:${String(m.id)}`), Number(info.lastInsertRowid));
      }
    });
    let batch: Row[] = [];
    for (const m of readable(src, 'milestones', report)) {
      batch.push(m);
      if (batch.length >= 500) {
        copyMilestones.immediate(batch);
        batch = [];
      }
    }
    copyMilestones.immediate(batch);

    // Readings some load had not delivered, in id order, with new ids. Each goes to the loads
    // here whose windows hold it: the copied loads (their windows from the old file) and the
    // loads already here that are open. A copied load that had it already, or for which it
    // was parked, is told so (load_marks), so nothing is sent twice.
    const copiedByResource = new Map<string, Old[]>();
    for (const n of copiedLoads) {
      const o = old.get(n)!;
      copiedByResource.set(o.resource, [...(copiedByResource.get(o.resource) ?? []), o]);
    }
    const openHere = db.prepare('SELECT load_number, window_from_ms, window_until_ms FROM loads WHERE resource_id = ? AND end_id IS NULL AND (end_id IS NULL OR acked_id < end_id)').raw();
    const copyReadings = db.transaction((rows: Row[]) => {
      const here = new Map<string, Array<[string, number, number | null]>>();
      for (const r of rows) {
        const id = Number(r.id);
        const resource = String(r.resource_id);
        const timeMs = Number(r.time_ms);
        const state = readingCols.has('state') ? Number(r.state) : 0;
        // What each load of the old file still wanted of it, or had parked.
        const wanted = new Set<string>();
        const parked = new Set<string>();
        let unassigned = false;
        if (windowed) {
          unassigned = state === ReadingState.UNASSIGNED;
          for (const o of oldByResource.get(resource) ?? []) {
            if (!holds(o, timeMs) || id > o.endId) continue;
            const mark = oldMarks.get(`${o.n}:${id}`);
            if (mark === MarkState.PARKED) parked.add(o.n);
            else if (mark === MarkState.RETRY || (mark === undefined && id > o.acked)) wanted.add(o.n);
          }
        } else if (r.load_number === null) {
          unassigned = true;
        } else {
          const n = String(r.load_number);
          if (state === 1) parked.add(n);
          else if (state === 2 || id > (old.get(n)?.acked ?? 0)) wanted.add(n);
        }
        if (!unassigned && wanted.size === 0 && parked.size === 0) {
          report.skippedDelivered += 1;
          continue;
        }
        for (const n of [...wanted, ...parked]) {
          if (!target.getLoad(n)) {
            wanted.delete(n);
            parked.delete(n);
          }
        }
        const copiedHolding = (copiedByResource.get(resource) ?? []).filter((o) => holds(o, timeMs)).map((o) => o.n);
        let open = here.get(resource);
        if (!open) {
          open = (openHere.all(resource) as Array<[string, number, number | null]>).filter(([n]) => !copiedLoads.has(n));
          here.set(resource, open);
        }
        const heldHere = open.some(([, from, until]) => timeMs >= from && (until === null || timeMs < until));
        if (!unassigned && parked.size === 0 && copiedHolding.length === 0 && !heldHere) {
          report.skippedNoLoad += 1;
          continue;
        }
        const dead = [...parked].map((n) => deadByRecord.get(`trace:${id}:${n}`));
        const rowState = unassigned ? ReadingState.UNASSIGNED : parked.size > 0 ? ReadingState.HELD : ReadingState.WAITING;
        const info = insertReading.run(resource, timeMs, r.lat, r.lon, r.speed, r.heading, r.odometer, r.temp_c, r.source ?? null, rowState);
        const newId = Number(info.lastInsertRowid);
        if (!unassigned) {
          for (const n of copiedHolding) if (!wanted.has(n) && !parked.has(n)) insertMark.run(n, newId, MarkState.SENT);
          for (const [i, n] of [...parked].entries()) {
            insertMark.run(n, newId, MarkState.PARKED);
            copyDead(dead[i], newId);
          }
        }
        if (r.lat !== null && r.lon !== null) upsertFix.run(r.resource_id, r.time_ms, r.lat, r.lon, r.speed, r.heading);
        report.readings += 1;
      }
    });
    batch = [];
    for (const r of readable(src, 'readings', report)) {
      batch.push(r);
      if (batch.length >= 1000) {
        copyReadings.immediate(batch);
        batch = [];
      }
    }
    copyReadings.immediate(batch);
    // The copied loads that had ended are closed: no reading committed from now on is theirs.
    db.transaction(() => {
      const close = db.prepare(`UPDATE loads SET end_id = (${HIGHEST_READING_ID}) WHERE load_number = ? AND ended_ms IS NOT NULL AND end_id IS NULL`);
      for (const n of copiedLoads) close.run(n);
      db.prepare(SETTLE_LOADS).run();
    }).immediate();
    db.prepare('INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value').run(
      mark,
      `${new Date(nowMs).toISOString()}: ${report.milestones} milestones, ${report.readings} readings from ${file}`,
    );
    return report;
  } finally {
    src.close();
  }
}
