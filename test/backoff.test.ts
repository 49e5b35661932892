import { describe, expect, it } from 'vitest';
import type { PostOutcome } from '../src/api/client.js';
import { Backoff, backoffDelay } from '../src/backoff.js';
import { clockOf } from '../src/clock.js';
import { configSchema } from '../src/config/schema.js';
import { classify } from '../src/delivery/classify.js';
import type { SenderStatus } from '../src/delivery/context.js';
import { RetryPolicy } from '../src/delivery/retry.js';
import { createLogger } from '../src/log.js';

describe('backoff', () => {
  it('doubles from the initial wait up to the cap, and knows when it is there', () => {
    const b = new Backoff({ initialMs: 50, maxMs: 400 });
    const waits: number[] = [];
    const atMax: boolean[] = [];
    for (let i = 0; i < 6; i++) {
      atMax.push(b.atMax);
      waits.push(b.next());
    }
    expect(waits).toEqual([50, 100, 200, 400, 400, 400]);
    expect(atMax).toEqual([false, false, false, true, true, true]);
    expect(b.failures).toBe(6);
    b.reset();
    expect([b.failures, b.next()]).toEqual([0, 50]);
  });

  it('draws a full-jitter wait from [0, the doubled wait]', () => {
    const o = { initialMs: 1000, maxMs: 60_000, jitter: true };
    expect(backoffDelay(3, { ...o, random: () => 1 })).toBe(8000);
    expect(backoffDelay(3, { ...o, random: () => 0 })).toBe(0);
    expect(backoffDelay(20, { ...o, random: () => 0.5 })).toBe(30_000);
    const b = new Backoff({ ...o, random: () => 0.25 });
    expect([b.next(), b.next(), b.next()]).toEqual([250, 500, 1000]);
  });

  it('stays a number after any number of failures', () => {
    expect(backoffDelay(5000, { initialMs: 1000, maxMs: 60_000 })).toBe(60_000);
    expect(backoffDelay(5000, { initialMs: 0, maxMs: 60_000 })).toBe(0);
  });
});

describe('delivery retry policy', () => {
  const policy = () => {
    const status = { consecutiveFailures: 0, failures: {}, nextAttemptMs: null, paused: null } as unknown as SenderStatus;
    const config = configSchema.parse({ api: { scac: 'ABCD' }, sources: [{ type: 'simulator', resource_id: 'T' }] });
    let now = 1_000_000;
    // The largest draw every time: the longest wait the policy allows.
    const p = new RetryPolicy(
      status,
      () => config,
      () => createLogger({ level: 'silent' }),
      clockOf(() => now),
      () => 1,
    );
    const waitAfter = (outcome: PostOutcome) => {
      p.failed(classify(outcome), 'x', outcome, {});
      const wait = status.nextAttemptMs! - now;
      now = status.nextAttemptMs!;
      return wait;
    };
    return { p, waitAfter };
  };
  const refused: PostOutcome = { kind: 'network', error: 'connect ECONNREFUSED', code: 'ECONNREFUSED', durationMs: 1 };

  it('no answer at all (refused, reset, DNS, connect timeout): never more than reconnect_max_s (30 s) apart, however long the outage', () => {
    const { waitAfter } = policy();
    // An hour of a dead zone: the waits grow 5, 10, 20 s, then stay at 30 s.
    const waits = Array.from({ length: 120 }, () => waitAfter(refused));
    expect(waits.slice(0, 4)).toEqual([5000, 10_000, 20_000, 30_000]);
    expect(Math.max(...waits)).toBe(30_000);
    for (const code of ['ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']) {
      expect(waitAfter({ kind: 'network', error: code, code, durationMs: 1 }), code).toBe(30_000);
    }
  });

  it('answers from the service (503, 429) and a request left unanswered keep the exponential backoff up to retry_max_s', () => {
    const { waitAfter } = policy();
    const unavailable: PostOutcome = { kind: 'response', status: 503, body: '', durationMs: 1 };
    const waits = Array.from({ length: 12 }, () => waitAfter(unavailable));
    expect(waits.slice(0, 6)).toEqual([5000, 10_000, 20_000, 40_000, 80_000, 160_000]);
    expect(Math.max(...waits)).toBe(900_000);
    const silent: PostOutcome = { kind: 'network', error: 'no answer within 30000 ms', code: 'ETIMEDOUT', durationMs: 30_000 };
    expect(waitAfter(silent)).toBe(900_000);
    // Retry-After is the service's word.
    expect(waitAfter({ kind: 'response', status: 429, body: '', retryAfter: '120', durationMs: 1 })).toBe(120_000);
  });
});
