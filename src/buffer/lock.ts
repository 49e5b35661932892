/**
 * One daemon per buffer. Two daemons on one buffer both run and send every chunk twice, so
 * `run` takes an exclusive lock on `<buffer>.lock` for its whole life. The lock is SQLite's
 * own (a POSIX record lock on a tiny database file in exclusive locking mode): the kernel
 * drops it when the process dies, however it dies, so a kill -9 or a power cut never leaves
 * a stale lock behind. The CLI does not take it: `status`, `load` and `milestone` keep working
 * beside the daemon.
 */
import { mkdirSync, readFileSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { BufferError } from '../errors.js';
import { accessProblem, keepOwner } from './db.js';

export class BufferLock {
  private constructor(
    private readonly db: Database.Database,
    readonly file: string,
  ) {}

  /** Take the lock or throw a BufferError ('locked') naming the pid that holds it. */
  static acquire(bufferPath: string): BufferLock {
    const file = `${bufferPath}.lock`;
    let db: Database.Database | undefined;
    try {
      mkdirSync(dirname(file), { recursive: true });
      db = new Database(file, { timeout: 0 });
      db.pragma('locking_mode = EXCLUSIVE');
      // No journal file beside it: the one row it holds is only for people reading the file.
      db.pragma('journal_mode = MEMORY');
      db.exec('CREATE TABLE IF NOT EXISTS holder (pid INTEGER NOT NULL, started_ms INTEGER NOT NULL)');
      db.exec('BEGIN EXCLUSIVE');
      db.prepare('DELETE FROM holder').run();
      db.prepare('INSERT INTO holder (pid, started_ms) VALUES (?, ?)').run(process.pid, Date.now());
      // In exclusive locking mode the lock stays after the commit, until the connection closes.
      db.exec('COMMIT');
      // `sudo telematics-agent run` once in the service's directory left a root-owned 0644
      // lock behind, and the service then failed at every start with exit 73.
      keepOwner(file, [file]);
      return new BufferLock(db, file);
    } catch (err) {
      if (db?.open) db.close();
      const code = (err as { code?: string }).code ?? '';
      if (code === 'SQLITE_BUSY' || code.startsWith('SQLITE_BUSY_')) {
        const pid = lockHolder(file);
        throw new BufferError(
          'locked',
          bufferPath,
          `${bufferPath}: another telematics-agent daemon is running on this buffer (${pid ? `pid ${pid}` : 'its pid is not visible from here'} holds ${file}); two daemons would send everything twice. Stop it first (systemctl stop telematics-agent), or give this one its own buffer.path.`,
        );
      }
      const problem = accessProblem(file);
      if (problem) {
        throw new BufferError(
          'access',
          bufferPath,
          `${bufferPath}: cannot take the daemon's lock ${file}: ${problem}. Give the user the agent runs as write access to ${dirname(bufferPath)} (the unit's StateDirectory= does it for /var/lib/telematics-agent), or set buffer.path to a place it can write.`,
        );
      }
      throw err;
    }
  }

  release(): void {
    if (this.db.open) this.db.close();
  }
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
