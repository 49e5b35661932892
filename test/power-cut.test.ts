/**
 * Power cuts, with real parts: the buffer on LazyFS (a FUSE file system that keeps every
 * write in its own cache until fsync, and drops what was not synced on command), the real
 * daemon fed by a real exec source, the real CLI, the real sandbox as the service. A cut:
 * the daemon and its source killed with SIGKILL, then, once they are gone, LazyFS drops
 * everything not fsynced: the disk as the power left it. The daemon starts again, and is cut
 * again, at random moments: while readings stream in, right after `load start` or
 * `milestone` returns, while a backlog drains. Once per buffer.synchronous level that
 * promises something different: FULL (the default: every commit synced) and NORMAL.
 *
 * Needs root, /dev/fuse, fusermount3 and LazyFS built by scripts/lazyfs.sh into .lazyfs/;
 * skipped with the reason printed otherwise. CI builds it and runs as root.
 * POWER_CUT_SEED=N replays a run (each run prints its seed).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from '../src/sandbox/server.js';
import { seededRandom } from '../src/sources/simulator.js';
import { ROOT, TEST_KEY, TEST_SCAC, runCli, startDaemon, tempDir, waitFor, writeFile, type Daemon } from './helpers.js';
import { alive, sleep, stopProcess } from './sources/support.js';
import { HIGHEST_READING_ID } from '../src/buffer/ledger.js';

const LAZYFS_DIR = join(ROOT, '.lazyfs');
const LAZYFS = join(LAZYFS_DIR, 'lazyfs');
/** buffer.flush_interval_ms: the commit interval (90 s by default; 1 s keeps the run short). */
const FLUSH_MS = 1000;
/**
 * How much later than the commit interval a reading may still wait for its commit: the pipe
 * from the source, and the daemon's event loop on a busy 2-CPU machine (other suites run beside).
 */
const SLACK_MS = 1000;
/** delivery.max_traces_per_request: small, so a backlog drains in several requests to cut between. */
const CHUNK = 10;
/** The source prints a reading every this many ms. */
const PERIOD_MS = 50;
/** Cuts per run: one right after `load start`, then streaming, milestone and drain cuts in a random order. */
const CUTS = 21;
const SEED = Number(process.env.POWER_CUT_SEED ?? Math.floor(Math.random() * 2 ** 31));

/** Why the suite cannot run here, or undefined when it can. */
function cannotRun(): string | undefined {
  const how = 'to run it: apt-get install g++ cmake libfuse3-dev fuse3 libtoml11-dev libspdlog-dev, then scripts/lazyfs.sh, as root';
  if (!existsSync(LAZYFS)) return `no LazyFS at .lazyfs/lazyfs; ${how}`;
  if (process.getuid?.() !== 0) return `not root: mounting LazyFS needs root; ${how}`;
  if (!existsSync('/dev/fuse')) return `no /dev/fuse: FUSE is not available here; ${how}`;
  if (spawnSync('fusermount3', ['-V'], { stdio: 'ignore' }).status !== 0) return `no fusermount3 (apt-get install fuse3); ${how}`;
  return undefined;
}

const skipReason = cannotRun();
if (skipReason) console.warn(`power-cut tests skipped: ${skipReason}`);

/**
 * The exec source's command: a reading every PERIOD_MS with a sequence number (as its
 * `odometer`) that goes on across restarts, each appended with the time it was printed to
 * `printed` (outside the mount) before it goes to stdout; none while `quiet` exists.
 */
const GENERATOR = `import { appendFileSync, existsSync, readFileSync } from 'node:fs';
const [printed, quiet, pids] = process.argv.slice(2);
appendFileSync(pids, process.pid + '\\n');
process.stdout.on('error', () => process.exit(0));
let seq = 0;
if (existsSync(printed)) seq = Number(readFileSync(printed, 'utf8').trimEnd().split('\\n').pop().split(' ')[0]) || 0;
setInterval(() => {
  if (existsSync(quiet)) return;
  seq += 1;
  appendFileSync(printed, seq + ' ' + Date.now() + '\\n');
  process.stdout.write(JSON.stringify({ resourceId: 'T1', latitude: 41.8 + (seq % 1000) * 1e-5, longitude: -87.6, odometer: seq }) + '\\n');
}, ${PERIOD_MS});
`;

const MOUNT_TIMEOUT_MS = 90_000;

/** LazyFS on `mnt`, its files in `root`, faults through `fifo`: the LazyFS README's setup. */
class LazyFs {
  private proc: ChildProcess | undefined;
  private out = '';

  constructor(
    readonly mnt: string,
    private readonly root: string,
    private readonly fifo: string,
    private readonly configFile: string,
  ) {}

  async mount(): Promise<void> {
    mkdirSync(this.mnt, { recursive: true });
    mkdirSync(this.root, { recursive: true });
    writeFileSync(
      this.configFile,
      `[faults]\nfifo_path="${this.fifo}"\n[cache]\napply_eviction=false\n[cache.simple]\ncustom_size="256mb"\nblocks_per_page=1\n[filesystem]\nlog_all_operations=false\nlogfile=""\n`,
    );
    const args = [this.mnt, '--config-path', this.configFile, '-o', 'allow_other', '-o', 'modules=subdir', '-o', `subdir=${this.root}`, '-f'];
    const proc = spawn(LAZYFS, args, { env: { ...process.env, LD_LIBRARY_PATH: LAZYFS_DIR }, stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
    proc.stdout!.on('data', (d: Buffer) => (this.out += d.toString()));
    proc.stderr!.on('data', (d: Buffer) => (this.out += d.toString()));
    proc.on('error', (err) => (this.out += `cannot start lazyfs: ${err.message}\n`));
    // About 0.2 s on its own (it pre-allocates its 256 MB cache first); a loaded CI machine,
    // with the unit's systemd booting beside it, once took more than 20 s.
    await waitFor(
      () => {
        if (proc.exitCode !== null) throw new Error(`lazyfs exited (${proc.exitCode}): ${this.out}`);
        return this.out.includes('waiting for fault commands') && this.mounted();
      },
      MOUNT_TIMEOUT_MS,
      `LazyFS mounted on ${this.mnt}`,
    ).catch((err: Error) => {
      throw new Error(`${err.message} (mounted: ${this.mounted()}); LazyFS said:\n${this.out}`);
    });
  }

  mounted(): boolean {
    return readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .some((l) => l.split(' ')[1] === this.mnt);
  }

  /** The power cut: every write not fsynced is gone. Returns once LazyFS says so. */
  async clearCache(): Promise<void> {
    const done = this.count('cache is cleared.');
    writeFileSync(this.fifo, 'lazyfs::clear-cache\n');
    await waitFor(() => this.count('cache is cleared.') > done, 10_000, 'LazyFS to clear its cache');
  }

  private count(text: string): number {
    return this.out.split(text).length - 1;
  }

  async unmount(): Promise<void> {
    for (let i = 0; i < 50 && this.mounted(); i++) {
      if (spawnSync('fusermount3', ['-u', this.mnt], { stdio: 'ignore' }).status === 0) break;
      await sleep(100);
    }
    // Still busy after 5 s: detach it, so that LazyFS can go.
    if (this.mounted()) spawnSync('fusermount3', ['-uz', this.mnt], { stdio: 'ignore' });
    await stopProcess(this.proc);
  }
}

let tmp: ReturnType<typeof tempDir>;
let lazy: LazyFs | undefined;
/** What a failed run leaves to clean up: its daemon, its source's PID file, its sandbox. */
let left: { daemon?: Daemon; pids?: string; sandbox?: Sandbox } = {};

beforeAll(async () => {
  tmp = tempDir('ta-power-');
  if (skipReason) return;
  lazy = new LazyFs(join(tmp.dir, 'mnt'), join(tmp.dir, 'disk'), join(tmp.dir, 'faults.fifo'), join(tmp.dir, 'lazyfs.toml'));
  await lazy.mount();
}, MOUNT_TIMEOUT_MS + 10_000);

afterAll(async () => {
  await cleanUp();
  await lazy?.unmount();
  tmp.cleanup();
}, 30_000);

async function cleanUp(): Promise<void> {
  await left.daemon?.stop('SIGKILL');
  if (left.pids) killPids(left.pids);
  await left.sandbox?.stop();
  left = {};
}

/** Kill the processes listed in `file` (the exec source's: a daemon killed with SIGKILL cannot stop them). */
function killPids(file: string): void {
  if (!existsSync(file)) return;
  for (const pid of readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number)) {
    if (!alive(pid)) continue;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone meanwhile.
    }
  }
}

type Level = 'NORMAL' | 'FULL';
type Kind = 'load' | 'stream' | 'milestone' | 'drain';

interface Cut {
  kind: Kind;
  at: number;
  /** The sandbox's trace requests and milestones up to here came from the daemons before the cut. */
  traces: number;
  milestones: number;
  /** What the daemon that was cut had logged. */
  log: string;
  /** The buffer at the cut (before LazyFS dropped what was not synced) and after it. */
  before: Committed;
  after: Committed;
}

/** The newest reading committed to a buffer: its id (past the purge: HIGHEST_READING_ID) and, unless purged, its sequence number. */
interface Committed {
  id: number;
  seq: number | undefined;
}

/** What the buffer holds, read beside nobody (the daemon is dead): the open must not change it, so read-only. */
function committed(buffer: string): Committed {
  const db = new Database(buffer, { readonly: true, fileMustExist: true });
  try {
    const id = (db.prepare(HIGHEST_READING_ID).pluck().get() as number | undefined) ?? 0;
    const odometer = db.prepare('SELECT odometer FROM readings WHERE id = ?').pluck().get(id) as number | undefined;
    return { id, seq: odometer === undefined ? undefined : Math.round(odometer) };
  } finally {
    db.close();
  }
}

interface Confirmed {
  ref: string;
  id: number;
}

/** One run: a fresh buffer under `mnt/<level>`, CUTS cuts, everything delivered at the end, then the accounts. */
async function run(level: Level): Promise<void> {
  const mnt = lazy!.mnt;
  const dir = join(tmp.dir, level);
  mkdirSync(dir);
  const file = (name: string) => join(dir, name);
  const buffer = join(mnt, level, 'buffer.db');
  const sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
  left = { pids: file('pids'), sandbox };
  const { url } = await sandbox.start();
  const cfg = writeFile(
    dir,
    'agent.toml',
    `device_id = "pc"
[api]
base_url = "${url}"
scac = "${TEST_SCAC}"
subscription_key_file = "${writeFile(dir, 'key', `${TEST_KEY}\n`, 0o600)}"
timeout_s = 5
[buffer]
path = "${buffer}"
synchronous = "${level}"
flush_interval_ms = ${FLUSH_MS}
[schedule]
splay_s = 0
traces = "* * * * * *"
[sampling]
interval_s = 0
[delivery]
max_traces_per_request = ${CHUNK}
drain_interval_ms = 100
poll_interval_ms = 100
retry_initial_s = 0.2
retry_max_s = 1
[[sources]]
type = "exec"
name = "gen"
command = ${JSON.stringify([process.execPath, writeFile(dir, 'gen.mjs', GENERATOR), file('printed'), file('quiet'), file('pids')])}
`,
  );
  // The settings this run is about are the ones in force.
  const effective = JSON.parse((await runCli(['validate-config', '--json', '--config', cfg])).stdout) as { buffer: { synchronous: string; flush_interval_ms: number } };
  expect(effective.buffer).toMatchObject({ synchronous: level, flush_interval_ms: FLUSH_MS });

  const seed = SEED + (level === 'FULL' ? 1 : 0);
  const rnd = seededRandom(seed);
  const between = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  const t0 = Date.now();
  const cuts: Cut[] = [];
  const confirmed: Confirmed[] = [];

  /** Start the daemon; it must open the buffer ('agent started'): exiting instead fails the run with its output. */
  const start = async (): Promise<Daemon> => {
    const d = startDaemon(['--config', cfg]);
    left.daemon = d;
    await waitFor(
      () => {
        if (d.child.exitCode !== null || d.child.signalCode !== null) {
          throw new Error(`after cut ${cuts.length} the daemon exited (${d.child.exitCode ?? d.child.signalCode}) instead of opening the buffer:\n${d.output().slice(-4000)}`);
        }
        return d.output().includes('"agent started"');
      },
      30_000,
      `the daemon to open the buffer after cut ${cuts.length}`,
    );
    return d;
  };

  /**
   * The cut: the source and the daemon killed at once; once they are gone (their last writes
   * through FUSE landed: they were made before the power went), LazyFS drops what was not synced.
   */
  const cut = async (d: Daemon, kind: Kind): Promise<void> => {
    const at = Date.now();
    killPids(file('pids'));
    d.child.kill('SIGKILL');
    await d.stop('SIGKILL');
    await sleep(100);
    const before = committed(buffer);
    await lazy!.clearCache();
    cuts.push({ kind, at, traces: sandbox.traces.length, milestones: sandbox.milestones.length, log: d.output(), before, after: committed(buffer) });
  };

  const milestone = async (): Promise<void> => {
    const r = await runCli(['milestone', '--load', 'L1', '--code', 'X6', '--lat', '41.9', '--lon', '-87.7', '--json', '--config', cfg]);
    expect(r.code, r.stderr).toBe(0);
    const row = JSON.parse(r.stdout) as Confirmed;
    confirmed.push({ ref: row.ref, id: row.id });
  };

  try {
    // The first cut comes right after `load start` returns, beside the running daemon.
    let d = await start();
    await sleep(between(200, 1000));
    const loadStart = await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', cfg]);
    expect(loadStart.code, loadStart.stderr).toBe(0);
    const loadConfirmedAt = Date.now();
    await cut(d, 'load');

    const kinds: Kind[] = [];
    for (let i = 1; i < CUTS; i++) kinds.push((['stream', 'milestone', 'drain'] as const)[i % 3]);
    for (let i = kinds.length - 1; i > 0; i--) {
      const j = between(0, i);
      [kinds[i], kinds[j]] = [kinds[j], kinds[i]];
    }
    for (const kind of kinds) {
      d = await start();
      if (kind === 'stream') {
        await sleep(between(300, 1500));
      } else if (kind === 'milestone') {
        // One to three milestones; the power goes right after the last one returns.
        await sleep(between(0, 600));
        for (let n = between(1, 3); n > 0; n--) await milestone();
        await sleep(between(0, 100));
      } else {
        // The service is down a while (a milestone may wait too): a backlog, drained in chunks when it is back.
        sandbox.setFaults({ forceStatus: 503 });
        await sleep(between(1000, 2500));
        if (rnd() < 0.5) await milestone();
        const before = sandbox.traces.length;
        sandbox.setFaults({ forceStatus: 0 });
        const requests = between(1, 4);
        await waitFor(() => sandbox.traces.length >= before + requests, 15_000, `${requests} trace request(s) of the drain`);
      }
      await cut(d, kind);
    }

    // The end: a quiet source, one more start, and everything committed goes out.
    writeFileSync(file('quiet'), '');
    d = await start();
    await waitFor(
      async () => {
        const q = (JSON.parse((await runCli(['status', '--json', '--config', cfg])).stdout) as { queue: { readings: number; pendingMilestones: number } }).queue;
        return q.readings === 0 && q.pendingMilestones === 0;
      },
      30_000,
      'an empty queue',
    );
    const finalLog = d.output();
    expect(await d.stop('SIGTERM'), d.output().slice(-3000)).toEqual({ code: 0, signal: null });
    left.daemon = undefined;
    const seconds = (Date.now() - t0) / 1000;

    /** Which daemon the sandbox's request number `index` came from: the number of cuts before it (0: the first daemon). */
    const epochOf = (index: number, of: 'traces' | 'milestones') => cuts.filter((c) => c[of] <= index).length;

    // Milestones: each one `milestone` confirmed reached the service, and once, by its
    // milestoneId (the Idempotency-Key). Once more only when a cut came while it was on the
    // wire: the daemon cut had not yet logged it delivered (the log is written after the
    // durable mark), and the copy carries the same key, which the service recognises.
    const problems: string[] = [];
    let resent = 0;
    for (const m of confirmed) {
      const epochs = sandbox.milestones.flatMap((r, i) => (r.idempotencyKey === m.ref ? [epochOf(i, 'milestones')] : []));
      if (epochs.length === 0) problems.push(`milestone ${m.id} never arrived`);
      for (let i = 0; i + 1 < epochs.length; i++) {
        const knew = epochs[i] < cuts.length && cuts[epochs[i]].log.split('\n').some((l) => l.includes('"milestone delivered"') && new RegExp(`"id":${m.id}[,}]`).test(l));
        if (epochs[i] === epochs[i + 1] || knew) problems.push(`milestone ${m.id} arrived again after daemon ${epochs[i]} had it delivered`);
        else resent += 1;
      }
    }

    // Readings: what the service got (the sequence number is the odometer) against what was printed.
    const deliveries = new Map<number, number>();
    const traceIds = new Map<string, number>();
    const reused: string[] = [];
    /** Per cut, the requests (by index) whose points the next daemon sent again. */
    const repeated = cuts.map(() => new Set<number>());
    const firstRequest = new Map<number, number>();
    /**
     * Points one daemon sent twice: no cut between, so not a cut's doing. A request the daemon
     * saw fail (a timeout on a busy machine) goes again with the same Idempotency-Key, which
     * the service recognises; the daemon must have logged the failure.
     */
    const retried = new Set<string>();
    sandbox.traces.forEach((t, i) => {
      for (const p of t.body.traces) {
        const seq = Math.round(p.odometer!);
        const ref = p.references![0].value;
        if (traceIds.has(ref) && traceIds.get(ref) !== seq) reused.push(`${ref} named readings ${traceIds.get(ref)} and ${seq}`);
        traceIds.set(ref, seq);
        const first = firstRequest.get(seq);
        if (first === undefined) firstRequest.set(seq, i);
        else if (epochOf(first, 'traces') === epochOf(i, 'traces')) retried.add(`${first}>${i}`);
        else repeated[epochOf(i, 'traces') - 1].add(first);
        deliveries.set(seq, (deliveries.get(seq) ?? 0) + 1);
      }
    });
    const duplicates = [...deliveries.values()].reduce((a, n) => a + n - 1, 0);

    // What a cut may take, in two parts. Commits: with FULL every commit is on the disk when
    // it returns, so the buffer after the cut holds every reading committed before it. With
    // NORMAL a commit is on the disk once synced, and the agent syncs before every request it
    // sends: every reading the service had got before the cut, and every one committed before
    // those, is still there; later commits may be taken back. Readings not yet committed: the
    // flush timer commits what came in every FLUSH_MS, so the oldest reading a cut finds
    // uncommitted was printed at most one commit interval before it, give or take SLACK_MS
    // (the pipe, and the daemon's event loop on a busy machine).
    const printed = readFileSync(file('printed'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(' ').map(Number));
    const idOf = (ref: string) => Number(ref.slice(ref.lastIndexOf('-') + 1));
    const seqOfId = new Map([...traceIds].map(([ref, seq]) => [idOf(ref), seq]));
    const problemsOfCommits: string[] = [];
    const perCut = cuts.map((c, k) => {
      const received = Math.max(0, ...sandbox.traces.slice(0, c.traces).flatMap((t) => t.body.traces.map((p) => idOf(p.references![0].value))));
      if (level === 'FULL' && c.after.id !== c.before.id) problemsOfCommits.push(`cut ${k}: readings ${c.after.id + 1}-${c.before.id} were committed, and gone after it`);
      if (c.after.id < received) problemsOfCommits.push(`cut ${k}: the service had reading ${received}, the buffer after the cut ends at ${c.after.id}`);
      const newest = c.before.seq ?? seqOfId.get(c.before.id) ?? 0;
      const since = k === 0 ? loadConfirmedAt : cuts[k - 1].at;
      const uncommitted = printed.filter(([seq, at]) => seq > newest && at > since && at <= c.at).map(([, at]) => at);
      return { takenBack: c.before.id - c.after.id, uncommittedMs: uncommitted.length ? c.at - Math.min(...uncommitted) : 0, lost: 0, lostMs: 0 };
    });
    // What the service never got, per cut: both parts together.
    for (const [seq, at] of printed) {
      // Before the load was confirmed, a reading may rightly have been dropped (no load yet).
      if (at <= loadConfirmedAt || deliveries.has(seq)) continue;
      const k = cuts.findIndex((c) => c.at >= at);
      expect(k, `reading ${seq}, printed after the last cut, was never delivered`).toBeGreaterThanOrEqual(0);
      perCut[k].lost += 1;
      perCut[k].lostMs = Math.max(perCut[k].lostMs, cuts[k].at - at);
    }
    const most = (f: (p: (typeof perCut)[number]) => number) => Math.max(...perCut.map(f));

    console.log(
      `power cuts, buffer.synchronous ${level} (seed ${seed}; POWER_CUT_SEED=${SEED} replays): ${cuts.length} cuts (${cuts.map((c) => c.kind).join(' ')}) in ${seconds.toFixed(0)} s, the buffer opened after each; ` +
        `milestones confirmed ${confirmed.length}, delivered ${confirmed.length - problems.filter((p) => p.endsWith('never arrived')).length}, sent again while on the wire at a cut ${resent}; ` +
        `readings printed ${printed.length}, delivered ${deliveries.size}, lost per cut ${perCut.map((p) => p.lost).join(',')}: at most ${(most((p) => p.lostMs) / 1000).toFixed(2)} s of readings ` +
        `(not yet committed: at most ${(most((p) => p.uncommittedMs) / 1000).toFixed(2)} s; committed and taken back by the cut: at most ${most((p) => p.takenBack)} readings); ` +
        `${duplicates} points delivered twice, from ${repeated.filter((r) => r.size > 0).length} cut(s) with one request each at most (${repeated.map((r) => r.size).join(',')}), ${retried.size} request(s) sent again by the daemon that sent them; traceIds naming two readings: ${reused.length}`,
    );
    expect(problems, 'confirmed milestones not delivered exactly once').toEqual([]);
    expect(reused.slice(0, 10), 'a traceId that named two different readings').toEqual([]);
    expect(
      repeated.flatMap((r, k) => (r.size > 1 ? [`cut ${k}: ${r.size} requests sent again`] : [])),
      'a cut made more than one request go twice (the one in flight, or the last sent)',
    ).toEqual([]);
    const logOf = (epoch: number) => (epoch < cuts.length ? cuts[epoch].log : finalLog);
    const retries = [...retried].map((pair) => {
      const [first, again] = pair.split('>').map(Number);
      const log = logOf(epochOf(again, 'traces'));
      const failures = log.split('\n').filter((l) => /"level":(40|50)/.test(l) && !l.includes('milestone'));
      return { first, again, sameKey: sandbox.traces[first].idempotencyKey === sandbox.traces[again].idempotencyKey, failures };
    });
    if (retries.length > 0) console.log(`requests one daemon sent again after a failure it saw: ${JSON.stringify(retries.map((r) => ({ ...r, failures: r.failures.slice(-3) })))}`);
    expect(
      retries.flatMap((r) => (r.sameKey && r.failures.length > 0 ? [] : [`request ${r.first} went again as request ${r.again} ${r.sameKey ? 'with no failure logged' : 'under another Idempotency-Key'}`])),
      'a request one daemon sent twice without a failure, or under a new key',
    ).toEqual([]);
    expect(problemsOfCommits, 'committed readings a cut took back').toEqual([]);
    expect(
      perCut.flatMap((p, k) => (p.uncommittedMs > FLUSH_MS + SLACK_MS ? [`cut ${k} (${cuts[k].kind}): readings printed ${p.uncommittedMs} ms before it not committed`] : [])),
      'readings waiting for a commit longer than one commit interval',
    ).toEqual([]);
    if (level === 'FULL') {
      expect(
        perCut.flatMap((p, k) => (p.lostMs > FLUSH_MS + SLACK_MS ? [`cut ${k} (${cuts[k].kind}): ${p.lost} readings lost, the oldest printed ${p.lostMs} ms before it`] : [])),
        'readings lost beyond one commit interval',
      ).toEqual([]);
    }
  } catch (err) {
    const d = left.daemon;
    if (d) console.error(`the daemon's last lines:\n${d.output().split('\n').slice(-40).join('\n')}`);
    throw err;
  } finally {
    await cleanUp();
  }
}

describe.skipIf(skipReason !== undefined)('power cuts (the buffer on LazyFS)', () => {
  // Each run is bounded: every wait has its timeout, and the whole run this one.
  it(
    `buffer.synchronous = "FULL" (the default): after each of ${CUTS} cuts the buffer opens; confirmed milestones arrive once; a cut costs at most one commit interval of readings and at most one request sent twice`,
    () => run('FULL'),
    180_000,
  );
  it(`buffer.synchronous = "NORMAL": the same, except that a cut may also take back what was committed after the last request sent`, () => run('NORMAL'), 180_000);
});
