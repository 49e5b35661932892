/**
 * Commits of readings that fail (a full disk, an I/O error): tried again with a capped
 * backoff, not at every reading. A full disk once made the agent retry every 50 ms at 100%
 * CPU, starving its timers and the health endpoint. The failure is logged when it starts and
 * when it ends, with counts, not at every try. The wait is on the monotonic clock (a step of
 * the wall clock neither stretches nor cuts it); `nextAttemptMs` shows its wall time.
 */
import type { Logger } from 'pino';
import { backoffDelay } from '../backoff.js';
import { isDiskFull } from '../buffer/disk.js';
import { type ClockSources, type Deadline, deadlineIn, isPast, wallOf } from '../clock.js';

/** Why readings are not being committed, while they are not. */
export interface CommitTrouble {
  kind: 'disk-full' | 'error';
  sinceMs: number;
  /** Failed attempts so far. */
  attempts: number;
  lastError: string;
  /** When the next attempt is due (epoch ms), as shown: the wait itself is `due`'s. */
  nextAttemptMs: number;
}

/** Each trouble's next attempt on the monotonic clock: the daemon's own, not in the state row. */
const due = new WeakMap<CommitTrouble, Deadline>();

/** Whether the backoff of this trouble is over. */
export function commitDue(t: CommitTrouble, clock: ClockSources): boolean {
  const d = due.get(t);
  return d === undefined || isPast(d, clock);
}

/** Try again at once (room was made). */
export function commitNow(t: CommitTrouble, clock: ClockSources): void {
  const d = deadlineIn(0, clock);
  due.set(t, d);
  t.nextAttemptMs = d.wall;
}

/** The wall clock was stepped: the next attempt shown is its wall time on the new clock. */
export function reshowCommitTrouble(t: CommitTrouble | null, clock: ClockSources): void {
  const d = t ? due.get(t) : undefined;
  if (t && d) t.nextAttemptMs = wallOf(d, clock);
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
export function commitFailed(err: unknown, state: CommitState, log: Logger, at: { clock: ClockSources; initialMs: number; pending: number; maxPending: number }): CommitTrouble {
  const message = (err as Error).message;
  state.commitErrors += 1;
  state.lastError = message;
  const kind = isDiskFull(err) ? 'disk-full' : 'error';
  const prev = state.trouble;
  const attempts = prev && prev.kind === kind ? prev.attempts + 1 : 1;
  const delay = backoffDelay(attempts - 1, { initialMs: at.initialMs, maxMs: MAX_COMMIT_RETRY_MS });
  const next = deadlineIn(delay, at.clock);
  state.trouble = { kind, sinceMs: prev?.sinceMs ?? at.clock.wall(), attempts, lastError: message, nextAttemptMs: next.wall };
  due.set(state.trouble, next);
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
