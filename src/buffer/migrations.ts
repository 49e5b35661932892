/**
 * The buffer's schema and its history. The version lives in `PRAGMA user_version`.
 * Migrations run one step at a time, each in its own transaction, so a power cut in the
 * middle of an upgrade leaves the file at the last complete version, never between two.
 * The steps themselves, with their frozen SQL, are in schema-steps.ts.
 */
import { BufferError } from '../errors.js';
import type { DB } from './db.js';

export { MIGRATIONS } from './schema-steps.js';
import { MIGRATIONS } from './schema-steps.js';

export const SCHEMA_VERSION = MIGRATIONS.length;

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
