/**
 * Moves records from the buffer to the service: milestones as soon as they are committed,
 * traces when a push is due (the schedule) and then until the backlog is drained.
 *
 * Only a 2xx lets a record leave the buffer. What the other answers do:
 * - 409 (delivery.conflict_is_delivered): the service has the record already; delivered,
 *   counted as a duplicate (a crash after the service took a request repeats it once);
 * - network error, timeout, 408, 425, 429, 5xx: keep, retry with exponential backoff and
 *   full jitter, or after Retry-After (capped);
 * - 3xx: never followed (the key would go to another host); retried with backoff, logged as a
 *   configuration problem;
 * - 401, 403, 404: the data is not at fault. Keep it, pause, retry every auth_retry_s, and
 *   resume at once when the key or config is reloaded (SIGHUP);
 * - 413: halve the chunk size and split the request;
 * - 400, 422, other 4xx: something in the request is refused. A trace request is split in
 *   halves until the refused points are found; they (and refused milestones) are parked in
 *   the dead-letter table with the answer, and everything else is delivered in the same cycle.
 */
import type { Logger } from 'pino';
import type { ApiClient, PostOutcome } from '../api/client.js';
import type { Trace } from '../api/schemas.js';
import type { Fix } from '../buffer/ingest.js';
import type { LoadRow, MilestoneRow, Store, StoredReading } from '../buffer/store.js';
import type { Config } from '../config/schema.js';
import { completePlace } from '../milestones/record.js';
import { backoffMs, classify, correlationIdOf, describeOutcome, isDelivered, retryAfterMs, type OutcomeClass } from './classify.js';
import { buildTraceChunk, idempotencyKeyFor, nextStopResolver, traceBody, type TraceBuildOptions, type TraceChunk } from './traces.js';

export interface SenderStatus {
  lastSuccessMs: number | null;
  lastAttemptMs: number | null;
  lastError: string | null;
  lastErrorMs: number | null;
  lastErrorClass: OutcomeClass | null;
  consecutiveFailures: number;
  nextAttemptMs: number | null;
  /** Set while the service refuses our credentials or address; delivery waits for a fix. */
  paused: string | null;
  lastTracePushMs: number | null;
  /** Current trace chunk size (halved on 413). */
  chunkLimit: number;
  sent: { milestones: number; traceRequests: number; tracePoints: number };
  /** Records the service already had (409): delivered, not sent twice. */
  duplicates: number;
  deadLettered: { milestones: number; tracePoints: number };
  failures: Record<string, number>;
}

export interface SenderDeps {
  store: Store;
  client: ApiClient;
  config: Config;
  deviceId: string;
  log: Logger;
  now?: () => number;
  random?: () => number;
  /** The daemon's newest fix of a resource (committed or not), for milestones recorded without a place. */
  fixOf?: (resourceId: string) => Fix | undefined;
  /** Told of an error a cycle could not get past (the daemon stops on a corrupt buffer). */
  onError?: (err: unknown) => void;
  /** Told when delivered rows were deleted: room was made (the daemon retries a commit then). */
  onPurged?: (deleted: number) => void;
  /** True while readings wait for room (a full disk): delivered rows are then purged chunk by chunk. */
  roomWanted?: () => boolean;
}

/** The floor under a jittered delay, so a zero draw cannot turn into a tight loop. */
const MIN_DELAY_MS = 250;

/**
 * Delivered readings are deleted after a push, off the delivery path, this many ids per
 * transaction (a few ms each), yielding between slices so sources and milestones never wait
 * behind a million-row delete.
 */
export const PURGE_SLICE = 20_000;

type Step = 'sent' | 'empty' | 'failed';

/** A trace chunk built ahead of sending. */
interface Prepared {
  load: LoadRow;
  /** The request body, serialised; null when the chunk only consumes readings sampling skipped. */
  json: string | null;
  key: string;
  points: number;
  readingIds: number[];
  lastId: number;
  lastSampleMs: number | null;
  /** The chunk's trace objects again, for splitting a refused request. */
  rebuild: () => TraceChunk | undefined;
}

/** The readings up to `lastId`, and none after (newer ones may have been committed since). */
function* upToId(readings: Iterable<StoredReading>, lastId: number): Generator<StoredReading> {
  for (const r of readings) {
    if (r.id > lastId) return;
    yield r;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Sender {
  readonly status: SenderStatus;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private tracesDue = false;
  /** Loads whose newest position already went out first in the current push. */
  private newestFirstDone = new Set<string>();
  /** Readings were acknowledged that are not purged yet. */
  private purgePending = false;
  private purging: Promise<void> | undefined;
  private stopping = false;
  private abort = new AbortController();
  private readonly now: () => number;
  private readonly random: () => number;
  private pollMs: number;
  /** The correlation id of the last trace request delivered, for the load's row. */
  private lastTraceCorrelation: string | undefined;

  constructor(private deps: SenderDeps) {
    this.now = deps.now ?? Date.now;
    this.random = deps.random ?? Math.random;
    this.pollMs = deps.config.delivery.poll_interval_ms;
    this.status = {
      lastSuccessMs: null,
      lastAttemptMs: null,
      lastError: null,
      lastErrorMs: null,
      lastErrorClass: null,
      consecutiveFailures: 0,
      nextAttemptMs: null,
      paused: null,
      lastTracePushMs: null,
      chunkLimit: deps.config.delivery.max_traces_per_request,
      sent: { milestones: 0, traceRequests: 0, tracePoints: 0 },
      duplicates: 0,
      deadLettered: { milestones: 0, tracePoints: 0 },
      failures: {},
    };
  }

  /** Take a new configuration (SIGHUP): try again at once, with the configured chunk size. */
  updateConfig(config: Config, client?: ApiClient): void {
    this.deps = { ...this.deps, config, client: client ?? this.deps.client };
    this.status.chunkLimit = config.delivery.max_traces_per_request;
    if (this.timer && config.delivery.poll_interval_ms !== this.pollMs) {
      clearInterval(this.timer);
      this.timer = undefined;
      this.startTimer();
    }
    this.retryNow();
  }

  /** The interval the poll timer runs at now. */
  get pollIntervalMs(): number {
    return this.pollMs;
  }

  private startTimer(): void {
    this.pollMs = this.deps.config.delivery.poll_interval_ms;
    this.timer ??= setInterval(() => void this.kick(), this.pollMs);
  }

  start(): void {
    this.stopping = false;
    this.abort = new AbortController();
    this.startTimer();
    void this.kick();
  }

  /**
   * Let the in-flight request finish, within most of delivery.shutdown_timeout_s (the rest
   * is for committing and closing), then abandon it. An abandoned request's records stay in
   * the buffer and go again (same idempotency key) at the next start.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    // A purge slice is short and stops at the next slice once stopping is set.
    await this.purging;
    const running = this.running;
    if (!running) return;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      running.then(() => false),
      new Promise<boolean>((r) => {
        timer = setTimeout(() => r(true), this.deps.config.delivery.shutdown_timeout_s * 800);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      this.deps.log.warn('in-flight request abandoned at shutdown; its records stay buffered');
      this.abort.abort();
      await running;
    }
  }

  /** A trace push is due (schedule tick): send everything buffered, chunk by chunk. */
  requestTracePush(): void {
    if (!this.tracesDue) this.newestFirstDone = new Set();
    this.tracesDue = true;
    void this.kick();
  }

  /** Forget the backoff and the pause, and try now (after a key or config change). */
  retryNow(): void {
    this.status.nextAttemptMs = null;
    this.status.paused = null;
    void this.kick();
  }

  /** Run delivery now unless it is already running; resolves when idle. */
  kick(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      try {
        do {
          this.again = false;
          await this.cycle();
        } while (this.again && !this.stopping && !this.waiting());
      } catch (err) {
        this.deps.log.error({ err: (err as Error).message }, 'delivery cycle failed; will try again');
        this.scheduleRetry('retry', (err as Error).message);
        this.deps.onError?.(err);
      } finally {
        this.running = undefined;
      }
      if (this.purgePending) this.purgeDelivered();
    })();
    return this.running;
  }

  /**
   * Delete what the service acknowledged, a slice at a time, while delivery is idle. A cycle
   * that starts meanwhile takes over; the purge resumes where it stopped when that ends. What
   * is not yet purged is already invisible to every query, so stopping half-way loses nothing.
   */
  private purgeDelivered(): void {
    if (this.purging) return;
    const run = async () => {
      try {
        // After the cycle has settled: whoever awaited the push is told before this starts.
        await new Promise<void>((r) => setImmediate(r));
        this.purgePending = false;
        for (;;) {
          if (this.stopping || this.running) {
            this.purgePending = true; // the next cycle's end resumes it
            return;
          }
          const slice = this.deps.store.purgeAcked(PURGE_SLICE);
          if (slice.deleted > 0) this.deps.onPurged?.(slice.deleted);
          if (slice.done) {
            // The WAL gives its room back (it would otherwise keep its high-water mark).
            this.deps.store.truncateWal();
            return;
          }
          await new Promise<void>((r) => setImmediate(r));
        }
      } catch (err) {
        this.deps.log.warn({ err: (err as Error).message }, 'could not delete delivered readings; will try after the next push');
      }
    };
    // Cleared by identity, after the fact: a purge that finishes without a single await must
    // not leave a settled promise behind that idle() would wait on forever.
    const purging = run().finally(() => {
      if (this.purging === purging) this.purging = undefined;
    });
    this.purging = purging;
  }

  /** Resolves when no purge slice is pending (tests, the bench, shutdown). */
  async idle(): Promise<void> {
    while (this.running || this.purging) await (this.running ?? this.purging);
  }

  /** True while a backoff is in force. */
  private waiting(): boolean {
    return this.status.nextAttemptMs !== null && this.now() < this.status.nextAttemptMs;
  }

  private async cycle(): Promise<void> {
    if (this.stopping || this.waiting()) return;
    if (!(await this.sendMilestones())) return;
    if ((await this.sendRetriedReadings()) === 'failed') return;
    if (!this.tracesDue) return;
    if ((await this.drainTraces()) === 'failed') return;
    this.tracesDue = false;
    this.status.lastTracePushMs = this.now();
  }

  /**
   * Send every waiting reading, one chunk per load in turn, the load waiting longest first:
   * a depot's backlog drains oldest first across the fleet, no load waits behind another's
   * week of data, and the rows acknowledged together are neighbours on disk, so the purge
   * rewrites each page about once instead of once per chunk.
   *
   * The next chunk is built (and delivered rows purged) while a request is on the wire:
   * building is CPU, sending is mostly waiting. A chunk is acknowledged before the next is
   * sent, so a crash can repeat at most one request, with the same Idempotency-Key.
   */
  private async drainTraces(): Promise<Step> {
    const { store } = this.deps;
    // What is buffered when the push starts: readings committed meanwhile wait for the next
    // push, so a push ends even while many loads keep adding points faster than a pass takes.
    const lastId = store.lastReadingId();
    let queue = store.loadsWithReadings();
    for (const loadNumber of queue) {
      if (this.newestFirstDone.has(loadNumber)) continue;
      this.newestFirstDone.add(loadNumber);
      if ((await this.sendNewestFirst(loadNumber)) === 'failed') {
        this.newestFirstDone.delete(loadNumber);
        return 'failed';
      }
    }
    // Per drain: the load and its stop resolver, and where the next chunk of each load starts
    // (ahead of the buffer's cursor while a chunk is in flight).
    const loads = new Map<string, { load: LoadRow; stopAt: (timeMs: number) => number | undefined } | null>();
    const cursors = new Map<string, { afterId: number; lastSampleMs: number | null }>();
    const build = (): Prepared | undefined => {
      for (;;) {
        const loadNumber = queue.shift();
        if (loadNumber === undefined) return undefined;
        let entry = loads.get(loadNumber);
        if (entry === undefined) {
          const load = store.getLoad(loadNumber);
          entry = load ? { load, stopAt: this.stopResolver(load) } : null;
          loads.set(loadNumber, entry);
        }
        if (!entry) continue;
        const from = cursors.get(loadNumber) ?? { afterId: 0, lastSampleMs: entry.load.lastSampleMs };
        const load = { ...entry.load, lastSampleMs: from.lastSampleMs };
        const { stopAt } = entry;
        const opts = this.traceOptions();
        const final = load.endedMs !== null;
        const chunk = buildTraceChunk(load, upToId(store.iterateReadings(loadNumber, from.afterId), lastId), stopAt, opts, final);
        if (!chunk) continue;
        cursors.set(loadNumber, { afterId: chunk.lastId, lastSampleMs: chunk.lastSampleMs });
        // A full chunk may have more behind it: the load takes its turn again after the others.
        if (chunk.points >= opts.maxPoints) queue.push(loadNumber);
        const upTo = chunk.lastId;
        const pointIds = new Set(chunk.readingIds);
        return {
          load,
          // Serialised now: 500 trace objects kept alive across a request would outlive V8's
          // young generation and be promoted, which made the drain mostly garbage collection.
          json: chunk.body ? JSON.stringify(chunk.body) : null,
          key: chunk.idempotencyKey,
          points: chunk.points,
          readingIds: chunk.readingIds,
          lastId: chunk.lastId,
          lastSampleMs: chunk.lastSampleMs,
          // Exactly the points that were sent (less any a limit dropped meanwhile).
          rebuild: () => buildTraceChunk(load, upToId(store.iterateReadings(loadNumber, from.afterId), upTo), stopAt, { ...opts, maxPoints: chunk.points, pointIds }, true),
        };
      }
    };

    let current = build();
    let first = true;
    while (current) {
      if (this.stopping) return 'failed';
      if (store.hasPendingMilestones()) {
        // Milestones jump the queue: one recorded during a long drain goes out next. A
        // departure changes the stop of later points, so what was built ahead is built again.
        if (!(await this.sendMilestones())) return 'failed';
        loads.clear();
        cursors.clear();
        queue = store.loadsWithReadings();
        current = build();
        continue;
      }
      // A backlog drains at a steady pace, not as fast as the service will take it.
      if (!first && this.deps.config.delivery.drain_interval_ms > 0) await sleep(this.deps.config.delivery.drain_interval_ms);
      first = false;
      const prepared = current;
      if (prepared.json === null) {
        // Only readings sampling skipped, at the end of an ended load: consumed, nothing to send.
        this.acknowledge(prepared);
        current = build();
        continue;
      }
      const delivered: number[] = [];
      const sending = this.deliverPrepared(prepared, prepared.json, delivered);
      // Let the request reach the socket first (node:http writes it on a later tick), or the
      // work below would run before it and nothing would overlap.
      await new Promise<void>((r) => setImmediate(r));
      const next = build();
      if ((await sending) === 'failed') {
        // Part of a split chunk got through before the failure: those points must not go twice.
        store.deleteReadings(delivered);
        return 'failed';
      }
      // Every point is at the service or parked: the chunk, and the readings sampling skipped, are done.
      this.acknowledge(prepared);
      current = next;
    }
    return 'empty';
  }

  private acknowledge(p: Prepared): void {
    this.deps.store.ackReadings(p.load.loadNumber, p.lastId, p.lastSampleMs, p.json === null ? undefined : this.lastTraceCorrelation);
    this.purgePending = true;
    // On a full disk the rows just delivered go at once, not after the whole drain: purging is
    // how the room comes back, and on a 4 MB tmpfs the readings in memory waited until the
    // last of a backlog drained a chunk every drain_interval_ms (with a week's backlog on a
    // cellular link, long enough to drop the oldest past buffer.max_pending).
    if (this.deps.roomWanted?.()) this.purgeSlice();
  }

  /** One slice of the purge now, in the middle of a drain; the rest waits for the end as usual. */
  private purgeSlice(): void {
    try {
      const slice = this.deps.store.purgeAcked(PURGE_SLICE);
      if (slice.deleted > 0) this.deps.onPurged?.(slice.deleted);
    } catch (err) {
      // The purge after the drain tries again and says so.
      this.deps.log.debug({ err: (err as Error).message }, 'could not delete delivered readings during the drain');
    }
  }

  /** Send pending milestones in the order they were recorded. False when delivery must pause. */
  private async sendMilestones(): Promise<boolean> {
    const { store, client } = this.deps;
    for (;;) {
      const batch = store.pendingMilestones(50);
      if (batch.length === 0) return true;
      for (const m0 of batch) {
        if (this.stopping) return false;
        const m = m0.needsPlace ? this.withPlace(m0) : m0;
        const body = { ...client.extraFields, ...m.body };
        const outcome = await this.post(() => client.postMilestone(body, m.ref, this.abort.signal));
        const cls = this.classify(outcome);
        if (isDelivered(cls) && outcome.kind === 'response') {
          const api = this.deps.config.api;
          const correlationId = correlationIdOf(outcome, api.correlation_id_field, api.correlation_id_header);
          store.markMilestoneSent(m.id, this.now(), { status: outcome.status, correlationId, duplicate: cls === 'duplicate' });
          this.status.sent.milestones += 1;
          if (cls === 'duplicate') {
            this.status.duplicates += 1;
            this.deps.log.info({ load: m.loadNumber, code: m.body.eventCode, id: m.id, correlationId }, 'milestone already at the service (HTTP 409): counted as delivered, a duplicate');
          } else {
            this.deps.log.info({ load: m.loadNumber, code: m.body.eventCode, id: m.id, correlationId }, 'milestone delivered');
          }
          continue;
        }
        const why = describeOutcome(outcome);
        if (cls === 'refused' || cls === 'too-large') {
          // This milestone will never be accepted as it is; the ones after it must not wait for it.
          store.parkMilestone(m, outcome.kind === 'response' ? outcome.status : null, outcome.kind === 'response' ? outcome.body : why, this.now(), outcome.kind === 'response' ? outcome.headers : undefined);
          this.status.deadLettered.milestones += 1;
          this.deps.log.error({ load: m.loadNumber, milestone: m.id, code: m.body.eventCode }, `milestone refused and parked in the dead-letter table: ${why}`);
          continue;
        }
        store.markMilestoneFailed(m.id, why, outcome.kind === 'response' ? outcome.status : null);
        this.fail(cls, why, outcome, { load: m.loadNumber, milestone: m.id });
        return false;
      }
    }
  }

  private classify(outcome: PostOutcome): OutcomeClass {
    return classify(outcome, { conflictIsDelivered: this.deps.config.delivery.conflict_is_delivered });
  }

  /**
   * A milestone recorded where no position was known (by the CLI right after \`load start\`,
   * before the first commit): the daemon's newest fix of the resource, committed or not, or
   * the buffer's last fix, gives it its place and zone now, once, before it is first sent.
   */
  private withPlace(m: MilestoneRow): MilestoneRow {
    const { store, config, log } = this.deps;
    try {
      const load = store.getLoad(m.loadNumber);
      const mine = load && this.deps.fixOf?.(load.resourceId);
      const stored = load && store.lastFix(load.resourceId);
      const fix = mine && (!stored || mine.timeMs >= stored.timeMs) ? mine : stored;
      const body = load && fix ? completePlace(m, fix, config) : undefined;
      if (body) {
        store.setMilestoneBody(m.id, body);
        log.info({ load: m.loadNumber, milestone: m.id, city: body.eventCity, state: body.eventState }, 'milestone recorded without a position: place and zone taken from the newest fix');
        return { ...m, body, needsPlace: false };
      }
      store.setMilestoneBody(m.id, m.body);
      log.warn(
        { load: m.loadNumber, milestone: m.id, resource: load?.resourceId },
        `milestone ${m.id} goes out without a city and state, in the device's zone: no fix of its resource within milestones.max_fix_age_s (${config.milestones.max_fix_age_s} s) of when it was recorded`,
      );
    } catch (err) {
      log.warn({ milestone: m.id, err: (err as Error).message }, 'could not fill in the place of a milestone; sending it as recorded');
    }
    return { ...m, needsPlace: false };
  }

  private traceOptions(maxPoints = this.status.chunkLimit): TraceBuildOptions {
    const c = this.deps.config;
    return {
      samplingMs: c.sampling.interval_s * 1000,
      maxPoints: Math.min(maxPoints, c.delivery.max_traces_per_request),
      dateForm: c.api.date_time_format,
      deviceId: this.deps.deviceId,
      temperatureMaxAgeMs: c.sampling.temperature_max_age_s * 1000,
      temperatureUnit: c.api.temperature_unit,
      extraFields: c.api.extra_fields,
    };
  }

  private stopResolver(load: LoadRow) {
    return nextStopResolver(load, this.deps.store.listMilestones(load.loadNumber), this.deps.config.codes.departure);
  }

  /**
   * After an outage the service first learns where the truck is now: when a load's backlog
   * is more than one chunk, its newest position goes alone, before the oldest-first drain.
   */
  private async sendNewestFirst(loadNumber: string): Promise<Step> {
    const { store } = this.deps;
    const load = store.getLoad(loadNumber);
    if (!load) return 'empty';
    const { newest, oldestMs } = store.backlogOf(loadNumber);
    if (!newest || oldestMs === null) return 'empty';
    const opts = this.traceOptions();
    const spanMs = newest.time_ms - oldestMs;
    const backlog = opts.samplingMs > 0 ? spanMs > opts.samplingMs * opts.maxPoints : spanMs > opts.maxPoints * 1000;
    if (!backlog) return 'empty';
    const chunk = buildTraceChunk({ ...load, lastSampleMs: null }, [newest], this.stopResolver(load), { ...opts, samplingMs: 0 }, true);
    if (!chunk?.body) return 'empty';
    const delivered: number[] = [];
    const result = await this.deliverTraces(load, chunk.body.traces, chunk.readingIds, delivered);
    store.deleteReadings(delivered);
    if (result === 'delivered') this.deps.log.info({ load: loadNumber, backlogS: Math.round(spanMs / 1000) }, 'newest position sent ahead of the backlog');
    return result === 'delivered' ? 'sent' : 'failed';
  }

  /** Dead letters the operator put back (`dead-letter retry`): each reading as its own point. */
  private async sendRetriedReadings(): Promise<Step> {
    const { store } = this.deps;
    const rows = store.retryReadings(this.status.chunkLimit);
    if (rows.length === 0) return 'empty';
    const byLoad = new Map<string, typeof rows>();
    for (const r of rows) byLoad.set(r.load_number ?? '', [...(byLoad.get(r.load_number ?? '') ?? []), r]);
    for (const [loadNumber, readings] of byLoad) {
      const load = store.getLoad(loadNumber);
      if (!load) {
        store.deleteReadings(readings.map((r) => r.id));
        continue;
      }
      const chunk = buildTraceChunk({ ...load, lastSampleMs: null }, readings, this.stopResolver(load), { ...this.traceOptions(), samplingMs: 0 }, true);
      if (!chunk?.body) {
        store.deleteReadings(readings.map((r) => r.id));
        continue;
      }
      const delivered: number[] = [];
      const result = await this.deliverTraces(load, chunk.body.traces, chunk.readingIds, delivered);
      store.deleteReadings(delivered);
      if (result === 'failed') return 'failed';
    }
    return 'sent';
  }

  /**
   * Deliver these trace points: as one request, or, when the service refuses it or finds it
   * too large, as halves, down to single points that are parked. `delivered` collects the
   * reading ids the service accepted. Resolves 'failed' when delivery must pause.
   */
  private deliverTraces(load: LoadRow, traces: Trace[], readingIds: number[], delivered: number[]): Promise<'delivered' | 'failed'> {
    const body = traceBody(load.loadNumber, traces, this.deps.config.api.extra_fields);
    const key = idempotencyKeyFor('trace', this.deps.deviceId, load.loadNumber, traces);
    return this.postTraces(load, body, key, readingIds, delivered, () => ({ traces, readingIds }));
  }

  /** A chunk built ahead, sent as serialised; its trace objects are built again only if it must be split. */
  private deliverPrepared(p: Prepared, json: string, delivered: number[]): Promise<'delivered' | 'failed'> {
    return this.postTraces(p.load, json, p.key, p.readingIds, delivered, () => {
      const again = p.rebuild();
      // Every reading of the chunk went meanwhile (a limit dropped them): nothing left to split.
      return again?.body ? { traces: again.body.traces, readingIds: again.readingIds } : undefined;
    });
  }

  /** One trace request; on a refusal the points from `toSplit` are sent as halves (see split). */
  private async postTraces(
    load: LoadRow,
    body: object | string,
    key: string,
    readingIds: number[],
    delivered: number[],
    toSplit: () => { traces: Trace[]; readingIds: number[] } | undefined,
  ): Promise<'delivered' | 'failed'> {
    if (this.stopping) return 'failed';
    const outcome = await this.post(() => this.deps.client.postTraces(body, key, this.abort.signal));
    const cls = this.classify(outcome);
    if (isDelivered(cls)) {
      delivered.push(...readingIds);
      this.status.sent.traceRequests += 1;
      this.status.sent.tracePoints += readingIds.length;
      const api = this.deps.config.api;
      this.lastTraceCorrelation = correlationIdOf(outcome, api.correlation_id_field, api.correlation_id_header);
      if (cls === 'duplicate') {
        this.status.duplicates += 1;
        this.deps.log.info({ load: load.loadNumber, points: readingIds.length }, 'trace request already at the service (HTTP 409): counted as delivered, a duplicate');
      } else {
        this.deps.log.debug({ load: load.loadNumber, points: readingIds.length, correlationId: this.lastTraceCorrelation }, 'trace request delivered');
      }
      return 'delivered';
    }
    if (cls === 'refused' || cls === 'too-large') {
      const points = toSplit();
      return points ? this.split(load, points.traces, points.readingIds, delivered, cls, outcome) : 'delivered';
    }
    this.fail(cls, describeOutcome(outcome), outcome, { load: load.loadNumber, points: readingIds.length });
    return 'failed';
  }

  /** The service refused these points or found them too many: park a single point, else send halves. */
  private async split(
    load: LoadRow,
    traces: Trace[],
    readingIds: number[],
    delivered: number[],
    cls: 'refused' | 'too-large',
    outcome: PostOutcome,
  ): Promise<'delivered' | 'failed'> {
    const why = describeOutcome(outcome);
    if (traces.length === 1) {
      const body = traceBody(load.loadNumber, traces, this.deps.config.api.extra_fields);
      const answer = outcome.kind === 'response' ? outcome : undefined;
      this.deps.store.parkReading(readingIds[0], load.loadNumber, answer?.status ?? null, answer ? answer.body : why, body, this.now(), answer?.headers);
      this.status.deadLettered.tracePoints += 1;
      this.deps.log.error({ load: load.loadNumber, reading: readingIds[0] }, `trace point refused and parked in the dead-letter table: ${why}`);
      return 'delivered';
    }
    if (cls === 'too-large') {
      this.status.chunkLimit = Math.max(1, Math.floor(traces.length / 2));
      this.deps.log.warn({ load: load.loadNumber, chunkLimit: this.status.chunkLimit }, 'service says the request is too large; sending smaller chunks');
    } else {
      this.deps.log.warn({ load: load.loadNumber, points: traces.length }, `trace request refused, splitting it to find the refused points: ${why}`);
    }
    const half = Math.ceil(traces.length / 2);
    if ((await this.deliverTraces(load, traces.slice(0, half), readingIds.slice(0, half), delivered)) === 'failed') return 'failed';
    return this.deliverTraces(load, traces.slice(half), readingIds.slice(half), delivered);
  }

  private async post(send: () => Promise<PostOutcome>): Promise<PostOutcome> {
    this.status.lastAttemptMs = this.now();
    const outcome = await send();
    if (isDelivered(this.classify(outcome))) {
      if (this.status.paused) this.deps.log.info('the service accepts requests again; delivery resumed');
      this.status.lastSuccessMs = this.now();
      this.status.consecutiveFailures = 0;
      this.status.nextAttemptMs = null;
      this.status.paused = null;
    }
    return outcome;
  }

  private fail(cls: OutcomeClass, why: string, outcome: PostOutcome, context: Record<string, unknown>): void {
    this.status.failures[cls] = (this.status.failures[cls] ?? 0) + 1;
    const hint =
      cls === 'auth'
        ? ' (the service refuses the key, SCAC or address: check api.subscription_key_file, api.scac, api.base_url and the paths, then reload with SIGHUP; data is kept)'
        : cls === 'redirect'
          ? ' (api.base_url probably points at the wrong address; redirects are never followed so the key stays here)'
          : '';
    const retryAfter = outcome.kind === 'response' ? retryAfterMs(outcome.retryAfter, this.now()) : undefined;
    this.scheduleRetry(cls, why + hint, retryAfter);
    if (cls === 'auth') this.status.paused = `service refuses our credentials or address (${outcome.kind === 'response' ? `HTTP ${outcome.status}` : cls})`;
    const level = cls === 'auth' || cls === 'redirect' ? 'error' : 'warn';
    this.deps.log[level]({ ...context, class: cls, retryInMs: (this.status.nextAttemptMs ?? 0) - this.now() }, `delivery failed: ${why}${hint}`);
  }

  private scheduleRetry(cls: OutcomeClass, why: string, retryAfter?: number): void {
    const d = this.deps.config.delivery;
    this.status.consecutiveFailures += 1;
    this.status.lastError = why;
    this.status.lastErrorMs = this.now();
    this.status.lastErrorClass = cls;
    let delay: number;
    if (cls === 'auth') {
      // Retrying a refused key quickly achieves nothing but noise; a reload retries at once.
      delay = d.auth_retry_s * 1000;
    } else if (retryAfter !== undefined) {
      delay = Math.max(MIN_DELAY_MS, Math.min(retryAfter, d.retry_after_max_s * 1000));
    } else {
      delay = Math.max(MIN_DELAY_MS, backoffMs(this.status.consecutiveFailures - 1, d.retry_initial_s * 1000, d.retry_max_s * 1000, this.random));
    }
    this.status.nextAttemptMs = this.now() + delay;
  }
}
