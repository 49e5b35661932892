/**
 * Failures that end a command or the daemon, each with a stable `code`, the exit status it
 * maps to, and whether trying again (a systemd restart) can help. The unit's
 * `RestartPreventExitStatus=` lists the statuses of the failures a restart cannot fix, so a
 * broken buffer or config leaves the unit failed with its message instead of looping every
 * RestartSec.
 *
 * The CLI exits with `exitCode` of whatever AgentError ends a command; anything else is a
 * run-time failure (exit 1). A class that belongs to one part lives there (ConfigError in
 * config/load.ts, LoadError in buffer/store.ts, ...) and extends one of these.
 */
import { EXIT } from './exit.js';

export abstract class AgentError extends Error {
  abstract readonly code: string;
  abstract readonly exitCode: number;
  /** True when the same command may succeed later without anyone changing anything. */
  readonly retryable: boolean = false;

  /** What a command prints on stderr before it exits with `exitCode`. */
  report(): string {
    return `error: ${this.message}`;
  }
}

/** The input named on the command line is wrong (unknown load, bad stops file, bad time): nothing was written. */
export abstract class DataError extends AgentError {
  readonly exitCode: number = EXIT.DATA;
}

/**
 * The command line itself is wrong in a way commander cannot see (options that go together, a
 * number out of range): usage (64), or data (65) when the value is well-formed but refused.
 */
export class CliError extends AgentError {
  readonly code: string;
  constructor(
    message: string,
    readonly exitCode: typeof EXIT.USAGE | typeof EXIT.DATA,
  ) {
    super(message);
    this.code = exitCode === EXIT.USAGE ? 'EUSAGE' : 'EDATA';
  }
}

export type BufferProblem = 'corrupt' | 'newer' | 'foreign-wal' | 'access' | 'locked' | 'held' | 'older';

const BUFFER_EXIT: Record<BufferProblem, number> = {
  // The file's content cannot be used as it is: someone must decide what to do with it.
  corrupt: EXIT.DATA,
  newer: EXIT.DATA,
  'foreign-wal': EXIT.DATA,
  // The file or its directory cannot be opened or created by this user.
  access: EXIT.CANTCREAT,
  // Another daemon runs on this buffer: a second one must not start.
  locked: EXIT.CONFIG,
  // Older than this version and held by a running daemon (or too large to read from a copy
  // upgraded in memory): restarting the service upgrades it, then the same command works.
  held: EXIT.TEMPFAIL,
  older: EXIT.TEMPFAIL,
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
