/**
 * When to try again after a failure, and what the failure means for the operator:
 * - no answer at all (connection refused or reset, DNS, unreachable, connect timeout): the
 *   same backoff, but never more than `delivery.reconnect_max_s` (30 s) apart, so a truck
 *   back in coverage sends within seconds, not after the 15 minutes a long outage grew to;
 * - an answer that says wait (timeout after the request went out, 408, 425, 429, 5xx):
 *   exponential backoff with full jitter (`delivery.retry_initial_s` to `retry_max_s`), or the
 *   service's Retry-After (capped at `retry_after_max_s`: a misconfigured proxy saying "a
 *   year" must not park us);
 * - 3xx: never followed (the key would go to another host); retried with backoff, logged as
 *   a configuration problem; a 2xx web page (a captive portal) alike, as a network problem;
 * - 401, 403, 404: the data is not at fault. Pause, retry every `auth_retry_s`, and resume at
 *   once when the key or config is reloaded (SIGHUP).
 *
 * The wait runs on the monotonic clock: a step of the wall clock (NTP, GPS, an operator)
 * neither stretches it (an hour back once stopped delivery for the hour) nor cuts it short.
 * The wall time `status` shows is derived from it, again after a step (`reshow`).
 */
import type { Logger } from 'pino';
import type { PostOutcome } from '../api/client.js';
import { type ClockSources, type Deadline, deadlineIn, isPast, wallOf } from '../clock.js';
import type { Config } from '../config/schema.js';
import { backoffMs, retryAfterMs, type OutcomeClass } from './classify.js';
import type { SenderStatus } from './context.js';

/**
 * Failures where the service never saw the request, or cannot have answered: the network or
 * the service's host is not there (yet). Retried at most `reconnect_max_s` apart.
 */
const NO_ANSWER_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'ECONNABORTED', 'EPIPE', 'UND_ERR_CONNECT_TIMEOUT']);

/** Whether a failure is one where no answer came (see NO_ANSWER_CODES). */
export function isNoAnswer(outcome: PostOutcome): boolean {
  return outcome.kind === 'network' && outcome.code !== undefined && NO_ANSWER_CODES.has(outcome.code);
}

/** The floor under a jittered delay, so a zero draw cannot turn into a tight loop. */
const MIN_DELAY_MS = 250;

export class RetryPolicy {
  /** The next attempt (status.nextAttemptMs shows its wall time). */
  private next: Deadline | null = null;

  constructor(
    private readonly status: SenderStatus,
    private readonly config: () => Config,
    private readonly log: () => Logger,
    private readonly clock: ClockSources,
    private readonly random: () => number,
  ) {}

  private now(): number {
    return this.clock.wall();
  }

  /** True while a backoff is in force. */
  waiting(): boolean {
    return this.next !== null && !isPast(this.next, this.clock);
  }

  /** The wall clock was stepped: the next attempt shown is its wall time on the new clock. */
  reshow(): void {
    if (this.next !== null) this.status.nextAttemptMs = wallOf(this.next, this.clock);
  }

  /** The service took a request: no backoff, no pause. */
  succeeded(): void {
    if (this.status.paused) this.log().info('the service accepts requests again; delivery resumed');
    this.status.lastSuccessMs = this.now();
    this.status.consecutiveFailures = 0;
    this.next = null;
    this.status.nextAttemptMs = null;
    this.status.paused = null;
  }

  /** Forget the backoff and the pause (after a key or config change). */
  reset(): void {
    this.next = null;
    this.status.nextAttemptMs = null;
    this.status.paused = null;
  }

  /** A failed request: count it, say what it means, and wait before the next. */
  failed(cls: OutcomeClass, why: string, outcome: PostOutcome, context: Record<string, unknown>): void {
    this.status.failures[cls] = (this.status.failures[cls] ?? 0) + 1;
    const hint =
      cls === 'auth'
        ? ' (the service refuses the key, SCAC or address: check the subscription key where it comes from (the start-up log and status say), api.scac, api.base_url and the paths, then reload with SIGHUP; data is kept)'
        : cls === 'redirect'
          ? ' (api.base_url probably points at the wrong address; redirects are never followed so the key stays here)'
          : cls === 'intercepted'
            ? ' (a web page answered instead of the service: a captive portal or a proxy that wants a login, on the network the truck is on; nothing was delivered and the data is kept: use an https:// api.base_url, which a portal cannot answer for)'
            : '';
    const retryAfter = outcome.kind === 'response' ? retryAfterMs(outcome.retryAfter, this.now()) : undefined;
    this.schedule(cls, why + hint, retryAfter, isNoAnswer(outcome));
    if (cls === 'auth') this.status.paused = `service refuses our credentials or address (${outcome.kind === 'response' ? `HTTP ${outcome.status}` : cls})`;
    const level = cls === 'auth' || cls === 'redirect' || cls === 'intercepted' ? 'error' : 'warn';
    this.log()[level]({ ...context, class: cls, retryInMs: Math.round((this.next?.mono ?? 0) - this.clock.mono()) }, `delivery failed: ${why}${hint}`);
  }

  /** Set the next attempt after a failure of this class (or the service's Retry-After); `noAnswer`: see isNoAnswer. */
  schedule(cls: OutcomeClass, why: string, retryAfter?: number, noAnswer = false): void {
    const d = this.config().delivery;
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
      const cap = noAnswer ? Math.min(d.retry_max_s, d.reconnect_max_s) : d.retry_max_s;
      delay = Math.max(MIN_DELAY_MS, backoffMs(this.status.consecutiveFailures - 1, d.retry_initial_s * 1000, cap * 1000, this.random));
    }
    this.next = deadlineIn(delay, this.clock);
    this.status.nextAttemptMs = this.next.wall;
  }
}
