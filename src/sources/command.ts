/**
 * A command as a source's transport: its stdout is the link, its stderr goes to the log
 * (rate-limited: a crashing adapter must not fill the journal), and it runs in its own
 * process group, so closing the link (and an exit of the main process) takes down whatever
 * it started too: a shell pipeline, a helper it forked.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import { KEY_ENV } from '../config/load.js';
import { LineSplitter, timer } from './common.js';
import type { Link, Opened } from './reconnector.js';

/** At most this many stderr lines are logged per minute; the rest are counted. */
const STDERR_LINES_PER_MIN = 30;
const STDERR_LINE_BYTES = 4096;

export interface CommandOptions {
  /** A shell command line, or the program and its arguments. */
  command: string | string[];
  cwd?: string;
  /** Added to the agent's environment (see commandEnv). */
  env: Record<string, string>;
  /** How long the group may take to go after SIGTERM before SIGKILL. */
  stopTimeoutS: number;
  stderr: StderrLog;
}

/** A running command; 'close' once it and everything holding its output are gone. */
export class CommandLink extends EventEmitter implements Link {
  /** How the command ended, once it has. */
  exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  /** An error of the process after it started (spawn errors reject `start` instead). */
  error: string | undefined;
  private killTimer: NodeJS.Timeout | undefined;
  private stopping = false;
  private done = false;

  private constructor(
    readonly child: ChildProcess,
    private readonly stopTimeoutS: number,
    stderr: StderrLog,
  ) {
    super();
    const lines = new LineSplitter(STDERR_LINE_BYTES, {
      line: (text) => stderr.line(text),
      overlong: (_n, bytes) => stderr.line(`[a stderr line of ${bytes} bytes, not logged]`),
    });
    child.stdout!.on('data', (chunk: Buffer) => this.emit('data', chunk));
    child.stdout!.on('end', () => this.emit('end'));
    child.stderr!.on('data', (chunk: Buffer) => lines.push(chunk));
    child.on('error', (err) => {
      this.error = (err as NodeJS.ErrnoException).code ?? err.message;
      if (this.listenerCount('error') > 0) this.emit('error', err);
    });
    child.on('exit', (code, signal) => {
      this.exit = { code, signal };
      // Leftovers of the group still hold stdout open: ask them to go, then insist.
      this.terminate();
    });
    child.on('close', () => {
      lines.end();
      this.finish();
    });
  }

  /** Start the command; rejects when it cannot start (ENOENT, EACCES). */
  static start(o: CommandOptions): Promise<Opened<CommandLink>> {
    const [file, args] = typeof o.command === 'string' ? ['/bin/sh', ['-c', o.command]] : [o.command[0], o.command.slice(1)];
    const child = spawn(file, args, {
      cwd: o.cwd,
      env: commandEnv(o.env),
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group: closing signals the group, pipelines and helpers included.
      detached: true,
    });
    return new Promise((resolve, reject) => {
      child.once('error', reject);
      child.once('spawn', () => {
        child.off('error', reject);
        resolve({ link: new CommandLink(child, o.stopTimeoutS, o.stderr) });
      });
    });
  }

  /** Stop the group: SIGTERM, SIGKILL after stopTimeoutS, and SIGKILL to whatever is left once the command is gone. */
  destroy(): void {
    if (this.done) return;
    this.stopping = true;
    this.terminate();
  }

  private terminate(): void {
    killGroup(this.child.pid, 'SIGTERM');
    // The first deadline holds: the command's exit after a stop does not push it back.
    this.killTimer ??= timer(() => killGroup(this.child.pid, 'SIGKILL'), this.stopTimeoutS * 1000);
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    clearTimeout(this.killTimer);
    // The leader is gone; anything left in its group (a child that ignores SIGTERM) goes too.
    if (this.stopping) killGroup(this.child.pid, 'SIGKILL');
    this.emit('close');
  }
}

/** A command's stderr in the log: at most 30 lines a minute, the rest counted and summed up. */
export class StderrLog {
  /** Lines seen, logged or not. */
  lines = 0;
  private window = { startMs: 0, lines: 0, suppressed: 0 };

  constructor(private readonly log: Logger) {}

  line(text: string): void {
    this.lines += 1;
    const now = Date.now();
    if (now - this.window.startMs >= 60_000) {
      if (this.window.suppressed) this.log.warn({ suppressed: this.window.suppressed }, 'stderr lines of the command not logged (more than 30 a minute)');
      this.window = { startMs: now, lines: 0, suppressed: 0 };
    }
    if (this.window.lines >= STDERR_LINES_PER_MIN) {
      this.window.suppressed += 1;
      return;
    }
    this.window.lines += 1;
    this.log.warn({ stderr: text.length > 1000 ? `${text.slice(0, 1000)}...` : text }, 'command stderr');
  }
}

/**
 * The agent's environment without what is not the command's business: the subscription key
 * and the systemd credentials directory it lies in (an adapter that logs its environment,
 * or reads that directory, must not get the key), systemd's notify and watchdog variables
 * (a child that speaks sd_notify would speak for the agent) and the agent's NODE_OPTIONS.
 * `env` from the config comes last.
 */
export function commandEnv(extra: Record<string, string>, base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env = { ...base };
  delete env[KEY_ENV];
  delete env.CREDENTIALS_DIRECTORY;
  delete env.NOTIFY_SOCKET;
  delete env.WATCHDOG_USEC;
  delete env.WATCHDOG_PID;
  // The agent's own heap limits (set by its unit) are not the adapter's: a Node.js adapter
  // gets Node's defaults unless the source's env says otherwise.
  delete env.NODE_OPTIONS;
  return { ...env, ...extra };
}

/** Signal a whole process group; a group that is already gone is not an error. */
function killGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: nothing left to signal.
  }
}
