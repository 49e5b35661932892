/**
 * "Now" for a command that stamps something (`milestone` without `--time`, and the check of a
 * typed time against the future): the system clock, unless the running daemon says that clock
 * is not synchronised and GNSS time is known (src/gnss-clock.ts). A device booted 12 h behind
 * would otherwise record a driver's "arrived" half a day early, or refuse the right local time
 * as 12 h in the future.
 */
import type { Store } from '../buffer/store.js';
import { formatStep } from '../clock.js';
import { DAEMON_STATE_KEY, type DaemonState } from '../daemon-state.js';
import { LATENCY_MS } from '../gnss-clock.js';
import { pidAlive } from './status.js';

export function commandNow(store: Store, wallMs = Date.now()): { nowMs: number; note?: string } {
  const s = store.getState<DaemonState>(DAEMON_STATE_KEY)?.value;
  const c = s?.running && pidAlive(s.pid) ? s.clock : undefined;
  if (c?.state !== 'gnss' || c.offsetMs === null || Math.abs(c.offsetMs) < LATENCY_MS) return { nowMs: wallMs };
  return {
    nowMs: wallMs + c.offsetMs,
    note: `the system clock is not synchronised (${c.from}): now is the running agent's GNSS time, ${formatStep(c.offsetMs)} from the system clock`,
  };
}
