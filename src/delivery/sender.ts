/**
 * Moves records from the buffer to the service: milestones as soon as they are committed,
 * traces when a push is due (schedule.ts) and then until the backlog is drained. The sender
 * runs the cycle; the parts do the work:
 * - milestones.ts: milestones in the order they were recorded, before any trace;
 * - drain.ts: a push, chunk by chunk, load by load, the newest position first after an outage;
 * - post-traces.ts: a trace request, and the splitting that finds refused points;
 * - retry.ts: what a failure means and when to try again;
 * - purge.ts: deleting what the service acknowledged, off the delivery path.
 *
 * Only a 2xx (or a 409 for a record already sent, `delivery.conflict_is_delivered`) lets a
 * record leave the buffer; what every other answer does is in classify.ts and retry.ts.
 */
import type { ApiClient, PostOutcome } from '../api/client.js';
import { type ClockSources, clockOf } from '../clock.js';
import type { Config } from '../config/schema.js';
import { classify, isDelivered, type OutcomeClass } from './classify.js';
import type { DeliveryContext, SenderDeps, SenderStatus } from './context.js';
import { Drain } from './drain.js';
import { MilestoneSender } from './milestones.js';
import { TracePoster } from './post-traces.js';
import { Purger } from './purge.js';
import { RefusedLoads } from './refusals.js';
import { RetryPolicy } from './retry.js';
import { TraceSchedule } from './schedule.js';

export type { SenderDeps, SenderStatus } from './context.js';
export { PURGE_SLICE } from './purge.js';

export class Sender implements DeliveryContext {
  readonly status: SenderStatus;
  /** When pushes are due: the daemon's cron, or (without one) only when asked. */
  readonly schedule: TraceSchedule;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private isStopping = false;
  private abort = new AbortController();
  readonly clock: ClockSources;
  private pollMs: number;
  private readonly retry: RetryPolicy;
  private readonly purger: Purger;
  private readonly milestones: MilestoneSender;
  private readonly drain: Drain;
  private readonly refusals: RefusedLoads;

  constructor(private currentDeps: SenderDeps & { schedule?: TraceSchedule }) {
    this.clock = currentDeps.clock ?? clockOf(currentDeps.now);
    this.pollMs = currentDeps.config.delivery.poll_interval_ms;
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
      lastAnswer: null,
      lastAnswerMs: null,
      chunkLimit: currentDeps.config.delivery.max_traces_per_request,
      sent: { milestones: 0, traceRequests: 0, tracePoints: 0 },
      duplicates: 0,
      deadLettered: { milestones: 0, tracePoints: 0 },
      failures: {},
      refusedLoads: {},
    };
    this.retry = new RetryPolicy(
      this.status,
      () => this.currentDeps.config,
      () => this.currentDeps.log,
      this.clock,
      currentDeps.random ?? Math.random,
    );
    this.purger = new Purger(
      () => this.currentDeps,
      () => this.isStopping || this.running !== undefined,
    );
    this.milestones = new MilestoneSender(this);
    this.refusals = new RefusedLoads(this, () => this.schedule.request());
    this.drain = new Drain(this, new TracePoster(this, this.refusals), this.milestones, this.purger, this.refusals);
    this.schedule = currentDeps.schedule ?? new TraceSchedule(undefined, 0);
    this.schedule.onDue = (fresh) => {
      if (fresh) this.drain.newPush();
      void this.kick();
    };
  }

  // ---- DeliveryContext ------------------------------------------------------------------

  get deps(): SenderDeps {
    return this.currentDeps;
  }

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get stopping(): boolean {
    return this.isStopping;
  }

  now(): number {
    return this.clock.wall();
  }

  async post(send: () => Promise<PostOutcome>, sentBefore: boolean): Promise<PostOutcome> {
    this.status.lastAttemptMs = this.now();
    // What the request carries, and the acknowledgement of the one before, are on the disk first.
    await this.currentDeps.store.syncCommits();
    const outcome = await send();
    const cls = this.classify(outcome, sentBefore);
    this.status.lastAnswer = outcome.kind === 'network' ? `no answer (${outcome.code ?? outcome.error})` : `HTTP ${outcome.status}${cls === 'intercepted' ? ' (a web page, not the service)' : ''}`;
    this.status.lastAnswerMs = this.now();
    if (isDelivered(cls)) this.retry.succeeded();
    return outcome;
  }

  classify(outcome: PostOutcome, sentBefore: boolean): OutcomeClass {
    return classify(outcome, { conflictIsDelivered: this.currentDeps.config.delivery.conflict_is_delivered, sentBefore });
  }

  fail(cls: OutcomeClass, why: string, outcome: PostOutcome, context: Record<string, unknown>): void {
    this.retry.failed(cls, why, outcome, context);
  }

  // ---- control ----------------------------------------------------------------------------

  /** Take a new configuration (SIGHUP): try again at once, with the configured chunk size. */
  updateConfig(config: Config, client?: ApiClient): void {
    this.currentDeps = { ...this.currentDeps, config, client: client ?? this.currentDeps.client };
    this.status.chunkLimit = config.delivery.max_traces_per_request;
    // The fix may be in the config (a field the service requires): loads whose traces wait try now.
    this.refusals.retryNow();
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
    this.pollMs = this.currentDeps.config.delivery.poll_interval_ms;
    this.timer ??= setInterval(() => void this.kick(), this.pollMs);
  }

  start(): void {
    this.isStopping = false;
    this.abort = new AbortController();
    this.startTimer();
    this.schedule.start();
    void this.kick();
  }

  /**
   * Let the in-flight request finish, within most of delivery.shutdown_timeout_s (the rest
   * is for committing and closing), then abandon it. An abandoned request's records stay in
   * the buffer and go again (same idempotency key) at the next start.
   */
  async stop(): Promise<void> {
    this.isStopping = true;
    this.schedule.stop();
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    // A purge slice is short and stops at the next slice once stopping is set.
    await this.purger.current;
    const running = this.running;
    if (!running) return;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      running.then(() => false),
      new Promise<boolean>((r) => {
        timer = setTimeout(() => r(true), this.currentDeps.config.delivery.shutdown_timeout_s * 800);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      this.currentDeps.log.warn('in-flight request abandoned at shutdown; its records stay buffered');
      this.abort.abort();
      await running;
    }
  }

  /** A trace push is due (schedule tick): send everything buffered, chunk by chunk. */
  requestTracePush(): void {
    this.schedule.request();
  }

  /**
   * The wall clock was stepped (clock.ts's ClockSteps): the waits run on the monotonic clock
   * and go on as they were; the times `status` shows for them are read again from the new clock.
   */
  clockStepped(): void {
    this.retry.reshow();
    this.refusals.reshow();
  }

  /** Forget the backoff and the pause, and try now (after a key or config change). */
  retryNow(): void {
    this.retry.reset();
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
        } while (this.again && !this.isStopping && !this.retry.waiting());
      } catch (err) {
        this.currentDeps.log.error({ err: (err as Error).message }, 'delivery cycle failed; will try again');
        this.retry.schedule('retry', (err as Error).message);
        this.currentDeps.onError?.(err);
      } finally {
        this.running = undefined;
      }
      this.purger.afterCycle();
    })();
    return this.running;
  }

  /** Resolves when no cycle runs and no purge slice is pending (tests, the bench, shutdown). */
  async idle(): Promise<void> {
    while (this.running || this.purger.current) await (this.running ?? this.purger.current);
  }

  private async cycle(): Promise<void> {
    if (this.isStopping || this.retry.waiting()) return;
    if (!(await this.milestones.send())) return;
    if ((await this.drain.sendRetriedReadings()) === 'failed') return;
    if ((await this.drain.retryRefused()) === 'failed') return;
    if (!this.schedule.due) return;
    if ((await this.drain.run()) === 'failed') return;
    this.schedule.completed();
    this.status.lastTracePushMs = this.now();
  }
}
