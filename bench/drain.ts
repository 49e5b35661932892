/**
 * Rows 2 and 3, drain and memory: a backlog delivered to the sandbox on loopback by the real
 * Agent in a drain worker, RSS sampled, vs a plain undici client posting the same bodies.
 */
import { join } from 'node:path';
import type { Sandbox } from '../src/sandbox/server.js';
import { memoryOf, sleep, writeBacklog, writeBytesOf, type Backlog, type WorkerCommand } from './common.js';
import { SIZES } from './options.js';
import { Worker, killChildren } from './processes.js';

export interface DrainResult {
  readings: number;
  ms: number;
  /** Deleting the delivered rows after the push, in slices, off the delivery path. */
  purgeMs: number;
  perS: number;
  requests: number;
  idle: { rss: number; anon: number; file: number };
  /** RSS `settleMs` after start, before V8's memory reducer has shrunk the young generation. */
  earlyRss: number;
  peakRss: number;
  peakAnon: number;
  hwm: number;
  afterRss: number;
  samples: number;
  /** Bytes the worker wrote to disk during the drain (acknowledged readings leaving the buffer). */
  writeBytes: number;
}

/** `idleSettleMs`: how long after start the idle RSS is taken (the large run's figure 3a). */
export async function drainRun(sandbox: Sandbox, dbPath: string, readings: number, latencyMs = 0, idleSettleMs = SIZES.settleMs): Promise<DrainResult> {
  sandbox.reset();
  if (latencyMs) sandbox.setFaults({ latencyMs });
  const w = new Worker(true);
  try {
    w.send({ cmd: 'drain', dbPath, url: sandbox.url });
    await w.next('started', 120_000);
    await sleep(SIZES.settleMs);
    const early = memoryOf(w.pid)!.rss;
    await sleep(Math.max(0, idleSettleMs - SIZES.settleMs));
    const idle = memoryOf(w.pid)!;
    let peak = idle.rss;
    let peakAnon = idle.anon;
    let samples = 0;
    const sampler = setInterval(() => {
      const m = memoryOf(w.pid);
      if (m) {
        peak = Math.max(peak, m.rss);
        peakAnon = Math.max(peakAnon, m.anon);
        samples += 1;
      }
    }, 50);
    const io0 = writeBytesOf(w.pid).writeBytes;
    w.send({ cmd: 'go' });
    const d = await w.next('drained');
    clearInterval(sampler);
    const writeBytes = writeBytesOf(w.pid).writeBytes - io0;
    const hwm = memoryOf(w.pid)!.hwm;
    await sleep(SIZES.settleMs);
    const after = memoryOf(w.pid)!.rss;
    w.send({ cmd: 'stop' });
    await w.next('stopped', 60_000);
    await w.exit();
    const s = sandbox.stats;
    if (d.left > 0) throw new Error(`drain left ${d.left} readings in the buffer`);
    if (s.tracePoints !== readings || s.duplicateTracePoints !== 0 || s.invalid !== 0) {
      throw new Error(`sandbox got ${s.tracePoints} trace points (${s.duplicateTracePoints} duplicates, ${s.invalid} invalid requests) for ${readings} readings`);
    }
    return {
      readings,
      ms: d.ms,
      purgeMs: d.purgeMs,
      perS: readings / (d.ms / 1000),
      requests: d.requests,
      idle: { rss: idle.rss, anon: idle.anon, file: idle.file },
      earlyRss: early,
      peakRss: peak,
      peakAnon,
      hwm,
      afterRss: after,
      samples,
      writeBytes,
    };
  } finally {
    killChildren();
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

export function backlogFile(dir: string, name: string, b: Backlog): string {
  const p = join(dir, name);
  writeBacklog(p, b);
  return p;
}
