/**
 * Opening the buffer and bringing its schema up to date.
 *
 * The schema version lives in `PRAGMA user_version`. Migrations run one step at a time,
 * each in its own transaction, so a power cut in the middle of an upgrade leaves the
 * file at the last complete version, never between two.
 */
import { randomInt } from 'node:crypto';
import { accessSync, chownSync, closeSync, constants, existsSync, mkdirSync, openSync, readSync, statSync } from 'node:fs';
import { userInfo } from 'node:os';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { BufferError, isCorruption } from '../errors.js';

export type DB = Database.Database;

/** Each entry takes the database from version i to i + 1. Append only; never edit a shipped step. */
export const MIGRATIONS: ReadonlyArray<(db: DB) => void> = [
  // 0 -> 1: readings, loads, milestones, daemon state.
  (db) => {
    db.exec(`
      -- AUTOINCREMENT: ids are never reused after the table drains, because they name
      -- trace points to the service (traceId) and must not repeat.
      CREATE TABLE readings (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        resource_id TEXT    NOT NULL,
        load_number TEXT,
        time_ms     INTEGER NOT NULL,
        lat         REAL,
        lon         REAL,
        speed       REAL,
        heading     REAL,
        odometer    REAL,
        temp_c      REAL,
        source      TEXT
      );
      CREATE INDEX readings_by_load ON readings (load_number, id);
      CREATE INDEX readings_by_resource ON readings (resource_id, id);

      CREATE TABLE loads (
        load_number    TEXT PRIMARY KEY,
        resource_id    TEXT    NOT NULL,
        resource_type  TEXT    NOT NULL,
        stops          TEXT    NOT NULL DEFAULT '[]',
        started_ms     INTEGER NOT NULL,
        ended_ms       INTEGER,
        next_stop      INTEGER,
        last_sample_ms INTEGER
      );
      -- One active load per resource: a reading must belong to exactly one load.
      CREATE UNIQUE INDEX loads_one_active_per_resource ON loads (resource_id) WHERE ended_ms IS NULL;

      CREATE TABLE milestones (
        id          INTEGER PRIMARY KEY,
        load_number TEXT    NOT NULL,
        ref         TEXT    NOT NULL UNIQUE,
        body        TEXT    NOT NULL,
        created_ms  INTEGER NOT NULL,
        attempts    INTEGER NOT NULL DEFAULT 0,
        last_error  TEXT,
        sent_ms     INTEGER
      );
      CREATE INDEX milestones_pending ON milestones (id) WHERE sent_ms IS NULL;

      CREATE TABLE state (
        key        TEXT PRIMARY KEY,
        value      TEXT    NOT NULL,
        updated_ms INTEGER NOT NULL
      );
    `);
  },
  // 1 -> 2: dead letters. A record the service refuses is parked, not deleted and not retried
  // forever: readings get a state (0 waiting, 1 parked, 2 retry requested), milestones a parked time.
  (db) => {
    db.exec(`
      ALTER TABLE readings ADD COLUMN state INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE milestones ADD COLUMN parked_ms INTEGER;
      DROP INDEX milestones_pending;
      CREATE INDEX milestones_pending ON milestones (id) WHERE sent_ms IS NULL AND parked_ms IS NULL;
      CREATE INDEX readings_parked ON readings (state) WHERE state <> 0;
      CREATE TABLE dead_letters (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        kind        TEXT    NOT NULL CHECK (kind IN ('milestone', 'trace')),
        load_number TEXT    NOT NULL,
        record_id   INTEGER NOT NULL,
        status      INTEGER,
        response    TEXT,
        body        TEXT    NOT NULL,
        created_ms  INTEGER NOT NULL
      );
      CREATE TABLE counters (
        name  TEXT PRIMARY KEY,
        value INTEGER NOT NULL
      );
    `);
  },
  // 2 -> 3: geofence and delay state per (load, stop), so detection survives a restart.
  (db) => {
    db.exec(`
      CREATE TABLE stop_state (
        load_number       TEXT    NOT NULL,
        stop_sequence     INTEGER NOT NULL,
        state             TEXT    NOT NULL DEFAULT 'outside',
        first_inside_ms   INTEGER,
        last_inside_ms    INTEGER,
        inside_fixes      INTEGER NOT NULL DEFAULT 0,
        outside_fixes     INTEGER NOT NULL DEFAULT 0,
        arrived_ms        INTEGER,
        departed_ms       INTEGER,
        delay_reported_s  INTEGER,
        PRIMARY KEY (load_number, stop_sequence)
      );
    `);
  },
  // 3 -> 4: acknowledgement by cursor. A delivered chunk moves its load's acked_id instead of
  // deleting its rows at once: the rows of 200 interleaved loads sit on shared pages, and a
  // DELETE per chunk rewrote about one page per reading (8 KB written per reading delivered).
  // Rows at or below the cursor are purged later in bulk (Store.purgeAcked).
  // The resource index goes: it was read only to find a resource's last position for a manual
  // milestone, and kept up on every insert and delete it cost a quarter of the buffer's writes.
  (db) => {
    db.exec(`
      ALTER TABLE loads ADD COLUMN acked_id INTEGER NOT NULL DEFAULT 0;
      DROP INDEX readings_by_resource;
    `);
  },
  // 4 -> 5: what a field device needs to trust its buffer and its events.
  // - meta: the buffer's identity (also in the header's application_id), checked at every open
  //   so a -wal file of another database is never applied silently.
  // - last_fix: the newest position of each resource, kept when its readings are purged, so a
  //   milestone recorded after a push still knows where the truck is.
  // - milestones: the event's code, stop and origin as columns (one per load, code and stop),
  //   and the service's last answer and correlation id.
  // - dead_letters: the answer's headers; loads: the correlation id of the last trace request.
  (db) => {
    const appId = randomIdentity();
    db.exec(`
      CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
      );
      CREATE TABLE last_fix (
        resource_id TEXT PRIMARY KEY,
        time_ms     INTEGER NOT NULL,
        lat         REAL    NOT NULL,
        lon         REAL    NOT NULL,
        speed       REAL,
        heading     REAL
      );
      INSERT INTO last_fix (resource_id, time_ms, lat, lon, speed, heading)
        SELECT r.resource_id, r.time_ms, r.lat, r.lon, r.speed, r.heading
          FROM readings r JOIN (SELECT max(id) AS id FROM readings WHERE lat IS NOT NULL GROUP BY resource_id) n ON n.id = r.id;
      ALTER TABLE milestones ADD COLUMN code TEXT;
      ALTER TABLE milestones ADD COLUMN stop_seq INTEGER;
      ALTER TABLE milestones ADD COLUMN origin TEXT;
      ALTER TABLE milestones ADD COLUMN needs_place INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE milestones ADD COLUMN last_status INTEGER;
      ALTER TABLE milestones ADD COLUMN correlation_id TEXT;
      UPDATE milestones SET code = json_extract(body, '$.eventCode'), stop_seq = json_extract(body, '$.stopsequenceNumber');
      CREATE INDEX milestones_by_event ON milestones (load_number, code, stop_seq);
      ALTER TABLE dead_letters ADD COLUMN headers TEXT;
      ALTER TABLE loads ADD COLUMN correlation_id TEXT;
    `);
    db.prepare("INSERT INTO meta (key, value) VALUES ('identity', ?)").run(String(appId));
    db.pragma(`application_id = ${appId}`);
  },
];

export const SCHEMA_VERSION = MIGRATIONS.length;

/** A buffer's identity: a random non-zero 31-bit number, kept in the header and in `meta`. */
function randomIdentity(): number {
  return randomInt(1, 2 ** 31 - 1);
}

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
}

export function migrate(db: DB, target = SCHEMA_VERSION, file = db.name): number {
  let version = db.pragma('user_version', { simple: true }) as number;
  if (version > SCHEMA_VERSION) {
    throw new BufferError(
      'newer',
      file,
      `${file}: written by a newer version of telematics-agent (buffer schema ${version}; this version understands up to ${SCHEMA_VERSION}); nothing was changed. Install the newer version again, or move the file (with its -wal and -shm) aside to start with an empty buffer: its data then waits there for the newer version.`,
    );
  }
  while (version < target) {
    const from = version;
    version = db
      .transaction(() => {
        // Read again under the write lock: another process opening the same new buffer (the
        // CLI's `load start` while the daemon starts for the first time) may have run this
        // step while this one waited, and running it twice failed one of them with "table
        // readings already exists" or "duplicate column name".
        const now = db.pragma('user_version', { simple: true }) as number;
        if (now !== from) return now;
        MIGRATIONS[from](db);
        db.pragma(`user_version = ${from + 1}`);
        return from + 1;
      })
      .immediate();
  }
  return version;
}

/** What the first 100 bytes of a database file say about it, read without SQLite. */
interface Header {
  bytes: number;
  pageSize: number;
  /** Pages the header says the file has; undefined when that field is not maintained. */
  pages: number | undefined;
  applicationId: number;
}

function readHeader(path: string): Header | 'empty' | 'not-sqlite' {
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
  return { bytes: size, pageSize, pages, applicationId: buf.readUInt32BE(68) };
}

/** How many times a header that looks truncated is read again, 50 ms apart. */
const TRUNCATED_CHECKS = 20;
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

function isTruncated(h: Header | 'empty' | 'not-sqlite'): h is Header & { pages: number } {
  return typeof h === 'object' && h.pages !== undefined && h.bytes < h.pages * h.pageSize;
}

function corrupt(file: string, why: string): BufferError {
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
function explain(err: unknown, file: string): unknown {
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
 * Open (creating if needed) and bring up to date. Every way a buffer can be unusable comes
 * out as a BufferError that names the file and what to do: corrupt, written by a newer
 * version, a WAL of another database, or not accessible to this user.
 */
export function openDatabase(path: string, opts: OpenOptions = {}): DB {
  const memory = path === ':memory:';
  try {
    if (!memory && !opts.readonly) mkdirSync(dirname(path), { recursive: true });
    let header = !memory && existsSync(path) ? readHeader(path) : 'empty';
    if (header === 'not-sqlite') throw corrupt(path, 'not an SQLite database');
    // A checkpoint in another process (the daemon's, or the first open of a new buffer)
    // writes page 1 before the pages that make the file longer: a header read in between
    // claims pages the file does not have yet, and a sound buffer was called truncated. A
    // truncated file stays truncated: look again for up to a second before saying so.
    for (let i = 0; i < TRUNCATED_CHECKS && isTruncated(header); i++) {
      Atomics.wait(PAUSE, 0, 0, 50);
      header = readHeader(path);
    }
    if (isTruncated(header)) {
      throw corrupt(path, `truncated: ${header.bytes} bytes where its header says ${header.pages * header.pageSize}`);
    }
    if (header === 'not-sqlite') throw corrupt(path, 'not an SQLite database');
    if (header !== 'empty' && !opts.readonly) checkWalIdentity(path, header.applicationId);
    const db = new Database(path, { readonly: opts.readonly ?? false, fileMustExist: opts.readonly ?? false });
    try {
      // Other processes (the CLI) write while the daemon runs: wait for their short transactions.
      db.pragma('busy_timeout = 5000');
      if (opts.cacheKb !== undefined) db.pragma(`cache_size = -${Math.round(opts.cacheKb)}`);
      if (!opts.readonly) {
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
function checkWalIdentity(path: string, mainIdentity: number): void {
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
