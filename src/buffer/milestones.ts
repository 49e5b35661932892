/**
 * Milestones and the geofence state that detects them. A milestone is committed durably
 * (synchronous = FULL) and, when it comes from detection, in one transaction with the stop
 * state that records it: never one without the other.
 */
import { randomUUID } from 'node:crypto';
import type { Statement } from 'better-sqlite3';
import type { DB } from './db.js';
import type { Loads } from './loads.js';
import type { BufferContext } from './store.js';
import type { MilestoneOrigin, MilestoneRow, NewMilestone, Receipt, StopState } from './types.js';

/** A manual milestone for an event the load already has. */
export class DuplicateEventError extends Error {
  readonly code = 'EDUPLICATE';
  constructor(
    readonly existing: MilestoneRow,
    readonly attempted: NewMilestone,
  ) {
    super(`load ${existing.loadNumber} already has ${existing.code}${existing.stop === null ? '' : ` for stop ${existing.stop}`} (milestone ${existing.id})`);
  }
}

interface RawMilestone {
  id: number;
  load_number: string;
  ref: string;
  body: string;
  created_ms: number;
  attempts: number;
  last_error: string | null;
  sent_ms: number | null;
  parked_ms: number | null;
  code: string | null;
  stop_seq: number | null;
  origin: MilestoneOrigin | null;
  needs_place: number;
  last_status: number | null;
  correlation_id: string | null;
}

interface RawStopState {
  stop_sequence: number;
  state: StopState['state'];
  first_inside_ms: number | null;
  last_inside_ms: number | null;
  inside_fixes: number;
  outside_fixes: number;
  arrived_ms: number | null;
  departed_ms: number | null;
  delay_reported_s: number | null;
}

const toMilestone = (r: RawMilestone): MilestoneRow => ({
  id: r.id,
  loadNumber: r.load_number,
  ref: r.ref,
  body: JSON.parse(r.body) as Record<string, unknown>,
  createdMs: r.created_ms,
  attempts: r.attempts,
  lastError: r.last_error,
  sentMs: r.sent_ms,
  parkedMs: r.parked_ms,
  code: r.code ?? String((JSON.parse(r.body) as { eventCode?: unknown }).eventCode),
  stop: r.stop_seq,
  origin: r.origin,
  needsPlace: r.needs_place === 1,
  lastStatus: r.last_status,
  correlationId: r.correlation_id,
});

export class Milestones {
  private readonly db: DB;
  private pendingOne: Statement | undefined;
  private stopsWithCodesStmt: Statement | undefined;

  constructor(
    private readonly ctx: BufferContext,
    private readonly loads: Loads,
  ) {
    this.db = ctx.db;
  }

  /**
   * Commit milestones (and the stop states that go with a detection) in one durable
   * transaction: a detection commits its milestone and the state that says it happened
   * together, or neither, so a failed write can never produce the same arrival twice.
   * `guard` runs inside the transaction before anything is written (the one-per-event check).
   */
  commitMilestones(
    items: ReadonlyArray<NewMilestone>,
    nowMs: number,
    extra?: { stopStates?: ReadonlyArray<{ loadNumber: string; stop: number; state: StopState }>; nextStop?: { loadNumber: string; next: number | null } },
  ): { rows: MilestoneRow[]; skipped: Array<{ item: NewMilestone; existing: MilestoneRow }> } {
    const insert = this.db.prepare('INSERT INTO milestones (load_number, ref, body, created_ms, code, stop_seq, origin, needs_place) VALUES (?, ?, ?, ?, ?, ?, ?, ?)');
    const run = () => {
      const rows: MilestoneRow[] = [];
      const skipped: Array<{ item: NewMilestone; existing: MilestoneRow }> = [];
      for (const m of items) {
        const code = String(m.body.eventCode);
        const stop = typeof m.body.stopsequenceNumber === 'number' ? m.body.stopsequenceNumber : null;
        if (m.unique) {
          const existing = this.findMilestone(m.loadNumber, code, stop);
          if (existing && m.origin === 'detected') {
            skipped.push({ item: m, existing });
            continue;
          }
          if (existing) throw new DuplicateEventError(existing, m);
        }
        const info = insert.run(m.loadNumber, m.ref, JSON.stringify(m.body), nowMs, code, stop, m.origin, m.needsPlace ? 1 : 0);
        rows.push({
          id: Number(info.lastInsertRowid),
          loadNumber: m.loadNumber,
          ref: m.ref,
          body: m.body,
          createdMs: nowMs,
          attempts: 0,
          lastError: null,
          sentMs: null,
          parkedMs: null,
          code,
          stop,
          origin: m.origin,
          needsPlace: m.needsPlace ?? false,
          lastStatus: null,
          correlationId: null,
        });
      }
      for (const st of extra?.stopStates ?? []) this.saveStopState(st.loadNumber, st.stop, st.state);
      if (extra?.nextStop) this.loads.setNextStop(extra.nextStop.loadNumber, extra.nextStop.next);
      return { rows, skipped };
    };
    // Only a milestone needs the fsync; states alone change with every fix at a stop.
    return items.length > 0 ? this.ctx.durably(run) : this.db.transaction(run).immediate();
  }

  /** Commit one milestone; it is durable when this returns. The ref is its idempotency reference. */
  insertMilestone(loadNumber: string, body: Record<string, unknown>, nowMs: number, ref: string = randomUUID(), origin: MilestoneOrigin = 'manual'): MilestoneRow {
    return this.commitMilestones([{ loadNumber, ref, body, origin }], nowMs).rows[0];
  }

  /** The first milestone of a load with this code at this stop (null: no stop), if any. */
  findMilestone(loadNumber: string, code: string, stop: number | null): MilestoneRow | undefined {
    const r = this.db.prepare('SELECT * FROM milestones WHERE load_number = ? AND code = ? AND stop_seq IS ? ORDER BY id LIMIT 1').get(loadNumber, code, stop) as RawMilestone | undefined;
    return r && toMilestone(r);
  }

  /** The milestone committed with this idempotency reference, if any. */
  byRef(ref: string): MilestoneRow | undefined {
    // No index to add: ref is UNIQUE since schema 1, and its own index serves this (SEARCH, not SCAN).
    const r = this.db.prepare('SELECT * FROM milestones WHERE ref = ?').get(ref) as RawMilestone | undefined;
    return r && toMilestone(r);
  }

  pendingMilestones(limit = 100): MilestoneRow[] {
    return (this.db.prepare('SELECT * FROM milestones WHERE sent_ms IS NULL AND parked_ms IS NULL ORDER BY id LIMIT ?').all(limit) as RawMilestone[]).map(toMilestone);
  }

  hasPendingMilestones(): boolean {
    // Asked before every request of a drain: prepared once.
    this.pendingOne ??= this.db.prepare('SELECT 1 FROM milestones WHERE sent_ms IS NULL AND parked_ms IS NULL LIMIT 1');
    return this.pendingOne.get() !== undefined;
  }

  /** The stops of a load that have a milestone with one of `codes` (recorded by hand or detected). */
  stopsWithCodes(loadNumber: string, codes: readonly string[]): Set<number> {
    // Asked at every fix of a load with appointments: prepared once.
    this.stopsWithCodesStmt ??= this.db.prepare('SELECT DISTINCT stop_seq FROM milestones WHERE load_number = ? AND stop_seq IS NOT NULL AND code IN (SELECT value FROM json_each(?))').pluck();
    return new Set(this.stopsWithCodesStmt.all(loadNumber, JSON.stringify(codes)) as number[]);
  }

  listMilestones(loadNumber?: string): MilestoneRow[] {
    const rows = loadNumber ? this.db.prepare('SELECT * FROM milestones WHERE load_number = ? ORDER BY id').all(loadNumber) : this.db.prepare('SELECT * FROM milestones ORDER BY id').all();
    return (rows as RawMilestone[]).map(toMilestone);
  }

  /** The body a milestone goes out with, once the daemon has filled in its place. */
  setMilestoneBody(id: number, body: Record<string, unknown>): void {
    this.ctx.withReserve(() => this.db.prepare('UPDATE milestones SET body = ?, needs_place = 0 WHERE id = ?').run(JSON.stringify(body), id));
  }

  /**
   * Durable, like the milestone itself: with synchronous NORMAL a power cut rolled the mark
   * back and the milestone went a second time after the restart (test/power-cut.test.ts).
   */
  markMilestoneSent(id: number, nowMs: number, receipt?: Receipt): void {
    this.ctx.withReserve(() =>
      this.ctx.durably(() =>
        this.db
          .prepare('UPDATE milestones SET sent_ms = ?, last_error = ?, last_status = ?, correlation_id = ? WHERE id = ?')
          .run(nowMs, receipt?.duplicate ? `HTTP ${receipt.status}: the service already had it` : null, receipt?.status ?? null, receipt?.correlationId ?? null, id),
      ),
    );
  }

  markMilestoneFailed(id: number, error: string, status: number | null = null): void {
    this.ctx.withReserve(() => this.db.prepare('UPDATE milestones SET last_error = ?, last_status = ? WHERE id = ?').run(error.slice(0, 500), status, id));
  }

  /**
   * A milestone is about to go out: counted before it leaves (the request waits for the sync
   * of this commit), so after a lost answer or a crash its next send knows it may be a
   * repeat, and only then takes a 409 as "the service has it".
   */
  markMilestoneAttempt(id: number): void {
    this.ctx.withReserve(() => this.db.prepare('UPDATE milestones SET attempts = attempts + 1 WHERE id = ?').run(id));
  }

  /** The saved state of each stop of a load (absent: never seen, i.e. outside). */
  stopStates(loadNumber: string): Map<number, StopState> {
    const rows = this.db.prepare('SELECT * FROM stop_state WHERE load_number = ?').all(loadNumber) as RawStopState[];
    return new Map(
      rows.map((r) => [
        r.stop_sequence,
        {
          state: r.state,
          firstInsideMs: r.first_inside_ms,
          lastInsideMs: r.last_inside_ms,
          insideFixes: r.inside_fixes,
          outsideFixes: r.outside_fixes,
          arrivedMs: r.arrived_ms,
          departedMs: r.departed_ms,
          delayReportedS: r.delay_reported_s,
        },
      ]),
    );
  }

  saveStopState(loadNumber: string, seq: number, s: StopState): void {
    this.db
      .prepare(
        `INSERT INTO stop_state (load_number, stop_sequence, state, first_inside_ms, last_inside_ms, inside_fixes, outside_fixes, arrived_ms, departed_ms, delay_reported_s)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (load_number, stop_sequence) DO UPDATE SET state = excluded.state, first_inside_ms = excluded.first_inside_ms,
           last_inside_ms = excluded.last_inside_ms, inside_fixes = excluded.inside_fixes, outside_fixes = excluded.outside_fixes,
           arrived_ms = excluded.arrived_ms, departed_ms = excluded.departed_ms, delay_reported_s = excluded.delay_reported_s`,
      )
      .run(loadNumber, seq, s.state, s.firstInsideMs, s.lastInsideMs, s.insideFixes, s.outsideFixes, s.arrivedMs, s.departedMs, s.delayReportedS);
  }

  /** Save stop states alone (fixes that moved a state machine without an event). */
  saveStopStates(loadNumber: string, states: ReadonlyArray<[number, StopState]>): void {
    if (states.length === 0) return;
    this.db.transaction(() => {
      for (const [seq, st] of states) this.saveStopState(loadNumber, seq, st);
    })();
  }
}
