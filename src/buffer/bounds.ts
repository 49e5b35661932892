/**
 * Keeping the buffer inside its limits. A truck can be offline for weeks and an SD card is
 * small: past `buffer.max_age_days` or `buffer.max_size_mb`, or when the disk is full, the
 * oldest readings go first (counted and logged). Milestones and dead letters are never
 * dropped: they are few, and each one is an event someone will ask about.
 */
import type { Logger } from 'pino';
import type { Store } from './store.js';

export const COUNTER_DROPPED_AGE = 'readings_dropped_age';
export const COUNTER_DROPPED_SIZE = 'readings_dropped_size';
export const COUNTER_DROPPED_DISK_FULL = 'readings_dropped_disk_full';

export interface Bounds {
  maxSizeBytes: number;
  maxAgeMs: number;
}

export function isDiskFull(err: unknown): boolean {
  const code = (err as { code?: string } | undefined)?.code;
  return code === 'SQLITE_FULL' || code === 'SQLITE_IOERR_WRITE' || (err as Error | undefined)?.message?.includes('database or disk is full') === true;
}

/** Apply the age and size limits now. Returns how many readings were dropped for each. */
export function enforceBounds(store: Store, bounds: Bounds, log: Logger, nowMs = Date.now()): { age: number; size: number } {
  const age = store.dropReadingsOlderThan(nowMs - bounds.maxAgeMs);
  store.bump(COUNTER_DROPPED_AGE, age);
  if (age > 0) log.warn({ dropped: age, maxAgeDays: bounds.maxAgeMs / 86_400_000 }, 'readings older than buffer.max_age_days dropped');
  let size = 0;
  // Delivered rows waiting for their purge make room first, uncounted. Only when room is
  // needed: a whole pass at once can take seconds with a big backlog on an SD card (the
  // sender purges in slices after each push).
  if (store.usedBytes() > bounds.maxSizeBytes) store.purgeAcked();
  // Bounded: at most 200 rounds of 1000 rows per call; the next call continues.
  for (let i = 0; i < 200 && store.usedBytes() > bounds.maxSizeBytes; i++) {
    const n = store.dropOldestReadings(1000);
    if (n === 0) break;
    size += n;
  }
  store.bump(COUNTER_DROPPED_SIZE, size);
  if (size > 0) log.warn({ dropped: size, maxSizeMb: bounds.maxSizeBytes / 1_048_576 }, 'buffer over buffer.max_size_mb: oldest readings dropped');
  return { age, size };
}

/**
 * Run a write; if the disk is full, drop the oldest readings to make room and try once more.
 * Used for reading batches and milestones alike, so a milestone can always be recorded while
 * there are readings to give way.
 */
export function withRoom<T>(store: Store, log: Logger, write: () => T, makeRoom = 5000): T {
  try {
    return write();
  } catch (err) {
    if (!isDiskFull(err)) throw err;
    // Delivered rows first (a DELETE frees pages even on a full disk: the WAL reuses its frames).
    try {
      if (store.purgeAcked().deleted > 0) return write();
    } catch (again) {
      // Still full (or the purge itself did not fit): drop the oldest waiting readings.
      if (!isDiskFull(again)) throw again;
    }
    const dropped = store.dropOldestReadings(makeRoom);
    try {
      store.bump(COUNTER_DROPPED_DISK_FULL, dropped);
    } catch {
      // Even the counter may not fit; the log line below still says it.
    }
    log.error({ dropped }, 'disk full: oldest readings dropped to make room');
    if (dropped === 0) throw err;
    return write();
  }
}
