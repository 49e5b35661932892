/**
 * Trace requests fixed before they are sent (migration 7 -> 8). A request's readings and its
 * Idempotency-Key are on the disk before it leaves, and every retry (after a lost answer, a
 * timeout, a restart) sends exactly those points under that key until an answer settles it:
 * newer readings go in the next request. A retry built again from the cursor up to the
 * newest reading carried more points under a new key, and a service that deduplicates by key
 * stored the first ones twice.
 *
 * One row per load and kind: its next chunk, or its newest position sent ahead of a backlog.
 * A row is written in the same transaction as the answer to the request before it (the drain
 * builds the next chunk while one is at the service), so a drain pays no extra commit for it;
 * only the first request of a push is fixed by a write of its own.
 */
import type { Statement } from 'better-sqlite3';
import type { BufferContext } from './store.js';

export type RequestKind = 'chunk' | 'newest';

export interface FixedRequest {
  loadNumber: string;
  kind: RequestKind;
  /** The load's cursor the request starts after. */
  afterId: number;
  /** Where the load's cursor goes once the request is settled (sampled-out readings included). */
  lastId: number;
  /** The sampling point before the request's first point. */
  lastSampleMs: number | null;
  /** The readings that are its points, in order. */
  pointIds: number[];
  /** Its Idempotency-Key; null once some of its points were settled on their own (a split), so the rest's key is derived from them. */
  key: string | null;
  /** Temperature-only readings it passes unsent (counted with its acknowledgement; see chunk-ack.ts). */
  dropped: number;
  /** When it was fixed (epoch ms); undefined for one not written yet. */
  fixedMs?: number;
}

interface RawRequest {
  load_number: string;
  kind: RequestKind;
  after_id: number;
  last_id: number;
  last_sample_ms: number | null;
  point_ids: string;
  idem_key: string | null;
  dropped: number;
  fixed_ms: number;
}

/** Ids as the first and the steps between them: a 500-point chunk sampled a minute apart is some 1.5 KB, not 4 KB. */
export function encodeIds(ids: readonly number[]): string {
  let text = '';
  let prev = 0;
  for (const id of ids) {
    text += text === '' ? `${id}` : `,${id - prev}`;
    prev = id;
  }
  return text;
}

export function decodeIds(text: string): number[] {
  const ids: number[] = [];
  let prev = 0;
  for (const part of text === '' ? [] : text.split(',')) {
    prev = ids.length === 0 ? Number(part) : prev + Number(part);
    ids.push(prev);
  }
  return ids;
}

export class Requests {
  private readonly get: Statement;
  private readonly put: Statement;
  private readonly del: Statement;
  private readonly unkeyStmt: Statement;

  constructor(private readonly ctx: BufferContext) {
    const db = ctx.db;
    this.get = db.prepare('SELECT * FROM requests WHERE load_number = ? AND kind = ?');
    this.put = db.prepare(
      `INSERT INTO requests (load_number, kind, after_id, last_id, last_sample_ms, point_ids, idem_key, dropped, fixed_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (load_number, kind) DO UPDATE SET after_id = excluded.after_id, last_id = excluded.last_id, last_sample_ms = excluded.last_sample_ms,
           point_ids = excluded.point_ids, idem_key = excluded.idem_key, dropped = excluded.dropped, fixed_ms = excluded.fixed_ms`,
    );
    this.del = db.prepare('DELETE FROM requests WHERE load_number = ? AND kind = ?');
    this.unkeyStmt = db.prepare('UPDATE requests SET idem_key = NULL WHERE load_number = ? AND kind = ?');
  }

  /** The load's request of this kind that went out, or may have, and has no answer yet. */
  fixed(loadNumber: string, kind: RequestKind): FixedRequest | undefined {
    const r = this.get.get(loadNumber, kind) as RawRequest | undefined;
    if (!r) return undefined;
    return { loadNumber, kind, afterId: r.after_id, lastId: r.last_id, lastSampleMs: r.last_sample_ms, pointIds: decodeIds(r.point_ids), key: r.idem_key, dropped: r.dropped, fixedMs: r.fixed_ms };
  }

  /** Every request fixed and not yet answered. */
  all(): FixedRequest[] {
    return (this.ctx.db.prepare('SELECT load_number, kind FROM requests').all() as Array<{ load_number: string; kind: RequestKind }>).flatMap((r) => this.fixed(r.load_number, r.kind) ?? []);
  }

  /** Fix a request in a transaction of its own (the first of a push: no answer before it to ride on). */
  fix(req: FixedRequest): void {
    this.ctx.withReserve(() => this.ctx.db.transaction(() => this.fixIn(req)).immediate());
  }

  /** Fix a request, inside the caller's transaction. */
  fixIn(req: FixedRequest): void {
    this.put.run(req.loadNumber, req.kind, req.afterId, req.lastId, req.lastSampleMs, encodeIds(req.pointIds), req.key, req.dropped, Date.now());
  }

  /** The load's request of this kind is not fixed any more: the service answered that it did not take it. */
  release(loadNumber: string, kind: RequestKind): void {
    this.ctx.withReserve(() => this.del.run(loadNumber, kind));
  }

  /** The load's request of this kind has its answer (inside the caller's transaction). */
  settleIn(loadNumber: string, kind: RequestKind): void {
    this.del.run(loadNumber, kind);
  }

  /** Some of the request's points were settled on their own: the rest go under a key of their own (inside the caller's transaction). */
  unkeyIn(loadNumber: string, kind: RequestKind): void {
    this.unkeyStmt.run(loadNumber, kind);
  }
}
