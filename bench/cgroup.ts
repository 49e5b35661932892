/**
 * Row 3f, the cgroup's view: the memory `systemctl status` shows for the service ("Memory:")
 * is its cgroup's memory.current (v2; memory.usage_in_bytes in v1): the process's anonymous
 * memory, every page of the page cache it brought in (the buffer file and its WAL, the node
 * binary and the libraries it mapped, unless another process had read them first) and the
 * kernel's memory on its behalf. The bench starts the 1 Hz `run` daemon (row 3e) in a fresh
 * child of its own cgroup and reads it there; where none can be made (not root, cgroup v2
 * without the memory controller delegated) it reports RSS plus the buffer files' page cache
 * (fincore), and says which it is.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, copyFileSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import { sleep } from './common.js';

const ROOT = '/sys/fs/cgroup';

export interface CgroupMemory {
  /** What was measured: 'cgroup v1', 'cgroup v2', or 'RSS + page cache of the buffer files (no cgroup: why)'. */
  kind: string;
  /** memory.current / memory.usage_in_bytes, or the fallback's sum, bytes. */
  usage: number;
  /** Anonymous memory charged (v2 anon, v1 rss), or the process's RssAnon. */
  anon: number;
  /** Page cache charged (v2 file, v1 cache), or the fallback's RssFile + buffer page cache. */
  file: number;
  /** Of `file`, the pages some process maps (v2 file_mapped, v1 mapped_file); the rest is read ahead or read(), reclaimed first. */
  mapped?: number;
  /** The highest usage since the cgroup was made (v2 memory.peak, v1 memory.max_usage_in_bytes), when known. */
  peak?: number;
}

/** The memory controller's directory this process is in, and the version of the hierarchy. */
function ownMemoryCgroup(): { dir: string; v: 1 | 2 } | undefined {
  let lines: string[];
  try {
    lines = readFileSync('/proc/self/cgroup', 'utf8').split('\n');
  } catch {
    return undefined;
  }
  // v1: "4:memory:/path"; v2 (unified): "0::/path".
  const v1 = lines.map((l) => /^\d+:([^:]*):(.*)$/.exec(l)).find((m) => m?.[1].split(',').includes('memory'));
  if (v1 && existsSync(join(ROOT, 'memory', 'memory.usage_in_bytes'))) return { dir: join(ROOT, 'memory', v1[2]), v: 1 };
  const v2 = lines.map((l) => /^0::(.*)$/.exec(l)).find(Boolean);
  if (v2 && existsSync(join(ROOT, 'cgroup.controllers'))) return { dir: join(ROOT, v2[1]), v: 2 };
  return undefined;
}

/** Cgroups made and not yet removed: a signal that stops the bench removes them (removeCgroupsNow). */
const made = new Set<string>();

/** Best effort, at once: for the bench's signal handler, after its children are killed. */
export function removeCgroupsNow(): void {
  for (const dir of made) {
    try {
      rmdirSync(dir);
    } catch {
      // Still busy, or gone.
    }
  }
}

const stat = (text: string, name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
const readNumber = (file: string) => (existsSync(file) ? Number(readFileSync(file, 'utf8').trim()) : undefined);

/**
 * A fresh memory cgroup, a child of the one the bench runs in (so whatever limits that one has
 * still hold), for one process started through `wrap`.
 */
export class MemoryCgroup {
  private constructor(
    readonly dir: string,
    private readonly v: 1 | 2,
  ) {}

  /** Make the child cgroup, or say why it cannot be. */
  static create(name: string): MemoryCgroup | { skipped: string } {
    if (process.getuid?.() !== 0) return { skipped: 'not root' };
    const own = ownMemoryCgroup();
    if (!own) return { skipped: 'no memory cgroup found in /proc/self/cgroup' };
    const dir = join(own.dir, name);
    try {
      mkdirSync(dir);
    } catch (err) {
      return { skipped: `mkdir ${dir} failed: ${(err as Error).message}` };
    }
    made.add(dir);
    const cg = new MemoryCgroup(dir, own.v);
    // v2 gives a child memory.current only where the parent delegates the memory controller.
    if (!existsSync(cg.usageFile)) {
      rmdirSync(dir);
      made.delete(dir);
      return { skipped: `${own.dir} does not delegate the memory controller (cgroup v2)` };
    }
    return cg;
  }

  private get usageFile(): string {
    return join(this.dir, this.v === 2 ? 'memory.current' : 'memory.usage_in_bytes');
  }

  /** sh enters the cgroup, then execs the command: every page the command brings in is charged there. */
  wrap(command: string, args: string[]): [string, string[]] {
    return ['/bin/sh', ['-c', 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', 'sh', this.dir, command, ...args]];
  }

  /**
   * Run `node -e 0` in the cgroup once: the node binary's start-up pages come into the page
   * cache charged here, so that a daemon started next starts as fast as from a warm cache (as
   * on a device where the service starts again), its figures charged as on a first start.
   */
  warm(node: string): void {
    const [command, args] = this.wrap(node, ['-e', '0']);
    execFileSync(command, args, { stdio: 'ignore' });
  }

  read(): CgroupMemory {
    const text = readFileSync(join(this.dir, 'memory.stat'), 'utf8');
    const usage = Number(readFileSync(this.usageFile, 'utf8').trim());
    const peak = readNumber(join(this.dir, this.v === 2 ? 'memory.peak' : 'memory.max_usage_in_bytes'));
    return this.v === 2
      ? { kind: 'cgroup v2', usage, anon: stat(text, 'anon'), file: stat(text, 'file'), mapped: stat(text, 'file_mapped'), peak }
      : { kind: 'cgroup v1', usage, anon: stat(text, 'rss'), file: stat(text, 'cache'), mapped: stat(text, 'mapped_file'), peak };
  }

  /** Remove the cgroup once its process has exited (its page cache goes to the parent). */
  async remove(): Promise<void> {
    for (let i = 0; ; i++) {
      try {
        rmdirSync(this.dir);
        made.delete(this.dir);
        return;
      } catch (err) {
        // EBUSY while the exited process is still being reaped.
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' || i >= 50) return;
        await sleep(100);
      }
    }
  }
}

/**
 * A copy of the node binary that is not in the page cache, for the process in the cgroup: a
 * file page is charged to the cgroup that first brings it in, and this machine's node has
 * been read by every node process before (the bench's own), so its pages would be charged
 * elsewhere. On a device the agent is mostly the first node process after boot, and its
 * cgroup pays for the binary: the copy reproduces that. Returns how much of the copy was
 * still cached after dropping it (undefined without fincore): not 0 means the figure misses it.
 */
export function uncachedNodeCopy(dir: string): { path: string; cachedBytes: number | undefined } {
  const path = join(dir, 'node');
  copyFileSync(process.execPath, path);
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  // GNU dd: posix_fadvise(DONTNEED) over the whole file, which drops its clean pages.
  try {
    execFileSync('dd', [`if=${path}`, 'iflag=nocache', 'count=0', 'status=none'], { stdio: 'ignore' });
  } catch {
    // No GNU dd: fincore tells below.
  }
  return { path, cachedBytes: pageCacheOf([path]) };
}

/** Bytes of the files' pages in the page cache (util-linux fincore), or undefined without fincore. */
export function pageCacheOf(files: string[]): number | undefined {
  const present = files.filter((f) => existsSync(f));
  if (present.length === 0) return 0;
  try {
    const out = execFileSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', ...present], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    return out
      .split('\n')
      .filter(Boolean)
      .reduce((sum, l) => sum + Number(l.trim()), 0);
  } catch {
    return undefined;
  }
}

/**
 * The fallback where no cgroup could be made: RSS (anonymous and file-backed pages mapped)
 * plus the page cache of the buffer files (which `read`/`write` bring in without mapping).
 */
export function rssPlusBufferCache(mem: { rss: number; anon: number; file: number }, bufferFiles: string[], why: string): CgroupMemory {
  const cache = pageCacheOf(bufferFiles);
  if (cache === undefined) return { kind: `RSS alone (no cgroup: ${why}; no fincore for the buffer's page cache)`, usage: mem.rss, anon: mem.anon, file: mem.file };
  return { kind: `RSS + page cache of the buffer files (no cgroup: ${why})`, usage: mem.rss + cache, anon: mem.anon, file: mem.file + cache };
}
