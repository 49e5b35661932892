/**
 * Room on the disk for what must never stop: acknowledging, purging and checkpointing.
 *
 * On a full disk SQLite can do nothing at all: even an UPDATE of one row needs a WAL frame,
 * and folding the WAL back into the file (the checkpoint that lets the WAL be reused) may
 * need the file to grow. Measured on a 4 MB tmpfs filled by readings: every write failed,
 * delivery stopped with the service up, and the agent retried a commit every 50 ms. Three
 * things keep a way out open:
 *
 * - the WAL is bounded (`wal_autocheckpoint`, `journal_size_limit` from walLimitBytes), so
 *   a checkpoint never needs more than that much new room;
 * - readings are committed only while the file system keeps that much free, or the buffer
 *   has free pages of its own to reuse: readings never take the last of the room;
 * - a reserve file (`<buffer>.reserve`) holds room that nothing else on the device can take
 *   (a log that fills the disk): when a delivery write fails for lack of room, it is deleted,
 *   the checkpoint goes through, and acknowledging and purging carry on. It is written again
 *   once the file system has room for it.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, openSync, statfsSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { keepOwner } from './db.js';
import type { Logger } from 'pino';

export interface DiskPlan {
  reserveBytes: number;
  walLimitBytes: number;
}

/** The largest share of a small file system the reserve may take. */
const RESERVE_SHARE = 1 / 8;
const MIN_WAL = 64 * 1024;
const MAX_WAL = 4 * 1_048_576;

/**
 * Sizes for a buffer at `path`: the configured reserve, but at most an eighth of the file
 * system (a 4 MB tmpfs gets 512 KB), and a WAL limit of half the reserve. The default (2 MB,
 * a 1 MB WAL) is also what wrote least at 1 Hz of the WAL limits measured (512 KB to 4 MB;
 * docs/performance.md, 5 and 5a).
 */
export function diskPlan(path: string, reserveKb: number): DiskPlan {
  // Not known (the directory is not there yet): plan with the configured size.
  return planFor(fileSystemOf(path)?.totalBytes ?? Number.POSITIVE_INFINITY, reserveKb);
}

/** diskPlan for a file system of `fsBytes`. */
export function planFor(fsBytes: number, reserveKb: number): DiskPlan {
  const reserveBytes = Math.floor(Math.min(reserveKb * 1024, fsBytes * RESERVE_SHARE));
  const walLimitBytes = Math.max(MIN_WAL, Math.min(MAX_WAL, Math.floor(reserveBytes / 2)));
  return { reserveBytes, walLimitBytes };
}

export function isDiskFull(err: unknown): boolean {
  const code = (err as { code?: string } | undefined)?.code;
  return code === 'SQLITE_FULL' || code === 'SQLITE_IOERR_WRITE' || code === 'ENOSPC' || (err as Error | undefined)?.message?.includes('database or disk is full') === true;
}

/**
 * Size and room of the file system `path` is on, or undefined when it cannot be told: statfs
 * fails, or answers with a file system of no blocks at all, which is how a FUSE file system
 * without a statfs of its own answers (LazyFS, in test/power-cut.test.ts). Taken at its word,
 * that was a full disk: no reserve, and not one reading committed.
 */
function fileSystemOf(path: string): { totalBytes: number; freeBytes: number } | undefined {
  try {
    const s = statfsSync(dirname(path));
    return s.blocks > 0 ? { totalBytes: s.blocks * s.bsize, freeBytes: s.bavail * s.bsize } : undefined;
  } catch {
    return undefined;
  }
}

export class DiskRoom {
  readonly reserveFile: string;
  /** No new attempt to write the reserve before this (epoch ms), after one failed. */
  private retryWriteMs = 0;

  constructor(
    readonly bufferPath: string,
    readonly plan: DiskPlan,
  ) {
    this.reserveFile = `${bufferPath}.reserve`;
  }

  /** Bytes free for this user on the buffer's file system (Infinity when it cannot be told). */
  freeBytes(): number {
    return fileSystemOf(this.bufferPath)?.freeBytes ?? Number.POSITIVE_INFINITY;
  }

  hasReserve(): boolean {
    try {
      return statSync(this.reserveFile).size >= this.plan.reserveBytes;
    } catch {
      return false;
    }
  }

  /**
   * Write the reserve if it is missing and the file system has room for it and a WAL's worth
   * more. Random bytes, so a compressing file system cannot store it in nothing. Returns
   * true when the reserve is in place afterwards.
   */
  ensureReserve(nowMs = Date.now()): boolean {
    if (this.plan.reserveBytes <= 0) return false;
    if (this.hasReserve()) return true;
    if (this.freeBytes() < this.plan.reserveBytes + this.plan.walLimitBytes) return false;
    // The daemon asks every second while the reserve is missing: a write that fails although
    // statfs said there was room (a quota) must not rewrite megabytes of flash every second.
    if (nowMs < this.retryWriteMs) return false;
    this.retryWriteMs = nowMs + 60_000;
    let fd: number | undefined;
    try {
      fd = openSync(this.reserveFile, 'w', 0o640);
      const chunk = randomBytes(64 * 1024);
      for (let left = this.plan.reserveBytes; left > 0; left -= chunk.length) writeSync(fd, chunk, 0, Math.min(left, chunk.length));
      fsyncSync(fd);
      keepOwner(this.reserveFile, [this.reserveFile]);
      this.retryWriteMs = 0;
      return true;
    } catch {
      // No room after all: a partial reserve would only take room from the buffer.
      if (fd !== undefined) closeSync(fd);
      fd = undefined;
      this.releaseReserve();
      return false;
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
  }

  /** Delete the reserve to give its room to the buffer. True when there was one. */
  releaseReserve(): boolean {
    if (!existsSync(this.reserveFile)) return false;
    try {
      unlinkSync(this.reserveFile);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Whether a commit of about `bytes` may go ahead: the file system keeps the WAL's room free
   * afterwards, or the buffer has enough free pages of its own to take it without growing.
   */
  roomFor(bytes: number, freePageBytes: number): boolean {
    return freePageBytes >= 2 * bytes || this.freeBytes() - bytes >= this.plan.walLimitBytes;
  }
}

/**
 * Keeps the reserve in place for the daemon: says once when it cannot be written at start or
 * was given up for delivery, and writes it again as soon as there is room (`check`, every
 * second: one statfs while it is missing; once a minute was too slow, a disk filled again
 * within that minute found no reserve and delivery could not acknowledge).
 */
export class ReserveKeeper {
  private missing = false;

  constructor(
    private readonly disk: DiskRoom | undefined,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.missing = !this.disk?.ensureReserve() && (this.disk?.plan.reserveBytes ?? 0) > 0;
    if (this.missing) this.log.warn({ reserve: this.disk?.reserveFile, freeBytes: this.disk?.freeBytes() }, 'not enough room on the disk for the reserve; written once there is');
  }

  /** The store gave the reserve up so delivery could acknowledge and purge. */
  released(): void {
    this.missing = true;
    this.log.error({ reserve: this.disk?.reserveFile }, 'disk full: the reserve was given up so delivery can acknowledge and purge; it is written again once there is room');
  }

  check(): void {
    if (this.missing && this.disk?.ensureReserve()) {
      this.missing = false;
      this.log.info({ reserve: this.disk.reserveFile }, 'the disk has room again: reserve written');
    }
  }
}
