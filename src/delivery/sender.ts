/**
 * Moves records from the buffer to the service: milestones as soon as they are committed,
 * traces when a push is due (the schedule) and then until the backlog is drained.
 *
 * Only a 2xx lets a record leave the buffer. Anything else leaves it where it is and
 * schedules the next attempt with exponential backoff and full jitter, or after the
 * server's Retry-After when it gives one.
 */
import type { Logger } from 'pino';
import type { ApiClient, PostOutcome } from '../api/client.js';
import type { Store } from '../buffer/store.js';
import type { Config } from '../config/schema.js';
import { backoffMs, classify, describeOutcome, retryAfterMs, type OutcomeClass } from './classify.js';
import { buildTraceChunk, nextStopResolver, type TraceBuildOptions } from './traces.js';

export interface SenderStatus {
  lastSuccessMs: number | null;
  lastAttemptMs: number | null;
  lastError: string | null;
  lastErrorMs: number | null;
  lastErrorClass: OutcomeClass | null;
  consecutiveFailures: number;
  nextAttemptMs: number | null;
  lastTracePushMs: number | null;
  sent: { milestones: number; traceRequests: number; tracePoints: number };
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
}

/** The floor under a jittered delay, so a zero draw cannot turn into a tight loop. */
const MIN_DELAY_MS = 250;

export class Sender {
  readonly status: SenderStatus = {
    lastSuccessMs: null,
    lastAttemptMs: null,
    lastError: null,
    lastErrorMs: null,
    lastErrorClass: null,
    consecutiveFailures: 0,
    nextAttemptMs: null,
    lastTracePushMs: null,
    sent: { milestones: 0, traceRequests: 0, tracePoints: 0 },
    failures: {},
  };
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private tracesDue = false;
  private stopping = false;
  private readonly now: () => number;
  private readonly random: () => number;

  constructor(private deps: SenderDeps) {
    this.now = deps.now ?? Date.now;
    this.random = deps.random ?? Math.random;
  }

  /** Take a new configuration (SIGHUP) without losing the queue position. */
  updateConfig(config: Config): void {
    this.deps = { ...this.deps, config };
  }

  start(): void {
    this.stopping = false;
    this.timer ??= setInterval(() => this.kick(), this.deps.config.delivery.poll_interval_ms);
    this.kick();
  }

  /** Let the in-flight request finish (bounded by the client's timeout), then stop. */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** A trace push is due (schedule tick): send everything buffered, chunk by chunk. */
  requestTracePush(): void {
    this.tracesDue = true;
    this.kick();
  }

  /** Forget the backoff and try now (e.g. after the key was replaced). */
  retryNow(): void {
    this.status.nextAttemptMs = null;
    this.kick();
  }

  /** Run one delivery cycle now unless one is already running; resolves when idle. */
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
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }

  /** True while a backoff is in force. */
  private waiting(): boolean {
    return this.status.nextAttemptMs !== null && this.now() < this.status.nextAttemptMs;
  }

  private async cycle(): Promise<void> {
    if (this.stopping || this.waiting()) return;
    if (!(await this.sendMilestones())) return;
    if (!this.tracesDue) return;
    const { store } = this.deps;
    for (const loadNumber of store.loadsWithReadings()) {
      for (;;) {
        if (this.stopping) return;
        // Milestones jump the queue: one recorded during a long drain goes out next.
        if (store.hasPendingMilestones() && !(await this.sendMilestones())) return;
        const sent = await this.sendNextTraceChunk(loadNumber);
        if (sent === 'failed') return;
        if (sent === 'empty') break;
      }
    }
    this.tracesDue = false;
    this.status.lastTracePushMs = this.now();
  }

  /** Send pending milestones in the order they were recorded. False when delivery must pause. */
  private async sendMilestones(): Promise<boolean> {
    const { store, client } = this.deps;
    for (;;) {
      const batch = store.pendingMilestones(50);
      if (batch.length === 0) return true;
      for (const m of batch) {
        if (this.stopping) return false;
        const body = { ...client.extraFields, ...m.body };
        const outcome = await this.post(() => client.postMilestone(body, m.ref));
        const cls = classify(outcome);
        if (cls === 'delivered') {
          store.markMilestoneSent(m.id, this.now());
          this.status.sent.milestones += 1;
          this.deps.log.info({ load: m.loadNumber, code: m.body.eventCode, id: m.id }, 'milestone delivered');
          continue;
        }
        const why = describeOutcome(outcome);
        store.markMilestoneFailed(m.id, why);
        this.fail(cls, why, outcome, { load: m.loadNumber, milestone: m.id });
        return false;
      }
    }
  }

  private traceOptions(): TraceBuildOptions {
    const c = this.deps.config;
    return {
      samplingMs: c.sampling.interval_s * 1000,
      maxPoints: c.delivery.max_traces_per_request,
      dateForm: c.api.date_time_format,
      deviceId: this.deps.deviceId,
      temperatureMaxAgeMs: c.sampling.temperature_max_age_s * 1000,
      temperatureUnit: c.api.temperature_unit,
      extraFields: c.api.extra_fields,
    };
  }

  private async sendNextTraceChunk(loadNumber: string): Promise<'sent' | 'empty' | 'failed'> {
    const { store, client } = this.deps;
    const load = store.getLoad(loadNumber);
    if (!load) return 'empty';
    const stopAt = nextStopResolver(load, store.listMilestones(loadNumber), this.deps.config.codes.departure);
    // Built fully before sending: better-sqlite3 cannot write on a connection while a read iterates.
    const chunk = buildTraceChunk(load, store.iterateReadings(loadNumber), stopAt, this.traceOptions(), load.endedMs !== null);
    if (!chunk) return 'empty';
    if (!chunk.body) {
      store.ackReadings(loadNumber, chunk.lastId, chunk.lastSampleMs);
      return 'sent';
    }
    const body = chunk.body;
    const outcome = await this.post(() => client.postTraces(body, chunk.idempotencyKey));
    const cls = classify(outcome);
    if (cls === 'delivered') {
      store.ackReadings(loadNumber, chunk.lastId, chunk.lastSampleMs);
      this.status.sent.traceRequests += 1;
      this.status.sent.tracePoints += chunk.points;
      this.deps.log.debug({ load: loadNumber, points: chunk.points }, 'trace request delivered');
      return 'sent';
    }
    this.fail(cls, describeOutcome(outcome), outcome, { load: loadNumber, points: chunk.points });
    return 'failed';
  }

  private async post(send: () => Promise<PostOutcome>): Promise<PostOutcome> {
    this.status.lastAttemptMs = this.now();
    const outcome = await send();
    if (classify(outcome) === 'delivered') {
      this.status.lastSuccessMs = this.now();
      this.status.consecutiveFailures = 0;
      this.status.nextAttemptMs = null;
    }
    return outcome;
  }

  private fail(cls: OutcomeClass, why: string, outcome: PostOutcome, context: Record<string, unknown>): void {
    this.status.failures[cls] = (this.status.failures[cls] ?? 0) + 1;
    const hint =
      cls === 'auth'
        ? ' (check api.subscription_key_file, api.scac, api.base_url and the paths; data is kept)'
        : cls === 'redirect'
          ? ' (api.base_url probably points at the wrong address; redirects are never followed)'
          : '';
    const retryAfter = outcome.kind === 'response' ? retryAfterMs(outcome.retryAfter, this.now()) : undefined;
    this.scheduleRetry(cls, why + hint, retryAfter);
    const level = cls === 'auth' || cls === 'redirect' ? 'error' : 'warn';
    this.deps.log[level]({ ...context, class: cls, retryInMs: (this.status.nextAttemptMs ?? 0) - this.now() }, `delivery failed: ${why}${hint}`);
  }

  private scheduleRetry(cls: OutcomeClass, why: string, retryAfter?: number): void {
    const d = this.deps.config.delivery;
    this.status.consecutiveFailures += 1;
    this.status.lastError = why;
    this.status.lastErrorMs = this.now();
    this.status.lastErrorClass = cls;
    const capMs = d.retry_max_s * 1000;
    let delay = Math.max(MIN_DELAY_MS, backoffMs(this.status.consecutiveFailures - 1, d.retry_initial_s * 1000, capMs, this.random));
    if (retryAfter !== undefined) delay = Math.max(MIN_DELAY_MS, Math.min(retryAfter, capMs));
    this.status.nextAttemptMs = this.now() + delay;
  }
}
