/**
 * A buffer that cannot be used, proved with the real daemon and CLI processes: a second
 * daemon on the same buffer, a truncated or garbage file, a directory the user cannot write
 * (a read-only mount; a directory of root's, run as nobody), a buffer from a newer version,
 * a WAL of another database, and a corrupt buffer moved aside and salvaged back. Each must
 * end with a message naming the file and what to do, and an exit status the unit's
 * RestartPreventExitStatus= (65 73 78) stops on, instead of a restart every 10 s forever.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, chownSync, closeSync, copyFileSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, statSync, truncateSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { Store } from '../src/buffer/store.js';
import { BIN, agentConfig, cleanEnv, NOBODY, nobodyCannot, runCli, startDaemon, waitFor, type CliResult, type Daemon, daemonFixture } from './helpers.js';

let children: ChildProcess[] = [];
let mounts: string[] = [];
const fx = daemonFixture({
  afterStop: () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    children = [];
    for (const m of mounts) spawnSync('umount', [m]);
    mounts = [];
  },
});

const isRoot = process.getuid?.() === 0;
// Recent: older readings would fall to buffer.max_age_days at start.
const T0 = Date.now() - 3_600_000;

function daemon(cfg: string): Daemon {
  const d = startDaemon(['--config', cfg]);
  fx.daemon = d;
  return d;
}

/** agentConfig with the buffer somewhere else, and extra lines in [buffer]. */
function configWith(dir: string, url: string, buffer: string, bufferLines = '', extra = '', opts: Parameters<typeof agentConfig>[3] = {}): string {
  const cfg = agentConfig(dir, url, extra, opts);
  const text = readFileSync(cfg, 'utf8').replace(`path = "${join(dir, 'buffer.db')}"`, `path = "${buffer}"\n${bufferLines}`);
  writeFileSync(cfg, text);
  return cfg;
}

function prefill(path: string, n: number, load = 'L1', resource = 'T1'): void {
  const store = Store.open(path);
  store.startLoad({ loadNumber: load, resourceId: resource, resourceType: 'Truck', stops: [], nowMs: T0 });
  store.insertReadings(Array.from({ length: n }, (_, i) => ({ resourceId: resource, timeMs: T0 + i * 1000, lat: 41.8, lon: -87.6 + i * 1e-5 })));
  store.close();
}

const sha = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');

/** What an operator must be told: the file, and the status that keeps systemd from looping. */
function expectRefused(r: CliResult, code: number, ...words: string[]): void {
  expect(r.code, r.stderr).toBe(code);
  for (const w of words) expect(r.stderr).toContain(w);
}

describe('one daemon per buffer', () => {
  it('a second run exits 78 naming the pid and the lock; the CLI works beside the first; SIGKILL frees the lock', async () => {
    const { url } = await fx.sandbox.start();
    const cfg = agentConfig(fx.tmp.dir, url);
    const buffer = join(fx.tmp.dir, 'buffer.db');
    const first = daemon(cfg);
    await first.started('the first daemon');

    // Refused at once, not queued behind the lock: a second run that waited for it would never
    // end while the first runs, and runCli's timeout would fail the test.
    const second = await runCli(['run', '--config', cfg], { timeoutMs: 10_000 });
    expectRefused(second, 78, `pid ${first.child.pid}`, `${buffer}.lock`, 'another telematics-agent daemon is running on this buffer');

    // The CLI does not take the lock: reading and writing the buffer beside the daemon works.
    const status = await runCli(['status', '--json', '--config', cfg]);
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout).daemon).toMatchObject({ running: true, pid: first.child.pid });
    expect((await runCli(['load', 'start', 'L1', '-r', 'T1', '--config', cfg])).code).toBe(0);
    const list = await runCli(['load', 'list', '--json', '--config', cfg]);
    expect(list.code).toBe(0);
    expect(JSON.parse(list.stdout).map((l: { loadNumber: string }) => l.loadNumber)).toEqual(['L1']);

    // A kill -9 leaves no stale lock: the kernel dropped it with the process.
    expect(await first.stop('SIGKILL')).toEqual({ code: null, signal: 'SIGKILL' });
    const third = daemon(cfg);
    await third.started('a new daemon after the first was killed');
    expect(third.child.exitCode).toBeNull();
  }, 40_000);
});

describe('a buffer that cannot be opened', () => {
  it('truncated to half: run and status exit 65 naming the file and buffer.on_corrupt; the file is left as it was', async () => {
    const buffer = join(fx.tmp.dir, 'buffer.db');
    prefill(buffer, 3000);
    expect(existsSync(`${buffer}-wal`)).toBe(false);
    truncateSync(buffer, Math.floor(statSync(buffer).size / 2));
    const before = sha(buffer);
    const cfg = agentConfig(fx.tmp.dir, 'http://127.0.0.1:9');

    const run = await runCli(['run', '--config', cfg], { timeoutMs: 10_000 });
    expectRefused(run, 65, buffer, 'truncated', 'buffer.on_corrupt = "move-aside"', 'telematics-agent buffer salvage');
    expectRefused(await runCli(['status', '--config', cfg]), 65, buffer, 'buffer.on_corrupt');
    expect(sha(buffer)).toBe(before);
  }, 30_000);

  it('a file of garbage bytes: run and status exit 65 naming the file', async () => {
    const buffer = join(fx.tmp.dir, 'buffer.db');
    writeFileSync(buffer, randomBytes(64 * 1024));
    const before = sha(buffer);
    const cfg = agentConfig(fx.tmp.dir, 'http://127.0.0.1:9');
    expectRefused(await runCli(['run', '--config', cfg], { timeoutMs: 10_000 }), 65, buffer, 'not an SQLite database', 'buffer.on_corrupt');
    expectRefused(await runCli(['status', '--config', cfg]), 65, buffer, 'not an SQLite database');
    expect(sha(buffer)).toBe(before);
  }, 30_000);

  it('on a read-only file system: validate-config exits 78 naming buffer.path and why, run exits 73 naming the file', async (ctx) => {
    if (!isRoot) {
      console.log('skipped: mounting a read-only tmpfs needs root');
      ctx.skip();
    }
    const ro = join(fx.tmp.dir, 'ro');
    mkdirSync(ro);
    const m = spawnSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=1m', 'tmpfs', ro], { encoding: 'utf8' });
    if (m.status !== 0) {
      console.log(`skipped: cannot mount a read-only tmpfs here (${m.stderr.trim()})`);
      ctx.skip();
    }
    mounts.push(ro);
    const buffer = join(ro, 'buffer.db');
    const cfg = configWith(fx.tmp.dir, 'http://127.0.0.1:9', buffer);

    const check = await runCli(['validate-config', '--config', cfg]);
    expectRefused(check, 78, `buffer.path: ${buffer}: ${ro} is on a read-only file system`);
    const run = await runCli(['run', '--config', cfg], { timeoutMs: 10_000 });
    expectRefused(run, 73, buffer, 'read-only file system', 'buffer.path');
    expect(run.stderr).not.toContain('unable to open database file');
  }, 30_000);

  describe('as an unprivileged user (uid 65534)', () => {
    /** A directory, config and key nobody can read: tempDir makes its directory 0700. */
    function nobodyConfig(buffer: string): string {
      chmodSync(fx.tmp.dir, 0o755);
      const cfg = configWith(fx.tmp.dir, 'http://127.0.0.1:9', buffer);
      chmodSync(cfg, 0o644);
      // Its own key, 0600: readable by the user the agent runs as, and no warning.
      chownSync(join(fx.tmp.dir, 'key'), NOBODY, NOBODY);
      chmodSync(join(fx.tmp.dir, 'idle-source.mjs'), 0o644);
      return cfg;
    }

    const runAsNobody = (args: string[]) => runCli(args, { uid: NOBODY, timeoutMs: 10_000 });

    it('a directory of root, 0755: validate-config exits 78 and run 73, both naming the user and the directory', async (ctx) => {
      const why = nobodyCannot();
      if (why) {
        console.log(`skipped: ${why}`);
        ctx.skip();
      }
      const dir = join(fx.tmp.dir, 'state');
      mkdirSync(dir, { mode: 0o755 });
      const buffer = join(dir, 'buffer.db');
      const cfg = nobodyConfig(buffer);
      const check = await runAsNobody(['validate-config', '--config', cfg]);
      expectRefused(check, 78, `buffer.path: ${buffer}: user nobody (uid ${NOBODY}) cannot write to ${dir} (EACCES)`);
      const run = await runAsNobody(['run', '--config', cfg]);
      expectRefused(run, 73, buffer, `user nobody (uid ${NOBODY}) cannot write to ${dir}`);
      expect(run.stderr).not.toContain('unable to open database file');
      expect(readdirSync(dir)).toEqual([]);
    }, 30_000);

    it("the service user's directory after root ran the daemon there once: the service user starts", async (ctx) => {
      const why = nobodyCannot();
      if (why) {
        console.log(`skipped: ${why}`);
        ctx.skip();
      }
      const dir = join(fx.tmp.dir, 'state');
      mkdirSync(dir, { mode: 0o750 });
      chownSync(dir, NOBODY, NOBODY);
      const buffer = join(dir, 'buffer.db');
      const cfg = nobodyConfig(buffer);
      // `sudo telematics-agent run` once, for a look.
      const asRoot = daemon(cfg);
      await asRoot.started('the daemon run by root');
      expect(await asRoot.stop('SIGTERM')).toEqual({ code: 0, signal: null });
      for (const f of ['buffer.db', 'buffer.db.lock']) expect(statSync(join(dir, f)).uid, f).toBe(NOBODY);

      expect((await runAsNobody(['validate-config', '--config', cfg])).code).toBe(0);
      const child = spawn(process.execPath, [BIN, 'run', '--config', cfg], { uid: NOBODY, gid: NOBODY, env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
      children.push(child);
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      await waitFor(() => out.includes('"msg":"agent started"') || child.exitCode !== null, 15_000, 'the daemon as uid 65534');
      expect(out).toContain('"msg":"agent started"');
      const gone = new Promise((r) => child.on('exit', r));
      child.kill('SIGTERM');
      await gone;
      expect(child.exitCode).toBe(0);
    }, 40_000);
  });

  it('written by a newer version: run and status exit 65 saying so and what to do; the file is not touched', async () => {
    const buffer = join(fx.tmp.dir, 'buffer.db');
    prefill(buffer, 10);
    const db = new Database(buffer);
    db.pragma('user_version = 99');
    db.close();
    expect(existsSync(`${buffer}-wal`)).toBe(false);
    const before = { sha: sha(buffer), mtimeMs: statSync(buffer).mtimeMs, size: statSync(buffer).size };
    const cfg = agentConfig(fx.tmp.dir, 'http://127.0.0.1:9');

    const run = await runCli(['run', '--config', cfg], { timeoutMs: 10_000 });
    expectRefused(run, 65, buffer, 'written by a newer version of telematics-agent', 'buffer schema 99', 'nothing was changed', 'Install the newer version again');
    expectRefused(await runCli(['status', '--config', cfg]), 65, buffer, 'newer version');
    expect({ sha: sha(buffer), mtimeMs: statSync(buffer).mtimeMs, size: statSync(buffer).size }).toEqual(before);
    expect(new Database(buffer, { readonly: true }).pragma('user_version', { simple: true })).toBe(99);
  }, 30_000);
});

describe('a WAL of another database', () => {
  /**
   * Buffer B as a real daemon leaves it: running with a load started from the CLI, then
   * killed, so its -wal (and -shm) stay behind uncheckpointed.
   */
  async function walOfAnotherBuffer(url: string): Promise<string> {
    const dirB = join(fx.tmp.dir, 'b');
    mkdirSync(dirB);
    const cfgB = agentConfig(dirB, url);
    const b = daemon(cfgB);
    await b.started('daemon B');
    expect((await runCli(['load', 'start', 'LB', '-r', 'TB', '--config', cfgB])).code).toBe(0);
    // The daemon puts its identity page into each new WAL generation within a second; give
    // it that long (a version without it goes on after the wait, and fails below).
    const bufferB = join(dirB, 'buffer.db');
    await waitFor(() => walPages(`${bufferB}-wal`).includes(1), 5000, "B's identity in its WAL").catch(() => undefined);
    await b.stop('SIGKILL');
    expect(statSync(`${bufferB}-wal`).size).toBeGreaterThan(0);
    return bufferB;
  }

  /**
   * Page numbers of the frames of a WAL file's current generation (the header: 32 bytes, its
   * salts at 16; each frame: 24 bytes with the same salts at 8, then the page). Frames of an
   * earlier generation further on in the file carry other salts and no longer count.
   */
  function walPages(wal: string): number[] {
    if (!existsSync(wal)) return [];
    const b = readFileSync(wal);
    if (b.length < 32) return [];
    const pageSize = b.readUInt32BE(8);
    const salts = b.subarray(16, 24);
    const pages: number[] = [];
    for (let o = 32; o + 24 + pageSize <= b.length && b.subarray(o + 8, o + 16).equals(salts); o += 24 + pageSize) pages.push(b.readUInt32BE(o));
    return pages;
  }

  it('is refused (65, naming the -wal) and not applied; move-aside sets it apart from the buffer, which salvages alone', async () => {
    const { url } = await fx.sandbox.start();
    const buffer = join(fx.tmp.dir, 'buffer.db');
    prefill(buffer, 200, 'LA', 'TA');
    expect(existsSync(`${buffer}-wal`)).toBe(false);
    const bufferB = await walOfAnotherBuffer(url);
    copyFileSync(`${bufferB}-wal`, `${buffer}-wal`);
    copyFileSync(`${bufferB}-shm`, `${buffer}-shm`);
    const before = sha(buffer);
    const cfg = agentConfig(fx.tmp.dir, url);

    const run = await runCli(['run', '--config', cfg], { timeoutMs: 10_000 });
    expectRefused(run, 65, `${buffer}-wal belongs to another database`, 'it was not applied', 'buffer.on_corrupt = "move-aside"');
    expectRefused(await runCli(['load', 'list', '--config', cfg]), 65, `${buffer}-wal`);
    expect(sha(buffer)).toBe(before);

    const moveCfg = configWith(fx.tmp.dir, url, buffer, 'on_corrupt = "move-aside"');
    const d = daemon(moveCfg);
    await d.started();
    const line = d
      .output()
      .split('\n')
      .find((l) => l.includes('buffer unusable (foreign-wal)'));
    expect(line).toBeDefined();
    const { movedTo, foreignWal } = JSON.parse(line!) as { movedTo: string; foreignWal: string };
    expect(movedTo).toMatch(new RegExp(`^${buffer.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.corrupt-\\d{8}T\\d{6}Z$`));
    expect(JSON.parse(line!).msg).toContain(`telematics-agent buffer salvage ${movedTo}`);
    expect(sha(movedTo)).toBe(before);
    expect(foreignWal).toBe(`${movedTo}.foreign-wal`);
    expect(sha(foreignWal)).toBe(sha(`${bufferB}-wal`));
    // Nothing SQLite would take for the moved file's own WAL.
    expect(existsSync(`${movedTo}-wal`)).toBe(false);

    // The moved file is this buffer's own content: salvaged, it brings back LA, never LB.
    const salvage = await runCli(['buffer', 'salvage', movedTo, '--json', '--config', moveCfg]);
    expect(salvage.code, salvage.stderr).toBe(0);
    expect(JSON.parse(salvage.stdout)).toMatchObject({ loads: 1, readings: 200, unreadable: {} });
    const loads = JSON.parse((await runCli(['load', 'list', '--all', '--json', '--config', moveCfg])).stdout) as Array<{ loadNumber: string }>;
    expect(loads.map((l) => l.loadNumber)).toEqual(['LA']);
  }, 60_000);
});

describe('a corrupt buffer moved aside and salvaged', () => {
  /** Turn one leaf page of readings in the middle of the file to garbage (a bad flash block). */
  function corruptMiddleOfReadings(buffer: string): void {
    const ro = new Database(buffer, { readonly: true });
    const leaves = ro.prepare("SELECT pageno FROM dbstat WHERE name = 'readings' AND pagetype = 'leaf' ORDER BY pageno").pluck().all() as number[];
    const pageSize = ro.pragma('page_size', { simple: true }) as number;
    ro.close();
    expect(leaves.length).toBeGreaterThan(10);
    const page = leaves[Math.floor(leaves.length / 2)];
    const fd = openSync(buffer, 'r+');
    writeSync(fd, Buffer.alloc(pageSize, 0xa5), 0, pageSize, (page - 1) * pageSize);
    closeSync(fd);
  }

  function movedAside(d: Daemon, buffer: string): string {
    const line = d
      .output()
      .split('\n')
      .find((l) => l.includes('"level":50') && l.includes('moved aside'));
    expect(line, d.output()).toBeDefined();
    const { movedTo, msg } = JSON.parse(line!) as { movedTo: string; msg: string };
    expect(movedTo).toMatch(/\.corrupt-\d{8}T\d{6}Z$/);
    expect(movedTo.startsWith(`${buffer}.corrupt-`)).toBe(true);
    expect(msg).toContain(`telematics-agent buffer salvage ${movedTo}`);
    expect(existsSync(movedTo)).toBe(true);
    return movedTo;
  }

  it('after a power cut: moved aside at start; salvage brings back the pending milestone (same milestoneId) and every readable reading', async () => {
    const { url } = await fx.sandbox.start();
    const buffer = join(fx.tmp.dir, 'buffer.db');
    const N = 3000;
    prefill(buffer, N);
    const cfg = configWith(fx.tmp.dir, url, buffer, 'on_corrupt = "move-aside"', '', { traces: '* * * * * *', sampling: 0 });
    const recorded = await runCli(['milestone', '--load', 'L1', '--code', 'X3', '--lat', '41.8', '--lon', '-87.6', '--json', '--config', cfg]);
    expect(recorded.code, recorded.stderr).toBe(0);
    const ref = (JSON.parse(recorded.stdout) as { ref: string }).ref;

    // The service is down: the milestone is tried and stays pending, the readings wait; then
    // the power goes, and a page of readings is damaged.
    fx.sandbox.setFaults({ failureRate: 1 });
    const first = daemon(cfg);
    await waitFor(() => fx.sandbox.stats.faults.failed >= 2, 15_000, 'the milestone and a trace request tried');
    expect(await first.stop('SIGKILL')).toEqual({ code: null, signal: 'SIGKILL' });
    expect(fx.sandbox.stats.accepted).toBe(0);
    corruptMiddleOfReadings(buffer);

    const second = daemon(cfg);
    await second.started('the daemon on a fresh buffer');
    const movedTo = movedAside(second, buffer);
    expect(second.child.exitCode).toBeNull();

    const salvage = await runCli(['buffer', 'salvage', movedTo, '--json', '--config', cfg]);
    expect(salvage.code, salvage.stderr).toBe(0);
    const report = JSON.parse(salvage.stdout) as { milestones: number; pendingMilestones: number; readings: number; unreadable: { readings?: number }; pageByPage?: object };
    expect(report).toMatchObject({ milestones: 1, pendingMilestones: 1 });
    // Read by SQLite (fencing the damaged page off) or page by page (no WAL beside the file):
    // either way only the damaged page's readings are missing.
    const lost = N - report.readings;
    expect(lost).toBeGreaterThan(0);
    expect(lost).toBeLessThan(N / 10);
    if (!report.pageByPage) expect(report.unreadable.readings).toBe(lost);

    // The service is back: the same milestone (same reference) and every readable reading arrive.
    fx.sandbox.setFaults({ failureRate: 0 });
    await waitFor(() => fx.sandbox.milestones.length >= 1 && fx.sandbox.stats.tracePoints >= report.readings, 30_000, 'the salvaged milestone and readings delivered');
    expect(fx.sandbox.milestones).toHaveLength(1);
    expect(fx.sandbox.milestones[0].body.references).toContainEqual({ name: 'milestoneId', value: ref });
    const points = fx.sandbox.traces.flatMap((t) => t.body.traces);
    expect(points).toHaveLength(report.readings);
    // Which readings they were, by their longitude (-87.6 + i * 1e-5): each once, and the
    // ones missing are one run of neighbours (the page that was lost).
    const index = new Set(points.map((p) => Math.round((p.coordinate.longitude + 87.6) / 1e-5)));
    expect(index.size).toBe(report.readings);
    const missing = Array.from({ length: N }, (_, i) => i).filter((i) => !index.has(i));
    expect(missing).toHaveLength(lost);
    expect(missing[missing.length - 1] - missing[0]).toBe(lost - 1);

    // A second salvage of the same file would send it all twice: refused without --force.
    expectRefused(await runCli(['buffer', 'salvage', movedTo, '--config', cfg]), 65, 'was salvaged into this buffer already', '--force');
  }, 90_000);

  it('damaged while it lay after a clean stop: found at the next start, before anything is sent, and moved aside', async () => {
    const { url } = await fx.sandbox.start();
    const buffer = join(fx.tmp.dir, 'buffer.db');
    prefill(buffer, 3000);
    const cfg = configWith(fx.tmp.dir, url, buffer, 'on_corrupt = "move-aside"', '', { traces: '* * * * * *', sampling: 0 });
    // A daemon ran and stopped cleanly: before, the next start read no page, delivered part of
    // the backlog, found the damage when a query reached it and stopped (exit 1).
    fx.sandbox.setFaults({ failureRate: 1 });
    const first = daemon(cfg);
    await waitFor(() => fx.sandbox.stats.faults.failed >= 1, 15_000, 'a trace request tried');
    expect(await first.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    corruptMiddleOfReadings(buffer);

    // The check at start (src/buffer/check.ts) finds it: moved aside, running on a fresh buffer.
    fx.sandbox.setFaults({ failureRate: 0 });
    const second = daemon(cfg);
    await second.started('the daemon on a fresh buffer');
    expect(second.child.exitCode, second.output()).toBeNull();
    const movedTo = movedAside(second, buffer);
    expect(fx.sandbox.stats.tracePoints).toBe(0);

    // SQLite cannot read the damaged table whole, and no WAL is beside it: read page by page.
    const salvage = await runCli(['buffer', 'salvage', movedTo, '--json', '--config', cfg]);
    expect(salvage.code, salvage.stderr).toBe(0);
    const report = JSON.parse(salvage.stdout) as { readings: number; pageByPage?: { unreadablePages: number } };
    expect(report.pageByPage).toBeDefined();
    // One page of some 20 readings lost, every other reading back and delivered once.
    expect(report.readings).toBeLessThan(3000);
    expect(report.readings).toBeGreaterThan(3000 - 100);
    const delivered = () => new Set(fx.sandbox.traces.flatMap((t) => t.body.traces.map((p) => Math.round((p.coordinate.longitude + 87.6) / 1e-5)))).size;
    await waitFor(() => delivered() === report.readings, 30_000, 'every readable reading delivered');
    expect(fx.sandbox.stats.tracePoints).toBe(report.readings);
  }, 90_000);
});
