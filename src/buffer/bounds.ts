/**
 * Keeping the buffer inside its limits. A truck can be offline for weeks and an SD card is
 * small: past `buffer.max_age_days` or `buffer.max_size_mb` the oldest readings go first
 * (counted and logged). Milestones and dead letters are never dropped: they are few, and
 * each one is an event someone will ask about.
 *
 * A full disk is not a limit: readings already committed stay (they go when the service
 * takes them, and purging them is how the room comes back); new readings wait in memory
 * (see ingest.ts). Only a milestone that finds no room at all makes the oldest waiting
 * readings give way, because a milestone must never be lost to a reading.
 */
import type { Logger } from 'pino';
import { CLOCK_JUMP_MS, formatStep, type TrustedClock } from '../clock.js';
import { isDiskFull } from './disk.js';
import type { Store } from './store.js';

export { isDiskFull };

export const COUNTER_DROPPED_AGE = 'readings_dropped_age';
export const COUNTER_DROPPED_SIZE = 'readings_dropped_size';
export const COUNTER_DROPPED_DISK_FULL = 'readings_dropped_disk_full';
/** Counter of readings dropped from memory because more than buffer.max_pending waited. */
export const COUNTER_DROPPED_PENDING = 'readings_dropped_pending';

export interface Bounds {
  maxSizeBytes: number;
  maxAgeMs: number;
  /** `loads.keep_unassigned_s` in ms; undefined: unassigned readings are kept for good (`privacy.record_without_load`). */
  keepUnassignedMs?: number;
  /** `history.keep_days`: over the size limit the position history is shortened before a reading is dropped. */
  historyKeepDays?: number;
}

/**
 * Apply the age and size limits now. Age is judged against the earliest of the clocks the
 * agent has (see clock.ts), and not at all when the wall clock jumped by more than a day
 * since the last look: a clock set weeks ahead must not turn a minute-old backlog into one
 * "older than max_age_days". Returns how many readings were dropped for each limit.
 */
export function enforceBounds(store: Store, bounds: Bounds, log: Logger, clock: TrustedClock | number): { age: number; size: number; unassigned: number; jumpMs?: number } {
  let age = 0;
  let unassigned = 0;
  let jumpMs: number | undefined;
  const drift = typeof clock === 'number' ? 0 : clock.takeDrift();
  if (Math.abs(drift) > CLOCK_JUMP_MS) {
    jumpMs = drift;
    log.warn(
      { jumpMs: drift },
      `system clock jumped ${formatStep(drift)} since the last check: no reading is dropped for its age now; from here on age is judged against the monotonic clock and the newest reading as well`,
    );
  } else {
    const now = typeof clock === 'number' ? clock : clock.earliest();
    age = dropCounted(store, COUNTER_DROPPED_AGE, () => store.dropReadingsOlderThan(now - bounds.maxAgeMs));
    if (age > 0) log.warn({ dropped: age, maxAgeDays: bounds.maxAgeMs / 86_400_000 }, 'readings older than buffer.max_age_days dropped');
    // Not a loss: readings of no load, held in case a load started late took them; counted
    // with those discarded at commit for having no load.
    if (bounds.keepUnassignedMs !== undefined) unassigned = store.expireUnassigned(now - bounds.keepUnassignedMs);
    // The history's age limit, here too: the purge after a push prunes it, and a truck may go
    // weeks without one.
    if (bounds.historyKeepDays !== undefined) store.readings.history.prune(now, bounds.historyKeepDays);
    if (unassigned > 0) log.debug({ discarded: unassigned, keepUnassignedS: bounds.keepUnassignedMs! / 1000 }, 'readings of no load older than loads.keep_unassigned_s discarded');
  }
  let size = 0;
  // Delivered rows waiting for their purge make room first, uncounted. Only when room is
  // needed: a whole pass at once can take seconds with a big backlog on an SD card (the
  // sender purges in slices after each push).
  if (store.usedBytes() > bounds.maxSizeBytes) store.purgeAcked();
  // The position history places milestones typed late; undelivered readings are the data
  // itself. Over the limit the history keeps half as many days a round (down to an hour,
  // counted from its newest row) before a reading goes: a depot gateway's 500 trailers write
  // some 23 MB of it a day.
  let pruned = 0;
  for (let days = (bounds.historyKeepDays ?? 0) / 2; days >= 1 / 24 && store.usedBytes() > bounds.maxSizeBytes; days /= 2) {
    pruned += store.readings.history.prune(Number.POSITIVE_INFINITY, days);
  }
  if (pruned > 0) log.warn({ pruned, maxSizeMb: bounds.maxSizeBytes / 1_048_576 }, 'buffer over buffer.max_size_mb: the position history was shortened first');
  // Bounded: at most 200 rounds of 1000 rows per call; the next call continues.
  for (let i = 0; i < 200 && store.usedBytes() > bounds.maxSizeBytes; i++) {
    const n = dropCounted(store, COUNTER_DROPPED_SIZE, () => store.dropOldestReadings(1000));
    if (n === 0) break;
    size += n;
  }
  if (size > 0) log.warn({ dropped: size, maxSizeMb: bounds.maxSizeBytes / 1_048_576 }, 'buffer over buffer.max_size_mb: oldest readings dropped');
  return { age, size, unassigned, jumpMs };
}

/**
 * Drop readings and count them in one transaction: a count bumped in a second one was lost
 * by a crash (or a failed write) between the two, and the readings were gone uncounted.
 */
function dropCounted(store: Store, counter: string, drop: () => number): number {
  return store.db
    .transaction(() => {
      const n = drop();
      store.bump(counter, n);
      return n;
    })
    .immediate();
}

/**
 * Commit a milestone however full the disk is: first with the reserve given up (inside
 * `store.withReserve`), then with delivered rows purged, and last by dropping the oldest
 * waiting readings (counted, and logged with the real count).
 */
export function withRoom<T>(store: Store, log: Logger, write: () => T, makeRoom = 5000): T {
  try {
    return store.withReserve(write);
  } catch (err) {
    if (!isDiskFull(err)) throw err;
    // Delivered rows first.
    try {
      if (store.purgeAcked().deleted > 0) return write();
    } catch (again) {
      if (!isDiskFull(again)) throw again;
    }
    // The counter fits where the rows were: the pages they free are reused in the same transaction.
    const dropped = dropCounted(store, COUNTER_DROPPED_DISK_FULL, () => store.dropOldestReadings(makeRoom));
    if (dropped === 0) throw err;
    log.error({ dropped }, 'disk full: the oldest waiting readings were dropped to make room for a milestone');
    return write();
  }
}

/**
 * The buffer's drop counters with the pending drops the daemon has not been able to write
 * yet: while the disk is full, /metrics and `status` showed none of the readings being
 * dropped from memory, because the counter is bumped only with the next commit.
 */
export function dropCounters(counters: Record<string, number>, uncounted: number): Record<string, number> {
  if (uncounted <= 0) return counters;
  return { ...counters, [COUNTER_DROPPED_PENDING]: (counters[COUNTER_DROPPED_PENDING] ?? 0) + uncounted };
}
