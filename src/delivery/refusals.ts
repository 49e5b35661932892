/**
 * Refusals by their scope. A trace request refused with 400 or 422 is split in halves to find
 * the refused points (post-traces.ts). When both halves of the first split, and both parts at
 * each level down the first half to a single point, get the same answer, the refusal is the
 * request's, not a point's: a deployment that requires a field on every body, or does not
 * know the load, refuses each half, each quarter, each point alike, and bisecting on cost
 * 2n-1 requests and n dead letters at every push (the probe costs 2 log2(n)). The request is parked
 * as one dead letter instead, and the load's traces wait: that request goes again, alone and
 * never split, every `delivery.retry_max_s` (at once after a reload or a start). When the
 * service takes it, the load's delivery resumes; milestones and other loads go on meanwhile.
 *
 * Which loads wait is read from the dead letters (those of a whole request), so a restart
 * keeps it and `dead-letter retry` of that dead letter ends it. The wait is on the monotonic
 * clock (a step of the wall clock does not stretch it); `status` shows its wall time.
 */
import type { PostOutcome } from '../api/client.js';
import type { Trace } from '../api/schemas.js';
import { MAX_ANSWER_CHARS, type LoadRow, type RefusedRequest, type StoredReading } from '../buffer/store.js';
import { type Deadline, deadlineIn, isPast, wallOf } from '../clock.js';
import { describeOutcome } from './classify.js';
import type { DeliveryContext, RefusedLoad, Step } from './context.js';
import type { Delivered, Refusal } from './post-traces.js';

/** The same answer: the same status and the same body (as much of it as a dead letter keeps). */
export function sameAnswer(a: PostOutcome, b: PostOutcome): boolean {
  return a.kind === 'response' && b.kind === 'response' && a.status === b.status && a.body === b.body;
}

/** The answer a parked request was refused with again (a dead letter keeps MAX_ANSWER_CHARS of it). */
const sameAsParked = (o: PostOutcome, r: RefusedRequest) => o.kind === 'response' && o.status === r.status && o.body.slice(0, MAX_ANSWER_CHARS) === r.response;

/** What `status` and the log say of a load whose requests the service refuses. */
export const refusedReason = (answer: string) => `the service refuses every trace request: ${answer}`;

/** A refused request's answer as describeOutcome writes it. */
const answerOf = (r: RefusedRequest) => describeOutcome({ kind: 'response', status: r.status ?? 0, body: r.response, durationMs: 0 });

/** What sends a request once (TracePoster.sendOnce) and builds one from parked readings (Drain). */
export interface RetryTools {
  sendOnce(load: LoadRow, traces: Trace[], readingIds: number[], delivered: number[]): Promise<Delivered | Refusal>;
  chunkOf(load: LoadRow, readings: StoredReading[]): { traces: Trace[]; readingIds: number[] } | undefined;
}

export class RefusedLoads {
  /** When each parked request goes again, by dead letter id; one not here (after a start) goes at once. */
  private readonly nextTry = new Map<number, Deadline>();
  /** Loads whose traces wait, as last read from the buffer or parked since. */
  private readonly waitingLoads = new Set<string>();
  /** Dead letters whose wait was logged (once each). */
  private readonly logged = new Set<number>();

  /** `onResumed`: a load's traces go again (the sender starts a push: its backlog waited long enough). */
  constructor(
    private readonly ctx: DeliveryContext,
    private readonly onResumed: () => void,
  ) {}

  /** Whether this load's traces wait (as of the last `refresh` or `parked`). */
  waits(loadNumber: string): boolean {
    return this.waitingLoads.has(loadNumber);
  }

  /** The service refused a whole request of this load: it is parked as dead letter `id`; the load's traces wait. */
  parked(loadNumber: string, id: number, points: number, outcome: PostOutcome): void {
    const reason = refusedReason(describeOutcome(outcome));
    const next = deadlineIn(this.retryMs(), this.ctx.clock);
    this.nextTry.set(id, next);
    this.logged.add(id);
    this.waitingLoads.add(loadNumber);
    this.ctx.status.refusedLoads[loadNumber] ??= { reason, deadLetter: id, points, sinceMs: this.ctx.now(), nextTryMs: next.wall };
    this.ctx.deps.log.error(
      { load: loadNumber, points, deadLetter: id, retryInS: this.retryMs() / 1000 },
      `${reason}; every part of the request was refused alike, down to a single point, so its ${points} points are parked as one dead letter and the load's traces wait; that request goes again every delivery.retry_max_s (or after a reload)`,
    );
  }

  /** Read which loads wait from the dead letters (an operator's `dead-letter retry` ends a wait), for `status` too. */
  refresh(): RefusedRequest[] {
    const requests = this.ctx.deps.store.refusedRequests();
    const status: Record<string, RefusedLoad> = {};
    this.waitingLoads.clear();
    for (const r of requests) {
      this.waitingLoads.add(r.loadNumber);
      // One not tried since the start goes at once; its time is kept, so `status` (and the
      // daemon's state row, written when it changes) stays still until then.
      if (!this.nextTry.has(r.id)) this.nextTry.set(r.id, deadlineIn(0, this.ctx.clock));
      const nextTryMs = this.nextTry.get(r.id)!.wall;
      const entry = status[r.loadNumber];
      if (entry) {
        entry.points += r.readingIds.length;
        entry.nextTryMs = Math.min(entry.nextTryMs, nextTryMs);
      } else {
        status[r.loadNumber] = { reason: refusedReason(answerOf(r)), deadLetter: r.id, points: r.readingIds.length, sinceMs: r.createdMs, nextTryMs };
      }
      if (!this.logged.has(r.id)) {
        this.logged.add(r.id);
        this.ctx.deps.log.warn({ load: r.loadNumber, points: r.readingIds.length, deadLetter: r.id }, `${status[r.loadNumber].reason}; the load's traces wait for the parked request to be taken`);
      }
    }
    for (const id of this.nextTry.keys()) if (!requests.some((r) => r.id === id)) this.nextTry.delete(id);
    this.ctx.status.refusedLoads = status;
    return requests;
  }

  /** Try every parked request now (a reload: the config or the service may have been fixed). */
  retryNow(): void {
    for (const id of this.nextTry.keys()) this.nextTry.set(id, deadlineIn(0, this.ctx.clock));
  }

  /** The wall clock was stepped: each next try's wall time again, for `status` (the wait goes on). */
  reshow(): void {
    for (const d of this.nextTry.values()) d.wall = wallOf(d, this.ctx.clock);
    this.refresh();
  }

  /**
   * Send each parked request whose time has come, once. Taken: its points are delivered and
   * the load's traces go again. Refused alike: it waits another `retry_max_s`. Answered
   * otherwise (a point of it may be at fault after all): it goes back as a `dead-letter
   * retry`, split as usual.
   */
  async retryDue(tools: RetryTools): Promise<Step> {
    const { store, log } = this.ctx.deps;
    let step: Step = 'empty';
    let settled = false;
    for (const r of this.refresh()) {
      if (this.ctx.stopping) return 'failed';
      const next = this.nextTry.get(r.id);
      if (next && !isPast(next, this.ctx.clock)) continue;
      const load = store.getLoad(r.loadNumber);
      const chunk = load ? tools.chunkOf(load, store.parkedReadings(r)) : undefined;
      if (!load || !chunk) {
        // The load or the readings are gone: nothing is left to send.
        store.settleRefusedRequest(r.id, r.loadNumber, r.readingIds);
        settled = true;
        continue;
      }
      step = 'sent';
      const result = await tools.sendOnce(load, chunk.traces, chunk.readingIds, []);
      if (result === 'failed') return 'failed';
      if (result === 'delivered') {
        store.settleRefusedRequest(r.id, r.loadNumber, r.readingIds);
        this.onResumed();
        log.info({ load: r.loadNumber, points: chunk.readingIds.length, deadLetter: r.id }, "the service took the trace request it had refused; the load's traces go again");
      } else if (result.cls === 'refused' && sameAsParked(result.outcome, r)) {
        this.nextTry.set(r.id, deadlineIn(this.retryMs(), this.ctx.clock));
        log.debug({ load: r.loadNumber, deadLetter: r.id }, 'the parked trace request is still refused alike; the load waits');
      } else {
        store.retryDeadLetters([r.id]);
        log.warn(
          { load: r.loadNumber, deadLetter: r.id },
          `the service answers the parked trace request otherwise now (${describeOutcome(result.outcome)}); its points go again as a retried dead letter, split as usual`,
        );
      }
    }
    if (step === 'sent' || settled) this.refresh();
    return step;
  }

  private retryMs(): number {
    return this.ctx.deps.config.delivery.retry_max_s * 1000;
  }
}
