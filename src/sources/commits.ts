/**
 * The buffer's commits as a source sees them (types.ts `Commits`), for a source that may
 * acknowledge a message only once what it held is on disk (MQTT QoS 1).
 *
 * Admission numbers the readings it queues (Ingest's `accepted` count) and they leave its
 * queue in that order, committed or, past buffer.max_pending, dropped from the front: so
 * "every reading below n has left memory" is one comparison, and after each commit the
 * readings that left without being in one were dropped. Watched from outside Ingest, through
 * what it already tells: its counts and its commit listeners.
 */
import type { Ingest } from '../admission/ingest.js';
import type { Commits } from './types.js';

interface Waiter {
  from: number;
  to: number;
  done: (committed: boolean) => void;
}

/** Runs of dropped readings kept at most (a waiter older than these would be very old). */
const MAX_DROP_RUNS = 1000;

export class IngestCommits implements Commits {
  /** Readings numbered below this have left memory. */
  private out: number;
  private waiters: Array<Waiter | undefined> = [];
  private head = 0;
  /** Numbers [from, to) of readings dropped from memory, not committed. */
  private drops: Array<[number, number]> = [];
  /** The lowest `from` of a waiter since all were answered. */
  private lowest = Number.POSITIVE_INFINITY;

  constructor(private readonly ingest: Ingest) {
    this.out = this.left();
    ingest.onCommit((batch) => this.observe(batch.length));
  }

  get position(): number {
    return this.ingest.stats.accepted;
  }

  whenCommitted(from: number, to: number, done: (committed: boolean) => void): void {
    this.waiters.push({ from, to, done });
    this.observe(0);
    // Every message handed over up to now has its waiter: a drop below every waiter that is
    // left can concern no later one (those are numbered from the position on). Not always the
    // first waiter's `from`: a message sent again waits for its copy taken before (mqtt.ts).
    // The lowest since the waiters were last all answered (kept too long, a run only stays).
    this.lowest = Math.min(this.lowest, from);
    const oldest = Math.min(this.lowest, this.waiters[this.head]?.from ?? Number.POSITIVE_INFINITY);
    if (this.drops.length > 0) this.drops = this.drops.filter(([, end]) => end > oldest);
  }

  get failing(): boolean {
    return this.ingest.stats.trouble !== null;
  }

  commitNow(): void {
    this.ingest.flush();
  }

  /** Readings that have left Ingest's queue, by its counts. */
  private left(): number {
    return this.ingest.stats.accepted - this.ingest.stats.pending;
  }

  /** After a commit of `committed` readings (0: none), or to see drops since the last look. */
  private observe(committed: number): void {
    const out = this.left();
    // What left before this commit's readings, since the last look, was dropped.
    const droppedTo = out - committed;
    if (droppedTo > this.out) {
      this.drops.push([this.out, droppedTo]);
      if (this.drops.length > MAX_DROP_RUNS) this.drops.shift();
    }
    this.out = out;
    while (this.head < this.waiters.length) {
      const w = this.waiters[this.head]!;
      if (w.to > this.out) break;
      this.waiters[this.head++] = undefined;
      w.done(!this.drops.some(([a, b]) => a < w.to && b > w.from));
    }
    if (this.head === this.waiters.length) {
      this.waiters = [];
      this.head = 0;
      this.lowest = Number.POSITIVE_INFINITY;
    } else if (this.head > 1024 && this.head * 2 > this.waiters.length) {
      this.waiters = this.waiters.slice(this.head);
      this.head = 0;
    }
  }
}
