/**
 * Sending trace points, and finding the refused ones. A request the service refuses (400,
 * 422...) or finds too large (413) is split in halves until the refused points are found;
 * they are parked in the dead-letter table with the answer, and everything else is
 * delivered in the same cycle. On 413 the chunk size is halved for what follows. When both
 * halves of the first split, and every part down the first half to a single point, are
 * refused with the same answer, the refusal is the request's, not a point's: the chunk is
 * parked whole and the load's traces wait (refusals.ts).
 */
import type { PostOutcome } from '../api/client.js';
import type { Trace } from '../api/schemas.js';
import type { Fix, FixedRequest, LoadRow } from '../buffer/store.js';
import { correlationIdOf, describeOutcome, isDelivered } from './classify.js';
import type { DeliveryContext } from './context.js';
import { fixPart, partsDone, partTaken } from './in-doubt.js';
import { sameAnswer, type RefusedLoads } from './refusals.js';
import { idempotencyKeyFor, traceBody, type TraceChunk } from './traces.js';

/** A trace chunk built ahead of sending. */
export interface Prepared {
  load: LoadRow;
  /** The request body, serialised and encoded; null when the chunk only consumes readings sampling skipped. */
  body: Buffer | null;
  key: string;
  points: number;
  readingIds: number[];
  lastId: number;
  lastSampleMs: number | null;
  /** What the acknowledgement carries besides the cursor: temperatures dropped, the fix at lastId (see TraceChunk). */
  dropped: number;
  cursorFix: Fix | null;
  /** The chunk's trace objects again, for splitting a refused request. */
  rebuild: () => TraceChunk | undefined;
  /** The request as the buffer fixes it before it is sent (requests.ts); undefined when there is nothing to send. */
  fix: FixedRequest | undefined;
  /** Whether `fix` is on the disk already. */
  fixed: boolean;
  /** Whether it may have gone out before under the same key: only then is a 409 "already there". */
  sentBefore: boolean;
}

export type Delivered = 'delivered' | 'failed';

/** Answers that say the request was not taken (3xx counted as 300). */
const NOT_TAKEN = new Set([300, 401, 403, 404, 408, 425, 429, 503]);

/** Some of a request's points, with their readings. */
interface Part {
  traces: Trace[];
  readingIds: number[];
}

/** A refusal of a request sent once, not split (see sendOnce). */
export interface Refusal {
  cls: 'refused' | 'too-large';
  outcome: PostOutcome;
}

export class TracePoster {
  /** The correlation id of the last trace request delivered, for the load's row. */
  lastCorrelation: string | undefined;
  /**
   * Whether the last failure was an answer that says the service did not take the request
   * (429, 503, 408, 425, 3xx, 401, 403, 404), which may then be built anew. Without an answer
   * (a lost one, a timeout), with one that does not say (500, 502, 504: a gateway whose
   * service may have taken it), or with one to a copy the client sent again after the
   * connection died under the first (`resent`), it may be at the service.
   */
  lastFailureNotTaken = false;
  /** The request deliverPrepared sends: when it is split, its parts go on the disk as they go (in-doubt.ts). */
  private whole: { loadNumber: string; key: string } | undefined;
  /** Whether a part of the last request deliverPrepared sent was fixed on its own (it goes first next time). */
  partFixed = false;
  /** Keys of every request this run posted, halves of split ones included (a 409 to one of them is a repeat). */
  readonly sentKeys = new Set<string>();

  constructor(
    private readonly ctx: DeliveryContext,
    private readonly refusals: RefusedLoads,
  ) {}

  /**
   * Deliver these trace points: as one request, or, when the service refuses it or finds it
   * too large, as halves, down to single points that are parked. `delivered` collects the
   * reading ids the service accepted. Resolves 'failed' when delivery must pause. `whole`:
   * the points are a request of their own, not a part of a split one.
   */
  deliverTraces(load: LoadRow, traces: Trace[], readingIds: number[], delivered: number[], sentBefore: boolean, whole = true): Promise<Delivered> {
    return this.post(load, this.bodyOf(load, traces), this.keyOf(load, traces), readingIds, delivered, sentBefore, undefined, (cls, outcome) =>
      this.split(load, traces, readingIds, delivered, sentBefore, cls, outcome, whole),
    );
  }

  /** These points as one request, never split: delivered, failed (delivery pauses), or the service's refusal. */
  async sendOnce(load: LoadRow, traces: Trace[], readingIds: number[], delivered: number[], sentBefore: boolean): Promise<Delivered | Refusal> {
    let refusal: Refusal | undefined;
    const result = await this.post(load, this.bodyOf(load, traces), this.keyOf(load, traces), readingIds, delivered, sentBefore, undefined, async (cls, outcome) => {
      refusal = { cls, outcome };
      return 'delivered';
    });
    return refusal ?? result;
  }

  private bodyOf(load: LoadRow, traces: Trace[]) {
    return traceBody(load.loadNumber, traces, this.ctx.deps.config.api.extra_fields);
  }

  private keyOf(load: LoadRow, traces: Trace[]) {
    return idempotencyKeyFor('trace', this.ctx.deps.deviceId, load.loadNumber, traces);
  }

  /** A chunk built ahead, sent as serialised; its trace objects are built again only if it must be split. */
  async deliverPrepared(p: Prepared, body: Buffer, delivered: number[], onWritten?: () => void): Promise<Delivered> {
    this.whole = { loadNumber: p.load.loadNumber, key: p.key };
    this.partFixed = false;
    try {
      const result = await this.post(p.load, body, p.key, p.readingIds, delivered, p.sentBefore, onWritten, (cls, outcome) => {
        const again = p.rebuild();
        // Every reading of the chunk went meanwhile (a limit dropped them): nothing left to split.
        return again?.body ? this.split(p.load, again.body.traces, again.readingIds, delivered, p.sentBefore, cls, outcome, true) : Promise.resolve('delivered');
      });
      if (result === 'delivered' && this.partFixed) partsDone(this.ctx.deps.store, p.load.loadNumber);
      return result;
    } finally {
      this.whole = undefined;
    }
  }

  /** One trace request; a refusal goes to `refused` (split, for a request of points). */
  private async post(
    load: LoadRow,
    body: object | string | Buffer,
    key: string,
    readingIds: number[],
    delivered: number[],
    sentBefore: boolean,
    onWritten: (() => void) | undefined,
    refused: (cls: Refusal['cls'], outcome: PostOutcome) => Promise<Delivered>,
  ): Promise<Delivered> {
    const { ctx } = this;
    if (ctx.stopping) return 'failed';
    const { client, config, log } = ctx.deps;
    this.lastFailureNotTaken = false;
    const seen = sentBefore || this.sentKeys.has(key);
    // A part of a split request: on the disk before it leaves (in-doubt.ts).
    const part = this.whole !== undefined && key !== this.whole.key;
    if (part) {
      fixPart(ctx.deps.store, load.loadNumber, readingIds, key);
      this.partFixed = true;
    }
    if (this.sentKeys.size >= 10_000) this.sentKeys.clear();
    this.sentKeys.add(key);
    const outcome = await ctx.post(() => client.postTraces(body, key, ctx.signal, onWritten), seen);
    const cls = ctx.classify(outcome, seen);
    if (isDelivered(cls)) {
      delivered.push(...readingIds);
      if (part) partTaken(ctx.deps.store, load.loadNumber, readingIds);
      ctx.status.sent.traceRequests += 1;
      ctx.status.sent.tracePoints += readingIds.length;
      this.lastCorrelation = correlationIdOf(outcome, config.api.correlation_id_field, config.api.correlation_id_header);
      if (cls === 'duplicate') {
        ctx.status.duplicates += 1;
        log.info({ load: load.loadNumber, points: readingIds.length }, 'trace request already at the service (HTTP 409): counted as delivered, a duplicate');
      } else {
        log.debug({ load: load.loadNumber, points: readingIds.length, correlationId: this.lastCorrelation }, 'trace request delivered');
      }
      return 'delivered';
    }
    if (cls === 'refused' || cls === 'too-large') return refused(cls, outcome);
    // A copy the client sent again (outcome.resent) says nothing of the first, which the service may have taken.
    this.lastFailureNotTaken = outcome.kind === 'response' && !outcome.resent && (cls === 'intercepted' || NOT_TAKEN.has(cls === 'redirect' ? 300 : outcome.status));
    // A part sent for the first time that the service says it did not take is not in doubt: the retry splits anew.
    if (part && this.lastFailureNotTaken && !seen) {
      partsDone(ctx.deps.store, load.loadNumber);
      this.partFixed = false;
    }
    ctx.fail(cls, describeOutcome(outcome), outcome, { load: load.loadNumber, points: readingIds.length });
    return 'failed';
  }

  /**
   * The service refused these points or found them too many: park a single point, else send
   * halves. `whole`: the points were a request of their own (the first split, see splitWhole).
   * `sentBefore`: the request may have gone out before, and so may its halves (a retry splits
   * the same way).
   */
  private async split(load: LoadRow, traces: Trace[], readingIds: number[], delivered: number[], sentBefore: boolean, cls: Refusal['cls'], outcome: PostOutcome, whole: boolean): Promise<Delivered> {
    const { ctx } = this;
    const { store, config, log } = ctx.deps;
    const why = describeOutcome(outcome);
    if (traces.length === 1) {
      const body = traceBody(load.loadNumber, traces, config.api.extra_fields);
      const answer = outcome.kind === 'response' ? outcome : undefined;
      store.parkReading(readingIds[0], load.loadNumber, answer?.status ?? null, answer ? answer.body : why, body, ctx.now(), answer?.headers);
      ctx.status.deadLettered.tracePoints += 1;
      log.error({ load: load.loadNumber, reading: readingIds[0] }, `trace point refused and parked in the dead-letter table: ${why}`);
      return 'delivered';
    }
    if (cls === 'too-large') {
      ctx.status.chunkLimit = Math.max(1, Math.floor(traces.length / 2));
      log.warn({ load: load.loadNumber, chunkLimit: ctx.status.chunkLimit }, 'service says the request is too large; sending smaller chunks');
    } else {
      log.warn({ load: load.loadNumber, points: traces.length }, `trace request refused, splitting it to find the refused points: ${why}`);
    }
    const half = Math.ceil(traces.length / 2);
    if (whole) return this.splitWhole(load, traces, readingIds, delivered, sentBefore, half);
    if ((await this.deliverTraces(load, traces.slice(0, half), readingIds.slice(0, half), delivered, sentBefore, false)) === 'failed') return 'failed';
    return this.deliverTraces(load, traces.slice(half), readingIds.slice(half), delivered, sentBefore, false);
  }

  /**
   * The first split of a request: each half goes once. Both refused with the same answer
   * (status and body) may be the service refusing the request, not a point of it (a field it
   * requires on every body, a load it does not know): bisecting on would cost 2n-1 requests
   * and n dead letters at every push. Or it may be two refused points, one in each half, of a
   * service whose answer does not say which (or says "traces[3]", the same index in both):
   * parking the request would hold the load's good points back for as long as the service
   * refuses the two. The first half is split on down to a single point, both parts each time
   * (2 requests a level): a part taken on the way says the refusal is of points, and the
   * refused parts are split on as usual; every part refused alike, to the last point, is the
   * request's: the points are parked as one dead letter with that answer, and the load's
   * traces wait for the service (refusals.ts). Otherwise each refused half is split on.
   */
  private async splitWhole(load: LoadRow, traces: Trace[], readingIds: number[], delivered: number[], sentBefore: boolean, half: number): Promise<Delivered> {
    const parts: Part[] = [
      { traces: traces.slice(0, half), readingIds: readingIds.slice(0, half) },
      { traces: traces.slice(half), readingIds: readingIds.slice(half) },
    ];
    const answers = await this.sendEach(load, parts, delivered, sentBefore);
    if (answers === 'failed') return 'failed';
    let refused = parts.map((part, i) => ({ part, refusal: answers[i] }));
    const [a, b] = answers;
    if (a?.cls === 'refused' && b?.cls === 'refused' && sameAnswer(a.outcome, b.outcome)) {
      const probe = await this.probe(load, parts[0]!, a.outcome, delivered, sentBefore);
      if (probe === 'failed') return 'failed';
      if (probe === 'request') return this.parkWhole(load, traces, readingIds, b.outcome);
      refused = [...probe, refused[1]!];
    }
    for (const { part, refusal } of refused) {
      if (refusal && (await this.split(load, part.traces, part.readingIds, delivered, sentBefore, refusal.cls, refusal.outcome, false)) === 'failed') return 'failed';
    }
    return 'delivered';
  }

  /** Each part once, in order: its refusal, or undefined when it was delivered. */
  private async sendEach(load: LoadRow, parts: Part[], delivered: number[], sentBefore: boolean): Promise<Array<Refusal | undefined> | 'failed'> {
    const answers: Array<Refusal | undefined> = [];
    for (const part of parts) {
      const result = await this.sendOnce(load, part.traces, part.readingIds, delivered, sentBefore);
      if (result === 'failed') return 'failed';
      answers.push(result === 'delivered' ? undefined : result);
    }
    return answers;
  }

  /**
   * Down the first halves of `part` (refused with `answer`): 'request' when every part is
   * refused alike to a single point; else the parts refused on the way, with their refusals,
   * to split on (those taken are delivered).
   */
  private async probe(load: LoadRow, part: Part, answer: PostOutcome, delivered: number[], sentBefore: boolean): Promise<'request' | 'failed' | Array<{ part: Part; refusal: Refusal }>> {
    const refused: Array<{ part: Part; refusal: Refusal }> = [];
    let current = part;
    while (current.traces.length > 1) {
      const half = Math.ceil(current.traces.length / 2);
      const halves: Part[] = [
        { traces: current.traces.slice(0, half), readingIds: current.readingIds.slice(0, half) },
        { traces: current.traces.slice(half), readingIds: current.readingIds.slice(half) },
      ];
      const answers = await this.sendEach(load, halves, delivered, sentBefore);
      if (answers === 'failed') return 'failed';
      const alike = answers.every((r) => r?.cls === 'refused' && sameAnswer(r.outcome, answer));
      for (const [i, r] of answers.entries()) if (r && (!alike || i === 1)) refused.push({ part: halves[i]!, refusal: r });
      if (!alike) return refused;
      current = halves[0]!;
    }
    return 'request';
  }

  /** The service refuses the request itself: its points parked as one dead letter, the load's traces wait. */
  private parkWhole(load: LoadRow, traces: Trace[], readingIds: number[], outcome: PostOutcome): Delivered {
    const { store, config } = this.ctx.deps;
    const answer = outcome.kind === 'response' ? outcome : undefined;
    const body = traceBody(load.loadNumber, traces, config.api.extra_fields);
    const id = store.parkRequest(readingIds, load.loadNumber, answer?.status ?? null, answer ? answer.body : describeOutcome(outcome), body, this.ctx.now(), answer?.headers);
    this.ctx.status.deadLettered.tracePoints += readingIds.length;
    this.refusals.parked(load.loadNumber, id, readingIds.length, outcome);
    return 'delivered';
  }
}
