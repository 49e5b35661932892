/**
 * One daemon per buffer. Two daemons on one buffer both run and send every chunk twice, so
 * `run` takes an exclusive lock on `<buffer>.lock` for its whole life. The lock is SQLite's
 * own (a POSIX record lock on a tiny database file in exclusive locking mode): the kernel
 * drops it when the process dies, however it dies, so a kill -9 or a power cut never leaves
 * a stale lock behind. The CLI does not take it: `status`, `load` and `milestone` keep working
 * beside the daemon; it only looks whether a daemon holds it before it would migrate the
 * buffer (lock-holder.ts, db.ts).
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { BufferError } from '../errors.js';
import { accessProblem, createPrivate, keepOwner } from './db.js';
import { lockFileOf, lockHolder } from './lock-holder.js';

export class BufferLock {
  private constructor(
    private readonly db: Database.Database,
    readonly file: string,
  ) {}

  /** Take the lock or throw a BufferError ('locked') naming the pid that holds it. */
  static acquire(bufferPath: string): BufferLock {
    const file = lockFileOf(bufferPath);
    let db: Database.Database | undefined;
    try {
      mkdirSync(dirname(file), { recursive: true });
      createPrivate(file);
      // A second daemon gives up after this wait. Not at once: a CLI about to migrate the
      // buffer reads the file (lock-holder.ts) to see whether a daemon holds it, and a daemon
      // starting in that moment must not take the reader for another daemon.
      db = new Database(file, { timeout: 1000 });
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
