/**
 * Row 5: what `telematics-agent run` at 1 Hz writes to flash, NORMAL and FULL side by side,
 * over one whole delivery cycle: from the start of a push to the start of the next, so the
 * commits of every reading, the push, the purge of what it delivered and the checkpoint that
 * folds the WAL back into the file are each counted once. A window without a push saw only
 * the commits (and a window of a minute was two or three commits of a longer interval).
 *
 * Bytes are /proc/PID/io write_bytes: the pages the process dirtied (4 KB each, however few
 * bytes of them changed), which is what the flash gets. Defaults throughout (pushes every
 * 15 minutes); in --quick a push every 10 s, which shows only that the row works.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { walSalts } from '../src/buffer/db.js';
import { Store } from '../src/buffer/store.js';
import { configSchema } from '../src/config/schema.js';
import type { Reading } from '../src/reading.js';
import { Sandbox } from '../src/sandbox/server.js';
import { BENCH_KEY, BENCH_SCAC, sleep, writeBytesOf } from './common.js';
import { committed, daemonFiles, startDaemon } from './daemon.js';
import { QUICK } from './options.js';
import { progress, waitExit } from './processes.js';

/** Bytes written per reading at 1 Hz must not pass this, with either synchronous level. */
export const FLASH_TARGET_BYTES = 1024;

/** Seconds between pushes (the default schedule; --quick: every 10 s). */
export const CYCLE_S = QUICK ? 10 : 900;

export interface FlashRun {
  synchronous: 'NORMAL' | 'FULL';
  /** From the first request of one push to the first of the next. */
  cycleS: number;
  readings: number;
  writeBytes: number;
  /** Checkpoints that emptied the WAL within the cycle (its salts changed), seen every 200 ms. */
  checkpoints: number;
}

/**
 * One daemon, its own service (so its pushes are told apart): the cycle between its first two
 * pushes. `bufferToml` adds lines to [buffer]; `name` tells daemons apart.
 */
export async function oneCycle(dir: string, synchronous: 'NORMAL' | 'FULL', bufferToml = '', name = `flash-${synchronous.toLowerCase()}`): Promise<FlashRun> {
  const sandbox = new Sandbox({ key: BENCH_KEY, scac: BENCH_SCAC, keepBodies: false });
  await sandbox.start();
  // --quick only shows that the row works: a push every 10 s with every reading in it,
  // readings committed every 2 s.
  const schedule = QUICK ? '[schedule]\ntraces = "*/10 * * * * *"\nsplay_s = 0\n[sampling]\ninterval_s = 0\n' : '';
  const files = daemonFiles(join(dir, name), sandbox.url, synchronous, name, schedule, QUICK ? `flush_interval_ms = 2000\n${bufferToml}` : bufferToml);
  const d = await startDaemon(files);
  try {
    let salts = walSalts(files.db);
    let generations = 0;
    /** Resolves at the first trace request of the next push: the first after a quiet minute (or since the start). */
    const nextPush = async (): Promise<{ io: number; n: number; t: number; generations: number }> => {
      const deadline = performance.now() + (CYCLE_S + 300) * 1000;
      let seen = sandbox.stats.tracePoints;
      let quietSince = performance.now();
      for (;;) {
        const now = walSalts(files.db);
        if (now !== undefined && now !== salts) {
          if (salts !== undefined) generations += 1;
          salts = now;
        }
        if (d.child.exitCode !== null) throw new Error(`the ${synchronous} daemon exited (${d.child.exitCode}): ${d.output().slice(-2000)}`);
        if (performance.now() > deadline) throw new Error(`the ${synchronous} daemon pushed no traces within ${CYCLE_S + 300} s`);
        const points = sandbox.stats.tracePoints;
        if (points > seen && performance.now() - quietSince >= Math.min(60_000, (CYCLE_S * 1000) / 2)) {
          return { io: writeBytesOf(d.child.pid!).writeBytes, n: committed(files.db), t: performance.now(), generations };
        }
        if (points > seen) quietSince = performance.now();
        seen = points;
        await sleep(200);
      }
    };
    const first = await nextPush();
    progress(`5. ${synchronous}: first push seen, measuring until the next (${CYCLE_S} s)`);
    const second = await nextPush();
    return { synchronous, cycleS: (second.t - first.t) / 1000, readings: second.n - first.n, writeBytes: second.io - first.io, checkpoints: second.generations - first.generations };
  } finally {
    d.child.kill('SIGTERM');
    const r = await waitExit(d.child, 25_000);
    if (r.code !== 0) progress(`flash daemon exited with ${r.code ?? r.signal}: ${d.output().slice(-1000)}`);
    await sandbox.stop();
  }
}

/** NORMAL and FULL side by side, each over one cycle. */
export function benchFlash(dir: string): Promise<FlashRun[]> {
  return Promise.all([oneCycle(dir, 'NORMAL'), oneCycle(dir, 'FULL')]);
}

/** Row 5c: the position history (src/buffer/history.ts), `TRUCKS` resources over `DAYS` days. */
export interface HistoryRun {
  rows: number;
  resources: number;
  days: number;
  intervalS: number;
  /** Pages the table takes (dbstat), per row and per resource-day. */
  bytesPerRow: number;
  bytesPerResourceDay: number;
}

/**
 * What the position history takes on the card: 14 days (its default keep_days) of 10 trucks
 * at its default interval, written through the commit of readings as the daemon writes it
 * (trucks interleaved in time, as they come), then measured as the pages its B-tree holds
 * (SQLite's dbstat), not estimated from the columns. Its share of the flash written is in
 * rows 5 and 5a: the daemons there run with it on (the default).
 */
export function benchHistory(dir: string): HistoryRun {
  const resources = 10;
  const days = QUICK ? 2 : 14;
  const config = configSchema.parse({ api: { scac: BENCH_SCAC }, sources: [{ type: 'simulator', resource_id: 'T1' }] });
  const history = { intervalS: config.history.interval_s, keepDays: config.history.keep_days };
  const path = join(dir, 'history.db');
  const store = Store.open(path);
  try {
    const t0 = Date.UTC(2026, 0, 1);
    const trucks = Array.from({ length: resources }, (_, i) => `TRUCK-${String(i + 1).padStart(4, '0')}`);
    for (const t of trucks) store.startLoad({ loadNumber: `L-${t}`, resourceId: t, resourceType: 'Truck', stops: [], nowMs: t0 - 1000 });
    const steps = (days * 86_400) / history.intervalS;
    let batch: Reading[] = [];
    for (let s = 0; s < steps; s++) {
      for (const [i, t] of trucks.entries()) {
        // A truck moving about 1 km a minute, somewhere in the US.
        batch.push({ resourceId: t, timeMs: t0 + s * history.intervalS * 1000 + i * 1000, lat: 35 + i * 0.5 + s * 1e-4, lon: -100 + s * 1.3e-4 });
      }
      if (batch.length >= 500) {
        store.insertReadings(batch, false, undefined, undefined, undefined, undefined, history);
        batch = [];
      }
    }
    if (batch.length > 0) store.insertReadings(batch, false, undefined, undefined, undefined, undefined, history);
    const rows = store.db.prepare('SELECT count(*) FROM positions').pluck().get() as number;
    const bytes = store.db.prepare("SELECT sum(pgsize) FROM dbstat WHERE name = 'positions'").pluck().get() as number;
    return { rows, resources, days, intervalS: history.intervalS, bytesPerRow: bytes / rows, bytesPerResourceDay: bytes / (resources * days) };
  } finally {
    store.close();
    rmSync(path, { force: true });
    rmSync(`${path}-wal`, { force: true });
    rmSync(`${path}-shm`, { force: true });
  }
}
