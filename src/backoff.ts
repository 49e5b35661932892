/**
 * The one backoff: sources reopening a device, ingest retrying a commit, delivery retrying a
 * request. The wait starts at `initialMs` and doubles up to `maxMs`; with `jitter` it is
 * drawn uniformly from [0, that] ("full jitter"), so a fleet that lost the service at the
 * same moment does not come back in the same second.
 */

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  /** Full jitter: uniform in [0, the doubled wait]. */
  jitter?: boolean;
  /** The uniform source for the jitter (tests fix it). */
  random?: () => number;
}

/** The doubled wait after `failures` failures, before any jitter. */
function ceilingMs(failures: number, o: BackoffOptions): number {
  // Capped: after 1024 failures 2 ** n is Infinity, and Infinity * 0 (initialMs 0) is NaN.
  return Math.min(o.maxMs, o.initialMs * 2 ** Math.min(failures, 30));
}

/** The wait before the next attempt after `failures` failures in a row (0: the first retry). */
export function backoffDelay(failures: number, o: BackoffOptions): number {
  const ceiling = ceilingMs(failures, o);
  return o.jitter ? Math.round((o.random ?? Math.random)() * ceiling) : ceiling;
}

/** Exponential backoff with full jitter: uniform in [0, min(cap, base * 2^attempt)]. */
export function backoffMs(attempt: number, baseMs: number, capMs: number, random: () => number = Math.random): number {
  return backoffDelay(attempt, { initialMs: baseMs, maxMs: capMs, jitter: true, random });
}

/** A backoff that counts its failures: `next()` after each one, `reset()` once it works again. */
export class Backoff {
  private n = 0;

  constructor(private readonly opts: BackoffOptions) {}

  /** The wait before the next attempt; each call doubles the following one. */
  next(): number {
    const ms = backoffDelay(this.n, this.opts);
    this.n += 1;
    return ms;
  }

  /** Failures in a row since the last reset. */
  get failures(): number {
    return this.n;
  }

  /** The next wait is the longest there is: the peer is really gone, not just slow to start. */
  get atMax(): boolean {
    return ceilingMs(this.n, this.opts) >= this.opts.maxMs;
  }

  reset(): void {
    this.n = 0;
  }
}
