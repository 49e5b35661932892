/**
 * The bench's child processes: the drain workers (driven over IPC) and the daemons it starts,
 * each tracked so that none outlives the bench.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { packageFile } from '../src/paths.js';
import type { WorkerCommand, WorkerEvent } from './common.js';
import { AGENT_NODE_OPTIONS, PROF_DIR } from './options.js';

/**
 * The workers run a bundle made as the one that ships (dist-bench/pkg/, written by
 * bench/bundle.mjs with scripts/bundle.mjs's settings), as the bin runs dist/pkg/: their
 * memory figures are the shipped code's, not those of tsc's one file per module.
 */
export const WORKER = packageFile('dist-bench', 'pkg', 'bench', 'drain-worker.js');
export const BIN = packageFile('bin', 'telematics-agent.js');

export const children = new Set<ChildProcess>();
export const progress = (s: string) => process.stderr.write(`bench: ${s}\n`);

/** Kill every child still running, by its PID. */
export function killChildren(): void {
  for (const c of children) {
    if (c.exitCode === null && c.signalCode === null && c.pid) {
      try {
        process.kill(c.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
  }
}

export function waitExit(child: ChildProcess, timeoutMs = 30_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolvePromise) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolvePromise({ code: child.exitCode, signal: child.signalCode });
    const timer = setTimeout(() => child.pid && process.kill(child.pid, 'SIGKILL'), timeoutMs);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      resolvePromise({ code, signal });
    });
  });
}

/** A drain-worker child and the events it sends. */
export class Worker {
  readonly child: ChildProcess;
  private queue: WorkerEvent[] = [];
  private waiting: Array<(e: WorkerEvent | Error) => void> = [];

  constructor(agent: boolean) {
    const execArgv = [...(agent ? AGENT_NODE_OPTIONS.split(/\s+/) : []), ...(PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROF_DIR}`] : [])];
    this.child = fork(WORKER, [], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'], execArgv });
    children.add(this.child);
    this.child.on('message', (e: WorkerEvent) => this.deliver(e));
    this.child.on('exit', (code, signal) => {
      children.delete(this.child);
      const err = new Error(`bench worker exited (code ${code}, signal ${signal})`);
      for (const w of this.waiting.splice(0)) w(err);
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  private deliver(e: WorkerEvent): void {
    const w = this.waiting.shift();
    if (w) w(e);
    else this.queue.push(e);
  }

  send(c: WorkerCommand): void {
    this.child.send(c);
  }

  /** The next event, which must be `ev`. */
  async next<K extends WorkerEvent['ev']>(ev: K, timeoutMs = 15 * 60_000): Promise<Extract<WorkerEvent, { ev: K }>> {
    const queued = this.queue.shift();
    const e =
      queued ??
      (await new Promise<WorkerEvent | Error>((resolvePromise) => {
        const timer = setTimeout(() => resolvePromise(new Error(`timed out waiting for ${ev} from the bench worker`)), timeoutMs);
        this.waiting.push((x) => {
          clearTimeout(timer);
          resolvePromise(x);
        });
      }));
    if (e instanceof Error) throw e;
    if (e.ev === 'error') throw new Error(`bench worker failed: ${e.message}`);
    if (e.ev !== ev) throw new Error(`bench worker sent ${e.ev}, expected ${ev}`);
    return e as Extract<WorkerEvent, { ev: K }>;
  }

  async exit(): Promise<void> {
    await waitExit(this.child);
  }
}

export function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('TELEMATICS_AGENT_')) delete env[k];
  delete env.CREDENTIALS_DIRECTORY;
  delete env.NOTIFY_SOCKET;
  return env;
}
