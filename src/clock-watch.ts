/**
 * What the daemon does when its wall clock is stepped (NTP or GPS setting it after a boot, an
 * operator's `date -s`): says so, once per step, and shows its deadlines again. The deadlines
 * themselves (delivery's backoff and Retry-After, a refused load's next try, the commit
 * backoff) run on the monotonic clock and keep their waits; what `status` shows of them is a
 * wall time, read again from the new clock here. Measured before: a 1 h step back left the
 * service unasked for the hour and `status` said the next attempt was "1 min 28 s ago".
 */
import type { Logger } from 'pino';
import type { Ingest } from './admission/ingest.js';
import { reshowCommitTrouble } from './admission/commit-trouble.js';
import { type ClockSteps, formatStep, systemClocks } from './clock.js';
import type { Sender } from './delivery/sender.js';

export interface StepParts {
  log: Logger;
  sender: () => Sender;
  ingest: () => Ingest;
  /** Write the daemon's state row now (`status` shows the new times at once). */
  writeState: () => void;
  /** Measures the GNSS offset again after a step (src/gnss-clock.ts); tells when its state changes. */
  gnss: { clockStepped(): void; onChange(fn: () => void): () => void };
  /** Told of an error showing the deadlines again (a corrupt buffer read for the refused loads). */
  onError: (err: unknown) => void;
}

/**
 * Listen to the daemon's detector of clock steps, and to the GNSS clock's state; returns what
 * stops listening. A change of state writes the state row too: `milestone` and `load` take
 * GNSS time as "now" from it, and a row a minute old stamped the first minute on the system clock.
 */
export function watchClockSteps(steps: ClockSteps, parts: StepParts): () => void {
  // Told from inside admission (a fix): the row is written after it returns.
  const offState = parts.gnss.onChange(() => setImmediate(() => parts.writeState()));
  const offSteps = steps.onStep((ms) => {
    parts.log.warn(
      { stepMs: Math.round(ms) },
      `system clock stepped ${formatStep(ms)} against the monotonic clock: retries, backoffs and Retry-After keep their waits (they run on the monotonic clock); the trace schedule follows the new time`,
    );
    try {
      parts.gnss.clockStepped();
      parts.sender().clockStepped();
      reshowCommitTrouble(parts.ingest().stats.trouble, systemClocks);
    } catch (err) {
      parts.onError(err);
    }
    parts.writeState();
  });
  return () => {
    offState();
    offSteps();
  };
}
