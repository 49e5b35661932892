/**
 * A part of a split trace request that may be at the service. A request refused for some of
 * its points is split; parts are taken or parked, and when one more part then fails without
 * an answer that says the service did not take it (a lost answer, a timeout, a 500), the
 * service may have stored it under its key. The rest of the request goes later under a key of
 * its own (its points changed), and that part, merged into it, would be stored twice. So the
 * part is fixed on its own, with its points and key, as the load's request sent ahead of its
 * chunk (the row of the newest position, settled by marking its points sent: newest-first.ts),
 * and goes again exactly so before the load's next chunk.
 */
import type { Store } from '../buffer/store.js';
import type { Prepared, TracePoster } from './post-traces.js';

/** Fix the part of `p` that failed in doubt as the load's request sent ahead; whether there was one. */
export function fixPartInDoubt(store: Store, poster: TracePoster, p: Prepared): boolean {
  const failed = poster.lastFailed;
  // The whole request failed: it stays fixed as it is (or is let go, when the service said it did not take it).
  if (!failed || poster.lastFailureNotTaken || failed.key === p.key || failed.readingIds.length === 0) return false;
  const ids = failed.readingIds;
  store.requests.fix({ loadNumber: p.load.loadNumber, kind: 'newest', afterId: Math.min(...ids) - 1, lastId: Math.max(...ids), lastSampleMs: null, pointIds: ids, key: failed.key, dropped: 0 });
  return true;
}
