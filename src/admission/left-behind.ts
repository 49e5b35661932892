/**
 * What a stop has to leave behind in memory: readings that could not be committed (a full
 * disk, an I/O error) are lost with the process. The daemon once stopped on a full disk with
 * about 9,000 readings (50 s of data) waiting and logged only "agent stopped": an operator
 * could not tell that anything was lost, let alone of which trucks and when.
 */
import type { Logger } from 'pino';
import type { Reading } from '../reading.js';

/** Resources named one by one in the log line; the rest are counted. */
const MAX_NAMED = 20;

export interface LeftBehind {
  readings: number;
  /** Readings per resource, the most first (MAX_NAMED at most). */
  resources: Record<string, number>;
  /** Resources not named in `resources`. */
  otherResources: number;
  /** Time of the oldest and the newest of them (ISO 8601). */
  firstReading: string;
  lastReading: string;
}

export function leftBehind(readings: ReadonlyArray<Reading>): LeftBehind | undefined {
  if (readings.length === 0) return undefined;
  const per = new Map<string, number>();
  let first = Number.POSITIVE_INFINITY;
  let last = Number.NEGATIVE_INFINITY;
  for (const r of readings) {
    per.set(r.resourceId, (per.get(r.resourceId) ?? 0) + 1);
    if (r.timeMs < first) first = r.timeMs;
    if (r.timeMs > last) last = r.timeMs;
  }
  const ranked = [...per].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  return {
    readings: readings.length,
    resources: Object.fromEntries(ranked.slice(0, MAX_NAMED)),
    otherResources: Math.max(0, ranked.length - MAX_NAMED),
    firstReading: new Date(first).toISOString(),
    lastReading: new Date(last).toISOString(),
  };
}

/**
 * Log what the stop drops, at error level: the readings still queued (how many, of which
 * resources, their time span) and the earlier drops from memory that never reached the
 * buffer's counter. Nothing when nothing is lost.
 */
export function logLeftBehind(log: Logger, queued: ReadonlyArray<Reading>, uncounted: number, cause: string | undefined): void {
  const lost = leftBehind(queued);
  if (lost) {
    log.error(
      { ...lost, droppedUncounted: uncounted, err: cause },
      `stopping with ${lost.readings} readings waiting in memory that were never committed: they are dropped (${lost.firstReading} to ${lost.lastReading})`,
    );
  } else if (uncounted > 0) {
    log.error({ droppedUncounted: uncounted, err: cause }, `stopping: ${uncounted} readings dropped from memory earlier could not be counted in the buffer`);
  }
}
