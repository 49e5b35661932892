import { chownSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Ingest } from '../src/buffer/ingest.js';
import { MIGRATIONS, SCHEMA_VERSION, migrate, openDatabase } from '../src/buffer/db.js';
import { Store } from '../src/buffer/store.js';
import { createLogger } from '../src/log.js';
import { tempDir } from './helpers.js';

let tmp: ReturnType<typeof tempDir>;
let path: string;
beforeEach(() => {
  tmp = tempDir();
  path = join(tmp.dir, 'buffer.db');
});
afterEach(() => tmp.cleanup());

const silent = createLogger({ level: 'silent', destination: process.stdout });
const reading = (i: number, resourceId = 'TRUCK-1') => ({ resourceId, timeMs: 1_700_000_000_000 + i * 1000, lat: 41 + i / 1000, lon: -87, temperatureC: 2 });

describe('buffer file', () => {
  it('is a WAL database at the current schema version', () => {
    const store = Store.open(path);
    expect(store.db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(store.db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
    store.close();
  });

  it('migrates one step at a time from an older file and keeps its rows', () => {
    const db = new Database(path);
    migrate(db, 1); // a file as version 1 of the agent left it
    db.prepare("INSERT INTO loads (load_number, resource_id, resource_type, started_ms) VALUES ('L1', 'T1', 'Truck', 1)").run();
    db.close();
    const store = Store.open(path);
    expect(store.db.pragma('user_version', { simple: true })).toBe(MIGRATIONS.length);
    expect(store.getLoad('L1')?.resourceId).toBe('T1');
    store.close();
  });

  it('refuses a file written by a newer agent instead of damaging it', () => {
    const db = new Database(path);
    db.pragma(`user_version = ${SCHEMA_VERSION + 1}`);
    db.close();
    expect(() => openDatabase(path)).toThrow(/newer than this agent understands/);
  });
});

describe('readings', () => {
  it('keeps readings only for resources with an active load, unless told otherwise', () => {
    const store = Store.open(path);
    expect(store.insertReadings([reading(1)])).toBe(0);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    expect(store.insertReadings([reading(2), reading(3, 'OTHER')])).toBe(1);
    expect(store.insertReadings([reading(4, 'OTHER')], true)).toBe(1);
    const counts = store.counts();
    expect(counts.readings).toBe(1);
    expect(counts.unassignedReadings).toBe(1);
    expect([...store.iterateReadings('L1')].map((r) => r.load_number)).toEqual(['L1']);
    store.close();
  });

  it('deletes readings only up to the acknowledged id', () => {
    const store = Store.open(path);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.insertReadings([1, 2, 3, 4, 5].map((i) => reading(i)));
    const ids = [...store.iterateReadings('L1')].map((r) => r.id);
    store.ackReadings('L1', ids[2], 123);
    expect([...store.iterateReadings('L1')].map((r) => r.id)).toEqual(ids.slice(3));
    expect(store.getLoad('L1')?.lastSampleMs).toBe(123);
    store.close();
  });

  it('ingest commits in batches, rejects bad readings with a reason, and survives reopening', () => {
    const store = Store.open(path);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    const ingest = new Ingest(store, { batchSize: 3, flushIntervalMs: 1000, keepWithoutLoad: false }, silent);
    expect(ingest.push({ resourceId: 'TRUCK-1', timeMs: 1, lat: 200, lon: 0 })).toBe('latitude: out of range (200)');
    expect(ingest.push({ resourceId: 'TRUCK-1', timeMs: 1, lat: Number.NaN, lon: 0 })).toBe('latitude: out of range (NaN)');
    expect(ingest.push({ resourceId: 'TRUCK-1', timeMs: 1 })).toBe('reading has neither a position nor a temperature');
    ingest.push(reading(1));
    ingest.push(reading(2));
    expect(store.counts().readings).toBe(0); // not yet a full batch
    ingest.push(reading(3));
    expect(store.counts().readings).toBe(3); // committed as one batch
    ingest.push(reading(4));
    ingest.stop(); // flushes what waits
    expect(ingest.stats).toMatchObject({ accepted: 4, committed: 4, rejected: 3 });
    store.close();
    const again = Store.open(path);
    expect(again.counts().readings).toBe(4);
    again.close();
  });
});

describe('loads', () => {
  it('allows one active load per resource and explains refusals', () => {
    const store = Store.open(path);
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: 1 });
    expect(() => store.startLoad({ loadNumber: 'L2', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: 2 })).toThrow(
      'resource T1 already has active load L1; end it first',
    );
    expect(() => store.startLoad({ loadNumber: 'L1', resourceId: 'T2', resourceType: 'Truck', stops: [], nowMs: 2 })).toThrow(
      'load L1 is already active on T1',
    );
    store.endLoad('L1', 3);
    expect(() => store.endLoad('L1', 4)).toThrow('load L1 has already ended');
    expect(() => store.endLoad('nope', 4)).toThrow('no load nope');
    expect(store.listLoads()).toEqual([]);
    expect(store.listLoads(true).map((l) => l.loadNumber)).toEqual(['L1']);
    store.startLoad({ loadNumber: 'L2', resourceId: 'T1', resourceType: 'Trailer', stops: [], nowMs: 5 });
    expect(store.activeLoadOf('T1')?.loadNumber).toBe('L2');
    store.close();
  });
});

describe('file ownership', () => {
  // Only root can create files for another user; CI runs as root.
  it.skipIf(process.getuid?.() !== 0)('files root creates in a directory owned by the service user take that owner', () => {
    const dir = join(tmp.dir, 'state');
    mkdirSync(dir);
    chownSync(dir, 4242, 4243);
    const store = Store.open(join(dir, 'buffer.db'));
    store.close();
    expect(statSync(join(dir, 'buffer.db'))).toMatchObject({ uid: 4242, gid: 4243 });
  });
});

describe('milestone durability', () => {
  it('commits a milestone with synchronous = FULL and gives the connection its level back', async () => {
    const { recordMilestone } = await import('../src/milestones/record.js');
    const { configSchema } = await import('../src/config/schema.js');
    const store = Store.open(path, { synchronous: 'NORMAL' });
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: 1 });
    const seen: number[] = [];
    // Observe the level in force while the milestone row is written.
    const insert = store.insertMilestone.bind(store);
    store.insertMilestone = (...args) => {
      seen.push(store.db.pragma('synchronous', { simple: true }) as number);
      return insert(...args);
    };
    recordMilestone(store, configSchema.parse({ api: { scac: 'ABCD' } }), { loadNumber: 'L1', code: 'X3' });
    expect(seen).toEqual([2]); // FULL
    expect(store.db.pragma('synchronous', { simple: true })).toBe(1); // NORMAL again
    store.close();
  });
});
