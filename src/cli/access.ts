/**
 * A command run by a user who may not use the daemon's buffer: an operator's own login, where
 * the buffer is the service user's (/var/lib/telematics-agent, 0750, files 0640). Said as
 * such, with the way round it and exit 73, rather than "no buffer: the daemon has never run"
 * (a directory it cannot look into) or SQLite's "attempt to write a readonly database" (exit 1,
 * which says trying again may work).
 */
import { accessSync, constants, statSync } from 'node:fs';
import { userInfo } from 'node:os';
import { dirname } from 'node:path';
import { BufferError } from '../errors.js';

/** The user the unit runs the daemon as (systemd/telematics-agent.service, User=). */
export const SERVICE_USER = 'telematics-agent';

function who(): string {
  let name = '?';
  try {
    name = userInfo().username;
  } catch {
    // A uid with no passwd entry: the number says enough.
  }
  return `user ${name} (uid ${process.getuid?.() ?? '?'})`;
}

/** The buffer cannot be used by this user for `what`: exit 73, naming how to run the command instead. */
export function notThisUser(file: string, what: 'read' | 'write', detail: string): BufferError {
  const again = ['sudo', '-u', SERVICE_USER, 'telematics-agent', ...process.argv.slice(2)].join(' ');
  return new BufferError('access', file, `${file}: cannot ${what} the buffer: ${detail}. The buffer belongs to the user the service runs as; run the command as that user: ${again}`);
}

/**
 * Why this user cannot read the buffer at `path` (its directory cannot be looked into, or
 * the file, its -wal or -shm cannot be read), or undefined: also when there is no buffer.
 */
export function readProblem(path: string): string | undefined {
  try {
    statSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    return `${who()} cannot look into ${dirname(path)} (${code})`;
  }
  for (const f of [path, `${path}-wal`, `${path}-shm`]) {
    try {
      accessSync(f, constants.R_OK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') return `${who()} cannot read ${f} (${code})`;
    }
  }
  return undefined;
}

/** SQLite refusing a write for want of permission (a file opened read-only because this user may not write it). */
export function isReadOnly(err: unknown): boolean {
  const code = (err as { code?: string } | undefined)?.code ?? '';
  return code === 'SQLITE_READONLY' || code.startsWith('SQLITE_READONLY_') || code === 'SQLITE_PERM' || code === 'SQLITE_CANTOPEN';
}
