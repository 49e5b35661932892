/**
 * Failures that end a command or the daemon, each with a stable `code`, the exit status it
 * maps to, and whether trying again (a systemd restart) can help. The unit's
 * `RestartPreventExitStatus=` lists the statuses of the failures a restart cannot fix, so a
 * broken buffer or config leaves the unit failed with its message instead of looping every
 * RestartSec.
 */
import { EXIT } from './cli/exit.js';

export abstract class AgentError extends Error {
  abstract readonly code: string;
  abstract readonly exitCode: number;
  /** True when the same command may succeed later without anyone changing anything. */
  readonly retryable: boolean = false;
}

export type BufferProblem = 'corrupt' | 'newer' | 'foreign-wal' | 'access' | 'locked';

const BUFFER_EXIT: Record<BufferProblem, number> = {
  // The file's content cannot be used as it is: someone must decide what to do with it.
  corrupt: EXIT.DATA,
  newer: EXIT.DATA,
  'foreign-wal': EXIT.DATA,
  // The file or its directory cannot be opened or created by this user.
  access: EXIT.CANTCREAT,
  // Another daemon runs on this buffer: a second one must not start.
  locked: EXIT.CONFIG,
};

/** The buffer cannot be used; the message names the file and what to do. */
export class BufferError extends AgentError {
  readonly code: string;
  readonly exitCode: number;
  constructor(
    readonly problem: BufferProblem,
    readonly file: string,
    message: string,
  ) {
    super(message);
    this.code = `EBUFFER_${problem.toUpperCase().replace('-', '_')}`;
    this.exitCode = BUFFER_EXIT[problem];
  }
}

/** SQLite's own words for a file whose pages cannot be trusted. */
export function isCorruption(err: unknown): boolean {
  const code = (err as { code?: string } | undefined)?.code ?? '';
  return code === 'SQLITE_CORRUPT' || code.startsWith('SQLITE_CORRUPT_') || code === 'SQLITE_NOTADB';
}
