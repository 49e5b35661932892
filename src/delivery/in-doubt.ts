/**
 * The parts of a split trace request, kept on the disk as they go. A request refused for some
 * of its points is split; its parts are taken or parked one by one. Once some are, the rest of
 * the request has other points and goes under a key of its own; a part that went out and got
 * no answer that says the service did not take it (a lost answer, a timeout, a 500, or a
 * `kill -9` while it was at the service) may be stored under its key, and merged into the rest
 * it would be stored twice. So each part is fixed before it leaves, with its points and key, as
 * the load's request sent ahead of its chunk (the row of the newest position after an outage,
 * settled by marking its points sent: newest-first.ts), and a part taken is marked sent at once:
 * after a failure or a crash the part in doubt goes again exactly so, before the rest, and what
 * the service took never goes again.
 */
import type { Store } from '../buffer/store.js';

/** A part is about to go: fixed on its own, so that it goes again as it is if no answer settles it. */
export function fixPart(store: Store, loadNumber: string, ids: number[], key: string): void {
  if (ids.length === 0) return;
  store.requests.fix({ loadNumber, kind: 'newest', afterId: Math.min(...ids) - 1, lastId: Math.max(...ids), lastSampleMs: null, pointIds: ids, key, dropped: 0 });
}

/** The service took the part: its points are sent for the load, and it is no longer fixed. */
export function partTaken(store: Store, loadNumber: string, ids: number[]): void {
  store.markSent(loadNumber, ids, { settle: 'newest' });
}

/** Every part of the request is settled (taken or parked): none is fixed any more. */
export function partsDone(store: Store, loadNumber: string): void {
  store.requests.release(loadNumber, 'newest');
}
