/**
 * A SIGHUP that came before `run` installed its own handler, kept by bin/telematics-agent.js
 * (its placeholder is installed before the code loads). Claimed once the daemon's handler is
 * in place, so the signal always has a listener: removing the last one gives SIGHUP back its
 * default action, death.
 */
interface EarlyHangup {
  pending: boolean;
  listener: () => void;
}

const KEY = Symbol.for('telematics-agent.early-hangup');

/** Whether a SIGHUP came before now; the placeholder is removed. False without one (tests). */
export function claimEarlyHangup(): boolean {
  const g = globalThis as { [KEY]?: EarlyHangup };
  const early = g[KEY];
  if (!early) return false;
  process.off('SIGHUP', early.listener);
  delete g[KEY];
  return early.pending;
}
