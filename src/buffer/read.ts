/**
 * Opening the buffer to read it and nothing else (`status`, `load list`, `dead-letter list`,
 * `milestone list`): the file keeps its content, its schema and its modification time, and no
 * -wal or -shm is left beside it where that can be helped. A read-write open migrated an
 * older buffer under the daemon still running it, and (run as root) could leave files the
 * service user cannot write; a read-only open of SQLite still creates a -wal and a -shm when
 * there are none, and leaves them.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import Database from 'better-sqlite3';
import { BufferError } from '../errors.js';
import { checkFile, checkWalIdentity, type DB, explain, keepOwner, openDatabase } from './db.js';
import { migrate, SCHEMA_VERSION } from './migrations.js';

/**
 * Largest buffer read into memory, bytes: one with no -wal beside it (none open), and one of
 * an older schema (upgraded there). Above it, the first is opened read-only in place; the
 * second cannot be read until the daemon upgrades it. Twice this is held for a moment (the
 * bytes read, SQLite's copy): a CLI command on a device with little memory.
 */
export const COPY_LIMIT_BYTES = 32 * 1024 * 1024;

export interface Reader {
  /** The buffer at this version's schema, answering reads only (read-only, or `query_only` for a copy). */
  db: DB;
  /** The schema the file is at, when older: `db` is a copy of it upgraded in memory. */
  upgradedFrom?: number;
}

export function openForReading(path: string, opts: { cacheKb?: number; copyLimitBytes?: number } = {}): Reader {
  const limit = opts.copyLimitBytes ?? COPY_LIMIT_BYTES;
  try {
    const header = checkFile(path);
    if (header === 'empty') return fromImage(undefined, path);
    // Every connection in WAL mode keeps the -wal while it is open: without one, no process
    // has the buffer open and the file holds all of it.
    if (!existsSync(`${path}-wal`)) {
      const image = readWhole(path, limit);
      if (image) return fromImage(image, path);
      // Too large to copy, and the header is all there is to the schema: said without opening it.
      if (header.userVersion < SCHEMA_VERSION && header.bytes > limit) throw tooLarge(path, header.userVersion, header.bytes, limit);
    }
    // A -wal of another database would be read as this buffer's pages (read-only itself).
    checkWalIdentity(path, header.applicationId);
    const db = openDatabase(path, { readonly: true, cacheKb: opts.cacheKb });
    let kept = false;
    try {
      // A -shm SQLite had to create, by root: the service user must still be able to write it.
      keepOwner(path);
      const version = db.pragma('user_version', { simple: true }) as number;
      if (version >= SCHEMA_VERSION) {
        // Up to its own version: no step runs, and a newer buffer is refused as the daemon does.
        migrate(db, version, path);
        kept = true;
        return { db };
      }
      const image = db.serialize();
      if (image.length > limit) throw tooLarge(path, version, image.length, limit);
      return fromImage(image, path);
    } finally {
      if (!kept) db.close();
    }
  } catch (err) {
    throw explain(err, path);
  }
}

/**
 * The whole file, or undefined when it is larger than `limit` or changed while it was read
 * (a daemon starting: it writes to a new -wal and folds it into the file).
 */
function readWhole(path: string, limit: number): Buffer | undefined {
  const before = statSync(path);
  if (before.size > limit) return undefined;
  const image = readFileSync(path);
  const after = statSync(path);
  if (after.size !== before.size || after.mtimeMs !== before.mtimeMs || after.ino !== before.ino || existsSync(`${path}-wal`)) return undefined;
  return image;
}

/** An in-memory database from a file's bytes (a new empty one without), at this version's schema. */
function fromImage(image: Buffer | undefined, path: string): Reader {
  // An in-memory database cannot be in WAL mode: its header must say rollback journal
  // (bytes 18-19, 2 for WAL) or SQLite refuses to open it.
  if (image && image.length >= 20) image.fill(1, 18, 20);
  const db = image ? new Database(image) : new Database(':memory:');
  try {
    const version = db.pragma('user_version', { simple: true }) as number;
    migrate(db, SCHEMA_VERSION, path);
    db.pragma('query_only = 1');
    return image && version < SCHEMA_VERSION ? { db, upgradedFrom: version } : { db };
  } catch (err) {
    db.close();
    throw err;
  }
}

function tooLarge(path: string, version: number, bytes: number, limit: number): BufferError {
  const mb = (n: number) => (n < 1048576 ? `${Math.round(n / 1024)} KB` : `${Math.round(n / 1048576)} MB`);
  return new BufferError(
    'older',
    path,
    `${path}: the buffer is at schema ${version}, older than this version's ${SCHEMA_VERSION}, and too large (${mb(bytes)}) to read from a copy upgraded in memory (up to ${mb(limit)}); nothing was changed. The daemon upgrades it at its next start: restart the service (systemctl restart telematics-agent), then run this again.`,
  );
}
