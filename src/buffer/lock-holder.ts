/**
 * Whether a daemon holds the buffer's lock (lock.ts), seen from another process: a CLI must
 * not migrate a buffer an older daemon has open (db.ts).
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import Database from 'better-sqlite3';

/** The daemon's lock file of a buffer. */
export function lockFileOf(bufferPath: string): string {
  return `${bufferPath}.lock`;
}

/**
 * The pid holding a POSIX lock on the file, from /proc/locks (the kernel's own table, so it
 * is right even when the holder never got to write its pid anywhere).
 */
export function lockHolder(file: string): number | undefined {
  let ino: number;
  try {
    ino = statSync(file).ino;
  } catch {
    return undefined;
  }
  let text: string;
  try {
    text = readFileSync('/proc/locks', 'utf8');
  } catch {
    return undefined;
  }
  for (const line of text.split('\n')) {
    // "1: POSIX  ADVISORY  WRITE 6609 fd:01:1234567 1073741824 1073742335"
    const m = /^\d+:\s+POSIX\s+\S+\s+\S+\s+(\d+)\s+[0-9a-f]+:[0-9a-f]+:(\d+)\s/.exec(line);
    if (m && Number(m[2]) === ino && Number(m[1]) !== process.pid) return Number(m[1]);
  }
  return undefined;
}

/**
 * Whether a daemon (another process) holds the buffer's lock: `{ pid }` when it does (pid
 * undefined when not visible from here), undefined when none does. SQLite says: a read of the
 * lock file fails at once while a daemon holds it. /proc/locks cannot say no: in a container
 * or a sandbox it may not list the holder at all. The read holds a shared lock for as long as
 * it takes; a daemon starting in that moment waits for it (lock.ts).
 */
export function daemonHolding(bufferPath: string): { pid: number | undefined } | undefined {
  const file = lockFileOf(bufferPath);
  // A daemon creates the file before it takes the lock, and nothing deletes it.
  if (!existsSync(file)) return undefined;
  let db: Database.Database | undefined;
  try {
    db = new Database(file, { readonly: true, fileMustExist: true, timeout: 0 });
    db.prepare('SELECT count(*) FROM sqlite_master').get();
    return undefined;
  } catch (err) {
    const code = (err as { code?: string }).code ?? '';
    if (code === 'SQLITE_BUSY' || code.startsWith('SQLITE_BUSY_')) return { pid: lockHolder(file) || undefined };
    // Gone meanwhile, or no database: no daemon holds it.
    return undefined;
  } finally {
    db?.close();
  }
}
