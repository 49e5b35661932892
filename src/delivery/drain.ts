/**
 * A trace push: every waiting reading goes out, one chunk per load in turn, the load waiting
 * longest first. A depot's backlog drains oldest first across the fleet, no load waits
 * behind another's week of data, and the rows acknowledged together are neighbours on disk,
 * so the purge rewrites each page about once instead of once per chunk.
 *
 * The next chunk is built while a request is on the wire: building is CPU, sending is
 * mostly waiting. A chunk is acknowledged before the next is sent, so a crash can repeat at
 * most one request, with the same Idempotency-Key. After an outage, each load's newest
 * position goes first, alone, so the service learns where the truck is now.
 */
import type { FixedRequest, LoadRow, StoredReading } from '../buffer/store.js';
import type { DeliveryContext, Step } from './context.js';
import type { MilestoneSender } from './milestones.js';
import { type Newest, newestOf } from './newest-first.js';
import type { Delivered, Prepared, TracePoster } from './post-traces.js';
import type { Purger } from './purge.js';
import type { RefusedLoads } from './refusals.js';
import { buildTraceChunk, buildTraceJson, nextStopResolver, type TraceBuildOptions, type TraceReadings } from './traces.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A fixed request by what it holds: the same row read again later has the same. */
const rowKey = (r: FixedRequest) => `${r.loadNumber}\u0000${r.kind}\u0000${r.afterId}\u0000${r.lastId}`;

/** A load and its stop resolver, as a drain builds its chunks. */
interface LoadEntry {
  load: LoadRow;
  stopAt: (timeMs: number) => number | undefined;
}

export class Drain {
  /** Loads whose newest position already went out first in the current push. */
  private newestFirstDone = new Set<string>();
  /**
   * The requests fixed before this drain began (load, kind, range): a crash or a restart may
   * have come after they went out. Known by what they hold, not by the time they were fixed: a
   * device without a clock boots with one that is behind.
   */
  private readonly inherited: Set<string>;

  constructor(
    private readonly ctx: DeliveryContext,
    private readonly poster: TracePoster,
    private readonly milestones: MilestoneSender,
    private readonly purger: Purger,
    private readonly refusals: RefusedLoads,
  ) {
    this.inherited = new Set(ctx.deps.store.requests.all().map(rowKey));
  }

  /** A new push begins: each load's newest position may go first again. */
  newPush(): void {
    this.newestFirstDone = new Set();
  }

  /** Send every waiting reading; 'failed' when delivery must pause (the push is then not done). */
  async run(): Promise<Step> {
    const { ctx } = this;
    const { store, config } = ctx.deps;
    // What is buffered when the push starts: readings committed meanwhile wait for the next
    // push, so a push ends even while many loads keep adding points faster than a pass takes.
    const lastId = store.lastReadingId();
    let queue = store.loadsWithReadings();
    if ((await this.sendNewestFirst(queue.filter((n) => !this.newestFirstDone.has(n) && !this.refusals.waits(n)))) === 'failed') return 'failed';
    // Per drain: the load and its stop resolver, and where the next chunk of each load starts
    // (ahead of the buffer's cursor while a chunk is in flight).
    const loads = new Map<string, LoadEntry | null>();
    const cursors = new Map<string, { afterId: number; lastSampleMs: number | null; fix: LoadRow['cursorFix'] }>();
    const build = (): Prepared | undefined => {
      for (;;) {
        const loadNumber = queue.shift();
        if (loadNumber === undefined) return undefined;
        // The service refuses every request of this load: its traces wait (refusals.ts).
        if (this.refusals.waits(loadNumber)) continue;
        let entry = loads.get(loadNumber);
        if (entry === undefined) {
          const load = store.getLoad(loadNumber);
          entry = load ? { load, stopAt: this.stopResolver(load) } : null;
          loads.set(loadNumber, entry);
        }
        if (!entry) continue;
        const opts = this.traceOptions();
        let from = cursors.get(loadNumber);
        if (from === undefined) {
          // The load's first request of this drain: one fixed before that has no answer yet
          // (a lost answer, a timeout, a restart) goes again exactly, under its key.
          const fixed = store.requests.fixed(loadNumber, 'chunk');
          if (fixed) {
            const again = this.fromFixed(entry, fixed, opts);
            cursors.set(loadNumber, { afterId: again.lastId, lastSampleMs: again.lastSampleMs, fix: again.cursorFix });
            queue.push(loadNumber);
            return again;
          }
          from = { afterId: 0, lastSampleMs: entry.load.lastSampleMs, fix: entry.load.cursorFix };
        }
        const load = { ...entry.load, lastSampleMs: from.lastSampleMs, cursorFix: from.fix };
        const { stopAt } = entry;
        const final = load.endedMs !== null;
        // Readings committed after the push began wait for the next push.
        const chunk = buildTraceJson(load, { pages: store.tracePages(loadNumber, from.afterId, lastId) }, stopAt, opts, final);
        if (!chunk) continue;
        cursors.set(loadNumber, { afterId: chunk.lastId, lastSampleMs: chunk.lastSampleMs, fix: chunk.fix });
        // A full chunk may have more behind it: the load takes its turn again after the others.
        if (chunk.points >= opts.maxPoints) queue.push(loadNumber);
        const upTo = chunk.lastId;
        const afterId = from.afterId;
        return {
          load,
          // Bytes, not trace objects: 500 of them kept alive across a request would outlive V8's
          // young generation and be promoted, which made the drain mostly garbage collection.
          // Encoded here, while the request before is at the service: sent as text, the
          // request itself encoded it (Content-Length, undici's Buffer.from) after the answer
          // before it had come, some 0.3 ms a request.
          body: chunk.bytes,
          key: chunk.idempotencyKey,
          points: chunk.points,
          readingIds: chunk.readingIds,
          lastId: chunk.lastId,
          lastSampleMs: chunk.lastSampleMs,
          dropped: chunk.dropped,
          cursorFix: chunk.fix,
          // Exactly the points that were sent (less any a limit dropped meanwhile).
          rebuild: () => buildTraceChunk(load, { pages: store.tracePages(loadNumber, afterId, upTo) }, stopAt, { ...opts, maxPoints: chunk.points, pointIds: new Set(chunk.readingIds) }, true),
          fix:
            chunk.bytes === null
              ? undefined
              : { loadNumber, kind: 'chunk', afterId, lastId: chunk.lastId, lastSampleMs: from.lastSampleMs, pointIds: chunk.readingIds, key: chunk.idempotencyKey, dropped: chunk.dropped },
          fixed: false,
          sentBefore: false,
        };
      }
    };

    let current = build();
    let first = true;
    while (current) {
      if (ctx.stopping) return 'failed';
      if (store.hasPendingMilestones()) {
        // Milestones jump the queue: one recorded during a long drain goes out next. A
        // departure changes the stop of later points, so what was built ahead is built again.
        if (!(await this.milestones.send())) return 'failed';
        loads.clear();
        cursors.clear();
        queue = store.loadsWithReadings();
        current = build();
        continue;
      }
      if (this.refusals.waits(current.load.loadNumber)) {
        // Built while the request before it had the load's traces refused as a whole.
        current = build();
        continue;
      }
      // A backlog drains at a steady pace, not as fast as the service will take it.
      if (!first && config.delivery.drain_interval_ms > 0) await sleep(config.delivery.drain_interval_ms);
      first = false;
      const prepared = current;
      if (prepared.body === null) {
        // Only readings to consume (sampling skipped them at the end of an ended load, or
        // temperatures with no fix to place them): nothing to send.
        this.acknowledge(prepared);
        current = build();
        continue;
      }
      this.fixBeforeSending(prepared);
      const delivered: number[] = [];
      const { sending, next } = await this.sendWhileBuilding(prepared, prepared.body, delivered, build);
      if ((await sending) === 'failed') {
        // Parts of a split chunk got through before the failure: they must not go twice (to this
        // load), a part that failed in doubt goes again first, the rest under a key of its own.
        store.markSent(prepared.load.loadNumber, delivered);
        this.releaseIfAnswered(prepared, delivered);
        if (this.poster.partFixed) this.newestFirstDone.delete(prepared.load.loadNumber);
        return 'failed';
      }
      // Every point is at the service or parked: the chunk, and the readings sampling skipped,
      // are done; the request built meanwhile is fixed in the same write.
      this.acknowledge(prepared, next);
      current = next;
    }
    return 'empty';
  }

  /**
   * Send a prepared request and, once it is on the wire, build what goes after it. Not
   * before: the request goes out a few turns of the event loop later (after syncCommits'
   * fsync, and after undici checks a kept-alive connection with a setImmediate), and a build
   * that ran first held it back for the whole build. Waiting a fixed setImmediate did that:
   * the drain ran at 32-42% of the plain client's pace, 58-77% since (bench row 2a).
   */
  private async sendWhileBuilding<T>(p: Prepared, body: Buffer, delivered: number[], build: () => T): Promise<{ sending: Promise<Delivered>; next: T }> {
    let onWritten!: () => void;
    const written = new Promise<void>((r) => {
      onWritten = r;
    });
    const sending = this.poster.deliverPrepared(p, body, delivered, onWritten);
    await Promise.race([written, sending]);
    return { sending, next: build() };
  }

  /** Dead letters the operator put back (`dead-letter retry`): each reading as its own point, for the load that parked it. */
  async sendRetriedReadings(): Promise<Step> {
    const { store } = this.ctx.deps;
    const rows = store.retryReadings(this.ctx.status.chunkLimit);
    if (rows.length === 0) return 'empty';
    const byLoad = new Map<string, typeof rows>();
    for (const r of rows) byLoad.set(r.load_number ?? '', [...(byLoad.get(r.load_number ?? '') ?? []), r]);
    for (const [loadNumber, readings] of byLoad) {
      const load = store.getLoad(loadNumber);
      if (!load) {
        store.retryDone(
          loadNumber,
          readings.map((r) => r.id),
        );
        continue;
      }
      const chunk = this.retryChunk(load, readings);
      if (!chunk?.body) {
        store.retryDone(
          loadNumber,
          readings.map((r) => r.id),
        );
        continue;
      }
      const delivered: number[] = [];
      // Each was refused on its own before, under the key it goes with now.
      const result = await this.poster.deliverTraces(load, chunk.body.traces, chunk.readingIds, delivered, true);
      store.retryDone(loadNumber, delivered);
      if (result === 'failed') return 'failed';
    }
    return 'sent';
  }

  /** A parked request of a load whose traces wait goes again, once (refusals.ts). */
  retryRefused(): Promise<Step> {
    return this.refusals.retryDue({
      sendOnce: (load, traces, readingIds, delivered) => this.poster.sendOnce(load, traces, readingIds, delivered, true),
      chunkOf: (load, readings) => {
        const chunk = this.retryChunk(load, readings);
        return chunk?.body ? { traces: chunk.body.traces, readingIds: chunk.readingIds } : undefined;
      },
    });
  }

  /**
   * Parked readings as trace points again, each one a point (no sampling). A temperature-only
   * one is placed as it was when it first went, at the fix before it: the load's fix at its
   * cursor is newer by then, and placed there (or dropped, unsent) it was lost.
   */
  private retryChunk(load: LoadRow, readings: StoredReading[]) {
    const first = readings[0];
    const cursorFix = first ? this.ctx.deps.store.fixAtOrBefore(load.resourceId, first.id, first.time_ms) : null;
    return buildTraceChunk({ ...load, lastSampleMs: null, cursorFix }, readings, this.stopResolver(load), { ...this.traceOptions(), samplingMs: 0 }, true);
  }

  /**
   * A load's request fixed before and not yet answered, built again: exactly its points (less
   * any a limit dropped meanwhile, or that went on their own), its cursor and its key.
   */
  private fromFixed(entry: LoadEntry, fixed: FixedRequest, opts: TraceBuildOptions): Prepared {
    const { store } = this.ctx.deps;
    const load = { ...entry.load, lastSampleMs: fixed.lastSampleMs };
    // One more than its points: the walk goes on to its last id, so the fix there is the newest it passes.
    const pointOpts = { ...opts, maxPoints: fixed.pointIds.length + 1, pointIds: new Set(fixed.pointIds) };
    const pages = (): TraceReadings => ({ pages: store.tracePages(load.loadNumber, fixed.afterId, fixed.lastId) });
    const chunk = buildTraceJson(load, pages(), entry.stopAt, pointOpts, true);
    const points = chunk?.bytes ? chunk.points : 0;
    // The key it went with, while it carries the same points; else the one its points make.
    const key = fixed.key !== null && points === fixed.pointIds.length ? fixed.key : (chunk?.idempotencyKey ?? '');
    return {
      load,
      body: points > 0 ? (chunk?.bytes ?? null) : null,
      key,
      points,
      readingIds: chunk?.readingIds ?? [],
      lastId: fixed.lastId,
      lastSampleMs: points > 0 && chunk ? chunk.lastSampleMs : fixed.lastSampleMs,
      // The temperatures it passes unsent were counted when it was built (pointIds counts none).
      dropped: fixed.dropped,
      cursorFix: chunk?.fix ?? load.cursorFix,
      rebuild: () => buildTraceChunk(load, pages(), entry.stopAt, pointOpts, true),
      fix: { ...fixed, key },
      fixed: true,
      sentBefore: this.maySentBefore(fixed, key),
    };
  }

  /** A request fixed by an earlier run (a crash, a restart) may have gone out; one fixed by this one did if this one sent it. */
  private maySentBefore(fixed: FixedRequest, key: string): boolean {
    return this.inherited.has(rowKey(fixed)) || this.poster.sentKeys.has(key);
  }

  /** The request is on the disk with its key before it leaves (most were fixed with the answer before them). */
  private fixBeforeSending(p: Prepared): void {
    if (p.fix && !p.fixed) {
      this.ctx.deps.store.requests.fix(p.fix);
      p.fixed = true;
    }
    // The same points again after an answer that let it go.
    p.sentBefore ||= this.poster.sentKeys.has(p.key);
  }

  /**
   * A first send answered with a status that says the service did not take it (429, 503,
   * 401...): it is no longer fixed, and the next try is built anew (the newest position may
   * be newer by then). Without an answer, with one that does not say (500, 502, 504), or after
   * a try that may have reached the service (an earlier one, or one the client resent), it goes again as it was.
   */
  private releaseIfAnswered(p: Prepared, delivered: number[]): void {
    if (!p.fix || p.sentBefore || !this.poster.lastFailureNotTaken || delivered.length > 0) return;
    this.ctx.deps.store.requests.release(p.load.loadNumber, p.fix.kind);
  }

  /** The request that goes next, when it still needs fixing: fixed with the answer before it, and marked so. */
  private fixNext(next: Prepared | undefined): FixedRequest | undefined {
    if (!next?.fix || next.fixed) return undefined;
    next.fixed = true;
    return next.fix;
  }

  private acknowledge(p: Prepared, next?: Prepared): void {
    const { store, roomWanted } = this.ctx.deps;
    store.ackReadings(p.load.loadNumber, p.lastId, p.lastSampleMs, p.body === null ? undefined : this.poster.lastCorrelation, { fix: p.cursorFix, dropped: p.dropped }, this.fixNext(next));
    this.purger.pending = true;
    // On a full disk the rows just delivered go at once, not after the whole drain: purging is
    // how the room comes back, and on a 4 MB tmpfs the readings in memory waited until the
    // last of a backlog drained a chunk every drain_interval_ms (with a week's backlog on a
    // cellular link, long enough to drop the oldest past buffer.max_pending).
    if (roomWanted?.()) this.purger.slice();
  }

  private traceOptions(maxPoints = this.ctx.status.chunkLimit): TraceBuildOptions {
    const c = this.ctx.deps.config;
    return {
      samplingMs: c.sampling.interval_s * 1000,
      maxPoints: Math.min(maxPoints, c.delivery.max_traces_per_request),
      dateForm: c.api.date_time_format,
      deviceId: this.ctx.deps.deviceId,
      temperatureMaxAgeMs: c.sampling.temperature_max_age_s * 1000,
      temperatureUnit: c.api.temperature_unit,
      extraFields: c.api.extra_fields,
      temperatureWithoutFix: c.traces.temperature_without_fix,
      references: c.traces.references,
      maxFixAgeMs: c.milestones.max_fix_age_s * 1000,
    };
  }

  private stopResolver(load: LoadRow) {
    const { store, config } = this.ctx.deps;
    return nextStopResolver(load, store.listMilestones(load.loadNumber), config.codes.departure);
  }

  /**
   * After an outage the service first learns where the truck is now: each load whose backlog
   * is more than one chunk sends its newest position alone, before the oldest-first drain.
   * One load's request is built while the one before is at the service (200 loads after an
   * outage are 200 requests in series).
   */
  private async sendNewestFirst(loadNumbers: string[]): Promise<Step> {
    const { store, log } = this.ctx.deps;
    let i = 0;
    const build = (): Newest | undefined => {
      while (i < loadNumbers.length) {
        const loadNumber = loadNumbers[i++];
        const newest = newestOf(loadNumber, {
          store,
          opts: this.traceOptions(),
          stopResolver: (load) => this.stopResolver(load),
          maySentBefore: (fixed, key) => this.maySentBefore(fixed, key),
        });
        if (newest) return newest;
        // Nothing to send ahead: not looked at again in this push.
        this.newestFirstDone.add(loadNumber);
      }
      return undefined;
    };
    let current = build();
    while (current) {
      const { p, backlogS } = current;
      this.fixBeforeSending(p);
      const delivered: number[] = [];
      const { sending, next } = await this.sendWhileBuilding(p, p.body, delivered, build);
      const result = await sending;
      // Fixed for the next try unless the service answered (the newest position may be newer
      // then); a part in doubt (in-doubt.ts) split in turn keeps what got through.
      if (result === 'failed') {
        store.markSent(p.load.loadNumber, delivered);
        this.releaseIfAnswered(p, delivered);
        return 'failed';
      }
      store.markSent(p.load.loadNumber, delivered, { settle: 'newest', fixNext: this.fixNext(next?.p) });
      this.newestFirstDone.add(p.load.loadNumber);
      log.info({ load: p.load.loadNumber, backlogS }, 'newest position sent ahead of the backlog');
      current = next;
    }
    return 'sent';
  }
}
