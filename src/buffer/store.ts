/**
 * Everything the agent keeps, behind one class: readings, loads, milestones, dead letters,
 * daemon state. The daemon and short-lived CLI commands open the same file; WAL lets them
 * work side by side. The SQL lives in one module per kind of record (readings.ts, loads.ts,
 * milestones.ts, dead-letters.ts, state.ts; the purge and the limits' drops in reclaim.ts),
 * the rules of a load's and a reading's states in ledger.ts; this façade opens the file, owns
 * what they share (the room on the disk, durable commits) and hands each call to its module.
 */
import { closeSync, fsync, openSync } from 'node:fs';
import { ChunkAck } from './chunk-ack.js';
import { openDatabase, walSalts, type DB, type OpenOptions } from './db.js';
import { DeadLetters } from './dead-letters.js';
import { DiskRoom, diskPlan, isDiskFull } from './disk.js';
import { Loads } from './loads.js';
import { Milestones } from './milestones.js';
import { AWAITED } from './ledger.js';
import { READING_BYTES, Readings } from './readings.js';
import { Reclaim } from './reclaim.js';
import { Requests } from './requests.js';
import { StateTable } from './state.js';
import { MarkState, ReadingState } from './types.js';

export * from './types.js';
export { LoadError } from './loads.js';
export { DuplicateEventError } from './milestones.js';
export type { FixedRequest, RequestKind } from './requests.js';
export type { RefusedRequest } from './dead-letters.js';

/** `buffer.reserve_kb` when none is given. */
export const DEFAULT_RESERVE_KB = 2048;

/** What the record modules share: the connection, the room on the disk, durable commits. */
export interface BufferContext {
  readonly db: DB;
  readonly disk: DiskRoom | undefined;
  withReserve<T>(write: () => T): T;
  durably<T>(fn: () => T): T;
}

export interface StoreOptions extends OpenOptions {
  /** `buffer.reserve_kb`: room kept for delivery on a full disk (see disk.ts). */
  reserveKb?: number;
}

export class Store implements BufferContext {
  readonly db: DB;
  /** Room on the disk for delivery writes; undefined for an in-memory buffer. */
  readonly disk: DiskRoom | undefined;
  readonly readings: Readings;
  readonly reclaim: Reclaim;
  readonly requests: Requests;
  readonly loads: Loads;
  readonly milestones: Milestones;
  readonly deadLetters: DeadLetters;
  readonly state: StateTable;

  constructor(db: DB, disk?: DiskRoom) {
    this.db = db;
    this.disk = disk;
    this.requests = new Requests(this);
    this.reclaim = new Reclaim(this);
    this.readings = new Readings(this, this.requests, this.reclaim);
    this.loads = new Loads(this);
    this.milestones = new Milestones(this, this.loads);
    this.deadLetters = new DeadLetters(this);
    this.state = new StateTable(this);
    const ack = new ChunkAck(this, this.readings, this.state);
    const r = this.readings;
    const p = this.reclaim;
    const l = this.loads;
    const m = this.milestones;
    const d = this.deadLetters;
    const s = this.state;
    // The façade: each call is its module's own method.
    this.insertReadings = r.insertReadings.bind(r);
    this.iterateReadings = r.iterateReadings.bind(r);
    this.tracePages = r.tracePages.bind(r);
    this.ackReadings = ack.ackReadings.bind(ack);
    this.markSent = r.markSent.bind(r);
    this.retryDone = r.retryDone.bind(r);
    this.closeEndedLoads = r.closeEndedLoads.bind(r);
    this.backlogs = r.backlogs.bind(r);
    this.purgeAcked = p.purgeAcked.bind(p);
    this.lastFix = r.lastFix.bind(r);
    this.lastFixes = r.lastFixes.bind(r);
    this.flushFixes = r.flushFixes.bind(r);
    this.newestReadingTime = r.newestReadingTime.bind(r);
    this.lastReadingId = r.lastReadingId.bind(r);
    this.loadsWithReadings = r.loadsWithReadings.bind(r);
    this.retryReadings = r.retryReadings.bind(r);
    this.deleteReadings = r.deleteReadings.bind(r);
    this.backlogOf = r.backlogOf.bind(r);
    this.usedBytes = r.usedBytes.bind(r);
    this.dropOldestReadings = p.dropOldestReadings.bind(p);
    this.dropReadingsOlderThan = p.dropReadingsOlderThan.bind(p);
    this.expireUnassigned = p.expireUnassigned.bind(p);
    this.startLoad = l.startLoad.bind(l);
    this.endLoad = l.endLoad.bind(l);
    this.getLoad = l.getLoad.bind(l);
    this.activeLoadsOf = l.activeLoadsOf.bind(l);
    this.openLoadsOf = l.openLoadsOf.bind(l);
    this.listLoads = l.listLoads.bind(l);
    this.endedSince = l.endedSince.bind(l);
    this.setNextStop = l.setNextStop.bind(l);
    this.commitMilestones = m.commitMilestones.bind(m);
    this.insertMilestone = m.insertMilestone.bind(m);
    this.findMilestone = m.findMilestone.bind(m);
    this.pendingMilestones = m.pendingMilestones.bind(m);
    this.hasPendingMilestones = m.hasPendingMilestones.bind(m);
    this.listMilestones = m.listMilestones.bind(m);
    this.stopsWithCodes = m.stopsWithCodes.bind(m);
    this.setMilestoneBody = m.setMilestoneBody.bind(m);
    this.markMilestoneSent = m.markMilestoneSent.bind(m);
    this.markMilestoneFailed = m.markMilestoneFailed.bind(m);
    this.markMilestoneAttempt = m.markMilestoneAttempt.bind(m);
    this.stopStates = m.stopStates.bind(m);
    this.saveStopStates = m.saveStopStates.bind(m);
    this.parkMilestone = d.parkMilestone.bind(d);
    this.parkReading = d.parkReading.bind(d);
    this.parkRequest = d.parkRequest.bind(d);
    this.refusedRequests = d.refusedRequests.bind(d);
    this.parkedReadings = d.parkedReadings.bind(d);
    this.fixAtOrBefore = d.fixAtOrBefore.bind(d);
    this.listDeadLetters = d.listDeadLetters.bind(d);
    this.retryDeadLetters = d.retryDeadLetters.bind(d);
    this.setState = s.setState.bind(s);
    this.getState = s.getState.bind(s);
    this.bump = s.bump.bind(s);
    this.counters = s.counters.bind(s);
  }

  insertReadings: Readings['insertReadings'];
  iterateReadings: Readings['iterateReadings'];
  tracePages: Readings['tracePages'];
  ackReadings: ChunkAck['ackReadings'];
  markSent: Readings['markSent'];
  retryDone: Readings['retryDone'];
  closeEndedLoads: Readings['closeEndedLoads'];
  backlogs: Readings['backlogs'];
  purgeAcked: Reclaim['purgeAcked'];
  lastFix: Readings['lastFix'];
  lastFixes: Readings['lastFixes'];
  flushFixes: Readings['flushFixes'];
  newestReadingTime: Readings['newestReadingTime'];
  lastReadingId: Readings['lastReadingId'];
  loadsWithReadings: Readings['loadsWithReadings'];
  retryReadings: Readings['retryReadings'];
  deleteReadings: Readings['deleteReadings'];
  backlogOf: Readings['backlogOf'];
  usedBytes: Readings['usedBytes'];
  dropOldestReadings: Reclaim['dropOldestReadings'];
  dropReadingsOlderThan: Reclaim['dropReadingsOlderThan'];
  expireUnassigned: Reclaim['expireUnassigned'];
  startLoad: Loads['startLoad'];
  endLoad: Loads['endLoad'];
  getLoad: Loads['getLoad'];
  activeLoadsOf: Loads['activeLoadsOf'];
  openLoadsOf: Loads['openLoadsOf'];
  listLoads: Loads['listLoads'];
  endedSince: Loads['endedSince'];
  setNextStop: Loads['setNextStop'];
  commitMilestones: Milestones['commitMilestones'];
  insertMilestone: Milestones['insertMilestone'];
  findMilestone: Milestones['findMilestone'];
  pendingMilestones: Milestones['pendingMilestones'];
  hasPendingMilestones: Milestones['hasPendingMilestones'];
  listMilestones: Milestones['listMilestones'];
  stopsWithCodes: Milestones['stopsWithCodes'];
  setMilestoneBody: Milestones['setMilestoneBody'];
  markMilestoneSent: Milestones['markMilestoneSent'];
  markMilestoneFailed: Milestones['markMilestoneFailed'];
  markMilestoneAttempt: Milestones['markMilestoneAttempt'];
  stopStates: Milestones['stopStates'];
  saveStopStates: Milestones['saveStopStates'];
  parkMilestone: DeadLetters['parkMilestone'];
  parkReading: DeadLetters['parkReading'];
  parkRequest: DeadLetters['parkRequest'];
  refusedRequests: DeadLetters['refusedRequests'];
  parkedReadings: DeadLetters['parkedReadings'];
  fixAtOrBefore: DeadLetters['fixAtOrBefore'];
  listDeadLetters: DeadLetters['listDeadLetters'];
  retryDeadLetters: DeadLetters['retryDeadLetters'];
  setState: StateTable['setState'];
  getState: StateTable['getState'];
  bump: StateTable['bump'];
  counters: StateTable['counters'];

  /**
   * A trace request the service had refused as a whole is settled (it took it at last, or
   * nothing of it is left to send): its readings are done for the load, as a retried dead
   * letter's are, and its dead letter goes, in one transaction, so no reading is left held by
   * a dead letter that is gone.
   */
  settleRefusedRequest(deadLetterId: number, loadNumber: string, readingIds: number[]): void {
    this.withReserve(() =>
      this.db.transaction(() => {
        this.readings.retryDone(loadNumber, readingIds);
        this.deadLetters.dropDeadLetter(deadLetterId);
      })(),
    );
  }

  /** A new synchronous level or page cache (a reload), applied to this connection at once. */
  tune(opts: { synchronous?: 'OFF' | 'NORMAL' | 'FULL'; cacheKb?: number }): void {
    if (opts.synchronous) {
      this.db.pragma(`synchronous = ${opts.synchronous}`);
      this.synchronousLevel = undefined;
    }
    if (opts.cacheKb !== undefined) this.db.pragma(`cache_size = -${Math.round(opts.cacheKb)}`);
  }

  /** What the connection runs with now: the file, its synchronous level, its page cache (KiB). */
  connectionSettings(): { path: string; synchronous: string; cacheKb: number } {
    const level = this.db.pragma('synchronous', { simple: true }) as number;
    return { path: this.db.name, synchronous: ['OFF', 'NORMAL', 'FULL', 'EXTRA'][level], cacheKb: -(this.db.pragma('cache_size', { simple: true }) as number) };
  }

  /** Told when a write gave up the reserve (the daemon logs it and writes it again later). */
  onReserveReleased: (() => void) | undefined;

  /** The WAL generation (its salts) known to hold the header page with the buffer's identity. */
  private identityInWal: string | undefined;
  /** The WAL, open for syncCommits (see there). */
  private walFd: number | undefined;
  /** The connection's synchronous level (0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA), read once per tune. */
  private synchronousLevel: number | undefined;

  static open(path: string, opts: StoreOptions = {}): Store {
    if (path === ':memory:' || opts.readonly) return new Store(openDatabase(path, opts));
    const plan = diskPlan(path, opts.reserveKb ?? DEFAULT_RESERVE_KB);
    return new Store(openDatabase(path, { walLimitBytes: plan.walLimitBytes, ...opts }), new DiskRoom(path, plan));
  }

  /**
   * Run a write delivery cannot do without (acknowledging, marking sent, parking, purging, the
   * daemon's state). On a full disk the reserve is given up for it once, the write tried again.
   */
  withReserve<T>(write: () => T): T {
    try {
      return write();
    } catch (err) {
      // Inside a transaction (a write riding in a commit of readings) the checkpoint cannot
      // run, and SQLite may have ended the transaction: the commit fails and is tried again.
      if (!isDiskFull(err) || this.db.inTransaction || !this.disk?.releaseReserve()) throw err;
      this.onReserveReleased?.();
      try {
        this.db.pragma('wal_checkpoint(PASSIVE)');
      } catch {
        // The write below says whether there is room now.
      }
      return write();
    }
  }

  /** Whether a batch of `n` readings may be committed without the room acknowledging and purging need (disk.ts). */
  roomForReadings(n: number): boolean {
    if (!this.disk) return true;
    const pageSize = this.db.pragma('page_size', { simple: true }) as number;
    const free = (this.db.pragma('freelist_count', { simple: true }) as number) * pageSize;
    return this.disk.roomFor(n * READING_BYTES, free);
  }

  /**
   * Fold the WAL back into the file and cut it to nothing: after a purge, so the WAL gives
   * its room back instead of keeping its high-water mark. Skipped quietly while a reader
   * (the CLI) holds a snapshot.
   */
  truncateWal(): void {
    try {
      this.db.pragma('wal_checkpoint(TRUNCATE)');
    } catch {
      // Busy or full: the next purge tries again.
    }
  }

  /**
   * A transaction committed with synchronous = FULL whatever the buffer's level: with NORMAL a
   * power cut can roll back the last commits, and a milestone is an event someone asks about.
   */
  durably<T>(fn: () => T): T {
    // Inside another durable write (a fleet command and its answer): a savepoint of it.
    if (this.db.inTransaction) return this.db.transaction(fn)();
    const previous = this.db.pragma('synchronous', { simple: true }) as number;
    this.db.pragma('synchronous = FULL');
    try {
      return this.db.transaction(fn).immediate();
    } finally {
      this.db.pragma(`synchronous = ${previous}`);
    }
  }

  /**
   * Put every commit so far on the disk, whatever the buffer's synchronous level: fsync the
   * WAL, which NORMAL syncs only at checkpoints. The sender calls it before every request, so
   * nothing reaches the service that a power cut can take back. Without it, a cut (on LazyFS,
   * test/power-cut.test.ts) rolled back readings the service already had and their ids went
   * to new readings: the service saw one traceId on two positions, and one that drops repeated
   * traceIds would have dropped the new ones. Rolled-back acknowledgements sent up to 5 chunks
   * again after one cut, and milestones went twice. With nothing new in the WAL the fsync
   * costs next to nothing; in a drain it is one per request (the acknowledgement before it).
   *
   * With synchronous = FULL (the default) every commit was synced as it ended, those of the
   * CLI too (it opens the buffer with the same config): there is nothing to do, and the trip
   * to the thread pool and back was on the way of every request of a drain.
   */
  async syncCommits(): Promise<void> {
    if (this.db.memory || this.db.readonly || !this.db.open) return;
    this.synchronousLevel ??= this.db.pragma('synchronous', { simple: true }) as number;
    if (this.synchronousLevel >= 2) return;
    if (this.walFd === undefined) {
      try {
        // Kept open while the buffer is: an open, an fsync and a close per request were three
        // trips to the thread pool on the way of every request of a drain. SQLite keeps the
        // WAL (same file, truncated at most) while a connection is open, and locks only the
        // database and -shm files, so this descriptor takes no lock and closing it drops none.
        this.walFd = openSync(`${this.db.name}-wal`, 'r');
      } catch {
        // No WAL: every commit is in the main file, synced by the checkpoint that emptied it.
        return;
      }
    }
    const fd = this.walFd;
    // In the thread pool: the drain waits for the request to be written, not for this.
    await new Promise<void>((resolve) => {
      // A disk that cannot sync is not helped by holding back what it has: the request goes.
      fsync(fd, () => resolve());
    });
  }

  /**
   * Write the header page, which holds the buffer's identity, into the WAL's current
   * generation if it is not there yet. SQLite puts a page into the WAL only when the page
   * changes, and the header page changes only when the file grows or its free list moves:
   * the WAL of an idle daemon, or of a few small writes, did not hold it, so the check at
   * open (db.ts, checkWalIdentity) saw this file's identity through another database's WAL
   * and let that WAL replace the loads. The daemon calls this every second: an 8-byte read,
   * and one page written per WAL generation.
   */
  keepIdentityInWal(): void {
    if (this.db.memory || this.db.readonly || !this.db.open) return;
    const salts = walSalts(this.db.name);
    if (salts === undefined || salts === this.identityInWal) return;
    const identity = this.db.pragma('application_id', { simple: true }) as number;
    if (identity === 0) return;
    try {
      // Setting it to the value it has still writes the page.
      this.db.pragma(`application_id = ${identity}`);
    } catch {
      // Busy or no room: the next call tries again.
      return;
    }
    // This write may itself have started a new generation: remember the one it is in.
    this.identityInWal = walSalts(this.db.name);
  }

  close(): void {
    if (this.walFd !== undefined) closeSync(this.walFd);
    this.walFd = undefined;
    if (this.db.open) this.db.close();
  }

  /**
   * Queue depths. `readings`: stored readings some load still has to send, each counted once
   * however many loads hold it (a load's own backlog: `backlogs`), one a dead letter of another
   * load holds included.
   */
  counts(): {
    readings: number;
    unassignedReadings: number;
    oldestReadingMs: number | null;
    pendingMilestones: number;
    sentMilestones: number;
    deadLetters: number;
    retryReadings: number;
  } {
    const r = this.db
      .prepare(
        `SELECT w.readings, w.oldest,
           (SELECT count(*) FROM readings WHERE state = ${ReadingState.UNASSIGNED} AND state <> ${ReadingState.WAITING}) AS unassigned,
           (SELECT count(*) FROM milestones WHERE sent_ms IS NULL AND parked_ms IS NULL) AS pending,
           (SELECT count(*) FROM milestones WHERE sent_ms IS NOT NULL) AS sent,
           (SELECT count(*) FROM dead_letters) AS dead,
           (SELECT count(*) FROM load_marks WHERE state = ${MarkState.RETRY}) AS retry
         FROM (SELECT count(*) AS readings, min(r.time_ms) AS oldest FROM readings r WHERE r.state <> ${ReadingState.UNASSIGNED} AND ${AWAITED}) w`,
      )
      .get() as { readings: number; unassigned: number; oldest: number | null; pending: number; sent: number; dead: number; retry: number };
    return {
      readings: r.readings,
      unassignedReadings: r.unassigned,
      oldestReadingMs: r.oldest,
      pendingMilestones: r.pending,
      sentMilestones: r.sent,
      deadLetters: r.dead,
      retryReadings: r.retry,
    };
  }
}
