/**
 * A look at what delivery reads next, at every start, clean stop or not. After a clean stop
 * the daemon reads no page to check it (a power cut is when a file gets damaged, and a full
 * check of a large buffer takes minutes), so a page damaged while the buffer lay on the card
 * was found only when a query reached it: in one run the daemon delivered 3,000 readings,
 * sent a 500-point request twice, then stopped with 65. This reads, before anything is sent,
 * the rows the first requests are built from: the loads, the milestones to send, the fixed
 * requests and each load's next rows, and every page when the file is small enough for that
 * to be quick.
 */
import { statSync } from 'node:fs';
import { isCorruption } from '../errors.js';
import { corrupt } from './db.js';
import type { Store } from './store.js';

/** Rows of each load read ahead: the first chunks of the next push (a chunk is at most 500 points). */
export const CHECK_AHEAD_ROWS = 5_000;
/** Below this size every page is read (`PRAGMA quick_check`: some 0.1 s for 16 MB here). */
export const QUICK_CHECK_BYTES = 16 * 1024 * 1024;

/** Throws the buffer's corrupt error (BufferError 'corrupt', exit 65) when what delivery reads next cannot be read. */
export function checkAhead(store: Store, opts: { rowsPerLoad?: number; quickCheckBytes?: number } = {}): void {
  const rowsPerLoad = opts.rowsPerLoad ?? CHECK_AHEAD_ROWS;
  const file = store.db.name;
  try {
    if (file !== ':memory:' && statSync(file).size <= (opts.quickCheckBytes ?? QUICK_CHECK_BYTES)) {
      const result = store.db.pragma('quick_check(1)', { simple: true }) as string;
      if (result !== 'ok') throw corrupt(file, result);
      return;
    }
    store.listLoads();
    store.pendingMilestones(100);
    store.db.prepare('SELECT * FROM requests').all();
    for (const loadNumber of store.loadsWithReadings()) {
      let rows = 0;
      for (const page of store.tracePages(loadNumber)) {
        rows += page.length;
        if (rows >= rowsPerLoad) break;
      }
    }
  } catch (err) {
    if (isCorruption(err)) throw corrupt(file, (err as Error).message);
    throw err;
  }
}
