import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Writable } from 'node:stream';
import Database from 'better-sqlite3';
import { afterEach, beforeEach } from 'vitest';
import { Store } from '../src/buffer/store.js';
import { type Config, configSchema } from '../src/config/schema.js';
import { createLogger, type Logger } from '../src/log.js';
import { Sandbox, type SandboxOptions } from '../src/sandbox/server.js';

export const ROOT = resolve(import.meta.dirname, '..');
export const BIN = join(ROOT, 'bin', 'telematics-agent.js');

export function tempDir(prefix = 'ta-test-'): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export function writeFile(dir: string, name: string, text: string, mode?: number): string {
  const p = join(dir, name);
  writeFileSync(p, text, mode === undefined ? undefined : { mode });
  return p;
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Run the real CLI as a child process, with no stdin, and wait for it; killed after
 * `timeoutMs`. `uid`: as that user, with the group of the same number (needs root).
 */
export function runCli(args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number; uid?: number } = {}): Promise<CliResult> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      env: { ...cleanEnv(), ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(opts.uid === undefined ? {} : { uid: opts.uid, gid: opts.uid }),
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`CLI ${args.join(' ')} timed out; stderr: ${stderr}`));
    }, opts.timeoutMs ?? 20_000);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolvePromise({ code, signal, stdout, stderr });
    });
  });
}

/** The unprivileged user (nobody) tests run commands as. */
export const NOBODY = 65534;

/** Why uid 65534 cannot run the checkout's bin here, or undefined when it can. */
export function nobodyCannot(): string | undefined {
  if (process.getuid?.() !== 0) return 'switching to uid 65534 needs root';
  const r = spawnSync(process.execPath, [BIN, '--version'], { uid: NOBODY, gid: NOBODY, encoding: 'utf8' });
  return r.status === 0 ? undefined : `uid 65534 cannot run ${BIN} here (the checkout is not readable by it: ${(r.stderr || r.error?.message || '').trim().split('\n')[0]})`;
}

/** Environment without variables that would change which config or key the CLI uses. */
export function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.TELEMATICS_AGENT_CONFIG;
  delete env.TELEMATICS_AGENT_SUBSCRIPTION_KEY;
  delete env.CREDENTIALS_DIRECTORY;
  delete env.NOTIFY_SOCKET;
  return env;
}

export interface Daemon {
  child: ChildProcess;
  output: () => string;
  /** Waits for the daemon's "agent started" log line, and gives it parsed. */
  started: <T = Record<string, unknown>>(what?: string) => Promise<T>;
  stop: (signal?: NodeJS.Signals) => Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Start `telematics-agent run` as a child process; `stop` sends the signal and waits, killing
 * by PID on timeout. `nodeArgs` go to node itself (V8 flags that NODE_OPTIONS refuses).
 */
export function startDaemon(args: string[], env: NodeJS.ProcessEnv = {}, nodeArgs: string[] = []): Daemon {
  const child = spawn(process.execPath, [...nodeArgs, BIN, 'run', ...args], { env: { ...cleanEnv(), ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.on('exit', (code, signal) => r({ code, signal })));
  return {
    child,
    output: () => out,
    started: async (what = 'the daemon to start') => {
      // Whole lines only: the last piece may be a line still being written.
      const line = await waitFor(
        () =>
          out
            .split('\n')
            .slice(0, -1)
            .find((l) => l.includes('"msg":"agent started"')),
        15_000,
        what,
      );
      return JSON.parse(line);
    },
    stop: async (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      const r = await exited;
      clearTimeout(timer);
      return r;
    },
  };
}

export async function waitFor<T>(fn: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 15_000, what = 'condition'): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** libfaketime as Debian installs it (`apt-get install faketime`), for this machine's architecture. */
export function findLibfaketime(): string | undefined {
  for (const dir of readdirSync('/usr/lib', { withFileTypes: true })) {
    const lib = join('/usr/lib', dir.name, 'faketime', 'libfaketime.so.1');
    if (dir.isDirectory() && existsSync(lib)) return lib;
  }
  return undefined;
}

/**
 * The environment that runs a process under libfaketime with its wall clock offset by what
 * `file` holds (`+0`, `-1h`, `+31d`), read again at every look, so a test steps the clock of a
 * running process by rewriting the file; the monotonic clock stays real.
 */
export function fakeClockEnv(lib: string, file: string): NodeJS.ProcessEnv {
  return { LD_PRELOAD: lib, FAKETIME_TIMESTAMP_FILE: file, FAKETIME_NO_CACHE: '1', FAKETIME_DONT_FAKE_MONOTONIC: '1' };
}

/** A logger at `level` whose lines (pino's JSON) are parsed into `into`, for assertions. */
/** A logger that hands each line it writes (its JSON text) to `onLine`. */
function loggerTo(onLine: (line: string) => void, level: 'debug' | 'info'): Logger {
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString().split('\n')) if (line.trim()) onLine(line);
      cb();
    },
  });
  return createLogger({ level, destination: sink, pretty: false });
}

/** A logger whose lines land parsed in `into`. */
export const jsonLogger = <T>(into: T[], level: 'debug' | 'info' = 'debug'): Logger => loggerTo((line) => into.push(JSON.parse(line)), level);

/** A logger whose lines land as written in `into`: to check what text reached the log at all (a PIN, a key). */
export const lineLogger = (into: string[], level: 'debug' | 'info' = 'info'): Logger => loggerTo((line) => into.push(line), level);

/** A parsed log line, as jsonLogger gives it. */
export type LogLine = { level: number; msg: string } & Record<string, unknown>;

/**
 * Per test: the lines a `logger()` writes (`lines`, fresh for each test) and what the test
 * opened (`open`: buffers, stores; closed after it, newest first).
 */
export function logFixture(): { readonly lines: LogLine[]; logger: () => Logger; open: Array<{ close(): void }> } {
  let lines: LogLine[] = [];
  const open: Array<{ close(): void }> = [];
  beforeEach(() => {
    lines = [];
  });
  afterEach(() => {
    while (open.length) open.pop()!.close();
  });
  return {
    get lines() {
      return lines;
    },
    logger: () => jsonLogger(lines),
    open,
  };
}

export const TEST_KEY = 'test-key-0123456789abcdef';
export const TEST_SCAC = 'ABCD';

/** What a fixture stops after a test: a daemon child process, or an in-process agent. */
interface Stoppable {
  stop: (signal?: NodeJS.Signals) => Promise<unknown>;
}

export interface DaemonFixture<D extends Stoppable = Daemon> {
  /** This test's directory, removed after it. */
  readonly tmp: ReturnType<typeof tempDir>;
  /** This test's sandbox with the test key and SCAC, not started; stopped after the test. */
  readonly sandbox: Sandbox;
  /** The daemon this test runs. Every one set during a test is stopped after it, not only the last. */
  daemon: D | undefined;
}

/**
 * The set-up of a test that runs a daemon against the sandbox: registers beforeEach and
 * afterEach in the suite it is called in, and gives each test a fresh directory and sandbox.
 * After the test, its daemons are stopped (by PID, SIGKILL unless `stop` says otherwise: a
 * test that failed half-way leaves nothing running), then `afterStop` runs, then the sandbox
 * stops and the directory goes.
 */
export function daemonFixture<D extends Stoppable = Daemon>(
  opts: {
    /** tempDir's prefix. */
    prefix?: string;
    /** More sandbox options than the test key and SCAC. */
    sandbox?: Omit<SandboxOptions, 'key' | 'scac'>;
    /** The signal that stops the daemons after a test. */
    stop?: NodeJS.Signals;
    /** More to stop between the daemons and the sandbox: a test's other processes. */
    afterStop?: () => unknown;
  } = {},
): DaemonFixture<D> {
  let tmp: ReturnType<typeof tempDir> | undefined;
  let sandbox: Sandbox | undefined;
  let current: D | undefined;
  let started: D[] = [];
  beforeEach(() => {
    tmp = tempDir(opts.prefix);
    sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC, ...opts.sandbox });
  });
  afterEach(async () => {
    const stopping = started;
    started = [];
    current = undefined;
    for (const d of stopping) await d.stop(opts.stop ?? 'SIGKILL');
    await opts.afterStop?.();
    await sandbox?.stop();
    tmp?.cleanup();
  });
  const during = <T>(v: T | undefined): T => {
    if (v === undefined) throw new Error('daemonFixture: used outside a test');
    return v;
  };
  return {
    get tmp() {
      return during(tmp);
    },
    get sandbox() {
      return during(sandbox);
    },
    get daemon() {
      return current;
    },
    set daemon(d) {
      current = d;
      if (d && !started.includes(d)) started.push(d);
    },
  };
}

export interface TempFixture {
  /** This test's directory, removed after it. */
  readonly dir: string;
  /** `buffer.db` in that directory: the buffer agentConfig's config names. */
  readonly buffer: string;
  /** `fn` with that buffer open, closed after (withStoreAt). */
  withBuffer: <T>(fn: (store: Store) => T) => T;
}

/**
 * A fresh directory for each test of the suite it is called in (registers beforeEach and
 * afterEach), removed after the test. Hooks the file registers after this call run after its
 * beforeEach and before its afterEach (vitest stacks after-hooks), so they may use the
 * directory to the end.
 */
export function tempFixture(prefix?: string): TempFixture {
  let tmp: ReturnType<typeof tempDir> | undefined;
  beforeEach(() => {
    tmp = tempDir(prefix);
  });
  afterEach(() => {
    tmp?.cleanup();
    tmp = undefined;
  });
  const dir = () => {
    if (!tmp) throw new Error('tempFixture: used outside a test');
    return tmp.dir;
  };
  return {
    get dir() {
      return dir();
    },
    get buffer() {
      return join(dir(), 'buffer.db');
    },
    withBuffer: (fn) => withStoreAt(join(dir(), 'buffer.db'), fn),
  };
}

/** A base_url where no service answers (the discard port): for commands that never deliver. */
export const NO_SERVICE = 'http://127.0.0.1:9';

export interface CliFixture extends TempFixture {
  /** This test's config (agentConfig, no service behind it); a test may write another here. */
  cfg: string;
}

/**
 * tempFixture with agentConfig's config written in the directory before each test, for
 * commands that work on the buffer and the config alone. `extra` and `opts` go to agentConfig.
 */
export function cliFixture(extra = '', opts: Parameters<typeof agentConfig>[3] = {}): CliFixture {
  const tmp = tempFixture();
  let cfg: string | undefined;
  beforeEach(() => {
    cfg = agentConfig(tmp.dir, NO_SERVICE, extra, opts);
  });
  afterEach(() => {
    cfg = undefined;
  });
  return {
    get dir() {
      return tmp.dir;
    },
    get buffer() {
      return tmp.buffer;
    },
    withBuffer: tmp.withBuffer,
    get cfg() {
      if (cfg === undefined) throw new Error('cliFixture: used outside a test');
      return cfg;
    },
    set cfg(path) {
      cfg = path;
    },
  };
}

/**
 * A source that reads nothing (a module whose start and stop do nothing), for daemons whose
 * readings a test writes itself: every config needs at least one source.
 */
export function idleSource(dir: string): string {
  const path = writeFile(dir, 'idle-source.mjs', 'export function createSource() { return { start() {}, stop() {}, health: () => ({ healthy: true, readings: 0, rejected: 0, detail: "idle" }) }; }\n');
  return `[[sources]]\ntype = "module"\nname = "idle"\npath = "${path}"\n`;
}

/**
 * A minimal valid config for the sandbox at `url`, with the key in a 0600 file. `extra` lands
 * in [delivery], the last table, unless it opens its own; without a [[sources]] table of its
 * own, an idle source is added.
 */
export function agentConfig(
  dir: string,
  url: string,
  extra = '',
  /**
   * `deviceId: null` leaves device_id out (the default applies); `flushMs` is
   * buffer.flush_interval_ms; `api` is more lines for the [api] table.
   */
  opts: { traces?: string; sampling?: number; flushMs?: number; deviceId?: string | null; api?: string } = {},
): string {
  const keyFile = writeFile(dir, 'key', `${TEST_KEY}\n`, 0o600);
  const sources = extra.includes('[[sources]]') ? '' : idleSource(dir);
  const deviceId = opts.deviceId === undefined ? 'test-device' : opts.deviceId;
  return writeFile(
    dir,
    'agent.toml',
    `${deviceId === null ? '' : `device_id = "${deviceId}"`}
[api]
base_url = "${url}"
scac = "${TEST_SCAC}"
subscription_key_file = "${keyFile}"
timeout_s = 5
${opts.api ?? ''}
[buffer]
path = "${join(dir, 'buffer.db')}"
flush_interval_ms = ${opts.flushMs ?? 100}
[schedule]
splay_s = 0
traces = "${opts.traces ?? '*/15 * * * *'}"
[sampling]
interval_s = ${opts.sampling ?? 60}
[delivery]
poll_interval_ms = 100
retry_initial_s = 0.2
retry_max_s = 1
${extra}
${sources}`,
  );
}

/**
 * The commits in a buffer's WAL since the last checkpoint, each as the set of tables whose
 * pages it wrote (named by dbstat; page 1, the header, as 'header').
 */
export function walCommits(file: string): Array<Set<string>> {
  const wal = readFileSync(`${file}-wal`);
  const db = new Database(file, { readonly: true });
  const names = new Map((db.prepare('SELECT pageno, name FROM dbstat').all() as { pageno: number; name: string }[]).map((r) => [r.pageno, r.name]));
  db.close();
  const frame = 24 + wal.readUInt32BE(8);
  const commits: Array<Set<string>> = [];
  let current = new Set<string>();
  for (let at = 32; at + frame <= wal.length && wal.readUInt32BE(at + 8) === wal.readUInt32BE(16) && wal.readUInt32BE(at + 12) === wal.readUInt32BE(20); at += frame) {
    const page = wal.readUInt32BE(at);
    current.add(page === 1 ? 'header' : (names.get(page) ?? `page ${page}`));
    if (wal.readUInt32BE(at + 4) !== 0) {
      commits.push(current);
      current = new Set();
    }
  }
  return commits;
}

/** `fn` with the buffer at `file` open, closed after (what a CLI command does between two runs). */
export function withStoreAt<T>(file: string, fn: (store: Store) => T): T {
  const store = Store.open(file);
  try {
    return fn(store);
  } finally {
    store.close();
  }
}

/** Why a tmpfs cannot be mounted here (for real full-disk tests), or undefined when it can. */
export function cannotMountTmpfs(): string | undefined {
  if (process.getuid?.() !== 0) return 'not root: mounting a tmpfs needs root';
  const probe = tempDir('ta-tmpfs-probe-');
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', probe.dir], { stdio: 'pipe' });
    execFileSync('umount', [probe.dir], { stdio: 'pipe' });
    return undefined;
  } catch (err) {
    return `mount -t tmpfs failed: ${String((err as { stderr?: Buffer }).stderr ?? (err as Error).message).trim()}`;
  } finally {
    probe.cleanup();
  }
}

/**
 * The config of an in-process agent serving the driver's page on a free loopback port: its
 * buffer in `dir`, an idle source, a service nobody answers at; `ui` adds to [ui] (a PIN file,
 * a certificate).
 */
export function pageAgentConfig(dir: string, deviceId: string, ui: Record<string, unknown> = {}): Config {
  return configSchema.parse({
    device_id: deviceId,
    api: { base_url: 'http://127.0.0.1:9', scac: TEST_SCAC, subscription_key: TEST_KEY },
    buffer: { path: join(dir, 'buffer.db') },
    ui: { listen: '127.0.0.1:0', ...ui },
    sources: [{ type: 'module', name: 'idle', path: writeFile(dir, 'idle.mjs', 'export function createSource() { return { start() {}, stop() {} }; }\n') }],
  });
}
