/**
 * The path from a source's `emit` to a committed row. Readings are validated, queued in
 * memory and committed together: one transaction per batch instead of one per reading
 * is what keeps an SD card alive (each commit rewrites at least a page and a WAL frame).
 * What a crash can cost is at most one flush interval of readings that were never committed.
 */
import type { Logger } from 'pino';
import type { Reading } from '../sources/types.js';
import { readingProblem } from '../sources/types.js';
import { withRoom } from './bounds.js';
import type { Store } from './store.js';

export interface IngestOptions {
  batchSize: number;
  flushIntervalMs: number;
  keepWithoutLoad: boolean;
  /** Hard cap on readings waiting in memory (e.g. while the disk is full); the oldest go first. */
  maxQueued?: number;
}

export interface IngestStats {
  accepted: number;
  committed: number;
  discardedNoLoad: number;
  rejected: number;
  droppedQueueFull: number;
  commitErrors: number;
  lastCommitMs?: number;
  lastError?: string;
}

export class Ingest {
  private queue: Reading[] = [];
  /**
   * The source of each queued reading, side by side with `queue`: copying each reading into
   * a new object to tag it (`{ ...reading, source }`) halved the ingest rate.
   */
  private sources: Array<string | undefined> = [];
  private timer: NodeJS.Timeout | undefined;
  readonly stats: IngestStats = { accepted: 0, committed: 0, discardedNoLoad: 0, rejected: 0, droppedQueueFull: 0, commitErrors: 0 };
  private firstFlushed = false;
  private readonly listeners: Array<(batch: ReadonlyArray<Reading>) => void> = [];

  constructor(
    private readonly store: Store,
    private readonly opts: IngestOptions,
    private readonly log: Logger,
  ) {}

  /** Called after every successful commit with the readings that were in it. */
  onCommit(fn: (batch: ReadonlyArray<Reading>) => void): void {
    this.listeners.push(fn);
  }

  /** Validate and queue; returns the problem when the reading is refused. */
  push(reading: Reading, source?: string): string | undefined {
    const problem = readingProblem(reading);
    if (problem) {
      this.stats.rejected += 1;
      return problem;
    }
    this.stats.accepted += 1;
    this.queue.push(reading);
    this.sources.push(source);
    const cap = this.opts.maxQueued ?? this.opts.batchSize * 100;
    if (this.queue.length > cap) {
      const drop = this.queue.length - cap;
      this.queue.splice(0, drop);
      this.sources.splice(0, drop);
      this.stats.droppedQueueFull += drop;
    }
    // The first reading is committed at once: `status` right after a start (or an install)
    // shows that readings arrive, without waiting a whole flush interval.
    if (this.queue.length >= this.opts.batchSize || !this.firstFlushed) {
      this.firstFlushed = true;
      this.flush();
    }
    return undefined;
  }

  start(): void {
    this.timer ??= setInterval(() => this.flush(), this.opts.flushIntervalMs);
  }

  /** Stop the timer and commit what waits. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.flush();
  }

  /** Commit everything queued now. On failure the batch stays queued for the next try. */
  flush(): number {
    if (this.queue.length === 0) return 0;
    const batch = this.queue;
    const sources = this.sources;
    this.queue = [];
    this.sources = [];
    let kept: number;
    try {
      kept = withRoom(this.store, this.log, () => this.store.insertReadings(batch, this.opts.keepWithoutLoad, sources), Math.max(1000, batch.length * 10));
    } catch (err) {
      // SQLITE_BUSY, a disk still full after making room, I/O errors: keep the readings in
      // memory (bounded by maxQueued) and try again at the next flush.
      this.stats.commitErrors += 1;
      this.stats.lastError = (err as Error).message;
      this.queue = batch.concat(this.queue);
      this.sources = sources.concat(this.sources);
      this.log.error({ err: (err as Error).message, code: (err as { code?: string }).code, queued: this.queue.length }, 'could not commit readings; keeping them in memory');
      return 0;
    }
    this.stats.committed += kept;
    this.stats.discardedNoLoad += batch.length - kept;
    this.stats.lastCommitMs = Date.now();
    // Outside the commit's error handling: a listener that throws must not put a batch that
    // is already committed back in the queue (it would be stored twice).
    for (const fn of this.listeners) {
      try {
        fn(batch);
      } catch (err) {
        this.log.error({ err: (err as Error).message }, 'processing committed readings failed');
      }
    }
    return kept;
  }
}
