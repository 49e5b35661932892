/**
 * Opening the buffer and bringing its schema up to date.
 *
 * The schema version lives in `PRAGMA user_version`. Migrations run one step at a time,
 * each in its own transaction, so a power cut in the middle of an upgrade leaves the
 * file at the last complete version, never between two.
 */
import { chownSync, existsSync, mkdirSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';

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
];

export const SCHEMA_VERSION = MIGRATIONS.length;

export interface OpenOptions {
  synchronous?: 'OFF' | 'NORMAL' | 'FULL';
  readonly?: boolean;
  /** SQLite page cache of this connection, KiB (`buffer.cache_kb`); unset: better-sqlite3's 16 MiB. */
  cacheKb?: number;
}

export function migrate(db: DB, target = SCHEMA_VERSION): number {
  let version = db.pragma('user_version', { simple: true }) as number;
  if (version > SCHEMA_VERSION) {
    throw new Error(
      `buffer schema version ${version} is newer than this agent understands (${SCHEMA_VERSION}); refusing to touch it`,
    );
  }
  while (version < target) {
    const step = MIGRATIONS[version];
    db.transaction(() => {
      step(db);
      db.pragma(`user_version = ${version + 1}`);
    }).immediate();
    version += 1;
  }
  return version;
}

export function openDatabase(path: string, opts: OpenOptions = {}): DB {
  if (path !== ':memory:' && !opts.readonly) mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path, { readonly: opts.readonly ?? false, fileMustExist: opts.readonly ?? false });
  // Other processes (the CLI) write while the daemon runs: wait for their short transactions.
  db.pragma('busy_timeout = 5000');
  if (opts.cacheKb !== undefined) db.pragma(`cache_size = -${Math.round(opts.cacheKb)}`);
  if (!opts.readonly) {
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${opts.synchronous ?? 'NORMAL'}`);
    migrate(db);
    if (path !== ':memory:') keepOwner(path);
  }
  return db;
}

/**
 * An operator running the CLI as root (`sudo telematics-agent load start ...`) must not leave
 * root-owned buffer files behind that the service user can no longer write: files root
 * creates take the owner of the directory they are in.
 */
function keepOwner(path: string): void {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return;
  const dir = statSync(dirname(path));
  if (dir.uid === 0) return;
  for (const f of [path, `${path}-wal`, `${path}-shm`]) {
    if (!existsSync(f)) continue;
    const st = statSync(f);
    if (st.uid === 0) chownSync(f, dir.uid, dir.gid);
  }
}
