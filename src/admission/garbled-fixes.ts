/**
 * Readings whose receiver's date was garbled, found once GNSS time is known. Before it is
 * known nothing can say that a fix a year ahead (or 40 days behind) is wrong: the fix is
 * refused as *time* (src/gnss-first-fix.ts) but kept as a reading, and so are the GGA-only
 * epochs that carry its date. Measured before this: such a reading stood as the truck's newest
 * fix (status, the driver's page, a milestone's position) and went out in its traces.
 *
 * When GNSS time T is taken, the run has been up `upMs` on the monotonic clock: every fix of
 * this run admitted before then came at a true time within [T - upMs - AGREE_MS, T + AGREE_MS].
 * The rows this run's ingest committed from the sources whose fixes were admitted before T
 * and timed outside that window are set aside (src/buffer/set-aside.ts), in one transaction,
 * with one warning. Readings of earlier runs (a salvage copies some in beside the daemon), of
 * other sources, those admitted after T (judged against GNSS time), and those a trace request
 * not yet answered holds are not.
 *
 * The system clock turning synchronised before two fixes agree is the same truth (T: the clock
 * then): GNSS time is never taken after it, and a reading a year ahead would otherwise stay the
 * truck's newest fix until that date passed. Whichever comes first, once a run (src/gnss-clock.ts).
 */
import type { Logger } from 'pino';
import { type SetAsideRow, setAsideReadings } from '../buffer/set-aside.js';
import type { Store } from '../buffer/store.js';
import type { GnssClock, TimeKnown } from '../gnss-clock.js';
import type { NewestFixes } from './newest-fixes.js';
import { AGREE_MS } from '../gnss-first-fix.js';

/** Readings named one by one in the warning; the rest are counted. */
const MAX_NAMED = 10;

/** What of the ingest is needed: its commits' ids, what is queued goes into the buffer first, and its newest fix per resource is forgotten. */
export interface GarbledIngest {
  onCommit(fn: () => void): void;
  flush(force?: boolean): number;
  readonly fixes: Pick<NewestFixes, 'forget'>;
}

/** The window of true times a fix of this run admitted before the true time was known can have. */
export function trueWindow(t: TimeKnown): { fromMs: number; untilMs: number } {
  return { fromMs: t.timeMs - t.upMs - AGREE_MS, untilMs: t.timeMs + AGREE_MS };
}

/** What gave the true time, as the log names it. */
const truthOf = (t: TimeKnown) => (t.by === 'gnss' ? 'GNSS time' : 'the synchronised clock');

/** Why a reading is set aside: its source, its time and the true time. */
export function garbledReason(r: SetAsideRow, t: TimeKnown): string {
  const iso = (ms: number) => new Date(ms).toISOString();
  const days = (r.timeMs - t.timeMs) / 86_400_000;
  const off = Math.abs(days) >= 1 ? `${Math.round(Math.abs(days))} days` : `${Math.round(Math.abs(r.timeMs - t.timeMs) / 1000)} s`;
  const where = days > 0 ? `${off} after` : `${off} before`;
  return `time: ${r.source}'s reading of ${r.resourceId} at ${iso(r.timeMs)} is ${where} ${truthOf(t)} ${iso(t.timeMs)} (run up ${Math.round(t.upMs / 1000)} s): a garbled date, set aside`;
}

/** Look for garbled readings of this run once the true time is known. Watches before the ingest's first commit. */
export function watchGarbledFixes(gnss: GnssClock, store: Pick<Store, 'db' | 'readings'>, ingest: GarbledIngest, log: Logger): () => void {
  // The ids each commit of the ingest gave, until the true time is known: one range, unless a
  // salvage's batches came between.
  let ranges: Array<[number, number]> | undefined = [];
  ingest.onCommit(() => {
    const ids = store.readings.lastIds;
    if (!ranges || !ids) return;
    const prev = ranges.at(-1);
    if (prev && prev[1] + 1 === ids.first) prev[1] = ids.last;
    else ranges.push([ids.first, ids.last]);
  });
  return gnss.onTimeKnown((t) => {
    try {
      // The fixes admitted before T and still waiting in memory are committed first (the one
      // that gave T comes after): one query then finds them all. A commit failing (a full
      // disk) leaves them waiting; they are not looked at again.
      ingest.flush(true);
      const rows = setAsideReadings(store.db, { ranges: ranges ?? [], sources: t.sources, ...trueWindow(t) });
      ranges = undefined;
      if (rows.length === 0) return;
      ingest.fixes.forget(new Set(rows.map((r) => r.resourceId)));
      log.warn(
        { setAside: rows.length, [t.by === 'gnss' ? 'gnssTime' : 'clockTime']: new Date(t.timeMs).toISOString(), readings: rows.slice(0, MAX_NAMED).map((r) => garbledReason(r, t)) },
        `${rows.length} reading(s) of this run set aside: their receiver's date is garbled, outside what ${truthOf(t)} allows (${garbledReason(rows[0]!, t)}${rows.length > 1 ? `, and ${rows.length - 1} more` : ''})`,
      );
    } catch (err) {
      log.error({ err: (err as Error).message }, 'could not look for readings with a garbled receiver date; they stay');
    }
  });
}
