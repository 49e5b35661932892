/**
 * Small writes that ride in a commit of readings (the daemon's state row, stop states, the
 * count of readings dropped from memory): one commit, one sync, where a commit of their own
 * cost as much flash again. Each runs in a savepoint: one that throws has its own writes
 * undone and the readings still commit. Which writes wait for the next commit, and how one
 * that failed rides again, is admission's (src/admission/riders.ts).
 */
import type { DB } from './db.js';

/** A write riding in a commit of readings, and where to say that it failed (its savepoint undone). */
export interface Rider {
  write: () => void;
  failed: (err: unknown) => void;
}

/**
 * Run the riders inside the commit's transaction, each in a savepoint. An error that ended
 * the whole transaction (a full disk, an I/O error) fails the commit, readings and all (they
 * stay queued); any other undid only the rider's own writes.
 */
export function rideAlong(db: DB, riders: ReadonlyArray<Rider> | undefined): void {
  for (const r of riders ?? []) {
    try {
      db.transaction(r.write)();
    } catch (err) {
      if (!db.inTransaction) throw err;
      r.failed(err);
    }
  }
}
