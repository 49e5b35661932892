import { describe, expect, it } from 'vitest';
import { Backoff, backoffDelay } from '../src/backoff.js';

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
