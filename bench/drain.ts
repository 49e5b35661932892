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
import { drainConfigInput, loadOf, type Memory, memoryOf, sleep, ingestBacklog, writeBacklog, writeBytesOf, type Backlog, type WorkerCommand } from './common.js';
import { SIZES } from './options.js';
import { Worker, killChildren } from './processes.js';

export interface DrainResult {
  readings: number;
  /** Trace points delivered: the readings, once for every load whose window holds them. */
  points: number;
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
}

/**
 * `idleSettleMs`: how long after start the idle RSS is taken (the large run's figure 3a);
 * `points`: the trace points the service must get (more than the readings when a truck
 * carries several loads).
 */
export async function drainRun(sandbox: Sandbox, dbPath: string, readings: number, latencyMs = 0, idleSettleMs = SIZES.settleMs, points = readings): Promise<DrainResult> {
  sandbox.reset();
  if (latencyMs) sandbox.setFaults({ latencyMs });
  pendingMilestone(sandbox.url, dbPath);
  const w = new Worker(true);
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
    const io0 = writeBytesOf(w.pid).writeBytes;
    w.send({ cmd: 'go' });
    const d = await w.next('drained');
    clearInterval(sampler);
    const writeBytes = writeBytesOf(w.pid).writeBytes - io0;
    const hwm = memoryOf(w.pid)!.hwm;
    await sleep(SIZES.settleMs);
    const after = memoryOf(w.pid)!;
    w.send({ cmd: 'stop' });
    await w.next('stopped', 60_000);
    await w.exit();
    const s = sandbox.stats;
    if (d.left > 0) throw new Error(`drain left ${d.left} readings in the buffer`);
    if (s.tracePoints !== points || s.duplicateTracePoints !== 0 || s.invalid !== 0 || s.accepted !== d.requests + 1) {
      throw new Error(
        `sandbox got ${s.tracePoints} trace points (${s.duplicateTracePoints} duplicates, ${s.invalid} invalid requests, ${s.accepted} accepted for ${d.requests} trace requests and a milestone) for ${readings} readings (${points} points due)`,
      );
    }
    return {
      readings,
      points,
      ms: d.ms,
      purgeMs: d.purgeMs,
      perS: readings / (d.ms / 1000),
      requests: d.requests,
      idle,
      earlyRss: early,
      peak: peak!,
      peakAnon,
      hwm,
      after,
      samples,
      writeBytes,
    };
  } finally {
    clearInterval(sampler);
    killChildren();
  }
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

export async function postRun(sandbox: Sandbox, c: WorkerCommand & { cmd: 'ceiling' | 'peer' }, latencyMs = 0) {
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
