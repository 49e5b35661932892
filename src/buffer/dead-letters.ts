/**
 * Dead letters: what the service refused (400, 422...), parked with its whole answer so the
 * rest goes on, until the operator puts it back (`dead-letter retry`).
 */
import { DataError } from '../errors.js';
import type { DB } from './db.js';
import type { BufferContext } from './store.js';
import { HOLD_READING, MARK_PARKED } from './ledger.js';
import { type DeadLetter, type Fix, MAX_ANSWER_CHARS, MarkState, type MilestoneRow, type StoredReading } from './types.js';

interface RawDeadLetter {
  id: number;
  kind: 'milestone' | 'trace';
  load_number: string;
  record_id: number;
  status: number | null;
  response: string | null;
  headers: string | null;
  body: string;
  created_ms: number;
  record_ids: string | null;
}

/** A trace request the service refused as a whole, parked as one dead letter (see parkRequest). */
export interface RefusedRequest {
  id: number;
  loadNumber: string;
  status: number | null;
  response: string;
  readingIds: number[];
  createdMs: number;
}

/** An id the operator named is not a dead letter: nothing was put back (exit 65). */
export class DeadLetterError extends DataError {
  readonly code = 'EDEADLETTER';
}

/** The readings a dead letter parks: its list, or its one record. */
const readingIdsOf = (r: RawDeadLetter): number[] => (r.record_ids === null ? [r.record_id] : (JSON.parse(r.record_ids) as number[]));

export class DeadLetters {
  private readonly db: DB;

  constructor(private readonly ctx: BufferContext) {
    this.db = ctx.db;
  }

  /** The service refused this milestone: park it with the answer, so the queue moves on. */
  parkMilestone(m: MilestoneRow, status: number | null, response: string, nowMs: number, headers?: Record<string, string>): void {
    this.ctx.withReserve(() =>
      this.db.transaction(() => {
        this.db.prepare('UPDATE milestones SET parked_ms = ?, last_error = ?, last_status = ? WHERE id = ?').run(nowMs, response.slice(0, 500), status, m.id);
        this.db
          .prepare('INSERT INTO dead_letters (kind, load_number, record_id, status, response, headers, body, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
          .run('milestone', m.loadNumber, m.id, status, response.slice(0, MAX_ANSWER_CHARS), headers ? JSON.stringify(headers) : null, JSON.stringify(m.body), nowMs);
      })(),
    );
  }

  /**
   * The service refused the trace point built from this reading for this load: park it for
   * the load (other loads holding the reading still send it), and hold the reading for the
   * dead letter.
   */
  parkReading(readingId: number, loadNumber: string, status: number | null, response: string, body: unknown, nowMs: number, headers?: Record<string, string>): void {
    this.ctx.withReserve(() =>
      this.db.transaction(() => {
        this.db.prepare(HOLD_READING).run(readingId);
        this.db.prepare(MARK_PARKED).run(loadNumber, readingId);
        this.db
          .prepare('INSERT INTO dead_letters (kind, load_number, record_id, status, response, headers, body, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
          .run('trace', loadNumber, readingId, status, response.slice(0, MAX_ANSWER_CHARS), headers ? JSON.stringify(headers) : null, JSON.stringify(body), nowMs);
      })(),
    );
  }

  /**
   * The service refused this trace request as a whole (the same answer to both its halves):
   * one dead letter for all its points, each reading parked for the load as parkReading
   * parks one. Returns the dead letter's id.
   */
  parkRequest(readingIds: number[], loadNumber: string, status: number | null, response: string, body: unknown, nowMs: number, headers?: Record<string, string>): number {
    return this.ctx.withReserve(() =>
      this.db.transaction(() => {
        const hold = this.db.prepare(HOLD_READING);
        const park = this.db.prepare(MARK_PARKED);
        for (const id of readingIds) {
          hold.run(id);
          park.run(loadNumber, id);
        }
        const info = this.db
          .prepare('INSERT INTO dead_letters (kind, load_number, record_id, record_ids, status, response, headers, body, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)')
          .run('trace', loadNumber, readingIds[0], JSON.stringify(readingIds), status, response.slice(0, MAX_ANSWER_CHARS), headers ? JSON.stringify(headers) : null, JSON.stringify(body), nowMs);
        return Number(info.lastInsertRowid);
      })(),
    );
  }

  /** Trace requests refused as a whole and still parked, oldest first: their loads' traces wait (delivery/refusals.ts). */
  refusedRequests(): RefusedRequest[] {
    return (this.db.prepare("SELECT * FROM dead_letters WHERE kind = 'trace' AND record_ids IS NOT NULL ORDER BY id").all() as RawDeadLetter[]).map((r) => ({
      id: r.id,
      loadNumber: r.load_number,
      status: r.status,
      response: r.response ?? '',
      readingIds: readingIdsOf(r),
      createdMs: r.created_ms,
    }));
  }

  /** The readings a refused request parks, oldest first (held: never purged while it is parked). */
  parkedReadings(req: RefusedRequest): StoredReading[] {
    return this.db
      .prepare(
        `SELECT r.id, r.resource_id, ? AS load_number, r.time_ms, r.lat, r.lon, r.speed, r.heading, r.odometer, r.temp_c, r.trace_id
           FROM readings r WHERE r.id IN (SELECT value FROM json_each(?)) ORDER BY r.id`,
      )
      .all(req.loadNumber, JSON.stringify(req.readingIds)) as StoredReading[];
  }

  /**
   * The resource's newest fix at or before a reading (its own row, if still held, else the
   * last fix if it is no newer): where a temperature-only reading sent again is placed, as it
   * was when it first went (the load's fix at its cursor is newer by then).
   */
  fixAtOrBefore(resourceId: string, readingId: number, timeMs: number): Fix | null {
    const row = this.db
      .prepare('SELECT time_ms AS timeMs, lat, lon FROM readings WHERE resource_id = ? AND id <= ? AND lat IS NOT NULL AND lon IS NOT NULL ORDER BY id DESC LIMIT 1')
      .get(resourceId, readingId) as Fix | undefined;
    if (row) return row;
    const last = this.db.prepare('SELECT time_ms AS timeMs, lat, lon FROM last_fix WHERE resource_id = ? AND time_ms <= ?').get(resourceId, timeMs) as Fix | undefined;
    return last ?? null;
  }

  /** The dead letter is settled (the service took its records at last): it goes. */
  dropDeadLetter(id: number): void {
    this.ctx.withReserve(() => this.db.prepare('DELETE FROM dead_letters WHERE id = ?').run(id));
  }

  listDeadLetters(): DeadLetter[] {
    return (this.db.prepare('SELECT * FROM dead_letters ORDER BY id').all() as RawDeadLetter[]).map((r) => ({
      id: r.id,
      kind: r.kind,
      loadNumber: r.load_number,
      recordId: r.record_id,
      recordIds: r.record_ids === null ? null : readingIdsOf(r),
      status: r.status,
      response: r.response,
      headers: r.headers === null ? null : (JSON.parse(r.headers) as Record<string, string>),
      body: JSON.parse(r.body) as unknown,
      createdMs: r.created_ms,
    }));
  }

  /**
   * Put dead letters back in the queue after the operator fixed the cause. Milestones return
   * to their place (oldest first); readings are sent again as their own trace points, for
   * the load whose request was refused.
   * Returns how many were put back.
   */
  /**
   * Put dead letters back in the queue; how many. An id given twice counts once. `allKnown`
   * (the operator's `dead-letter retry`): when an id is not a dead letter, put none back and
   * throw a DeadLetterError naming it; what was asked is done whole or not at all. Without
   * it (the daemon), an id gone meanwhile is skipped.
   */
  retryDeadLetters(ids: number[] | 'all', opts: { allKnown?: boolean } = {}): number {
    // IMMEDIATE: the CLI reads, then writes, beside a daemon that commits all the time; a
    // deferred transaction whose snapshot the daemon moved on failed at once with
    // SQLITE_BUSY instead of waiting for the lock.
    return this.db
      .transaction(() => {
        let rows: RawDeadLetter[];
        if (ids === 'all') rows = this.db.prepare('SELECT * FROM dead_letters').all() as RawDeadLetter[];
        else {
          const unique = [...new Set(ids)].sort((a, b) => a - b);
          const found = unique.map((id) => this.db.prepare('SELECT * FROM dead_letters WHERE id = ?').get(id) as RawDeadLetter | undefined);
          const unknown = unique.filter((_, i) => !found[i]);
          if (opts.allKnown && unknown.length) throw new DeadLetterError(`no dead letter has the id ${unknown.join(', ')} (see "dead-letter list"); nothing put back`);
          rows = found.filter((r) => r !== undefined);
        }
        for (const r of rows) {
          if (r.kind === 'milestone') this.db.prepare('UPDATE milestones SET parked_ms = NULL, last_error = NULL WHERE id = ?').run(r.record_id);
          else {
            for (const id of readingIdsOf(r)) {
              this.db
                .prepare(
                  `INSERT INTO load_marks (load_number, reading_id, state) SELECT ?, id, ${MarkState.RETRY} FROM readings WHERE id = ?
                     ON CONFLICT DO UPDATE SET state = excluded.state`,
                )
                .run(r.load_number, id);
              this.db.prepare(HOLD_READING).run(id);
            }
          }
          this.db.prepare('DELETE FROM dead_letters WHERE id = ?').run(r.id);
        }
        return rows.length;
      })
      .immediate();
  }
}
