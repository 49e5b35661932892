/**
 * Commits of readings that fail (a full disk, an I/O error): tried again with a capped
 * backoff, not at every reading. A full disk once made the agent retry every 50 ms at 100%
 * CPU, starving its timers and the health endpoint. The failure is logged when it starts and
 * when it ends, with counts, not at every try.
 */
import type { Logger } from 'pino';
import { backoffDelay } from '../backoff.js';
import { isDiskFull } from '../buffer/disk.js';

/** Why readings are not being committed, while they are not. */
export interface CommitTrouble {
  kind: 'disk-full' | 'error';
  sinceMs: number;
  /** Failed attempts so far. */
  attempts: number;
  lastError: string;
  /** When the next attempt is due (epoch ms). */
  nextAttemptMs: number;
}

/** The longest wait between two attempts to commit while commits fail. */
export const MAX_COMMIT_RETRY_MS = 60_000;

/** What a failed or a resumed commit reports to, and what it logs with. */
export interface CommitState {
  trouble: CommitTrouble | null;
  commitErrors: number;
  lastError?: string;
  droppedPending: number;
}

/**
 * One more failed attempt: the trouble it makes (the first of its kind logged), the next
 * attempt after the backoff (from `initialMs`, doubling up to MAX_COMMIT_RETRY_MS).
 */
export function commitFailed(err: unknown, state: CommitState, log: Logger, at: { nowMs: number; initialMs: number; pending: number; maxPending: number }): CommitTrouble {
  const message = (err as Error).message;
  state.commitErrors += 1;
  state.lastError = message;
  const kind = isDiskFull(err) ? 'disk-full' : 'error';
  const prev = state.trouble;
  const attempts = prev && prev.kind === kind ? prev.attempts + 1 : 1;
  const delay = backoffDelay(attempts - 1, { initialMs: at.initialMs, maxMs: MAX_COMMIT_RETRY_MS });
  state.trouble = { kind, sinceMs: prev?.sinceMs ?? at.nowMs, attempts, lastError: message, nextAttemptMs: at.nowMs + delay };
  if (!prev || prev.kind !== kind) {
    const what = kind === 'disk-full' ? 'disk full' : 'commit failed';
    log.error(
      { err: message, code: (err as { code?: string }).code, pending: at.pending, maxPending: at.maxPending },
      `${what}: could not commit readings; keeping them in memory and trying again with backoff (up to ${MAX_COMMIT_RETRY_MS / 1000} s); delivery goes on`,
    );
  }
  return state.trouble;
}

/** Everything that waited is committed: the trouble is over (logged with its counts). */
export function commitsResumed(state: CommitState, log: Logger, nowMs: number, committed: number): void {
  const t = state.trouble;
  if (!t) return;
  log.info(
    { attempts: t.attempts, forS: Math.round((nowMs - t.sinceMs) / 1000), committed, droppedPending: state.droppedPending },
    t.kind === 'disk-full' ? 'disk has room again: readings committed' : 'readings committed again',
  );
  state.trouble = null;
}
