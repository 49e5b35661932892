/**
 * Whether opening the buffer will upgrade its schema, told from its header alone (nothing
 * opened, nothing written). Each step is one transaction that may rebuild a table: on a full
 * buffer and a worn SD card, longer than systemd's start timeout (90 s), and a start killed in
 * the middle of a step rolls it back and begins it again at the next start, for ever. The
 * daemon asks systemd for more time first (run.ts).
 */
import { readHeader } from './db.js';
import { SCHEMA_VERSION } from './migrations.js';

export function upgradeDue(path: string): { from: number; to: number; bytes: number } | undefined {
  let header: ReturnType<typeof readHeader>;
  try {
    header = readHeader(path);
  } catch {
    // No buffer yet, or one the open will explain: no upgrade to wait for.
    return undefined;
  }
  // 0: a buffer being created, in milliseconds. A -wal may hold a newer version than the
  // header: then this asks for time it does not need, which costs nothing.
  if (typeof header !== 'object' || header.userVersion === 0 || header.userVersion >= SCHEMA_VERSION) return undefined;
  return { from: header.userVersion, to: SCHEMA_VERSION, bytes: header.bytes };
}
