/**
 * Deleting what the service acknowledged. Acknowledging only moves a load's cursor; the rows
 * go here, a slice at a time while delivery is idle, so sources and milestones never wait
 * behind a million-row delete. What is not yet purged is already invisible to every query,
 * so stopping half-way loses nothing.
 */
import type { SenderDeps } from './context.js';

/**
 * Delivered readings are deleted after a push, off the delivery path, this many ids per
 * call (a few ms each), yielding between slices.
 */
export const PURGE_SLICE = 20_000;

export class Purger {
  /** Readings were acknowledged that are not purged yet. */
  pending = false;
  private running: Promise<void> | undefined;

  constructor(
    private readonly deps: () => SenderDeps,
    /** True while a delivery cycle runs or the sender stops: the purge gives way. */
    private readonly busy: () => boolean,
  ) {}

  /** The purge under way, if any (for idle() and stop()). */
  get current(): Promise<void> | undefined {
    return this.running;
  }

  /** After a cycle: delete what was acknowledged, unless there is nothing. */
  afterCycle(): void {
    if (this.pending) this.start();
  }

  /**
   * One slice now, in the middle of a drain (on a full disk, where purging is how the room
   * comes back); the rest waits for the end as usual.
   */
  slice(): void {
    const { store, onPurged, log } = this.deps();
    try {
      const slice = store.purgeAcked(PURGE_SLICE);
      if (slice.deleted > 0) onPurged?.(slice.deleted);
    } catch (err) {
      // The purge after the drain tries again and says so.
      log.debug({ err: (err as Error).message }, 'could not delete delivered readings during the drain');
    }
  }

  /**
   * The position history's rows older than history.keep_days go with each purge pass
   * (buffer/history.ts): a few rows a resource, one range of its key each.
   */
  private pruneHistory(): void {
    const { store, config, log, now } = this.deps();
    try {
      const pruned = store.withReserve(() => store.readings.history.prune(now?.() ?? Date.now(), config.history.keep_days));
      if (pruned > 0) log.debug({ pruned, keepDays: config.history.keep_days }, 'old positions pruned from the history');
    } catch (err) {
      // The next pass tries again.
      log.warn({ err: (err as Error).message }, 'could not prune the position history; will try after the next push');
    }
  }

  private start(): void {
    if (this.running) return;
    const run = async () => {
      const { store, onPurged, log } = this.deps();
      try {
        // After the cycle has settled: whoever awaited the push is told before this starts.
        await new Promise<void>((r) => setImmediate(r));
        this.pending = false;
        for (;;) {
          if (this.busy()) {
            this.pending = true; // the next cycle's end resumes it
            return;
          }
          const slice = store.purgeAcked(PURGE_SLICE);
          if (slice.deleted > 0) onPurged?.(slice.deleted);
          if (slice.done) {
            this.pruneHistory();
            // On a full disk the WAL gives its room back at once (it would keep its high-water
            // mark, up to the WAL limit). Not otherwise: a checkpoint after every push copied
            // each page the readings of 15 minutes had touched into the file, each 1 KB page a
            // 4 KB page of the card (half of all that the agent wrote at 1 Hz). Left to the WAL
            // limit, a checkpoint comes every few hours and copies each page once: the purge
            // frees the pages the next readings reuse, so the WAL keeps rewriting the same few.
            if (this.deps().roomWanted?.()) store.truncateWal();
            // The last acknowledgement of the push and the purge, on the disk now: with
            // synchronous NORMAL they would wait for the next request's sync, and a cut before
            // it sent the last chunk again (the checkpoint that was here synced them too).
            else await store.syncCommits();
            return;
          }
          await new Promise<void>((r) => setImmediate(r));
        }
      } catch (err) {
        log.warn({ err: (err as Error).message }, 'could not delete delivered readings; will try after the next push');
      }
    };
    // Cleared by identity, after the fact: a purge that finishes without a single await must
    // not leave a settled promise behind that idle() would wait on forever.
    const running = run().finally(() => {
      if (this.running === running) this.running = undefined;
    });
    this.running = running;
  }
}
