/**
 * Row 1, ingest: Ingest.admit + flush (validation, batches, the look-up of the loads whose
 * windows hold each reading) vs a raw better-sqlite3 prepared insert loop in one transaction.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { Ingest } from '../src/admission/ingest.js';
import { openDatabase } from '../src/buffer/db.js';
import { Store } from '../src/buffer/store.js';
import type { Reading } from '../src/reading.js';
import { loadOf, resourceOf, syntheticReading } from './common.js';
import { BUFFER_DEFAULTS, LOADS_DEFAULTS, SIZES } from './options.js';

function ingestReadings(n: number): Reading[] {
  const trucks = 10;
  const start = Date.now() - n * 100;
  return Array.from({ length: n }, (_, i) => syntheticReading(i % trucks, Math.floor(i / trucks), start + Math.floor(i / trucks) * 1000));
}

function rawInsert(path: string, readings: Reading[]): number {
  const db = openDatabase(path);
  // The row the agent writes, its state (a load holds it) known in advance.
  const insert = db.prepare('INSERT INTO readings (resource_id, time_ms, lat, lon, speed, heading, odometer, temp_c, source, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0)');
  const t0 = performance.now();
  db.transaction(() => {
    for (const r of readings) {
      insert.run(r.resourceId, r.timeMs, r.lat ?? null, r.lon ?? null, r.speed ?? null, r.heading ?? null, r.odometer ?? null, r.temperatureC ?? null, 'bench');
    }
  })();
  const ms = performance.now() - t0;
  const count = (db.prepare('SELECT count(*) AS n FROM readings').get() as { n: number }).n;
  db.close();
  if (count !== readings.length) throw new Error(`raw insert stored ${count} of ${readings.length}`);
  return ms;
}

function agentInsert(path: string, readings: Reading[], batchSize: number, flushIntervalMs: number): number {
  const store = Store.open(path);
  // Started when the trucks' readings begin: a load's window holds readings from its start on.
  for (let t = 0; t < 10; t++) store.startLoad({ loadNumber: loadOf(t), resourceId: resourceOf(t), resourceType: 'Truck', stops: [], nowMs: readings[0].timeMs });
  const log = pino({ level: 'silent' });
  // As the daemon runs it: each batch also looks for closed loads taking late readings.
  const ingest = new Ingest(store, { batchSize, flushIntervalMs, keepWithoutLoad: false, lateReadingsMs: LOADS_DEFAULTS.late_readings_s * 1000 }, log);
  const bench = ingest.intake('bench', log);
  const t0 = performance.now();
  for (const r of readings) ingest.admit(r, bench);
  ingest.flush();
  const ms = performance.now() - t0;
  store.close();
  if (ingest.stats.committed !== readings.length) throw new Error(`ingest committed ${ingest.stats.committed} of ${readings.length}`);
  return ms;
}

export function benchIngest(dir: string) {
  const readings = ingestReadings(SIZES.ingest);
  const raw: number[] = [];
  const ours: number[] = [];
  const fresh = (name: string) => {
    const p = join(dir, name);
    for (const s of ['', '-wal', '-shm']) rmSync(p + s, { force: true });
    return p;
  };
  // Alternating rounds, each on a fresh file; the best of each side is compared.
  for (let i = 0; i < SIZES.rounds; i++) {
    raw.push(rawInsert(fresh('ingest-raw.db'), readings));
    ours.push(agentInsert(fresh('ingest-agent.db'), readings, BUFFER_DEFAULTS.batch_size, BUFFER_DEFAULTS.flush_interval_ms));
  }
  const rawPerS = readings.length / (Math.min(...raw) / 1000);
  const oursPerS = readings.length / (Math.min(...ours) / 1000);
  return { readings: readings.length, batchSize: BUFFER_DEFAULTS.batch_size, rawPerS, oursPerS, ratio: oursPerS / rawPerS };
}
