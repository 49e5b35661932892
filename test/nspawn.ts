/**
 * A minimal Debian booted by systemd-nspawn with a real systemd as PID 1, for the tests of the
 * unit (test/systemd-unit.test.ts). The root file system is built once by
 * scripts/nspawn-rootfs.sh into .nspawn/rootfs and never changed: each boot mounts an overlay
 * on it (.nspawn/run-<pid>/), so every run starts from a device nothing was installed on.
 *
 * The container shares the host's network (a sandbox on the host's loopback is reachable
 * at 127.0.0.1) but has its own PID, mount, IPC and UTS namespaces. Commands run inside with
 * `nsenter -a` under `timeout`, with a clean environment (the test runner's NODE_OPTIONS and
 * npm_config_* must not leak into the device), and never block the test's event loop: the
 * sandbox answering the agent runs in this process.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, waitFor } from './helpers.js';

export const NSPAWN_DIR = join(ROOT, '.nspawn');
export const ROOTFS = join(NSPAWN_DIR, 'rootfs');
const BUILD_SCRIPT = join(ROOT, 'scripts', 'nspawn-rootfs.sh');
const PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface ExecResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

export interface ExecOptions {
  /** Run as this user (runuser -u), with its HOME; default root. */
  user?: string;
  /** Written to the command's stdin; default: /dev/null. */
  input?: string;
  /** More environment variables (the rest is a clean PATH, HOME, LANG). */
  env?: Record<string, string>;
  /** Killed (inside the container, by timeout) after this long; default 60 s. */
  timeoutMs?: number;
}

function onPath(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

/**
 * Why this machine cannot boot the container, or undefined when it can. A machine that has
 * the tools but fails to boot fails the tests; only a missing prerequisite skips them.
 */
export function cannotBoot(): string | undefined {
  if (process.platform !== 'linux') return `not Linux (${process.platform})`;
  if (process.getuid?.() !== 0) return 'not root: systemd-nspawn, overlay mounts and debootstrap need root';
  if (!onPath('systemd-nspawn')) return 'systemd-nspawn not found (apt-get install systemd-container)';
  if (!onPath('nsenter')) return 'nsenter not found (apt-get install util-linux)';
  if (!existsSync(join(ROOTFS, 'lib/systemd/systemd')) && !onPath('debootstrap')) {
    return `no root file system at ${ROOTFS} and debootstrap not found to build one (apt-get install debootstrap; scripts/nspawn-rootfs.sh)`;
  }
  return undefined;
}

/** Run a host command to its end without blocking the event loop. */
export function runHost(cmd: string, args: string[], opts: { timeoutMs?: number; cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

/** Builds .nspawn/rootfs when it is missing or its package list changed; quick otherwise. */
export async function prepareRootfs(): Promise<void> {
  const r = await runHost('sh', [BUILD_SCRIPT], { timeoutMs: 15 * 60_000 });
  if (r.status !== 0) throw new Error(`scripts/nspawn-rootfs.sh failed (${r.status}):\n${r.stdout.slice(-2000)}\n${r.stderr.slice(-2000)}`);
}

interface CgroupDir {
  /** The directory made for the container (removed after). */
  dir: string;
}

/**
 * A child cgroup of the test's own in each hierarchy systemd inside needs, for nspawn to
 * start in. On a host with cgroup v1 controllers (hybrid), nspawn puts the container at the
 * root of a cgroup namespace made where nspawn itself runs; whatever the container's systemd
 * creates (system.slice, the service's group) then lands below these directories, not
 * beside the host's own, and goes with them.
 */
function makeCgroups(name: string): CgroupDir[] {
  const out: CgroupDir[] = [];
  for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    const [, controllers, path] = m;
    let mount: string | undefined;
    if (controllers === '') mount = existsSync('/sys/fs/cgroup/unified') ? '/sys/fs/cgroup/unified' : '/sys/fs/cgroup';
    else if (controllers === 'name=systemd') mount = '/sys/fs/cgroup/systemd';
    else if (['memory', 'devices', 'pids'].includes(controllers)) mount = `/sys/fs/cgroup/${controllers}`;
    if (!mount || !existsSync(join(mount, 'cgroup.procs'))) continue;
    const dir = join(mount, path, name);
    mkdirSync(dir, { recursive: true });
    out.push({ dir });
  }
  return out;
}

/** Removes a cgroup directory and what was made below it, deepest first (only empty groups go). */
function removeCgroup(dir: string): void {
  if (!existsSync(dir)) return;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) removeCgroup(join(dir, entry.name));
  }
  try {
    rmdirSync(dir);
  } catch {
    // A group with a process left in it; the next run's cleanup tries again.
  }
}

function isMounted(path: string): boolean {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === path);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The PIDs of a process's children. */
function children(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((t) => readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').split(' ').filter(Boolean).map(Number));
  } catch {
    return [];
  }
}

/** Whether the process is PID 1 of its own PID namespace (the container's systemd). */
function isNamespaceInit(pid: number): boolean {
  try {
    const ns = /^NSpid:\s+(.*)$/m
      .exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
      .trim()
      .split(/\s+/);
    return !!ns && ns.length > 1 && ns.at(-1) === '1';
  } catch {
    return false;
  }
}

/** A run directory (overlay and its cgroups) left by a test process that is gone: unmounted and removed. */
function cleanStaleRuns(): void {
  if (!existsSync(NSPAWN_DIR)) return;
  for (const entry of readdirSync(NSPAWN_DIR)) {
    if (!entry.startsWith('run-')) continue;
    const dir = join(NSPAWN_DIR, entry);
    const owner = Number(entry.split('-')[1]);
    if (owner && alive(owner)) continue;
    const state = join(dir, 'state.json');
    if (existsSync(state)) {
      const s = JSON.parse(readFileSync(state, 'utf8')) as { init?: number; nspawn?: number; cgroups?: string[] };
      for (const pid of [s.init, s.nspawn]) if (pid && alive(pid)) process.kill(pid, 'SIGKILL');
      for (const cg of s.cgroups ?? []) removeCgroup(cg);
    }
    const merged = join(dir, 'merged');
    if (isMounted(merged)) spawnSync('umount', ['-l', merged]);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A command running in the container. */
export interface Background {
  /** Its stdout and stderr so far. */
  output(): string;
  /** Resolves with its exit status. */
  exited: Promise<number | null>;
  /** Ends it and waits. */
  stop(): Promise<void>;
}

export class Container {
  readonly dir: string;
  /** The container's root as the host sees it (the overlay): files written here are inside. */
  readonly root: string;
  private nspawn: ChildProcess | undefined;
  private init: number | undefined;
  private cgroups: CgroupDir[] = [];
  private console = '';
  private readonly onExit = () => this.killNow();

  /** `rootfs`: the tree the overlay goes on; default the one scripts/nspawn-rootfs.sh builds. */
  constructor(private readonly rootfs = ROOTFS) {
    this.dir = join(NSPAWN_DIR, `run-${process.pid}-${Date.now()}`);
    this.root = join(this.dir, 'merged');
  }

  /** The host path of a path inside the container. */
  path(inside: string): string {
    return join(this.root, inside);
  }

  /** Mounts the overlay, starts systemd-nspawn and waits for the container's systemd to be up. */
  async boot(): Promise<void> {
    cleanStaleRuns();
    for (const d of ['upper', 'work', 'merged']) mkdirSync(join(this.dir, d), { recursive: true });
    const mount = spawnSync('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${this.rootfs},upperdir=${join(this.dir, 'upper')},workdir=${join(this.dir, 'work')}`, this.root], { encoding: 'utf8' });
    if (mount.status !== 0) throw new Error(`cannot mount the overlay on ${this.rootfs}: ${mount.stderr}`);
    this.cgroups = makeCgroups(`ta-nspawn-${process.pid}`);
    process.once('exit', this.onExit);
    // sh joins the cgroups, then becomes nspawn: everything the container runs is below them.
    const join_ = 'for f; do echo $$ > "$f/cgroup.procs" || exit 1; done; exec systemd-nspawn --quiet --register=no --keep-unit --console=pipe --machine=ta-device -D "$ROOTFS" -b';
    const child = spawn('sh', ['-c', join_, 'sh', ...this.cgroups.map((c) => c.dir)], {
      env: { PATH, ROOTFS: this.root, SYSTEMD_LOG_COLOR: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.nspawn = child;
    child.stdout!.on('data', (d: Buffer) => (this.console = (this.console + d.toString()).slice(-20_000)));
    child.stderr!.on('data', (d: Buffer) => (this.console = (this.console + d.toString()).slice(-20_000)));
    this.init = await waitFor(
      () => {
        if (child.exitCode !== null) throw new Error(`systemd-nspawn exited with ${child.exitCode}: ${this.console}`);
        const queue = [child.pid!];
        while (queue.length) {
          const pid = queue.shift()!;
          if (pid !== child.pid && isNamespaceInit(pid)) return pid;
          queue.push(...children(pid));
        }
        return undefined;
      },
      30_000,
      "the container's systemd",
    );
    this.saveState();
    await this.settle();
    await this.delegateControllers();
  }

  /** Waits until the container's systemd has finished booting. */
  private async settle(): Promise<void> {
    // "offline", or no bus at all, until PID 1 listens on its socket, a moment after it started.
    let r: ExecResult = { status: null, stdout: '', stderr: '' };
    const end = Date.now() + 90_000;
    do {
      r = await this.exec(['systemctl', 'is-system-running', '--wait'], { timeoutMs: 90_000 });
      if (!['', 'offline'].includes(r.stdout.trim())) break;
      await new Promise((res) => setTimeout(res, 200));
    } while (Date.now() < end);
    if (!['running', 'degraded'].includes(r.stdout.trim())) {
      throw new Error(`the container did not boot: ${r.stdout}${r.stderr}\n${(await this.exec(['systemctl', '--failed', '--no-pager'])).stdout}\n${this.console}`);
    }
  }

  /**
   * nspawn mounts cgroup v1 controllers read-only in the container (no systemd on the host
   * to delegate them), so the container's systemd would keep no memory accounting
   * (`MemoryCurrent=[not set]`) and could not apply `DevicePolicy=`/`DeviceAllow=` (the v1
   * devices controller): the unit's device sandbox would be untested. Made writable here (they
   * are the cgroups made for this container, see makeCgroups), then systemd looks again
   * (`daemon-reexec`). On a cgroup v2 host nspawn delegates by itself and nothing is done.
   */
  private async delegateControllers(): Promise<void> {
    const r = await this.sh(
      'for c in memory devices pids; do if [ -d /sys/fs/cgroup/$c ] && grep -q " /sys/fs/cgroup/$c .*ro," /proc/self/mountinfo; then mount -o remount,bind,rw /sys/fs/cgroup/$c || exit 1; echo $c; fi; done',
    );
    if (r.status !== 0) throw new Error(`cannot make the cgroup controllers writable in the container: ${r.stderr}`);
    if (r.stdout.trim()) {
      const re = await this.exec(['systemctl', 'daemon-reexec']);
      if (re.status !== 0) throw new Error(`systemctl daemon-reexec: ${re.stderr}`);
      await this.settle();
    }
  }

  private saveState(): void {
    writeFileSync(join(this.dir, 'state.json'), JSON.stringify({ init: this.init, nspawn: this.nspawn?.pid, cgroups: this.cgroups.map((c) => c.dir) }));
  }

  /** The argument list of nsenter running `args` inside, under timeout, with a clean environment. */
  private command(args: string[], opts: ExecOptions): string[] {
    if (!this.init) throw new Error('the container is not running');
    const home = opts.user && opts.user !== 'root' ? `/home/${opts.user}` : '/root';
    const env = Object.entries({ PATH, HOME: home, LANG: 'C.UTF-8', SYSTEMD_PAGER: '', SYSTEMD_COLORS: '0', ...opts.env }).map(([k, v]) => `${k}=${v}`);
    const user = opts.user && opts.user !== 'root' ? ['runuser', '-u', opts.user, '--'] : [];
    const seconds = String(Math.ceil((opts.timeoutMs ?? 60_000) / 1000));
    // Input through cat: node's stdin for a child is a socket, which /dev/stdin cannot open
    // (ENXIO); a command then reads a pipe, as from `echo key | command`.
    const piped = opts.input === undefined ? args : ['sh', '-c', 'cat | "$@"', 'sh', ...args];
    return ['-t', String(this.init), '-a', 'env', '-i', ...env, 'timeout', '--kill-after=5', seconds, ...user, 'env', ...env, ...piped];
  }

  /** Runs a command inside and waits for it. */
  exec(args: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    return new Promise((resolve, reject) => {
      const child = spawn('nsenter', this.command(args, opts), { stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      if (opts.input !== undefined) child.stdin!.end(opts.input);
      // A second bound outside, should nsenter itself hang.
      const timer = setTimeout(() => child.kill('SIGKILL'), (opts.timeoutMs ?? 60_000) + 15_000);
      child.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      child.on('close', (status) => {
        clearTimeout(timer);
        resolve({ status, stdout, stderr });
      });
    });
  }

  /** `sh -c script` inside. */
  sh(script: string, opts: ExecOptions = {}): Promise<ExecResult> {
    return this.exec(['sh', '-c', script], opts);
  }

  /** `sh -c script` inside that must succeed; returns its stdout. */
  async ok(script: string, opts: ExecOptions = {}): Promise<string> {
    const r = await this.sh(script, opts);
    if (r.status !== 0) throw new Error(`in the container: ${script}\nexit ${r.status}\n${r.stdout}\n${r.stderr}`);
    return r.stdout;
  }

  /**
   * Starts a long-running command inside. Its output is collected in `output()`; `stop()`
   * ends it from inside (SIGTERM to its timeout, which passes it on to the command's
   * process group): killing nsenter alone would leave the command running in the container.
   */
  start(args: string[], opts: ExecOptions = {}): Background {
    const cmd = this.command(args, { timeoutMs: 600_000, ...opts });
    const at = cmd.indexOf('timeout');
    // The shell prints its PID inside the container, then becomes timeout (same PID).
    cmd.splice(at, 0, 'sh', '-c', 'echo "pid $$"; exec "$@"', 'sh');
    // stdin stays open until stop(): a command may read more than `input`, or end at EOF.
    const child = spawn('nsenter', cmd, { stdio: ['pipe', 'pipe', 'pipe'] });
    if (opts.input !== undefined) child.stdin!.write(opts.input);
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((r) => child.on('close', (code) => r(code)));
    const pid = waitFor(() => /^pid (\d+)$/m.exec(out)?.[1], 10_000, `the PID of ${args.join(' ')}`).then(Number);
    return {
      output: () => out.replace(/^pid \d+\n/, ''),
      exited,
      stop: async () => {
        // The shell's kill: the image has no /bin/kill.
        if (child.exitCode === null) await this.sh(`kill -TERM ${await pid}`).catch(() => undefined);
        child.stdin!.end();
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      },
    };
  }

  /** What systemd-nspawn printed (its own errors; the container's console is not a terminal). */
  get consoleOutput(): string {
    return this.console;
  }

  /** Powers the container off (SIGTERM to nspawn), then removes the overlay and the cgroups. */
  async stop(): Promise<void> {
    const child = this.nspawn;
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((r) => child.once('exit', () => r()));
      child.kill('SIGTERM');
      const timer = setTimeout(() => this.killNow(), 30_000);
      await exited;
      clearTimeout(timer);
    }
    this.cleanup();
  }

  /** Kills the container at once: its PID 1 (which takes every process inside) and nspawn. */
  private killNow(): void {
    for (const pid of [this.init, this.nspawn?.pid]) {
      if (pid && alive(pid)) process.kill(pid, 'SIGKILL');
    }
    this.cleanup();
  }

  private cleanup(): void {
    process.off('exit', this.onExit);
    if (isMounted(this.root)) {
      if (spawnSync('umount', [this.root]).status !== 0) spawnSync('umount', ['-l', this.root]);
    }
    for (const cg of this.cgroups) removeCgroup(cg.dir);
    this.cgroups = [];
    this.init = undefined;
    rmSync(this.dir, { recursive: true, force: true });
  }
}
