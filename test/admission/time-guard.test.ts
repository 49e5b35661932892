import { describe, expect, it } from 'vitest';
import { CLOCK_FLOOR_MS, systemClockUnset, timeProblem } from '../../src/admission/time-guard.js';

const opts = { maxFutureS: 300, maxPastDays: 30 };
const now = Date.parse('2026-11-22T12:00:00Z');

describe('time guard', () => {
  it('accepts times within the window around a set system clock', () => {
    expect(timeProblem(now, now, opts)).toBeUndefined();
    expect(timeProblem(now + 299_000, now, opts)).toBeUndefined();
    expect(timeProblem(now - 29 * 86_400_000, now, opts)).toBeUndefined();
  });

  it('refuses times too far in the future or the past, naming the setting', () => {
    expect(timeProblem(now + 3_600_000, now, opts)).toBe('time: 2026-11-22T13:00:00.000Z is 3600 s in the future (sources_time.max_future_s = 300)');
    expect(timeProblem(now - 31 * 86_400_000, now, opts)).toBe('time: 2026-10-22T12:00:00.000Z is 31.0 days in the past (sources_time.max_past_days = 30)');
  });

  it('refuses times from a clock that was never set: GPS epoch, week rollover, RTC-less boot', () => {
    expect(timeProblem(Date.parse('1980-01-06T00:00:00Z'), now, opts)).toMatch(/^time: 1980-01-06T00:00:00\.000Z is before 2025-01-01T00:00:00\.000Z; the clock that stamped it was not set/);
    expect(timeProblem(now - 1024 * 7 * 86_400_000, now, opts)).toMatch(/was not set/);
    expect(timeProblem(0, now, opts)).toMatch(/^time: 1970-01-01T00:00:00\.000Z is before/);
    expect(timeProblem(Number.NaN, now, opts)).toBe('time: not a valid time');
  });

  it('with the system clock unset, keeps plausible (GPS) times and refuses receive-time stamps', () => {
    const boot = Date.parse('1970-01-01T00:00:42Z');
    expect(systemClockUnset(boot)).toBe(true);
    expect(systemClockUnset(now)).toBe(false);
    expect(timeProblem(now, boot, opts)).toBeUndefined(); // GPS time: the only good clock
    expect(timeProblem(boot, boot, opts)).toMatch(/was not set/); // a 1-Wire reading stamped at receipt
    expect(CLOCK_FLOOR_MS).toBe(Date.parse('2025-01-01T00:00:00Z'));
    expect(timeProblem(Date.parse('2024-06-01T00:00:00Z'), now, { ...opts, floorMs: Date.parse('2024-01-01T00:00:00Z') })).toMatch(/days in the past/);
  });
});
