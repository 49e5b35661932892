/**
 * Sending trace points, and finding the refused ones. A request the service refuses (400,
 * 422...) or finds too large (413) is split in halves until the refused points are found;
 * they are parked in the dead-letter table with the answer, and everything else is
 * delivered in the same cycle. On 413 the chunk size is halved for what follows.
 */
import type { PostOutcome } from '../api/client.js';
import type { Trace } from '../api/schemas.js';
import type { Fix, LoadRow } from '../buffer/store.js';
import { correlationIdOf, describeOutcome, isDelivered } from './classify.js';
import type { DeliveryContext } from './context.js';
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
  fix: Fix | null;
  /** The chunk's trace objects again, for splitting a refused request. */
  rebuild: () => TraceChunk | undefined;
}

export type Delivered = 'delivered' | 'failed';

export class TracePoster {
  /** The correlation id of the last trace request delivered, for the load's row. */
  lastCorrelation: string | undefined;

  constructor(private readonly ctx: DeliveryContext) {}

  /**
   * Deliver these trace points: as one request, or, when the service refuses it or finds it
   * too large, as halves, down to single points that are parked. `delivered` collects the
   * reading ids the service accepted. Resolves 'failed' when delivery must pause.
   */
  deliverTraces(load: LoadRow, traces: Trace[], readingIds: number[], delivered: number[]): Promise<Delivered> {
    const { config, deviceId } = this.ctx.deps;
    const body = traceBody(load.loadNumber, traces, config.api.extra_fields);
    const key = idempotencyKeyFor('trace', deviceId, load.loadNumber, traces);
    return this.post(load, body, key, readingIds, delivered, undefined, () => ({ traces, readingIds }));
  }

  /** A chunk built ahead, sent as serialised; its trace objects are built again only if it must be split. */
  deliverPrepared(p: Prepared, body: Buffer, delivered: number[], onWritten?: () => void): Promise<Delivered> {
    return this.post(p.load, body, p.key, p.readingIds, delivered, onWritten, () => {
      const again = p.rebuild();
      // Every reading of the chunk went meanwhile (a limit dropped them): nothing left to split.
      return again?.body ? { traces: again.body.traces, readingIds: again.readingIds } : undefined;
    });
  }

  /** One trace request; on a refusal the points from `toSplit` are sent as halves (see split). */
  private async post(
    load: LoadRow,
    body: object | string | Buffer,
    key: string,
    readingIds: number[],
    delivered: number[],
    onWritten: (() => void) | undefined,
    toSplit: () => { traces: Trace[]; readingIds: number[] } | undefined,
  ): Promise<Delivered> {
    const { ctx } = this;
    if (ctx.stopping) return 'failed';
    const { client, config, log } = ctx.deps;
    const outcome = await ctx.post(() => client.postTraces(body, key, ctx.signal, onWritten));
    const cls = ctx.classify(outcome);
    if (isDelivered(cls)) {
      delivered.push(...readingIds);
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
    if (cls === 'refused' || cls === 'too-large') {
      const points = toSplit();
      return points ? this.split(load, points.traces, points.readingIds, delivered, cls, outcome) : 'delivered';
    }
    ctx.fail(cls, describeOutcome(outcome), outcome, { load: load.loadNumber, points: readingIds.length });
    return 'failed';
  }

  /** The service refused these points or found them too many: park a single point, else send halves. */
  private async split(load: LoadRow, traces: Trace[], readingIds: number[], delivered: number[], cls: 'refused' | 'too-large', outcome: PostOutcome): Promise<Delivered> {
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
    if ((await this.deliverTraces(load, traces.slice(0, half), readingIds.slice(0, half), delivered)) === 'failed') return 'failed';
    return this.deliverTraces(load, traces.slice(half), readingIds.slice(half), delivered);
  }
}
