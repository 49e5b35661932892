/**
 * The path from a source's `emit` to a committed row. Readings are admitted (validated,
 * their time judged, counted per source: once, here), queued in memory and committed
 * together: one transaction per batch instead of one per reading is what keeps an SD card
 * alive (each commit rewrites at least a page and a WAL frame). What a crash can cost is
 * at most one flush interval of readings that were never committed.
 *
 * When a commit fails (a full disk, an I/O error) the readings stay queued, up to
 * `maxPending`, past which the oldest pending ones are dropped and counted. Commits are
 * then tried again with a capped backoff (commit-trouble.ts). A stop that cannot commit what
 * waits says what it drops (left-behind.ts).
 */
import type { Logger } from 'pino';
import { COUNTER_DROPPED_PENDING } from '../buffer/bounds.js';
import { lateSince } from '../buffer/ledger.js';
import { OdometerMarks, type OdometerBuffer } from '../buffer/odometer-marks.js';
import type { Store } from '../buffer/store.js';
import { type ClockSources, clockOf } from '../clock.js';
import type { Reading } from '../reading.js';
import { commitDue, commitFailed, commitNow, commitsResumed, type CommitTrouble } from './commit-trouble.js';
import { SourceIntake, type TimeCheck } from './intake.js';
import { logLeftBehind } from './left-behind.js';
import { NewestFixes } from './newest-fixes.js';
import { GnssOdometers, type OdometerOptions } from './odometer.js';
import { Riders } from './riders.js';
import { judgeTime } from './time-guard.js';
import { readingProblem } from './validate.js';
import { findReading } from '../buffer/seen.js';

export { MAX_COMMIT_RETRY_MS, type CommitTrouble } from './commit-trouble.js';
export type { IngestOptions } from './ingest-options.js';
import type { IngestOptions } from './ingest-options.js';

/** What ingest needs of the buffer. */
export type IngestStore = Pick<Store, 'roomForReadings' | 'insertReadings' | 'bump'> & Partial<OdometerBuffer>;

export interface IngestStats {
  accepted: number;
  committed: number;
  discardedNoLoad: number;
  rejected: number;
  /** Pending readings dropped because more than maxPending waited. */
  droppedPending: number;
  /**
   * Of those, the ones not yet in the buffer's counter (readings_dropped_pending): it is
   * bumped in the next commit of readings, so while the disk is full they are counted only here.
   */
  droppedUncounted: number;
  commitErrors: number;
  pending: number;
  lastCommitMs?: number;
  lastError?: string;
  trouble: CommitTrouble | null;
}

/** Readings accepted are handed to onAdmitted's listeners (milestone detection) at least this often. */
export const ADMITTED_EVERY_MS = 5000;

export class Ingest {
  private queue: Reading[] = [];
  /**
   * The source of each queued reading, side by side with `queue`: copying each reading into
   * a new object to tag it (`{ ...reading, source }`) halved the ingest rate.
   */
  private sources: Array<string | undefined> = [];
  private timer: NodeJS.Timeout | undefined;
  readonly stats: IngestStats = { accepted: 0, committed: 0, discardedNoLoad: 0, rejected: 0, droppedPending: 0, droppedUncounted: 0, commitErrors: 0, pending: 0, trouble: null };
  private firstFlushed = false;
  /** Written in the next commit of readings, by owner (writeWithNextCommit). */
  private readonly riders: Riders;
  private readonly listeners: Array<(batch: ReadonlyArray<Reading>) => void> = [];
  private readonly admittedListeners: Array<(batch: ReadonlyArray<Reading>) => void> = [];
  /** Accepted since the last hand-over (handOver). */
  private admitted: Reading[] = [];
  private handTimer: NodeJS.Timeout | undefined;
  /** Newest fix per resource, from every reading accepted (for milestones recorded before a commit). */
  readonly fixes = new NewestFixes();
  private warnedFull = false;
  /** Totals of the sources with `odometer = "gnss"`, per resource. */
  private readonly odometers: GnssOdometers;
  private retryQueued = false;

  constructor(
    private readonly store: IngestStore,
    private opts: IngestOptions,
    private readonly log: Logger,
    now?: () => number,
    private readonly clock: ClockSources = clockOf(now),
  ) {
    this.riders = new Riders(log);
    const s = store;
    this.odometers = new GnssOdometers(log, s.db && s.getState && s.setState ? new OdometerMarks({ db: s.db, getState: s.getState, setState: s.setState }) : undefined, this.clock.mono);
  }

  /** Called after every successful commit with the readings that were in it. */
  onCommit(fn: (batch: ReadonlyArray<Reading>) => void): void {
    this.listeners.push(fn);
  }

  /**
   * Called with the readings accepted since the last call, every ADMITTED_EVERY_MS at most
   * (sooner when the flush interval is shorter) and before each commit: milestone detection
   * follows the truck this soon, however long readings wait to be committed together.
   */
  onAdmitted(fn: (batch: ReadonlyArray<Reading>) => void): void {
    this.admittedListeners.push(fn);
  }

  /** Hand the readings accepted since the last hand-over to onAdmitted's listeners. */
  handOver(): void {
    if (this.admitted.length === 0) return;
    const batch = this.admitted;
    this.admitted = [];
    for (const fn of this.admittedListeners) {
      try {
        fn(batch);
      } catch (err) {
        this.log.error({ err: (err as Error).message }, 'processing accepted readings failed');
      }
    }
  }

  /**
   * Have `write` run inside the next commit of readings, in place of what `owner` handed
   * before (undefined: nothing). Every commit dirties the WAL's last page and the -shm index
   * again: the daemon's state row by itself once a minute cost as much flash as a commit of
   * readings, and stop states every 5 s at a stop far more. A write that throws is undone
   * (the readings still commit), logged, and written again with the next commit (riders.ts).
   */
  writeWithNextCommit(owner: string, write: (() => void) | undefined): void {
    this.riders.set(owner, write);
  }

  /** Told of a commit failure that is not about room (corruption, I/O): the daemon decides. */
  onError: ((err: unknown) => void) | undefined;

  /** New options (a reload): the flush timer follows a new interval at once. */
  configure(opts: IngestOptions): void {
    const restart = this.timer !== undefined && opts.flushIntervalMs !== this.opts.flushIntervalMs;
    this.opts = opts;
    if (restart) {
      clearInterval(this.timer);
      clearInterval(this.handTimer);
      this.timer = undefined;
      this.handTimer = undefined;
      this.start();
    }
  }

  get options(): Readonly<IngestOptions> {
    return this.opts;
  }

  private get maxPending(): number {
    return this.opts.maxPending ?? this.opts.batchSize * 100;
  }

  /** A source's context, whose readings come to `admit` (`time`: how their times are judged). */
  intake(name: string, log: Logger, time?: TimeCheck, odometer?: OdometerOptions): SourceIntake {
    return new SourceIntake(this, name, log, time, odometer);
  }

  /**
   * The one admission step of every reading, before it is queued: a reading in bad form is
   * refused and counted as rejected; one in good form counts as a reading of its source and
   * then has its time judged (when the source's times are), a bad time refusing it too
   * (counted as timeRejected). Returns the reason when it is refused. Without a source
   * (tools, tests) nothing is counted per source and the rows carry no source name.
   */
  admit(reading: Reading, source?: SourceIntake, where?: string): string | undefined {
    const problem = readingProblem(reading);
    if (problem) {
      if (source) source.counts.rejected += 1;
      return this.refused(source, where ? `${where}: ${problem}` : problem);
    }
    if (source) {
      source.counts.readings += 1;
      source.counts.lastReadingMs = reading.timeMs;
      if (source.time) {
        const judged = judgeTime(reading, source.time, source.name);
        if (judged.problem) {
          source.counts.timeRejected += 1;
          return this.refused(source, judged.problem);
        }
        // Re-stamped by the GNSS offset while the system clock is not synchronised: as shown.
        source.counts.lastReadingMs = (reading = judged.reading).timeMs;
      }
      if (source.odometer) this.odometers.apply(reading, source.odometer);
    }
    this.enqueue(reading, source?.name);
    this.saveOdometers();
    return undefined;
  }

  /** Where this reading of `source` is already (a message its peer sent again): its number while it waits, 'stored', or undefined. */
  find(reading: Reading, source: string): number | 'stored' | undefined {
    return findReading(this.store, this.queue, this.sources, this.stats.accepted, reading, source);
  }

  /** A bad input the source found itself (a garbled line, a bad checksum): counted and logged. */
  refuse(source: SourceIntake, reason: string): void {
    source.counts.rejected += 1;
    this.refused(source, reason);
  }

  private refused(source: SourceIntake | undefined, reason: string): string {
    this.stats.rejected += 1;
    if (source) {
      // Logged, but not once per line forever: the first ten of the source, then every 1000th.
      const n = source.counts.rejected + source.counts.timeRejected;
      if (n <= 10 || n % 1000 === 1) source.log.warn({ rejected: n }, `bad input skipped: ${reason}`);
    }
    return reason;
  }

  private enqueue(reading: Reading, source: string | undefined): void {
    this.stats.accepted += 1;
    this.queue.push(reading);
    if (this.admittedListeners.length > 0) this.admitted.push(reading);
    this.sources.push(source);
    this.fixes.note(reading);
    if (this.queue.length > this.maxPending) {
      const drop = this.queue.length - this.maxPending;
      this.queue.splice(0, drop);
      this.sources.splice(0, drop);
      this.stats.droppedPending += drop;
      this.stats.droppedUncounted += drop;
      if (!this.warnedFull) {
        this.warnedFull = true;
        this.log.error({ maxPending: this.maxPending }, 'buffer.max_pending readings wait in memory: the oldest pending readings are dropped from now on (counted)');
      }
    }
    this.stats.pending = this.queue.length;
    // While commits fail, a full batch waits for the next attempt like the rest.
    if (this.stats.trouble) return;
    // The first reading is committed at once: `status` right after a start (or an install)
    // shows that readings arrive, without waiting a whole flush interval.
    if (this.queue.length >= this.opts.batchSize || !this.firstFlushed) {
      this.firstFlushed = true;
      this.flush();
    }
  }

  start(): void {
    this.timer ??= setInterval(() => this.flush(), this.opts.flushIntervalMs);
    const handEvery = Math.min(this.opts.flushIntervalMs, ADMITTED_EVERY_MS);
    if (handEvery < this.opts.flushIntervalMs) this.handTimer ??= setInterval(() => this.handOver(), handEvery);
  }

  /** Stop the timer and try once more to commit what waits (backoff or not). */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    if (this.handTimer) clearInterval(this.handTimer);
    this.timer = undefined;
    this.handTimer = undefined;
    this.saveOdometers(true);
    this.flush(true);
    // Writes still waiting for a commit of readings (none came): in one of their own.
    this.countDrops();
    if (this.riders.size > 0) {
      try {
        const { riders, committed } = this.riders.board();
        this.store.insertReadings([], false, undefined, riders, this.queue.length === 0 ? this.clock.wall() : undefined);
        committed();
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'could not write what waited for a commit of readings');
      }
    }
    // Lost with the process: said, with what and whose it was.
    logLeftBehind(this.log, this.queue, this.stats.droppedUncounted, this.stats.lastError);
  }

  /**
   * Commit everything queued now, in transactions of at most batch_size readings. While
   * commits fail, an attempt is made only when the backoff allows it (`force` skips the
   * wait). What a failed transaction held stays queued.
   */
  flush(force = false): number {
    this.handOver();
    if (this.queue.length === 0) return 0;
    const trouble = this.stats.trouble;
    if (trouble && !force && !commitDue(trouble, this.clock)) return 0;
    let total = 0;
    while (this.queue.length > 0) {
      // Slices, not the whole queue: after a full disk up to max_pending readings wait, and
      // one transaction of them all needs that much free room at once and grows the WAL
      // past its limit (it holds every page until the commit; measured on a 4 MB tmpfs).
      const all = this.queue.length <= this.opts.batchSize;
      const batch = all ? this.queue : this.queue.slice(0, this.opts.batchSize);
      const sources = all ? this.sources : this.sources.slice(0, this.opts.batchSize);
      let kept: number;
      try {
        // Not the last of the room: acknowledging and purging need it to make more (disk.ts).
        if (!this.store.roomForReadings(batch.length)) {
          throw Object.assign(new Error('database or disk is full (no room left beyond what delivery needs to make more)'), { code: 'SQLITE_FULL' });
        }
        this.countDrops();
        const { riders, committed } = this.riders.board();
        const now = this.clock.wall();
        const late = this.opts.lateReadingsMs;
        kept = this.store.insertReadings(
          batch,
          // Readings of no load: for good, or those recent enough for a load started `--from`.
          this.opts.keepWithoutLoad || (this.opts.keepUnassignedMs ? now - this.opts.keepUnassignedMs : false),
          sources,
          riders,
          // The whole queue: every reading admitted until now is in the buffer with this
          // commit, so the loads ended before now can be closed (see Readings.insertReadings).
          all ? now : undefined,
          // Closed loads ended since then still take the readings of their window (late readings).
          late ? lateSince(now, late) : undefined,
          this.opts.history,
        );
        committed();
      } catch (err) {
        this.failed(err);
        break;
      }
      if (all) {
        this.queue = [];
        this.sources = [];
      } else {
        this.queue.splice(0, batch.length);
        this.sources.splice(0, batch.length);
      }
      this.stats.pending = this.queue.length;
      this.stats.committed += kept;
      this.stats.discardedNoLoad += batch.length - kept;
      this.stats.lastCommitMs = this.clock.wall();
      total += kept;
      // Outside the commit's error handling: a listener that throws must not put a batch that
      // is already committed back in the queue (it would be stored twice).
      for (const fn of this.listeners) {
        try {
          fn(batch);
        } catch (err) {
          this.log.error({ err: (err as Error).message }, 'processing committed readings failed');
        }
      }
    }
    // Recovered once everything that waited is in: a slice that still finds no room keeps the
    // trouble (and its one log line) instead of flapping between two states in one flush.
    if (this.queue.length === 0 && this.stats.trouble) {
      commitsResumed(this.stats, this.log, this.clock.wall(), total);
      this.warnedFull = false;
    }
    return total;
  }

  /**
   * Delivery deleted rows: while the disk is full, try to commit now instead of at the end
   * of the backoff. After minutes of a full disk the backoff is at its 60 s cap, and readings
   * waited (and were dropped past max_pending) that long after the room was back.
   */
  roomMade(): void {
    const t = this.stats.trouble;
    if (t?.kind !== 'disk-full' || this.retryQueued) return;
    commitNow(t, this.clock);
    this.retryQueued = true;
    setImmediate(() => {
      this.retryQueued = false;
      this.flush();
    });
  }

  private failed(err: unknown): void {
    const t = commitFailed(err, this.stats, this.log, { clock: this.clock, initialMs: this.opts.flushIntervalMs, pending: this.queue.length, maxPending: this.maxPending });
    if (t.kind === 'error') this.onError?.(err);
  }

  /** The odometers' totals ride with the next commit when due (`now`: whenever one moved). */
  private saveOdometers(now = false): void {
    const write = this.odometers.due(now);
    if (write) this.riders.set('odometer', () => write(this.clock.wall()));
  }

  /**
   * The readings dropped from memory are counted in the next commit of readings (it rides
   * along), not in a transaction of their own: on a full disk that second commit was one
   * more write that could fail, and a crash between the two lost the count.
   */
  private countDrops(): void {
    const n = this.stats.droppedUncounted;
    if (n === 0) return;
    this.riders.set(
      COUNTER_DROPPED_PENDING,
      () => this.store.bump(COUNTER_DROPPED_PENDING, n),
      () => (this.stats.droppedUncounted -= n),
    );
  }
}
