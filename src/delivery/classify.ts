/**
 * What a response means for the records in the request. One place decides it, so the
 * milestone path and the trace path cannot disagree.
 */
import type { PostOutcome } from '../api/client.js';

export type OutcomeClass =
  /** 2xx: the service has it; the records may leave the buffer. */
  | 'delivered'
  /** 409 to a record that went out before under the same key (delivery.conflict_is_delivered): the service has it already. */
  | 'duplicate'
  /** Network error, timeout, 408, 425, 429, 5xx: the records are fine, try later. */
  | 'retry'
  /** 3xx: never followed (the key would go to another host); a configuration problem. */
  | 'redirect'
  /** A 2xx web page (a captive portal's or a proxy's login page): not the service's answer; the records stay. */
  | 'intercepted'
  /** 401, 403, 404: the data is not at fault; the key, SCAC, base URL or path is. Pause and keep the data. */
  | 'auth'
  /** 413: the request was too large; send smaller chunks. */
  | 'too-large'
  /** 400, 422, other 4xx: the service refuses something in this request. */
  | 'refused';

export interface ClassifyOptions {
  /** `delivery.conflict_is_delivered`: a 409 means the service already has the record. */
  conflictIsDelivered?: boolean;
  /**
   * Whether the request may have gone out before under the same key (a retry after a lost
   * answer, a timeout or a restart). A 409 to a first send is no repeat: the service objects
   * to something in it, and it is refused like a 400. An outcome `resent` by the client (a
   * kept-alive connection died under it) is a repeat whatever this says.
   */
  sentBefore?: boolean;
}

/** Whether the request may have reached the service before this answer: told by the caller, or sent twice by the client. */
function wasSentBefore(outcome: PostOutcome, sentBefore: boolean): boolean {
  return sentBefore || outcome.resent === true;
}

/**
 * Whether an answer is a web page: an HTML document where the service answers JSON or
 * nothing. A captive portal (a truck stop's Wi-Fi, a cellular plan run out) or a proxy's login
 * page answers a plain-HTTP request with 200 and its page; taken as the service's 2xx, the
 * records would leave the buffer undelivered. An HTML type alone is not enough (a service may
 * label an empty answer text/html): the body must be markup.
 */
export function isWebPage(outcome: Extract<PostOutcome, { kind: 'response' }>): boolean {
  const start = outcome.body.trimStart().slice(0, 15).toLowerCase();
  if (start.startsWith('<!doctype html') || start.startsWith('<html')) return true;
  return /^\s*(text\/html|application\/xhtml\+xml)\b/i.test(outcome.headers?.['content-type'] ?? '') && start.startsWith('<');
}

export function classify(outcome: PostOutcome, opts: ClassifyOptions = {}): OutcomeClass {
  if (outcome.kind === 'network') return 'retry';
  const s = outcome.status;
  if (s >= 200 && s < 300) return isWebPage(outcome) ? 'intercepted' : 'delivered';
  if (s === 409 && (opts.conflictIsDelivered ?? true) && wasSentBefore(outcome, opts.sentBefore ?? true)) return 'duplicate';
  if (s >= 300 && s < 400) return 'redirect';
  if (s === 401 || s === 403 || s === 404) return 'auth';
  if (s === 413) return 'too-large';
  if (s === 408 || s === 425 || s === 429 || s >= 500) return 'retry';
  return 'refused';
}

/** True for the classes that let records leave the buffer. */
export function isDelivered(cls: OutcomeClass): boolean {
  return cls === 'delivered' || cls === 'duplicate';
}

/**
 * The service's correlation id of an answer: a field of a JSON body (`api.correlation_id_field`),
 * else a header (`api.correlation_id_header`). Undefined when it gave none.
 */
export function correlationIdOf(outcome: PostOutcome, field: string, header: string): string | undefined {
  if (outcome.kind !== 'response') return undefined;
  if (outcome.body.startsWith('{')) {
    try {
      const v = (JSON.parse(outcome.body) as Record<string, unknown>)[field];
      if (typeof v === 'string' && v !== '') return v.slice(0, 200);
      if (typeof v === 'number') return String(v);
    } catch {
      // Not JSON after all: the header may still carry it.
    }
  }
  const h = outcome.headers?.[header.toLowerCase()];
  return h ? h.slice(0, 200) : undefined;
}

/** A short description for logs and `status`, never containing request headers. */
export function describeOutcome(outcome: PostOutcome): string {
  if (outcome.kind === 'network') return `network error: ${outcome.code ?? ''}${outcome.code ? ' ' : ''}${outcome.error}`.trim();
  const body = outcome.body.replace(/\s+/g, ' ').slice(0, 300);
  const where = outcome.location ? ` (redirect to ${outcome.location} not followed)` : '';
  return `HTTP ${outcome.status}${where}${body ? `: ${body}` : ''}`;
}

/**
 * Retry-After in milliseconds from now: seconds or an HTTP date. Undefined when absent or
 * unreadable; the caller caps it (a misconfigured proxy saying "wait a year" must not park us).
 */
export function retryAfterMs(value: string | undefined, nowMs = Date.now()): number | undefined {
  if (!value) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - nowMs);
}

// The one backoff lives in src/backoff.ts; delivery takes it from here until it imports it directly.
export { backoffMs } from '../backoff.js';
