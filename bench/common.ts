/**
 * Shared by the bench (parent) and its child-process workers: synthetic readings, a backlog
 * written straight into a buffer file, the settings the drain runs with, and /proc readers.
 * Nothing here is used by the agent itself.
 */
import { accessSync, closeSync, copyFileSync, constants as fsConstants, fsyncSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { openDatabase } from '../src/buffer/db.js';
import { Store } from '../src/buffer/store.js';
import { packageFile } from '../src/paths.js';
import type { Reading } from '../src/reading.js';

export const BENCH_KEY = 'bench-key-0123456789abcdef';
export const BENCH_SCAC = 'BNCH';
export const BENCH_DEVICE = 'bench-device';
/**
 * The device the reference client's bodies are built for when it posts in turns with a
 * drain: traceIds of their own (the sandbox counts a traceId it has seen as a duplicate, and
 * remembers it at less cost), bodies of the same size (a name of the same length).
 */
export const BENCH_CLIENT_DEVICE = 'bench-client';
/** The header that tells the sandbox's gate a request is the reference client's. */
export const BENCH_CLIENT_HEADER = 'x-bench-client';
/** The chunk size the drain uses (delivery.max_traces_per_request). */
export const CHUNK = 500;

export const resourceOf = (i: number) => `TRUCK-${String(i).padStart(4, '0')}`;
export const loadOf = (i: number) => `BENCH-L${String(i).padStart(4, '0')}`;

/**
 * Reading `i` of a truck: 1 Hz, moving east at about 20 m/s from a start point spread over
 * the continental US (so trace points cross time zones and towns the way real ones do),
 * with a reefer temperature on every reading.
 */
export function syntheticReading(truck: number, i: number, timeMs: number): Reading {
  const lat0 = 31 + ((truck * 7) % 15);
  const lon0 = -118 + ((truck * 13) % 38);
  return {
    resourceId: resourceOf(truck),
    timeMs,
    lat: lat0 + Math.sin(i / 600) * 0.05,
    lon: lon0 + (i % 200_000) * 0.00022,
    speed: 20 + (i % 7) * 0.5,
    heading: 90,
    odometer: 120_000 + i * 0.02,
    temperatureC: -18 + ((i * 37) % 100) / 100,
  };
}

export interface Backlog {
  /** Trucks, each with its readings (and one load, unless loadsPerTruck says more). */
  loads: number;
  /** Readings of each truck. */
  perLoad: number;
  /** Loads each truck carries, every one over its whole backlog (less than truckload): 1 by default. */
  loadsPerTruck?: number;
}

/** The load numbers of truck `i`: loadOf(i), then loadOf(i)-2, loadOf(i)-3... */
export const loadsOf = (i: number, perTruck = 1) => Array.from({ length: perTruck }, (_, k) => (k === 0 ? loadOf(i) : `${loadOf(i)}-${k + 1}`));

/**
 * Write a backlog of `loads` x `perLoad` readings (each truck 1 Hz, ending now) into a fresh
 * buffer file with the agent's schema, as if the trucks had been offline; each truck carries
 * `loadsPerTruck` loads whose windows hold all of its readings (stored once). Straight SQL in
 * one transaction: this is set-up, not what is measured.
 */
export function writeBacklog(path: string, b: Backlog, nowMs = Date.now()): void {
  const db = openDatabase(path);
  const insertLoad = db.prepare("INSERT INTO loads (load_number, resource_id, resource_type, stops, started_ms, window_from_ms) VALUES (?, ?, 'Truck', '[]', ?, ?)");
  const insert = db.prepare('INSERT INTO readings (resource_id, time_ms, lat, lon, speed, heading, odometer, temp_c, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)');
  const startMs = nowMs - b.perLoad * 1000;
  db.transaction(() => {
    for (let l = 0; l < b.loads; l++) for (const n of loadsOf(l, b.loadsPerTruck)) insertLoad.run(n, resourceOf(l), startMs - 1000, startMs - 1000);
    // Interleaved as a depot gateway would write them: one reading of every truck per second.
    for (let i = 0; i < b.perLoad; i++) {
      for (let l = 0; l < b.loads; l++) {
        const r = syntheticReading(l, i, startMs + i * 1000);
        insert.run(r.resourceId, r.timeMs, r.lat, r.lon, r.speed, r.heading, r.odometer, r.temperatureC, 'bench');
      }
    }
  })();
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
  syncFile(path);
}

/**
 * Put a file the bench wrote on the disk before a measurement starts. Left to the kernel, a
 * 100 MB backlog is written back some 30 s later, in the middle of the drain that follows,
 * and every fsync of the drain waits behind it.
 */
export function syncFile(path: string): void {
  const fd = openSync(path, 'r+');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** A copy of a backlog, on the disk (see syncFile). */
export function copySynced(from: string, to: string): void {
  copyFileSync(from, to);
  syncFile(to);
}

/**
 * The same backlog as writeBacklog, written the way the daemon writes it: the loads started
 * with the store's own `startLoad`, the readings committed through `insertReadings` in
 * batches (one second of every truck each). Rows 2e and 2f measure what the agent's own
 * path stores for several loads on a truck, so a copy per load would show.
 */
export function ingestBacklog(path: string, b: Backlog, nowMs = Date.now()): void {
  const store = Store.open(path);
  const startMs = nowMs - b.perLoad * 1000;
  try {
    for (let l = 0; l < b.loads; l++) for (const n of loadsOf(l, b.loadsPerTruck)) store.startLoad({ loadNumber: n, resourceId: resourceOf(l), resourceType: 'Truck', stops: [], nowMs: startMs - 1000 });
    for (let i = 0; i < b.perLoad; i++) {
      const batch = Array.from({ length: b.loads }, (_, l) => ({ ...syntheticReading(l, i, startMs + i * 1000), source: 'bench' }));
      if (store.insertReadings(batch) !== batch.length) throw new Error(`the buffer kept fewer than ${batch.length} readings of second ${i}`);
    }
    store.db.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    store.close();
  }
  syncFile(path);
}

/** The config object (snake_case, before parsing) the drain worker runs the Agent with. */
export function drainConfigInput(url: string, dbPath: string): Record<string, unknown> {
  return {
    device_id: BENCH_DEVICE,
    api: { base_url: url, scac: BENCH_SCAC, timeout_s: 60 },
    buffer: { path: dbPath },
    // Far away: the bench triggers the push itself.
    schedule: { traces: '0 0 1 1 *', splay_s: 0 },
    sampling: { interval_s: 0 },
    delivery: { max_traces_per_request: CHUNK, drain_interval_ms: 0, retry_initial_s: 0.2, retry_max_s: 1 },
    milestones: { detect: false },
    log: { level: 'warn' },
    // The bench feeds the buffer itself; a config needs a source all the same.
    sources: [{ type: 'simulator', resource_id: 'BENCH' }],
  };
}

// ---- /proc ----------------------------------------------------------------------------------

/**
 * VmRSS and VmHWM (peak) of a process, and RSS split into anonymous memory (RssAnon: the
 * process's own, heap, stacks, malloc, compiled code) and file-backed pages (RssFile +
 * RssShmem: mostly the node binary's code and data, shared and reclaimable), bytes.
 */
export interface Memory {
  rss: number;
  hwm: number;
  anon: number;
  file: number;
}

/** The process's Memory from /proc/PID/status; undefined once the process is gone. */
export function memoryOf(pid: number): Memory | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN) * 1024;
    return { rss: kb('VmRSS'), hwm: kb('VmHWM'), anon: kb('RssAnon'), file: kb('RssFile') + kb('RssShmem') };
  } catch {
    return undefined;
  }
}

/** Clock ticks per second of /proc/PID/stat (USER_HZ; 100 on every Linux we ship to). */
export const CLK_TCK = 100;

/** utime + stime of a process (all its threads), seconds, from /proc/PID/stat. */
export function cpuSecondsOf(pid: number): number {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state); utime is field 14, stime field 15.
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

/** CPU time of all live threads of a process, seconds, with nanosecond resolution (schedstat). */
export function schedSecondsOf(pid: number): number {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return ns / 1e9;
}

/** Bytes a process caused to be written to the block layer (write_bytes of /proc/PID/io). */
export function writeBytesOf(pid: number): { writeBytes: number; wchar: number } {
  const text = readFileSync(`/proc/${pid}/io`, 'utf8');
  const get = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN);
  return { writeBytes: get('write_bytes') - get('cancelled_write_bytes'), wchar: get('wchar') };
}

/**
 * The NODE_OPTIONS the systemd unit runs the agent with (its heap limits): the bench measures
 * the agent as it is shipped, and cannot drift from the unit.
 */
export function unitNodeOptions(): string {
  const unit = readFileSync(packageFile('systemd', 'telematics-agent.service'), 'utf8');
  const m = /^Environment="?NODE_OPTIONS=([^"\n]*)"?$/m.exec(unit);
  if (!m) throw new Error('systemd/telematics-agent.service sets no NODE_OPTIONS');
  return m[1].trim();
}

/** The mosquitto broker's binary, where Debian puts it (sbin is not on every PATH), or undefined. */
export function findMosquitto(): string | undefined {
  for (const dir of [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/sbin']) {
    try {
      accessSync(join(dir, 'mosquitto'), fsConstants.X_OK);
      return join(dir, 'mosquitto');
    } catch {
      // Not here.
    }
  }
  return undefined;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// ---- messages between the bench and its workers ------------------------------------------

export type WorkerCommand =
  | { cmd: 'drain'; dbPath: string; url: string }
  | { cmd: 'go' }
  | { cmd: 'stop' }
  /** In turns with a drain: build the bodies, say `ready`, then post for each `slice` command until `end`. */
  | { cmd: 'ceiling'; dbPath: string; url: string; requests: number }
  | { cmd: 'slice'; ms: number }
  | { cmd: 'end' }
  | { cmd: 'peer'; dbPath: string; url: string; requests: number };

export type WorkerEvent =
  | { ev: 'started' }
  | { ev: 'drained'; ms: number; purgeMs: number; left: number; requests: number; points: number }
  | { ev: 'stopped' }
  | { ev: 'posted'; ms: number; requests: number; points: number; bytes: number; failed: number }
  | { ev: 'ready' }
  | { ev: 'sliced'; ms: number; requests: number; points: number }
  | { ev: 'error'; message: string };
