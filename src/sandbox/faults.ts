/** The faults the sandbox injects on request (PUT /_sandbox/faults, or the sandbox command's options). */
export interface Faults {
  /** Extra delay before answering, ms. */
  latencyMs: number;
  /** Share of requests answered 503 (0..1). */
  failureRate: number;
  /** Share of requests whose connection is destroyed without an answer (0..1). */
  dropRate: number;
  /** The next N requests are answered 503. */
  failNext: number;
  /** The next N requests get their connection dropped after the body was read (a lost response). */
  dropNext: number;
  /** The next N accepted requests are recorded, then their connection dropped: the answer is lost. */
  loseResponseNext: number;
  /** The next N requests are answered 429 with Retry-After. */
  throttleNext: number;
  /** Every Nth request (counting all) is answered 429; 0 = never. */
  throttleEvery: number;
  /** Retry-After value sent with 429 (seconds, or an HTTP date string). */
  retryAfter: string;
  /** Answer every request with this status (e.g. 301, 401, 404) until cleared; 0 = off. */
  forceStatus: number;
  /** The next N requests are answered 200 with an HTML page, as a captive portal does; nothing is recorded. */
  portalNext: number;
  /** Location header sent with a forced 3xx. */
  redirectTo: string;
  /** 400 for bodies whose loadNumber is listed. */
  rejectLoads: string[];
  /** 400 for trace requests holding a trace with one of these reference values (e.g. a traceId). */
  rejectTraceRefs: string[];
  /** Answer those alike, naming no point (a service that checks each point but does not say which it refused). */
  rejectUnnamed: boolean;
  /** 413 when a trace request has more traces than this; 0 = no limit. */
  maxTracesPerRequest: number;
}

export const NO_FAULTS: Faults = {
  latencyMs: 0,
  failureRate: 0,
  dropRate: 0,
  failNext: 0,
  dropNext: 0,
  loseResponseNext: 0,
  throttleNext: 0,
  throttleEvery: 0,
  retryAfter: '1',
  forceStatus: 0,
  portalNext: 0,
  redirectTo: 'http://example.invalid/',
  rejectLoads: [],
  rejectTraceRefs: [],
  rejectUnnamed: false,
  maxTracesPerRequest: 0,
};
