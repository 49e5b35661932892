import { describe, expect, it } from 'vitest';
import { localDateTime, utcDateTime } from '../../src/geo/iso-text.js';

/** What Date and its getters say: the reference the arithmetic must match, character for character. */
function byDate(ms: number): string {
  const d = new Date(ms);
  const y = d.getUTCFullYear();
  const year = y >= 0 && y <= 9999 ? String(y).padStart(4, '0') : String(y);
  const p = (n: number) => String(n).padStart(2, '0');
  return `${year}-${p(d.getUTCMonth() + 1)}-${p(d.getUTCDate())}T${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())}`;
}
const localByDate = (ms: number, off: number) => {
  const abs = Math.abs(off);
  const millis = String(new Date(ms + off * 60_000).getUTCMilliseconds()).padStart(3, '0');
  return `${byDate(ms + off * 60_000)}.${millis}${off < 0 ? '-' : '+'}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
};

describe('ISO text of an instant', () => {
  it('writes the examples the service shows', () => {
    expect(utcDateTime(Date.parse('2026-11-23T14:05:09.456Z'))).toBe('2026-11-23T14:05:09Z');
    expect(localDateTime(Date.parse('2026-11-23T14:05:09.456Z'), -360)).toBe('2026-11-23T08:05:09.456-06:00');
    expect(localDateTime(Date.parse('2026-03-01T00:30:00Z'), 330)).toBe('2026-03-01T06:00:00.000+05:30');
    expect(localDateTime(Date.parse('2024-03-01T02:00:00Z'), -210)).toBe('2024-02-29T22:30:00.000-03:30');
  });

  it('matches Date over leap days, month and year ends, centuries and far dates', () => {
    const instants: number[] = [];
    // Every day edge from 1899 to 2101 (leap years, 1900 and 2000 among them)...
    for (let ms = Date.UTC(1899, 0, 1); ms < Date.UTC(2101, 0, 1); ms += 86_400_000) instants.push(ms - 1, ms, ms + 999);
    // ...and instants spread over the whole range a Date holds, before and after 1970.
    let seed = 7;
    for (let i = 0; i < 20_000; i++) {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      instants.push(Math.round((seed / 2_147_483_648 - 0.5) * 2 * 8.6e15 * 0.99));
    }
    instants.push(-62_135_596_800_000 /* year 1 */, -62_198_755_200_000 /* year 0 */, 253_402_300_799_999 /* 9999-12-31 */, 253_402_300_800_000 /* 10000 */);
    let checked = 0;
    const wrong: string[] = [];
    for (const ms of instants) {
      if (utcDateTime(ms) !== `${byDate(ms)}Z`) wrong.push(`${ms} UTC: ${utcDateTime(ms)}`);
      for (const off of [-600, -360, -210, 0, 330, 345, 840]) {
        if (localDateTime(ms, off) !== localByDate(ms, off)) wrong.push(`${ms} at ${off}: ${localDateTime(ms, off)}, Date says ${localByDate(ms, off)}`);
        checked += 1;
      }
    }
    expect(wrong.slice(0, 5)).toEqual([]);
    expect(checked).toBeGreaterThan(500_000);
  });
});
