import { spawn } from 'node:child_process';
import { chownSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it, vi } from 'vitest';
import { ADMITTED_EVERY_MS, Ingest } from '../src/admission/ingest.js';
import { checkFile, MIGRATIONS, migrate, openDatabase, PAGE_SIZE, SCHEMA_VERSION } from '../src/buffer/db.js';
import { planFor } from '../src/buffer/disk.js';
import { DEFAULT_RESERVE_KB, Store } from '../src/buffer/store.js';
import { configSchema } from '../src/config/schema.js';
import { createLogger } from '../src/log.js';
import { agentConfig, ROOT, runCli, walCommits, tempFixture, jsonLogger } from './helpers.js';

const tmp = tempFixture();

const silent = createLogger({ level: 'silent', destination: process.stdout });
const reading = (i: number, resourceId = 'TRUCK-1') => ({ resourceId, timeMs: 1_700_000_000_000 + i * 1000, lat: 41 + i / 1000, lon: -87, temperatureC: 2 });

describe('buffer file', () => {
  it('is a WAL database at the current schema version', () => {
    const store = Store.open(tmp.buffer);
    expect(store.db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(store.db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
    store.close();
  });

  it('migrates one step at a time from an older file and keeps its rows', () => {
    const db = new Database(tmp.buffer);
    migrate(db, 1); // a file as version 1 of the agent left it
    db.prepare("INSERT INTO loads (load_number, resource_id, resource_type, started_ms) VALUES ('L1', 'T1', 'Truck', 1)").run();
    db.close();
    const store = Store.open(tmp.buffer);
    expect(store.db.pragma('user_version', { simple: true })).toBe(MIGRATIONS.length);
    expect(store.getLoad('L1')?.resourceId).toBe('T1');
    store.close();
  });

  it('moves a version 3 file to acknowledgement by cursor: its waiting readings stay waiting, readings are found by resource', () => {
    const db = new Database(tmp.buffer);
    migrate(db, 3);
    db.prepare("INSERT INTO loads (load_number, resource_id, resource_type, started_ms) VALUES ('L1', 'T1', 'Truck', 1)").run();
    const insert = db.prepare("INSERT INTO readings (resource_id, load_number, time_ms, lat, lon) VALUES ('T1', 'L1', ?, 41, -87)");
    for (let i = 0; i < 3; i++) insert.run(1_700_000_000_000 + i);
    db.close();
    const store = Store.open(tmp.buffer);
    expect(store.db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
    expect(store.getLoad('L1')?.ackedId).toBe(0);
    expect([...store.iterateReadings('L1')]).toHaveLength(3);
    const indexes = store.db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'readings'").pluck().all();
    // Gone at version 4, back at version 7 (several loads on one resource), the load's gone.
    expect(indexes).toContain('readings_by_resource');
    expect(indexes).not.toContain('readings_by_load');
    store.close();
  });

  it('sets the page cache from buffer.cache_kb', () => {
    const store = Store.open(tmp.buffer, { cacheKb: 1024 });
    expect(store.db.pragma('cache_size', { simple: true })).toBe(-1024);
    store.close();
  });

  it('a new buffer opened by several processes at once (daemon and CLI) is created once, and every one of them works', async () => {
    // Each process used to run the migrations it found missing, whether or not another was
    // running them: one failed with "table readings already exists" or "duplicate column
    // name", or took the new buffer's WAL for another database's.
    const cfg = agentConfig(tmp.dir, 'http://127.0.0.1:9');
    for (let round = 0; round < 5; round++) {
      rmSync(tmp.dir, { recursive: true, force: true });
      mkdirSync(tmp.dir, { recursive: true });
      agentConfig(tmp.dir, 'http://127.0.0.1:9');
      // Commands that write: one that only reads creates no buffer (src/buffer/read.ts).
      const results = await Promise.all(Array.from({ length: 6 }, (_, i) => runCli(['load', 'start', `L${i}`, '--resource', `T${i}`, '--config', cfg])));
      for (const r of results) expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
      const db = new Database(tmp.buffer, { readonly: true });
      expect(db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
      expect(db.prepare('SELECT count(*) FROM loads').pluck().get()).toBe(6);
      db.close();
    }
  }, 60_000);

  it('a file really cut short is still refused as truncated, after looking again', () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.insertReadings(Array.from({ length: 2000 }, (_, i) => reading(i)));
    store.close();
    truncateSync(tmp.buffer, 4096);
    expect(() => openDatabase(tmp.buffer)).toThrow(/the buffer is corrupt \(truncated: 4096 bytes where its header says \d+\)/);
  });

  it('a checkpoint stalled for 2 s between page 1 and the rest (a loaded machine) is waited for, not called truncated', async () => {
    const store = Store.open(tmp.buffer);
    store.insertReadings(Array.from({ length: 2000 }, (_, i) => reading(i)));
    store.close();
    const whole = readFileSync(tmp.buffer);
    expect(whole.length).toBeGreaterThan(16 * PAGE_SIZE);
    // Another process's checkpoint has written page 1 (whose header counts every page) and is
    // descheduled before the rest; it writes them 2 s later, then deletes the WAL it copied
    // them from (here a stand-in: the pages are in no WAL this check could read).
    const file = join(tmp.dir, 'stalled.db');
    writeFileSync(file, whole.subarray(0, PAGE_SIZE));
    writeFileSync(`${file}-wal`, '');
    writeFileSync(join(tmp.dir, 'rest'), whole.subarray(PAGE_SIZE));
    const writer = spawn('sh', ['-c', `sleep 2; cat "${join(tmp.dir, 'rest')}" >> "${file}"; rm "${file}-wal"`], { stdio: 'ignore' });
    const done = new Promise((r) => writer.on('exit', r));
    try {
      const header = checkFile(file);
      expect(header).toMatchObject({ bytes: whole.length, pageSize: PAGE_SIZE });
    } finally {
      writer.kill();
      await done;
    }
  });

  it('refuses a file written by a newer agent instead of damaging it', () => {
    const db = new Database(tmp.buffer);
    db.pragma(`user_version = ${SCHEMA_VERSION + 1}`);
    db.close();
    expect(() => openDatabase(tmp.buffer)).toThrow(/written by a newer version of telematics-agent \(buffer schema \d+; this version understands up to \d+\); nothing was changed/);
  });
});

describe('page size', () => {
  it('a new buffer has 1 KB pages (less flash per commit); one made with 4 KB pages keeps them and works', () => {
    const store = Store.open(tmp.buffer);
    expect(store.db.pragma('page_size', { simple: true })).toBe(PAGE_SIZE);
    expect(PAGE_SIZE).toBe(1024);
    store.close();
    const old = join(tmp.dir, 'old.db');
    const raw = new Database(old);
    raw.pragma('page_size = 4096');
    raw.exec('CREATE TABLE x (a)');
    raw.close();
    const again = Store.open(old);
    expect(again.db.pragma('page_size', { simple: true })).toBe(4096);
    again.insertReadings([reading(1)], true);
    expect(again.counts().unassignedReadings).toBe(1);
    again.close();
  });
});

describe('checkpoints', () => {
  it('with the default reserve the WAL takes 1 MB before a checkpoint; a small disk gets an eighth of itself as reserve, half that as WAL', () => {
    const { reserve_kb } = configSchema.parse({ api: { base_url: 'http://127.0.0.1:9', scac: 'TEST' }, buffer: { path: tmp.buffer }, sources: [{ type: 'simulator', resource_id: 'T1' }] }).buffer;
    expect(reserve_kb).toBe(DEFAULT_RESERVE_KB);
    const store = Store.open(tmp.buffer, { reserveKb: reserve_kb });
    // 1 KB pages: a checkpoint once 1,024 frames are in the WAL, which is cut back to 1 MB after it.
    // Measured at 1 Hz (docs/performance.md, 5 and 5a): 512 KB checkpoints twice as often, and
    // past about 1,000 frames (where the -shm index's frame entries leave its header's 4 KB
    // page) every commit dirties a page more.
    expect(store.db.pragma('wal_autocheckpoint', { simple: true })).toBe(1024);
    expect(store.db.pragma('journal_size_limit', { simple: true })).toBe(1_048_576);
    store.close();
    expect(planFor(16 * 1_048_576, DEFAULT_RESERVE_KB)).toEqual({ reserveBytes: 2 * 1_048_576, walLimitBytes: 1_048_576 });
    expect(planFor(4 * 1_048_576, DEFAULT_RESERVE_KB)).toEqual({ reserveBytes: 512 * 1024, walLimitBytes: 256 * 1024 });
  });
});

/** The tables whose pages the WAL holds since the last checkpoint, and its commits. */
function walContent(db: Database.Database): { tables: string[]; commits: number } {
  const commits = walCommits(db.name);
  return { tables: [...new Set(commits.flatMap((c) => [...c]))].sort(), commits: commits.length };
}

describe('what a commit of readings writes', () => {
  it('the readings, their index and the header page: not sqlite_sequence, not last_fix', () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.insertReadings([reading(1), reading(2)]);
    store.flushFixes();
    store.db.pragma('wal_checkpoint(TRUNCATE)');
    for (let i = 3; i < 60; i += 5) store.insertReadings([reading(i), reading(i + 1), reading(i + 2), reading(i + 3), reading(i + 4)]);
    expect(walContent(store.db)).toEqual({ tables: ['header', 'readings', 'readings_by_resource'], commits: 12 });
    // Nothing new: the minute's flush writes nothing either.
    store.flushFixes();
    store.db.pragma('wal_checkpoint(TRUNCATE)');
    store.flushFixes();
    expect(statSync(`${tmp.buffer}-wal`).size).toBe(0);
    store.close();
  });

  it("the daemon's state row rides in the next commit of readings; if it fails, the readings still commit", () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    const ingest = new Ingest(store, { batchSize: 100, flushIntervalMs: 60_000, keepWithoutLoad: false }, silent);
    ingest.admit(reading(1)); // the first is committed at once
    store.db.pragma('wal_checkpoint(TRUNCATE)');
    ingest.writeWithNextCommit('state', () => store.setState('daemon', { n: 1 }, 5));
    ingest.admit(reading(2));
    ingest.admit(reading(3));
    expect(store.getState('daemon')).toBeUndefined();
    ingest.flush();
    expect(store.getState('daemon')?.value).toEqual({ n: 1 });
    expect(walContent(store.db)).toMatchObject({ commits: 1 });
    expect(walContent(store.db).tables).toEqual(expect.arrayContaining(['readings', 'state']));
    // Taken once: the next commit carries nothing more.
    ingest.admit(reading(4));
    ingest.flush();
    expect(store.getState('daemon')?.updatedMs).toBe(5);
    ingest.writeWithNextCommit('state', () => {
      store.setState('daemon', { n: 2 }, 6);
      throw new Error('the state cannot be written');
    });
    ingest.admit(reading(5));
    ingest.flush();
    expect(store.getState('daemon')).toMatchObject({ value: { n: 1 }, updatedMs: 5 });
    expect([...store.iterateReadings('L1')].map((r) => r.id)).toEqual([1, 2, 3, 4, 5]);
    // An error that ends the whole transaction (as SQLITE_FULL may) fails the commit: the
    // readings stay queued for the next attempt, none is lost.
    ingest.writeWithNextCommit('state', () => {
      store.db.exec('ROLLBACK');
      throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    });
    ingest.admit(reading(6));
    ingest.flush();
    // Told as what it was (a full disk: delivery purges to make room), not as a failed commit.
    expect(ingest.stats).toMatchObject({ pending: 1, trouble: { kind: 'disk-full' } });
    expect(store.counts().readings).toBe(5);
    ingest.writeWithNextCommit('state', undefined);
    ingest.flush(true);
    expect(store.counts().readings).toBe(6);
    store.close();
  });

  it('readings dropped from memory are counted in the commit that follows, not in a transaction of their own', () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    const ingest = new Ingest(store, { batchSize: 10_000, flushIntervalMs: 60_000, keepWithoutLoad: false, maxPending: 100 }, silent);
    ingest.admit(reading(0)); // the first is committed at once
    // The file can grow no more: commits fail with SQLITE_FULL, a real one.
    store.db.pragma('wal_checkpoint(TRUNCATE)');
    store.db.pragma(`max_page_count = ${store.db.pragma('page_count', { simple: true }) as number}`);
    for (let i = 1; i <= 300; i++) ingest.admit(reading(i));
    ingest.flush();
    expect(ingest.stats).toMatchObject({ pending: 100, droppedPending: 200, droppedUncounted: 200, trouble: { kind: 'disk-full' } });
    store.db.pragma('max_page_count = 1000000000');
    store.db.pragma('wal_checkpoint(TRUNCATE)');
    ingest.flush(true);
    expect(store.counts().readings).toBe(101);
    expect(store.counters()).toEqual({ readings_dropped_pending: 200 });
    expect(ingest.stats.droppedUncounted).toBe(0);
    expect(walContent(store.db)).toMatchObject({ commits: 1 });
    expect(walContent(store.db).tables).toEqual(expect.arrayContaining(['readings', 'counters']));
    store.close();
  });

  it('never gives a reading id twice: not after the newest reading is deleted, the table drains, or the file is reopened', () => {
    let store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.insertReadings([reading(1), reading(2), reading(3)]);
    const ids = () => [...store.iterateReadings('L1')].map((r) => r.id);
    expect(ids()).toEqual([1, 2, 3]);
    // The newest position went alone after an outage, and was deleted.
    store.deleteReadings([3]);
    store.insertReadings([reading(4)]);
    expect(ids()).toEqual([1, 2, 4]);
    store.ackReadings('L1', 4, null);
    store.purgeAcked();
    expect(store.counts().readings).toBe(0);
    store.close();
    store = Store.open(tmp.buffer);
    store.insertReadings([reading(5)]);
    expect(ids()).toEqual([5]);
    store.close();
  });

  it("knows each resource's newest fix before last_fix is brought forward, and after its readings are deleted", () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.insertReadings([reading(1), reading(2)]);
    const stored = () => store.db.prepare('SELECT resource_id, time_ms FROM last_fix').all();
    expect(stored()).toEqual([]);
    expect(store.lastFix('TRUCK-1')?.timeMs).toBe(reading(2).timeMs);
    store.flushFixes();
    expect(stored()).toEqual([{ resource_id: 'TRUCK-1', time_ms: reading(2).timeMs }]);
    store.insertReadings([reading(3), reading(4)]);
    expect(store.lastFixes().map((f) => f.timeMs)).toEqual([reading(4).timeMs]);
    // Deleted before the next flush (sent alone, first): the fix is kept on the way out.
    store.deleteReadings([4]);
    expect(store.lastFix('TRUCK-1')?.timeMs).toBe(reading(4).timeMs);
    expect(stored()).toEqual([{ resource_id: 'TRUCK-1', time_ms: reading(4).timeMs }]);
    store.close();
  });

  it('upgrades a version 5 file: ids go on past its sequence, its last fixes stay', () => {
    const db = new Database(tmp.buffer);
    migrate(db, 5);
    db.prepare("INSERT INTO loads (load_number, resource_id, resource_type, started_ms) VALUES ('L1', 'TRUCK-1', 'Truck', 1)").run();
    const insert = db.prepare("INSERT INTO readings (resource_id, load_number, time_ms, lat, lon) VALUES ('TRUCK-1', 'L1', ?, 41, -87)");
    for (let i = 1; i <= 7; i++) insert.run(reading(i).timeMs);
    db.prepare("INSERT INTO last_fix (resource_id, time_ms, lat, lon) VALUES ('TRUCK-1', ?, 41, -87)").run(reading(7).timeMs);
    db.prepare('DELETE FROM readings WHERE id > 5').run();
    db.close();
    const store = Store.open(tmp.buffer);
    expect(store.db.prepare("SELECT sql FROM sqlite_master WHERE name = 'readings'").pluck().get()).not.toMatch(/AUTOINCREMENT/);
    expect(store.db.pragma('integrity_check', { simple: true })).toBe('ok');
    expect(store.lastFix('TRUCK-1')?.timeMs).toBe(reading(7).timeMs);
    store.insertReadings([reading(8)]);
    expect([...store.iterateReadings('L1')].map((r) => r.id)).toEqual([1, 2, 3, 4, 5, 8]);
    store.close();
  });
});

describe('delivery path', () => {
  it('finds retried readings through their marks, not by walking every reading', () => {
    const store = Store.open(tmp.buffer);
    const plan = (sql: string) => (store.db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all() as Array<{ detail: string }>).map((r) => r.detail).join('; ');
    expect(plan('SELECT r.id FROM load_marks m JOIN readings r ON r.id = m.reading_id WHERE m.state = 2 ORDER BY r.id LIMIT 500')).not.toMatch(/SCAN r\b/);
    expect(plan('SELECT count(*) FROM readings WHERE state = 3 AND state <> 0')).toMatch(/USING (COVERING )?INDEX readings_parked/);
    store.close();
  });

  /** This process's descriptors open on the WAL. */
  const walFds = () =>
    readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`) === `${tmp.buffer}-wal`;
      } catch {
        return false;
      }
    }).length;

  it('keeps the WAL open for syncing while the buffer is open, and closes it with the buffer', async () => {
    const before = walFds();
    const store = Store.open(tmp.buffer);
    store.insertReadings([reading(1)], true);
    await store.syncCommits();
    await store.syncCommits();
    // SQLite's own descriptor and ours, one each, however many requests went out.
    expect(walFds()).toBe(before + 2);
    store.close();
    expect(walFds()).toBe(before);
  });

  it('has nothing to sync with synchronous = FULL: every commit was synced as it ended', async () => {
    const before = walFds();
    const store = Store.open(tmp.buffer, { synchronous: 'FULL' });
    store.insertReadings([reading(1)], true);
    await store.syncCommits();
    // SQLite's own descriptor only: no second one opened to fsync through.
    expect(walFds()).toBe(before + 1);
    // A reload to NORMAL: from then on the WAL is synced before each request.
    store.tune({ synchronous: 'NORMAL' });
    await store.syncCommits();
    expect(walFds()).toBe(before + 2);
    store.close();
  });
});

describe('readings', () => {
  it('keeps readings only for resources with an active load, unless told otherwise', () => {
    const store = Store.open(tmp.buffer);
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
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.insertReadings([1, 2, 3, 4, 5].map((i) => reading(i)));
    const ids = [...store.iterateReadings('L1')].map((r) => r.id);
    store.ackReadings('L1', ids[2], 123);
    expect([...store.iterateReadings('L1')].map((r) => r.id)).toEqual(ids.slice(3));
    expect(store.getLoad('L1')?.lastSampleMs).toBe(123);
    store.close();
  });

  it('hides acknowledged readings at once and purges them later, keeping parked and unassigned rows', () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.startLoad({ loadNumber: 'L2', resourceId: 'TRUCK-2', resourceType: 'Truck', stops: [], nowMs: 1 });
    // Interleaved, as a depot writes them; one reading of a resource without a load kept too.
    for (let i = 0; i < 10; i++) store.insertReadings([reading(i, 'TRUCK-1'), reading(i, 'TRUCK-2')]);
    store.insertReadings([reading(99, 'NOBODY')], true);
    const l1 = [...store.iterateReadings('L1')].map((r) => r.id);
    const l2 = [...store.iterateReadings('L2')].map((r) => r.id);
    store.parkReading(l1[1], 'L1', 400, 'refused', {}, 1);
    store.ackReadings('L1', l1[5], null);
    store.ackReadings('L2', l2[9], null);
    // Hidden from every query at once...
    expect([...store.iterateReadings('L1')].map((r) => r.id)).toEqual(l1.slice(6));
    expect(store.loadsWithReadings()).toEqual(['L1']);
    expect(store.counts().readings).toBe(4);
    expect(store.backlogOf('L2').newest).toBeUndefined();
    const rows = () => store.db.prepare('SELECT count(*) FROM readings').pluck().get() as number;
    expect(rows()).toBe(21);
    // ...and deleted by the purge: 5 of L1 (the parked one stays), all 10 of L2.
    expect(store.purgeAcked()).toEqual({ deleted: 15, done: true });
    expect(rows()).toBe(6);
    expect(store.counts()).toMatchObject({ readings: 4, unassignedReadings: 1, deadLetters: 1 });
    store.close();
  });

  it('purges in slices that resume where they stopped, and after a reopen finds what a crash left', () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.insertReadings(Array.from({ length: 100 }, (_, i) => reading(i)));
    const ids = [...store.iterateReadings('L1')].map((r) => r.id);
    store.ackReadings('L1', ids[79], null);
    const slices: number[] = [];
    for (let done = false; !done; ) {
      const r = store.purgeAcked(30);
      slices.push(r.deleted);
      done = r.done;
    }
    expect(slices).toEqual([30, 30, 20]);
    store.ackReadings('L1', ids[89], null);
    store.close(); // as if the process died before its next purge

    const again = Store.open(tmp.buffer);
    expect([...again.iterateReadings('L1')].map((r) => r.id)).toEqual(ids.slice(90));
    expect(again.purgeAcked()).toEqual({ deleted: 10, done: true });
    expect(again.db.prepare('SELECT count(*) FROM readings').pluck().get()).toBe(10);
    again.close();
  });

  it('orders loads by their oldest waiting reading', () => {
    const store = Store.open(tmp.buffer);
    for (const [l, r] of [
      ['A', 'T-A'],
      ['B', 'T-B'],
      ['C', 'T-C'],
    ])
      store.startLoad({ loadNumber: l, resourceId: r, resourceType: 'Truck', stops: [], nowMs: 1 });
    store.insertReadings([reading(1, 'T-C'), reading(1, 'T-A'), reading(1, 'T-B'), reading(2, 'T-C'), reading(2, 'T-A')]);
    expect(store.loadsWithReadings()).toEqual(['C', 'A', 'B']);
    const c = [...store.iterateReadings('C')].map((r) => r.id);
    store.ackReadings('C', c[0], null);
    expect(store.loadsWithReadings()).toEqual(['A', 'B', 'C']);
    store.close();
  });

  it('streams a long backlog page by page, and allows writes while the iterator is open', () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.insertReadings(Array.from({ length: 1000 }, (_, i) => reading(i)));
    let n = 0;
    let last = 0;
    for (const r of store.iterateReadings('L1')) {
      expect(r.id).toBeGreaterThan(last);
      last = r.id;
      n += 1;
      if (n === 300) store.ackReadings('L1', 0, n); // a write in the middle of the stream
    }
    expect(n).toBe(1000);
    store.close();
  });

  it('keeps the last fix of each resource, moved only forward in time, and never purged with the readings', () => {
    const store = Store.open(tmp.buffer);
    store.insertReadings([reading(1, 'LOOSE'), { resourceId: 'LOOSE', timeMs: 1_700_000_009_000, temperatureC: 3 }], true);
    expect(store.lastFix('LOOSE')?.timeMs).toBe(reading(1).timeMs);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.insertReadings([reading(5), reading(6), { resourceId: 'TRUCK-1', timeMs: 1_700_000_010_000, temperatureC: 3 }]);
    expect(store.lastFix('TRUCK-1')).toMatchObject({ timeMs: reading(6).timeMs, lat: reading(6).lat, lon: reading(6).lon });
    // A late reading (older than the fix) does not move it back.
    store.insertReadings([reading(2)]);
    expect(store.lastFix('TRUCK-1')?.timeMs).toBe(reading(6).timeMs);
    // Delivered and purged: the fix stays.
    const ids = [...store.iterateReadings('L1')].map((r) => r.id);
    store.ackReadings('L1', ids[ids.length - 1], null);
    store.purgeAcked();
    expect(store.counts().readings).toBe(0);
    expect(store.lastFix('TRUCK-1')?.timeMs).toBe(reading(6).timeMs);
    expect(store.lastFix('NEVER')).toBeUndefined();
    // Readings of a resource without a load are not kept, and neither is its position.
    store.insertReadings([reading(9, 'NO-LOAD')]);
    expect(store.lastFix('NO-LOAD')).toBeUndefined();
    store.close();
  });

  it('ingest commits in batches, rejects bad readings with a reason, and survives reopening', () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    const ingest = new Ingest(store, { batchSize: 3, flushIntervalMs: 1000, keepWithoutLoad: false }, silent);
    const gps = ingest.intake('gps', silent);
    const reefer = ingest.intake('reefer', silent);
    expect(ingest.admit({ resourceId: 'TRUCK-1', timeMs: 1, lat: 200, lon: 0 })).toBe('latitude: out of range (200)');
    expect(ingest.admit({ resourceId: 'TRUCK-1', timeMs: 1, lat: Number.NaN, lon: 0 })).toBe('latitude: out of range (NaN)');
    expect(ingest.admit({ resourceId: 'TRUCK-1', timeMs: 1 })).toBe('reading has neither a position nor a temperature');
    const mine = reading(1);
    ingest.admit(mine, gps);
    expect(store.counts().readings).toBe(1); // the first reading goes at once
    ingest.admit(reading(2), reefer);
    ingest.admit(reading(3));
    expect(store.counts().readings).toBe(1); // not yet a full batch
    ingest.admit(reading(4), gps);
    expect(store.counts().readings).toBe(4); // committed as one batch
    ingest.admit(reading(5));
    ingest.stop(); // flushes what waits
    expect(ingest.stats).toMatchObject({ accepted: 5, committed: 5, rejected: 3 });
    expect(mine).toEqual(reading(1)); // the caller's object is not tagged or changed
    store.close();
    const again = Store.open(tmp.buffer);
    expect(again.counts().readings).toBe(5);
    expect(again.db.prepare('SELECT source FROM readings ORDER BY id').pluck().all()).toEqual(['gps', 'reefer', null, 'gps', null]);
    again.close();
  });
});

describe('beside another writer', () => {
  it('dead-letter retry waits for a writer that holds the lock, then sees what it wrote (no SQLITE_BUSY)', async () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.insertReadings([reading(1)]);
    const [id] = [...store.iterateReadings('L1')].map((r) => r.id);
    store.parkReading(id, 'L1', 400, 'refused', {}, 1);
    // Another process (the daemon) takes the write lock, writes, and commits 300 ms later.
    const child = spawn(
      process.execPath,
      [
        '-e',
        `const db = new (require('better-sqlite3'))(${JSON.stringify(tmp.buffer)}); db.exec('BEGIN IMMEDIATE'); db.prepare('UPDATE loads SET last_sample_ms = 7').run(); process.stdout.write('locked\\n'); setTimeout(() => { db.exec('COMMIT'); db.close(); }, 300);`,
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const exited = new Promise((r) => child.on('exit', r));
    await new Promise<void>((r) => child.stdout.on('data', (d: Buffer) => d.toString().includes('locked') && r()));
    // Synchronous: blocks until the lock is free (busy_timeout), then reads and writes.
    expect(store.retryDeadLetters('all')).toBe(1);
    expect(store.listDeadLetters()).toEqual([]);
    expect(store.getLoad('L1')?.lastSampleMs).toBe(7);
    await exited;
    store.close();
  });
});

describe('admission', () => {
  it('validates, judges the time, and counts and logs per source, once; the simulator is not judged', () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    const lines: Array<{ msg: string; rejected?: number; source?: string }> = [];
    const log = jsonLogger(lines, 'info');
    const ingest = new Ingest(store, { batchSize: 100, flushIntervalMs: 1000, keepWithoutLoad: false }, silent);
    const now = Date.parse('2026-11-22T12:00:00Z');
    const time = { clock: { earliest: () => now, latest: () => now }, maxFutureS: 300, maxPastDays: 30 };
    const gps = ingest.intake('gps', log.child({ source: 'gps' }), time);
    const sim = ingest.intake('sim', log.child({ source: 'sim' }));
    const at = (timeMs: number, lat = 41.8) => ({ resourceId: 'TRUCK-1', timeMs, lat, lon: -87.6 });

    gps.emit(at(now));
    gps.emit(at(now + 3_600_000)); // a clock an hour ahead
    gps.emit(at(now, 200), 'line 7');
    gps.reject('line 8: bad checksum');
    sim.emit(at(now + 3_600_000)); // the simulator's clock runs ahead on purpose
    // Counted where they are judged: a reading in good form counts before its time is judged.
    expect(gps.counts).toEqual({ readings: 2, rejected: 2, timeRejected: 1, lastReadingMs: now + 3_600_000 });
    expect(sim.counts).toEqual({ readings: 1, rejected: 0, timeRejected: 0, lastReadingMs: now + 3_600_000 });
    expect(ingest.stats).toMatchObject({ accepted: 2, rejected: 3 });
    expect(lines).toEqual([
      expect.objectContaining({ source: 'gps', rejected: 1, msg: 'bad input skipped: time: 2026-11-22T13:00:00.000Z is 3600 s in the future (sources_time.max_future_s = 300)' }),
      expect.objectContaining({ source: 'gps', rejected: 2, msg: 'bad input skipped: line 7: latitude: out of range (200)' }),
      expect.objectContaining({ source: 'gps', rejected: 3, msg: 'bad input skipped: line 8: bad checksum' }),
    ]);
    // Not once per line forever: the first ten, then every 1000th.
    for (let i = 0; i < 2000; i++) gps.reject('garbage');
    expect(lines.map((l) => l.rejected)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1001, 2001]);
    ingest.stop();
    expect(store.db.prepare('SELECT source FROM readings ORDER BY id').pluck().all()).toEqual(['gps', 'sim']);
    store.close();
  });
});

describe('ingest while commits fail', () => {
  it('caps what waits, commits it in batch_size transactions when room comes back, and counts the drops', async () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    // Room for this many more readings (the tmpfs case is test/disk-full.test.ts).
    let room = 0;
    store.roomForReadings = (n) => n <= room;
    const transactions: number[] = [];
    const insert = store.insertReadings.bind(store);
    store.insertReadings = (batch, ...rest) => {
      transactions.push(batch.length);
      room -= batch.length;
      return insert(batch, ...rest);
    };
    const ingest = new Ingest(store, { batchSize: 3, flushIntervalMs: 1000, keepWithoutLoad: false, maxPending: 10 }, silent);
    for (let i = 1; i <= 12; i++) ingest.admit(reading(i));
    expect(ingest.stats.trouble?.kind).toBe('disk-full');
    expect(ingest.stats).toMatchObject({ pending: 10, droppedPending: 2, droppedUncounted: 2 });
    room = 7;
    ingest.flush(true);
    // Two slices fit; the third finds no room and stays queued with the rest.
    expect(transactions).toEqual([3, 3]);
    expect(ingest.stats.pending).toBe(4);
    expect(ingest.stats.trouble?.kind).toBe('disk-full');
    // Delivery purged: tried at once, not at the end of the backoff.
    room = Number.POSITIVE_INFINITY;
    ingest.roomMade();
    await new Promise((r) => setImmediate(r));
    expect(transactions).toEqual([3, 3, 3, 1]);
    expect(ingest.stats).toMatchObject({ pending: 0, trouble: null, droppedUncounted: 0 });
    expect(store.counts().readings).toBe(10);
    expect(store.counters()).toMatchObject({ readings_dropped_pending: 2 });
    store.close();
  });
});

describe('ingest listeners', () => {
  it('a listener that throws does not put a committed batch back in the queue', () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
    const ingest = new Ingest(store, { batchSize: 2, flushIntervalMs: 1000, keepWithoutLoad: false }, silent);
    ingest.onCommit(() => {
      throw new Error('detector bug');
    });
    ingest.admit(reading(1));
    ingest.admit(reading(2));
    ingest.admit(reading(3));
    ingest.stop();
    expect(store.counts().readings).toBe(3);
    expect(ingest.stats).toMatchObject({ committed: 3, commitErrors: 0 });
    store.close();
  });
});

describe('ingest hands accepted readings on before they are committed', () => {
  it('every ADMITTED_EVERY_MS and before each commit, each reading once, however long the commit interval', () => {
    vi.useFakeTimers();
    try {
      const store = Store.open(tmp.buffer);
      store.startLoad({ loadNumber: 'L1', resourceId: 'TRUCK-1', resourceType: 'Truck', stops: [], nowMs: 1 });
      const ingest = new Ingest(store, { batchSize: 100, flushIntervalMs: 60_000, keepWithoutLoad: false }, silent);
      const handed: number[][] = [];
      ingest.onAdmitted((batch) => handed.push(batch.map((r) => r.timeMs - reading(0).timeMs)));
      ingest.start();
      ingest.admit(reading(1)); // the first is committed at once, and handed on before
      expect(handed).toEqual([[1000]]);
      ingest.admit(reading(2));
      ingest.admit(reading(3));
      vi.advanceTimersByTime(ADMITTED_EVERY_MS);
      expect(handed).toEqual([[1000], [2000, 3000]]);
      expect(store.counts().readings).toBe(1);
      ingest.admit(reading(4));
      vi.advanceTimersByTime(60_000 - ADMITTED_EVERY_MS);
      expect(handed).toEqual([[1000], [2000, 3000], [4000]]);
      expect(store.counts().readings).toBe(4);
      ingest.stop();
      expect(handed).toHaveLength(3);
      store.close();
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('loads', () => {
  it('allows several active loads per resource, ends one alone, and explains refusals', () => {
    const store = Store.open(tmp.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: 1 });
    store.startLoad({ loadNumber: 'L2', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: 2 });
    expect(store.activeLoadsOf('T1').map((l) => l.loadNumber)).toEqual(['L1', 'L2']);
    expect(() => store.startLoad({ loadNumber: 'L1', resourceId: 'T2', resourceType: 'Truck', stops: [], nowMs: 2 })).toThrow('load L1 is already active on T1');
    store.endLoad('L1', 3);
    expect(() => store.endLoad('L1', 4)).toThrow('load L1 has already ended');
    expect(() => store.endLoad('nope', 4)).toThrow('no load nope');
    expect(() => store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: 5 })).toThrow('load L1 existed before and has ended; use a new load number');
    expect(store.listLoads().map((l) => l.loadNumber)).toEqual(['L2']);
    expect(store.listLoads(true).map((l) => l.loadNumber)).toEqual(['L1', 'L2']);
    expect(store.getLoad('L1')).toMatchObject({ endedMs: 3, windowFromMs: 1, windowUntilMs: 3 });
    expect(store.getLoad('L2')).toMatchObject({ endedMs: null, windowFromMs: 2, windowUntilMs: null });
    store.startLoad({ loadNumber: 'L3', resourceId: 'T1', resourceType: 'Trailer', stops: [], nowMs: 5 });
    expect(store.activeLoadsOf('T1').map((l) => l.loadNumber)).toEqual(['L2', 'L3']);
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
    const store = Store.open(tmp.buffer, { synchronous: 'NORMAL' });
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: 1 });
    const seen: number[] = [];
    // Observe the level in force inside the milestone's transaction (the one-per-event check runs there).
    const find = store.milestones.findMilestone.bind(store.milestones);
    store.milestones.findMilestone = (...args) => {
      seen.push(store.db.pragma('synchronous', { simple: true }) as number);
      return find(...args);
    };
    recordMilestone(store, configSchema.parse({ api: { scac: 'ABCD' }, sources: [{ type: 'simulator', resource_id: 'T1' }] }), { loadNumber: 'L1', code: 'X3' });
    expect(seen).toEqual([2]); // FULL
    expect(store.db.pragma('synchronous', { simple: true })).toBe(1); // NORMAL again
    store.close();
  });
});
