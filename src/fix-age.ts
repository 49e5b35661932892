/**
 * A fix's age as messages and `status` give it. After the system clock steps back (NTP
 * correcting a clock that ran ahead, an operator's `date -s`), the newest fix is dated after
 * "now", and its age came out negative: a milestone's zone "of the last fix of T1, -3569 s
 * old", `status --json` `ageS: -3569`. Such a fix is 0 s old, and the text says it is ahead.
 */
import { LATENCY_MS } from './gnss-clock.js';

/** Whole seconds since the fix at `nowMs`; 0 for a fix dated after it. */
export function fixAgeS(nowMs: number, fixMs: number): number {
  return Math.max(0, Math.round((nowMs - fixMs) / 1000));
}

/** Whether the fix is dated after `nowMs` by more than a receiver's latency (the clock stepped back). */
export function fixAhead(nowMs: number, fixMs: number): boolean {
  return fixMs - nowMs > LATENCY_MS;
}

/** `30 s old`, or `dated 3569 s after this device's clock (it stepped back, or runs behind)`. */
export function fixAgeText(nowMs: number, fixMs: number): string {
  if (!fixAhead(nowMs, fixMs)) return `${fixAgeS(nowMs, fixMs)} s old`;
  return `dated ${Math.round((fixMs - nowMs) / 1000)} s after this device's clock (it stepped back, or runs behind)`;
}
