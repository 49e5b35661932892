/**
 * `telematics-agent buffer salvage FILE`: copy everything still readable of a buffer that was
 * set aside (corrupt, or from another device) into the running buffer, so its milestones
 * and undelivered readings still reach the service.
 *
 * The old file is only read (salvage-read.ts). What is copied:
 * - loads the running buffer does not have, active or ended as they were, each with its
 *   window;
 * - every milestone, sent or not, with its idempotency reference (one already here is
 *   skipped); pending ones go out within seconds, and the service sees the same reference;
 * - readings some load had not yet delivered, with new ids and the traceIds they had, each
 *   to the loads here whose windows hold it, less those that had it already; parked ones
 *   with their dead letters; geofence state of the loads copied; the last fix of each
 *   resource if newer; the position history (salvage-positions.ts).
 *
 * Beside the daemon (docs/operations.md: move aside, start, then salvage), which commits to
 * the same buffer meanwhile. A copied reading gets an id above every one the buffer gave, so
 * it is above the cursor of every load that is to take it. A copied load that had ended is
 * closed from the start (the daemon's next commit would otherwise close it at its own
 * highest id, and the readings copied after that commit would fall outside the load), and
 * each batch moves its last id (end_id) up to the readings it gave it, in the batch's own
 * transaction: what is in the load's window is always there, and what is due is delivered
 * once, whenever the daemon reads it.
 *
 * Resumable: every batch records in the same transaction how far it got (meta
 * `salvage:<identity>`), so a run cut off (a power cut, a full disk, kill -9) continues where
 * it stopped when started again, and no reading is copied twice. A complete one is
 * recorded as `salvaged:<identity>`; a second run then needs `--force`.
 */
import type Database from 'better-sqlite3';
import { BufferError } from '../errors.js';
import { bufferIdentity } from './db.js';
import { HIGHEST_READING_ID } from './ledger.js';
import { allRows, columns, highestId, identityOf, type OldLoad, oldLoads, type Row, readable, type Unreadable } from './salvage-read.js';
import type { Store } from './store.js';
import { openSalvageSource } from './salvage-open.js';
import { historyOptions, historySchema } from '../config/time-place.js';
import type { HistoryOptions } from './history.js';
import { copyPositions } from './salvage-positions.js';
import { readingCopier, traceIdKeeper } from './salvage-readings.js';

export interface SalvageReport {
  file: string;
  /** This run continued one that was cut off; the counts are of this run. */
  resumed: boolean;
  loads: number;
  milestones: number;
  pendingMilestones: number;
  readings: number;
  deadLetters: number;
  skippedDelivered: number;
  /** Readings of a load that is here already and whose window here does not hold them. */
  skippedNoLoad: number;
  /** Rows of position history (a minute each) this buffer did not have. */
  positions: number;
  /** Ids (or whole tables) that could not be read. */
  unreadable: Unreadable;
  /**
   * Set when SQLite could not read the file and it was read page by page (salvage-open.ts):
   * its pages, those that held no rows of a known table (past a cut, damaged), and rows whose
   * record could not be read.
   */
  pageByPage?: { pages: number; unreadablePages: number; unreadableRows: number };
}

/** How far a salvage has got, kept in the buffer it copies into (meta `salvage:<identity>`). */
interface Progress {
  /** The loads it copied (their readings are given as the old file said). */
  loads: string[];
  milestonesAfter: number;
  readingsAfter: number;
  /**
   * The buffer's highest reading id when the salvage began. A traceId of the same device with
   * an id up to this one may name a reading of this buffer: such readings get new traceIds.
   */
  floor: number;
}

/** [history] at its defaults, for a salvage given none (tools, tests). */
const HISTORY_DEFAULTS: HistoryOptions = historyOptions(historySchema.parse({}));

export function salvage(file: string, target: Store, opts: { force?: boolean; nowMs?: number; deviceId?: string; history?: HistoryOptions } = {}): SalvageReport {
  const nowMs = opts.nowMs ?? Date.now();
  const source = openSalvageSource(file);
  const src = source.db;
  const unreadable: Unreadable = {};
  const report: SalvageReport = { file, resumed: false, loads: 0, milestones: 0, pendingMilestones: 0, readings: 0, deadLetters: 0, skippedDelivered: 0, skippedNoLoad: 0, positions: 0, unreadable };
  if (source.pages) {
    const { pages, unreadablePages, unreadableRows } = source.pages;
    report.pageByPage = { pages, unreadablePages, unreadableRows };
  }
  try {
    const { key, identity } = identityOf(src, file);
    const db = target.db;
    const meta = db.prepare('SELECT value FROM meta WHERE key = ?').pluck();
    const setMeta = db.prepare('INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value');
    const progressKey = `salvage:${key}`;
    const saved = meta.get(progressKey) as string | undefined;
    const done = meta.get(`salvaged:${key}`) as string | undefined;
    if (done && !saved && !opts.force) {
      throw new BufferError('corrupt', file, `${file} was salvaged into this buffer already (${done}); copying it again would send its readings twice. Add --force to copy it anyway`);
    }
    if (identity !== undefined && identity === bufferIdentity(db)) {
      throw new BufferError('corrupt', file, `${file} is this buffer itself (same identity ${identity}); nothing to copy`);
    }

    const loadCols = columns(src, 'loads');
    // Schema 7 and later: loads have windows, and a reading is each load's whose window holds it.
    const windowed = loadCols.has('window_from_ms');
    const loads = allRows(src, 'SELECT * FROM loads', 'loads', unreadable);
    const old = oldLoads(src, loads, windowed, loadCols.has('acked_id'));
    const srcMax = highestId(src, 'readings') ?? 0;

    let progress: Progress;
    if (saved) {
      progress = JSON.parse(saved) as Progress;
      report.resumed = true;
    } else {
      progress = { loads: [], milestonesAfter: 0, readingsAfter: 0, floor: 0 };
      db.transaction(() => {
        progress.floor = db.prepare(HIGHEST_READING_ID).pluck().get() as number;
        // Readings this buffer commits from now on get ids above every one of the old file,
        // so a traceId a copied reading keeps never names one of them.
        db.prepare("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'readings'").run(srcMax);
        copyLoads(src, target, loads, old, progress, unreadable);
        report.loads = progress.loads.length;
        setMeta.run(progressKey, JSON.stringify(progress));
      }).immediate();
    }
    const copiedLoads = new Set(progress.loads);
    const save = () => setMeta.run(progressKey, JSON.stringify(progress));
    const insertDead = db.prepare('INSERT INTO dead_letters (kind, load_number, record_id, record_ids, status, response, headers, body, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)');
    const addRecord = db.prepare("UPDATE dead_letters SET record_ids = json_insert(record_ids, '$[#]', ?) WHERE id = ?");

    // Dead letters of the old file, by what they park (a trace point: for which load).
    // A trace request refused whole (schema 8) parks each of its readings.
    const deadByRecord = new Map<string, Row>();
    for (const d of readable(src, 'dead_letters', unreadable)) {
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

    // Every write transaction here is IMMEDIATE: the daemon may be committing to this buffer
    // meanwhile, and a deferred one that read first could not take the write lock after the
    // daemon's commit ("database is locked" at once, whatever busy_timeout says).
    const copyMilestones = milestoneCopier(src, target, report, (m, newId) => copyDead(deadByRecord.get(`milestone:${String(m.id)}`), newId));
    const milestoneBatch = db.transaction((rows: Row[]) => {
      copyMilestones(rows);
      progress.milestonesAfter = Number(rows[rows.length - 1].id);
      save();
    });
    for (const rows of batches(readable(src, 'milestones', unreadable, progress.milestonesAfter), 500)) milestoneBatch.immediate(rows);

    const copyReadings = readingCopier(src, target, { old, windowed, copiedLoads, report, copyDead, deadByRecord, traceIds: traceIdKeeper(src, opts.deviceId, progress.floor) });
    const readingBatch = db.transaction((rows: Row[]) => {
      copyReadings(rows);
      progress.readingsAfter = Number(rows[rows.length - 1].id);
      save();
    });
    for (const rows of batches(readable(src, 'readings', unreadable, progress.readingsAfter), 1000)) readingBatch.immediate(rows);
    report.positions = copyPositions(src, db, unreadable, Boolean(source.pages), opts.history ?? HISTORY_DEFAULTS);

    db.transaction(() => {
      setMeta.run(
        `salvaged:${key}`,
        `${new Date(nowMs).toISOString()}: ${report.milestones} milestones, ${report.readings} readings from ${file}${report.resumed ? ' (the rest of a salvage cut off before)' : ''}`,
      );
      db.prepare('DELETE FROM meta WHERE key = ?').run(progressKey);
    }).immediate();
    return report;
  } finally {
    source.close();
  }
}

/** Rows in batches of `size` (none empty). */
function* batches(rows: Iterable<Row>, size: number): Generator<Row[]> {
  let batch: Row[] = [];
  for (const r of rows) {
    batch.push(r);
    if (batch.length >= size) {
      yield batch;
      batch = [];
    }
  }
  if (batch.length > 0) yield batch;
}

/**
 * The loads the running buffer does not have, with the geofence state of each (so arrivals
 * are not detected a second time). One that had ended is closed at once, empty (its cursor
 * at its last id): the readings copied for it move its last id up (readingCopier).
 */
function copyLoads(src: Database.Database, target: Store, loads: Row[], old: Map<string, OldLoad>, progress: Progress, unreadable: Unreadable): void {
  const db = target.db;
  const insertLoad = db.prepare(
    `INSERT INTO loads (load_number, resource_id, resource_type, stops, started_ms, ended_ms, window_from_ms, window_until_ms, next_stop, last_sample_ms, acked_id, end_id)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (${HIGHEST_READING_ID}), CASE WHEN ? THEN (${HIGHEST_READING_ID}) END)`,
  );
  for (const l of loads) {
    const n = String(l.load_number);
    if (target.getLoad(n)) continue;
    const o = old.get(n)!;
    const ended = o.ended !== null;
    insertLoad.run(n, l.resource_id, l.resource_type, l.stops, l.started_ms, o.ended, o.from, ended ? o.until : null, l.next_stop ?? null, l.last_sample_ms ?? null, ended ? 1 : 0);
    progress.loads.push(n);
  }
  const copied = new Set(progress.loads);
  const insertState = db.prepare(
    `INSERT OR IGNORE INTO stop_state (load_number, stop_sequence, state, first_inside_ms, last_inside_ms, inside_fixes, outside_fixes, arrived_ms, departed_ms, delay_reported_s)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  for (const st of allRows(src, 'SELECT * FROM stop_state', 'stop_state', unreadable)) {
    if (!copied.has(String(st.load_number))) continue;
    insertState.run(st.load_number, st.stop_sequence, st.state, st.first_inside_ms, st.last_inside_ms, st.inside_fixes, st.outside_fixes, st.arrived_ms, st.departed_ms, st.delay_reported_s);
  }
}

/** Copies a batch of milestones, each in the same transaction as its dead letter. */
function milestoneCopier(src: Database.Database, target: Store, report: SalvageReport, copyDead: (milestone: Row, newId: number) => void) {
  const db = target.db;
  const milestoneCols = columns(src, 'milestones');
  const haveRef = db.prepare('SELECT 1 FROM milestones WHERE ref = ?');
  const insertMilestone = db.prepare(
    `INSERT INTO milestones (load_number, ref, body, created_ms, attempts, last_error, sent_ms, parked_ms, code, stop_seq, origin, last_status, correlation_id)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  return (rows: Row[]) => {
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
      if ((m.parked_ms ?? null) !== null) copyDead(m, Number(info.lastInsertRowid));
    }
  };
}
