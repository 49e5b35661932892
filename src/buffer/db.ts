/**
 * Opening the buffer: every way a file can be unusable becomes a BufferError naming it and
 * what to do, and the schema is brought up to date (migrations.ts), by the daemon, or by
 * another process only while no daemon holds the buffer. Reading only: read.ts.
 */
import { accessSync, chownSync, closeSync, constants, existsSync, mkdirSync, openSync, readSync, statSync } from 'node:fs';
import { userInfo } from 'node:os';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { BufferError, isCorruption } from '../errors.js';

import { daemonHolding, lockFileOf } from './lock-holder.js';
import { migrate, SCHEMA_VERSION } from './migrations.js';
import { walCommittedPages } from './wal-pages.js';

export type DB = Database.Database;
export { migrate, MIGRATIONS, SCHEMA_VERSION } from './migrations.js';

export interface OpenOptions {
  synchronous?: 'OFF' | 'NORMAL' | 'FULL';
  readonly?: boolean;
  /** SQLite page cache of this connection, KiB (`buffer.cache_kb`); unset: better-sqlite3's 16 MiB. */
  cacheKb?: number;
  /**
   * Largest the WAL may grow before it is checkpointed, and what it is cut back to after
   * (`journal_size_limit`). A full disk must always leave room to checkpoint what the WAL
   * holds, so this is bounded by the room kept in reserve (see disk.ts).
   */
  walLimitBytes?: number;
  /**
   * Read every page once (`PRAGMA quick_check`): the daemon does it after an unclean stop.
   * `'full'`: also check every index against its table (`integrity_check`), after the daemon
   * stopped because it found the buffer corrupt.
   */
  verify?: boolean | 'full';
  /**
   * This process holds the daemon's lock (lock.ts): it may migrate the buffer. Any other
   * process migrates an older buffer only while no daemon holds it (see refuseUpgradeBeside).
   */
  daemon?: boolean;
}

/** What the first 100 bytes of a database file say about it, read without SQLite. */
export interface Header {
  bytes: number;
  pageSize: number;
  /** Pages the header says the file has; undefined when that field is not maintained. */
  pages: number | undefined;
  applicationId: number;
  /** `user_version`: the schema, as the file has it (a WAL beside it may hold a newer one). */
  userVersion: number;
}

export function readHeader(path: string): Header | 'empty' | 'not-sqlite' {
  const size = statSync(path).size;
  if (size === 0) return 'empty';
  const buf = Buffer.alloc(100);
  const fd = openSync(path, 'r');
  try {
    readSync(fd, buf, 0, 100, 0);
  } finally {
    closeSync(fd);
  }
  if (size < 100 || buf.toString('latin1', 0, 16) !== 'SQLite format 3\u0000') return 'not-sqlite';
  const raw = buf.readUInt16BE(16);
  const pageSize = raw === 1 ? 65536 : raw;
  // The page count in the header is valid only when its "version-valid-for" matches the change counter.
  const pages = buf.readUInt32BE(24) === buf.readUInt32BE(92) ? buf.readUInt32BE(28) : undefined;
  return { bytes: size, pageSize, pages, applicationId: buf.readUInt32BE(68), userVersion: buf.readUInt32BE(60) };
}

/**
 * How many times a header that looks truncated is read again, 50 ms apart, while a WAL is
 * beside it: 5 s. A checkpoint descheduled between page 1 and the rest on a loaded machine (six
 * processes opening a new buffer at once, beside others) stalled longer than the 1 s this was.
 */
const TRUNCATED_CHECKS = 100;
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

function isTruncated(h: Header | 'empty' | 'not-sqlite', path: string): h is Header & { pages: number } {
  if (typeof h !== 'object' || h.pages === undefined || h.bytes >= h.pages * h.pageSize) return false;
  // A checkpoint that ran out of room wrote page 1 and no further: the WAL holds the rest.
  const inWal = walCommittedPages(path, h.pageSize);
  for (let page = Math.floor(h.bytes / h.pageSize) + 1; page <= h.pages; page++) if (!inWal.has(page)) return true;
  return false;
}

/** The error of a corrupt buffer, with what the operator can do about it (the daemon, `status` and the check ahead say the same). */
export function corrupt(file: string, why: string): BufferError {
  return new BufferError(
    'corrupt',
    file,
    `${file}: the buffer is corrupt (${why}); nothing was changed. Set buffer.on_corrupt = "move-aside" and restart to keep it as ${file}.corrupt-<time> and start an empty buffer (or move it, with its -wal and -shm, aside yourself); then copy what is readable into the new buffer with: telematics-agent buffer salvage <the moved file>`,
  );
}

/**
 * Why this user cannot open the buffer, in words an operator can act on, or undefined when
 * nothing is in the way. Used when SQLite says only "unable to open database file", and by
 * `validate-config` before the daemon ever runs.
 */
export function accessProblem(path: string): string | undefined {
  const who = `user ${userInfo().username} (uid ${process.getuid?.() ?? '?'})`;
  let dir = dirname(path);
  // The nearest directory that exists: the agent creates the rest.
  while (!existsSync(dir) && dirname(dir) !== dir) dir = dirname(dir);
  try {
    accessSync(dir, constants.W_OK | constants.X_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EROFS') return `${dir} is on a read-only file system`;
    return `${who} cannot write to ${dir} (${code})`;
  }
  for (const f of [path, `${path}-wal`, `${path}-shm`]) {
    if (!existsSync(f)) continue;
    try {
      accessSync(f, constants.R_OK | constants.W_OK);
    } catch (err) {
      return `${who} cannot read and write ${f} (${(err as NodeJS.ErrnoException).code})`;
    }
  }
  return undefined;
}

function accessError(file: string, detail: string): BufferError {
  return new BufferError(
    'access',
    file,
    `${file}: cannot open the buffer: ${detail}. Give the user the agent runs as write access to ${dirname(file)} (the unit's StateDirectory= does it for /var/lib/telematics-agent), or set buffer.path to a place it can write.`,
  );
}

/** An error from SQLite or the file system, as a BufferError when it is one of ours to explain. */
export function explain(err: unknown, file: string): unknown {
  if (err instanceof BufferError) return err;
  if (isCorruption(err)) return corrupt(file, (err as Error).message);
  const code = (err as { code?: string }).code ?? '';
  if (code === 'SQLITE_CANTOPEN' || code === 'SQLITE_READONLY' || code.startsWith('SQLITE_READONLY_') || code === 'SQLITE_PERM' || code === 'SQLITE_AUTH') {
    return accessError(file, accessProblem(file) ?? (err as Error).message);
  }
  if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS' || code === 'ENOTDIR') {
    return accessError(file, accessProblem(file) ?? (err as Error).message);
  }
  return err;
}

/**
 * What the header of the file at `path` says, read without SQLite ('empty': no file, or no
 * bytes yet), or a BufferError when it is no SQLite database or is cut short.
 */
export function checkFile(path: string): Header | 'empty' {
  let header = existsSync(path) ? readHeader(path) : 'empty';
  if (header === 'not-sqlite') throw corrupt(path, 'not an SQLite database');
  // A checkpoint in another process (the daemon's, or the first open of a new buffer)
  // writes page 1 before the pages that make the file longer: a header read in between
  // claims pages the file does not have yet, and a sound buffer was called truncated. A
  // checkpoint copies from the WAL, which SQLite deletes only once the file is whole: while
  // one is beside it, look again for up to 5 s; without one, what the file says now is final.
  for (let i = 0; i < TRUNCATED_CHECKS && isTruncated(header, path); i++) {
    if (!existsSync(`${path}-wal`)) {
      header = readHeader(path);
      if (!existsSync(`${path}-wal`)) break;
      continue;
    }
    Atomics.wait(PAUSE, 0, 0, 50);
    header = readHeader(path);
  }
  if (isTruncated(header, path)) {
    throw corrupt(path, `truncated: ${header.bytes} bytes where its header says ${header.pages * header.pageSize}`);
  }
  if (header === 'not-sqlite') throw corrupt(path, 'not an SQLite database');
  return header;
}

/** Page size of a new buffer, bytes. */
export const PAGE_SIZE = 1024;

/**
 * Open (creating if needed) and bring up to date. Every way a buffer can be unusable comes
 * out as a BufferError that names the file and what to do: corrupt, written by a newer
 * version, a WAL of another database, or not accessible to this user.
 */
export function openDatabase(path: string, opts: OpenOptions = {}): DB {
  const memory = path === ':memory:';
  try {
    if (!memory && !opts.readonly) mkdirSync(dirname(path), { recursive: true });
    if (!memory && !opts.readonly) createPrivate(path);
    const header = memory ? 'empty' : checkFile(path);
    if (header !== 'empty' && !opts.readonly) checkWalIdentity(path, header.applicationId);
    const db = new Database(path, { readonly: opts.readonly ?? false, fileMustExist: opts.readonly ?? false });
    try {
      // Other processes (the CLI) write while the daemon runs: wait for their short transactions.
      db.pragma('busy_timeout = 5000');
      if (opts.cacheKb !== undefined) db.pragma(`cache_size = -${Math.round(opts.cacheKb)}`);
      if (!opts.readonly) {
        // A new buffer gets small pages: every commit rewrites whole pages in the WAL (the
        // readings leaf, its index, the id sequence, the last fix), so at 1 Hz 1 KB pages
        // wrote 2.1 KB of flash per reading where 4 KB pages wrote 4.5 KB. A buffer made
        // before keeps its size (SQLite changes it only by rewriting the whole file).
        if (header === 'empty' && !memory) db.pragma(`page_size = ${PAGE_SIZE}`);
        db.pragma('journal_mode = WAL');
        db.pragma(`synchronous = ${opts.synchronous ?? 'NORMAL'}`);
        if (opts.walLimitBytes !== undefined) {
          const pageSize = db.pragma('page_size', { simple: true }) as number;
          db.pragma(`wal_autocheckpoint = ${Math.max(16, Math.floor(opts.walLimitBytes / pageSize))}`);
          db.pragma(`journal_size_limit = ${Math.round(opts.walLimitBytes)}`);
        }
        if (opts.verify) {
          const result = db.pragma(opts.verify === 'full' ? 'integrity_check(1)' : 'quick_check(1)', { simple: true }) as string;
          if (result !== 'ok') throw corrupt(path, result);
        }
        if (!memory && !opts.daemon) refuseUpgradeBeside(db, path);
        migrate(db, SCHEMA_VERSION, path);
        checkIdentity(db, path);
        // A new or just migrated buffer: put its identity into the main file now, so the
        // check above can tell this file's WAL from another's from the next open on.
        if (!memory && (header === 'empty' || header.applicationId === 0)) db.pragma('wal_checkpoint(PASSIVE)');
        if (!memory) keepOwner(path);
      }
      return db;
    } catch (err) {
      if (db.open) db.close();
      throw err;
    }
  } catch (err) {
    throw explain(err, path);
  }
}

/** How long a command waits for a daemon starting beside it to finish migrating (see refuseUpgradeBeside). */
const MIGRATION_WAIT_MS = 3000;

/**
 * After a package upgrade the CLI is newer than the daemon still running: migrating the
 * buffer under that daemon would leave it writing with the old schema's SQL into the new one
 * (its window and acknowledgement rules, its columns), and its next start would find a
 * buffer it calls "written by a newer version". Only a daemon migrates a buffer a daemon
 * holds: this refuses, before anything is written, and says how to get there.
 */
function refuseUpgradeBeside(db: DB, path: string): void {
  let version = db.pragma('user_version', { simple: true }) as number;
  // 0: a buffer being created (a daemon starting beside this command creates it the same way).
  if (version === 0 || version >= SCHEMA_VERSION) return;
  const holder = daemonHolding(path);
  if (!holder) return;
  // A daemon of this version that has just started migrates the buffer one step a
  // transaction: a command beside it saw a step between two (a buffer it had just created at
  // schema 5, say) and took it for an older daemon. One of this version is done in
  // milliseconds; an older one never moves the version on.
  const until = Date.now() + MIGRATION_WAIT_MS;
  while (version < SCHEMA_VERSION && Date.now() < until) {
    Atomics.wait(PAUSE, 0, 0, 50);
    version = db.pragma('user_version', { simple: true }) as number;
  }
  if (version >= SCHEMA_VERSION) return;
  throw new BufferError(
    'held',
    path,
    `${path}: this version of telematics-agent would upgrade the buffer (schema ${version} to ${SCHEMA_VERSION}), but the daemon holds it; restart the service to upgrade (systemctl restart telematics-agent: the daemon upgrades the buffer as it starts; ${holder.pid ? `pid ${holder.pid}` : 'a daemon'} holds ${lockFileOf(path)}), then run this again. Nothing was changed.`,
  );
}

/** The identity the buffer records in `meta`, or undefined before version 5. */
export function bufferIdentity(db: DB): string | undefined {
  const has = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").get();
  if (!has) return undefined;
  return (db.prepare("SELECT value FROM meta WHERE key = 'identity'").pluck().get() as string | undefined) ?? undefined;
}

function foreignWal(file: string, detail: string): BufferError {
  return new BufferError(
    'foreign-wal',
    file,
    `${file}-wal belongs to another database (${detail}); it was not applied and nothing was changed. Move ${file}-wal (and ${file}-shm) aside to use the buffer as it is in ${file}, or set buffer.on_corrupt = "move-aside" to set all three aside and start an empty buffer.`,
  );
}

function checkIdentity(db: DB, file: string): void {
  const header = db.pragma('application_id', { simple: true }) as number;
  const recorded = bufferIdentity(db);
  if (recorded !== undefined && String(header) !== recorded) throw foreignWal(file, `the header says ${header}, the buffer's own record ${recorded}`);
}

/**
 * The salts in a WAL's header (bytes 16-23), or undefined while it has none. SQLite draws new
 * ones each time it starts the WAL over, so they name the WAL's current generation.
 */
export function walSalts(path: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(`${path}-wal`, 'r');
  } catch {
    return undefined;
  }
  try {
    const buf = Buffer.alloc(8);
    return readSync(fd, buf, 0, 8, 16) === 8 ? buf.toString('hex') : undefined;
  } finally {
    closeSync(fd);
  }
}

/**
 * A -wal file is applied to whatever database sits beside it, page by page: one left over
 * from another file (a buffer copied in over an old one, a restore from backup) would
 * silently mix two databases. The identity in the main file's header, read here without
 * SQLite, must be the identity seen through the WAL. The look through the WAL is read-only:
 * a read-write connection would fold the WAL into the file when it closes. The identity is
 * on the header page, which a WAL holds only if a transaction of its generation wrote that
 * page; the daemon makes sure one does (Store.keepIdentityInWal).
 */
export function checkWalIdentity(path: string, mainIdentity: number): void {
  // The last connection of another process deletes its WAL when it closes: gone between
  // an exists and a stat, it failed the open with ENOENT.
  const wal = statSync(`${path}-wal`, { throwIfNoEntry: false });
  if (!wal || wal.size === 0) return;
  const ro = new Database(path, { readonly: true, fileMustExist: true });
  try {
    ro.pragma('busy_timeout = 5000');
    // Both from one snapshot: read apart, another process's first open could commit the
    // identity in between (header 0, record set), and a new buffer was called foreign.
    const { seen, recorded } = ro.transaction(() => ({ seen: ro.pragma('application_id', { simple: true }) as number, recorded: bufferIdentity(ro) }))();
    if (mainIdentity !== 0 && seen !== mainIdentity) throw foreignWal(path, `identity ${seen} in the WAL, ${mainIdentity} in the file`);
    if (recorded !== undefined && recorded !== String(seen)) throw foreignWal(path, `the header says ${seen}, the buffer's own record ${recorded}`);
  } finally {
    ro.close();
  }
}

/**
 * Create `path` empty, mode 0640, unless it is there: the buffer holds the truck's positions,
 * and SQLite makes a file 0644 (less the umask; a run by hand has 022), readable by every user
 * of the device. SQLite gives the -wal and -shm it makes the mode of the database file, and
 * the daemon's lock file is made here too (lock.ts).
 */
export function createPrivate(path: string): void {
  try {
    closeSync(openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o640));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
}

/**
 * An operator running the CLI as root (`sudo telematics-agent load start ...`) must not leave
 * root-owned buffer files behind that the service user can no longer write: files root
 * creates take the owner of the directory they are in. `files`: the buffer and its -wal and
 * -shm unless told otherwise (the daemon's lock file, see lock.ts).
 */
export function keepOwner(path: string, files = [path, `${path}-wal`, `${path}-shm`]): void {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return;
  const dir = statSync(dirname(path));
  if (dir.uid === 0) return;
  for (const f of files) {
    const st = statSync(f, { throwIfNoEntry: false });
    try {
      if (st?.uid === 0) chownSync(f, dir.uid, dir.gid);
    } catch (err) {
      // Deleted meanwhile by another process closing its last connection (its -wal, -shm).
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}
