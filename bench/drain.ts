/**
 * Rows 2 and 3, drain and memory: a backlog delivered to the sandbox on loopback by the real
 * Agent in a drain worker, memory sampled, vs a plain undici client posting the same bodies.
 * A milestone waits in the buffer beside the backlog: the worker sends it as soon as it
 * starts, so its first request (which compiles undici's HTTP parser) is made before the idle
 * figures are read, as a daemon's would have been.
 */
import { join } from 'node:path';
import { Store } from '../src/buffer/store.js';
import { configSchema } from '../src/config/schema.js';
import { recordMilestone } from '../src/milestones/record.js';
import type { Sandbox } from '../src/sandbox/server.js';
import { BENCH_CLIENT_HEADER, drainConfigInput, loadOf, type Memory, memoryOf, sleep, ingestBacklog, writeBacklog, writeBytesOf, type Backlog, type WorkerCommand } from './common.js';
import { SIZES } from './options.js';
import { Worker, killChildren } from './processes.js';

/** The reference client's turns beside a drain (see inTurns). */
export interface Turns {
  /** Its requests, points and milliseconds, all turns together. */
  requests: number;
  points: number;
  ms: number;
  turns: number;
  /** How long the agent's requests were held while it posted: taken off the drain's time. */
  pausedMs: number;
}

export interface DrainResult {
  readings: number;
  /** Trace points delivered: the readings, once for every load whose window holds them. */
  points: number;
  /** The drain's own time (without the turns the reference client took, when it had any). */
  ms: number;
  /** Deleting the delivered rows after the push, in slices, off the delivery path. */
  purgeMs: number;
  perS: number;
  requests: number;
  idle: Memory;
  /** RSS `settleMs` after start, before the collection after start-up (src/v8-tuning.ts). */
  earlyRss: number;
  /** The sample with the highest RSS, from start (the milestone, idle) to the end of the purge. */
  peak: Memory;
  /** The highest RssAnon of any sample. */
  peakAnon: number;
  hwm: number;
  /** `settleMs` after the purge. */
  after: Memory;
  samples: number;
  /** Bytes the worker wrote to disk during the drain (acknowledged readings leaving the buffer). */
  writeBytes: number;
  /** The reference client's turns, when the drain ran in turns with it. */
  ceiling?: Turns;
}

export interface DrainOptions {
  /** Added by the sandbox to every answer (a cellular link). */
  latencyMs?: number;
  /** How long after start the idle RSS is taken (the large run's figure 3a). */
  idleSettleMs?: number;
  /** The trace points the service must get (more than the readings when a truck carries several loads). */
  points?: number;
  /** The reference client posts in turns with the drain, its bodies built from this file and `requests` of them at most (see inTurns). */
  ceiling?: { dbPath: string; requests: number };
}

/** The agent draining the backlog in `dbPath` (a worker process), its memory sampled every 50 ms. */
export async function drainRun(sandbox: Sandbox, dbPath: string, readings: number, opts: DrainOptions = {}): Promise<DrainResult> {
  const { latencyMs = 0, idleSettleMs = SIZES.settleMs, points = readings, ceiling } = opts;
  sandbox.reset();
  if (latencyMs) sandbox.setFaults({ latencyMs });
  pendingMilestone(sandbox.url, dbPath);
  const w = new Worker(true);
  const client = ceiling ? new Worker(false) : undefined;
  let peak: Memory | undefined;
  let peakAnon = 0;
  let samples = 0;
  const sample = () => {
    const m = memoryOf(w.pid);
    if (!m) return;
    if (!peak || m.rss > peak.rss) peak = m;
    peakAnon = Math.max(peakAnon, m.anon);
    samples += 1;
  };
  const sampler = setInterval(sample, 50);
  try {
    w.send({ cmd: 'drain', dbPath, url: sandbox.url });
    await w.next('started', 120_000);
    const t0 = performance.now();
    // The milestone is the only request before `go`.
    while (sandbox.stats.accepted < 1) {
      if (performance.now() - t0 > 30_000) throw new Error('the drain worker did not deliver its milestone within 30 s');
      await sleep(10);
    }
    await sleep(Math.max(0, SIZES.settleMs - (performance.now() - t0)));
    const early = memoryOf(w.pid)!.rss;
    await sleep(Math.max(0, idleSettleMs - (performance.now() - t0)));
    const idle = memoryOf(w.pid)!;
    if (client && ceiling) {
      client.send({ cmd: 'ceiling', dbPath: ceiling.dbPath, url: sandbox.url, requests: ceiling.requests });
      await client.next('ready', 120_000);
    }
    const io0 = writeBytesOf(w.pid).writeBytes;
    w.send({ cmd: 'go' });
    const drained = w.next('drained');
    const turns = client ? await inTurns(sandbox, client, drained) : undefined;
    const d = await drained;
    clearInterval(sampler);
    const writeBytes = writeBytesOf(w.pid).writeBytes - io0;
    const hwm = memoryOf(w.pid)!.hwm;
    await sleep(SIZES.settleMs);
    const after = memoryOf(w.pid)!;
    w.send({ cmd: 'stop' });
    await w.next('stopped', 60_000);
    await w.exit();
    if (client) {
      client.send({ cmd: 'end' });
      const posted = await client.next('posted');
      await client.exit();
      if (posted.failed > 0) throw new Error(`${posted.failed} of ${posted.requests} requests of the reference client failed`);
    }
    const s = sandbox.stats;
    if (d.left > 0) throw new Error(`drain left ${d.left} readings in the buffer`);
    // The agent's part of what the sandbox got (the reference client's traceIds are its own).
    const [gotPoints, accepted] = [s.tracePoints - (turns?.points ?? 0), s.accepted - (turns?.requests ?? 0)];
    if (gotPoints !== points || s.duplicateTracePoints !== 0 || s.invalid !== 0 || accepted !== d.requests + 1) {
      throw new Error(
        `sandbox got ${gotPoints} trace points (${s.duplicateTracePoints} duplicates, ${s.invalid} invalid requests, ${accepted} accepted for ${d.requests} trace requests and a milestone) for ${readings} readings (${points} points due)`,
      );
    }
    const ms = d.ms - (turns?.pausedMs ?? 0);
    return {
      readings,
      points,
      ms,
      purgeMs: d.purgeMs,
      perS: readings / (ms / 1000),
      requests: d.requests,
      idle,
      earlyRss: early,
      peak: peak!,
      peakAnon,
      hwm,
      after,
      samples,
      writeBytes,
      ceiling: turns,
    };
  } finally {
    clearInterval(sampler);
    sandbox.gate = undefined;
    killChildren();
  }
}

/** The drain's turn, then the reference client's, ms (see inTurns). */
const DRAIN_TURN_MS = 500;
const CLIENT_TURN_MS = 200;

/**
 * The drain and the reference client (the ceiling) in turns over the same seconds, until the
 * drain ends: the drain for DRAIN_TURN_MS, then the agent's next request is held at the
 * sandbox once it is read whole (the agent waits for its answer, idle) while the client
 * posts for CLIENT_TURN_MS, and so on. On this kind of machine the pace of both moved by
 * 20% within minutes (a virtual machine's neighbours): a drain and a ceiling run one after
 * the other were measured on different machines, in effect, and 2a moved by 10 points from
 * run to run. In turns, both see the same machine. The drain's time is its own: the held
 * spans come off it. Each turn costs the drain nothing it would not pay anyway: its next
 * chunk is built while its request waits, as it is while a request is at the service.
 */
async function inTurns(sandbox: Sandbox, client: Worker, drained: Promise<unknown>): Promise<Turns> {
  const t: Turns = { requests: 0, points: 0, ms: 0, turns: 0, pausedMs: 0 };
  let done = false;
  let wake: () => void = () => undefined;
  void drained.then(
    () => {
      done = true;
      wake();
    },
    () => {
      done = true;
      wake();
    },
  );
  /** One turn of the client's, added to the totals. */
  const clientTurn = async () => {
    client.send({ cmd: 'slice', ms: CLIENT_TURN_MS });
    const s = await client.next('sliced');
    t.requests += s.requests;
    t.points += s.points;
    t.ms += s.ms;
    t.turns += 1;
  };
  let holding = false;
  let release: () => void = () => undefined;
  let held: () => void = () => undefined;
  sandbox.gate = (req) => {
    if (!holding || req.headers[BENCH_CLIENT_HEADER] !== undefined) return undefined;
    return new Promise<void>((resolve) => {
      release = resolve;
      held();
    });
  };
  try {
    while (!done) {
      await new Promise<void>((r) => {
        const timer = setTimeout(r, DRAIN_TURN_MS);
        wake = () => {
          clearTimeout(timer);
          r();
        };
      });
      if (done) break;
      holding = true;
      // The agent's next request, read whole (or the end of the drain).
      const isHeld = await new Promise<boolean>((r) => {
        held = () => r(true);
        wake = () => r(false);
      });
      if (!isHeld) break;
      const p0 = performance.now();
      await clientTurn();
      holding = false;
      release();
      t.pausedMs += performance.now() - p0;
    }
    // A drain shorter than its first turn (a quick run): the client's turn comes after it.
    if (t.turns === 0) await clientTurn();
  } finally {
    holding = false;
    release();
  }
  return t;
}

/** A milestone waiting in the backlog's buffer for the first load (the worker's first request). */
function pendingMilestone(url: string, dbPath: string): void {
  const store = Store.open(dbPath);
  try {
    recordMilestone(store, configSchema.parse(drainConfigInput(url, dbPath)), { loadNumber: loadOf(0), code: 'X3', lat: 41.847, lon: -87.647 });
  } finally {
    store.close();
  }
}

export async function postRun(sandbox: Sandbox, c: WorkerCommand & { cmd: 'peer' }, latencyMs = 0) {
  sandbox.reset();
  if (latencyMs) sandbox.setFaults({ latencyMs });
  const w = new Worker(false);
  try {
    w.send(c);
    const r = await w.next('posted');
    await w.exit();
    if (r.failed > 0) throw new Error(`${r.failed} of ${r.requests} requests of the ${c.cmd} client failed`);
    return r;
  } finally {
    killChildren();
  }
}

/** Bytes a buffer file's data occupies (pages in use, not the file's high-water mark), as the agent counts them. */
export function bufferBytes(dbPath: string): number {
  const store = Store.open(dbPath, { readonly: true });
  try {
    return store.usedBytes();
  } finally {
    store.close();
  }
}

/** A backlog in a fresh buffer file: written with straight SQL, or (`ingested`) through the agent's own insert path. */
export function backlogFile(dir: string, name: string, b: Backlog, ingested = false): string {
  const p = join(dir, name);
  if (ingested) ingestBacklog(p, b);
  else writeBacklog(p, b);
  return p;
}
