/**
 * What the parts of delivery share: the sender's dependencies, its status (written for
 * `status` and /metrics), and the few operations every part uses (post a request, classify
 * the answer, fail so that delivery pauses).
 */
import type { Logger } from 'pino';
import type { ApiClient, PostOutcome } from '../api/client.js';
import type { Fix, Store } from '../buffer/store.js';
import type { ClockSources } from '../clock.js';
import type { Config } from '../config/schema.js';
import type { OutcomeClass } from './classify.js';

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
  /** The service's answer to the last request, a push or a milestone: "HTTP 202", or "no answer (ECONNREFUSED)". */
  lastAnswer: string | null;
  lastAnswerMs: number | null;
  /** Current trace chunk size (halved on 413). */
  chunkLimit: number;
  sent: { milestones: number; traceRequests: number; tracePoints: number };
  /** Records the service already had (409): delivered, not sent twice. */
  duplicates: number;
  deadLettered: { milestones: number; tracePoints: number };
  failures: Record<string, number>;
  /**
   * Loads whose trace delivery waits because the service refused a whole request of theirs
   * (refusals.ts), by load number: what it answered, the dead letter holding the request,
   * and when its one request goes again.
   */
  refusedLoads: Record<string, RefusedLoad>;
}

/** A load whose traces wait: the service refuses every trace request of it (see refusals.ts). */
export interface RefusedLoad {
  /** "the service refuses every trace request: HTTP 400: ..." */
  reason: string;
  deadLetter: number;
  points: number;
  sinceMs: number;
  nextTryMs: number;
}

export interface SenderDeps {
  store: Store;
  client: ApiClient;
  config: Config;
  deviceId: string;
  log: Logger;
  /** The wall clock (a test's fake time moves the waits too, see clockOf); or both clocks: */
  now?: () => number;
  /** Wall and monotonic clocks: deadlines (backoff, Retry-After, a refused load's next try) are monotonic. */
  clock?: ClockSources;
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

/** How a step of a cycle ended: it sent something, had nothing to send, or must pause. */
export type Step = 'sent' | 'empty' | 'failed';

/** What the parts of delivery (milestones, the drain, trace posting) get from the sender. */
export interface DeliveryContext {
  readonly deps: SenderDeps;
  readonly status: SenderStatus;
  /** Aborted when a stop gives up on the request in flight. */
  readonly signal: AbortSignal;
  readonly stopping: boolean;
  /** The clocks (see SenderDeps.clock). */
  readonly clock: ClockSources;
  /** The wall clock now. */
  now(): number;
  /** Send a request, noting the attempt; a 2xx (or a 409 to a repeat) clears the backoff and the pause. */
  post(send: () => Promise<PostOutcome>, sentBefore: boolean): Promise<PostOutcome>;
  /** What an answer means; `sentBefore`: the request may have gone out before under the same key (see classify.ts). */
  classify(outcome: PostOutcome, sentBefore: boolean): OutcomeClass;
  /** A failure that pauses delivery: counted, logged, tried again after the retry policy's delay. */
  fail(cls: OutcomeClass, why: string, outcome: PostOutcome, context: Record<string, unknown>): void;
}
