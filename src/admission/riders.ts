/**
 * The writes waiting to ride in the next commit of readings (buffer/riders.ts runs them in
 * it). One that failed is not forgotten: it is logged with its cause and rides again with the
 * next commit, until it lands. A failed stop-state write was once swallowed and taken as
 * written, and the geofence's progress at a stop was lost.
 */
import type { Logger } from 'pino';
import type { Rider } from '../buffer/riders.js';

interface Waiting {
  write: () => void;
  /** Called once the write is in a committed transaction. */
  landed?: () => void;
}

/** Failed commits in a row after which a rider that keeps failing is logged again. */
const LOG_AGAIN_EVERY = 100;

/** The riders waiting for the next commit, by owner (one each: a newer write replaces the older). */
export class Riders {
  private readonly waiting = new Map<string, Waiting>();
  /** Owners whose write failed, with how many commits in a row it failed in. */
  private readonly failing = new Map<string, number>();

  constructor(private readonly log: Logger) {}

  /** Have `write` ride in the next commit in place of what `owner` handed before (undefined: nothing). */
  set(owner: string, write: (() => void) | undefined, landed?: () => void): void {
    if (write) this.waiting.set(owner, { write, landed });
    else this.waiting.delete(owner);
  }

  get size(): number {
    return this.waiting.size;
  }

  /**
   * The riders for one commit, and what to call once that commit went through: a rider that
   * wrote is done (unless its owner handed a newer one meanwhile); one that failed waits for
   * the next commit, and so does one the commit did not run. When the commit itself fails,
   * nothing is called and every rider waits.
   */
  board(): { riders: Rider[]; committed: () => void } {
    const taken = [...this.waiting];
    const wrote = new Set<string>();
    const failures = new Map<string, unknown>();
    const riders = taken.map(
      ([owner, w]): Rider => ({
        write: () => {
          w.write();
          wrote.add(owner);
        },
        failed: (err) => failures.set(owner, err),
      }),
    );
    const committed = () => {
      for (const [owner, w] of taken) {
        if (wrote.has(owner)) this.landed(owner, w);
        else if (failures.has(owner)) this.failed(owner, failures.get(owner));
      }
    };
    return { riders, committed };
  }

  private landed(owner: string, w: Waiting): void {
    if (this.waiting.get(owner) === w) this.waiting.delete(owner);
    w.landed?.();
    const n = this.failing.get(owner);
    if (n === undefined) return;
    this.failing.delete(owner);
    this.log.info({ owner, failedCommits: n }, `${owner}: written again with a commit of readings`);
  }

  private failed(owner: string, err: unknown): void {
    const n = (this.failing.get(owner) ?? 0) + 1;
    this.failing.set(owner, n);
    if (n !== 1 && n % LOG_AGAIN_EVERY !== 0) return;
    this.log.warn(
      { owner, err: (err as Error)?.message ?? String(err), code: (err as { code?: string })?.code, failedCommits: n },
      `${owner}: the write riding on a commit of readings failed and was undone (the readings committed); it rides again with the next commit`,
    );
  }
}
