/**
 * A package upgrade replaces the CLI while the older daemon keeps running on the buffer: the
 * newer CLI must read the buffer without changing it, and must not migrate it under the daemon
 * (which would then write a schema it does not know). The buffer is the schema-6 fixture
 * written by the agent's own code (test/fixtures/buffer-v6); the daemon's lock is held by a
 * child process through the real lock module, as an older daemon holds it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, readdirSync, readFileSync, statSync, watch } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SCHEMA_VERSION } from '../src/buffer/db.js';
import { openForReading } from '../src/buffer/read.js';
import { Store } from '../src/buffer/store.js';
import { BufferError } from '../src/errors.js';
import { cleanEnv, ROOT, runCli, cliFixture } from './helpers.js';

const FIXTURE = join(ROOT, 'test', 'fixtures', 'buffer-v6', 'buffer.sqlite');
const LOCK_MODULE = join(ROOT, 'dist', 'buffer', 'lock.js');

const fx = cliFixture();
let holder: ChildProcess | undefined;
beforeEach(() => {
  copyFileSync(FIXTURE, fx.buffer);
});
afterEach(async () => {
  if (holder && holder.exitCode === null && holder.signalCode === null) {
    const gone = new Promise((r) => holder!.once('exit', r));
    holder.kill('SIGKILL');
    await gone;
  }
  holder = undefined;
});

/**
 * Another process takes the daemon's lock as `run` does (and, with `write`, keeps the buffer
 * open and commits a reading into its WAL, as a running daemon of the old schema does).
 */
async function holdLock(write = false, migrateAfterMs = 0): Promise<void> {
  const script = `
    const { BufferLock } = await import(${JSON.stringify(LOCK_MODULE)});
    const { default: Database } = await import('better-sqlite3');
    const path = ${JSON.stringify(fx.buffer)};
    // Kept referenced: a connection the garbage collector takes releases its lock.
    globalThis.lock = BufferLock.acquire(path);
    if (${migrateAfterMs} > 0) {
      // A daemon of this version, starting: it migrates the buffer a moment after taking the lock.
      const { migrate } = await import(${JSON.stringify(join(ROOT, 'dist', 'buffer', 'migrations.js'))});
      setTimeout(() => {
        const db = new Database(path);
        migrate(db);
        globalThis.db = db;
      }, ${migrateAfterMs});
    }
    if (${write}) {
      const db = new Database(path);
      globalThis.db = db;
      db.prepare("INSERT INTO readings (resource_id, load_number, time_ms, lat, lon) VALUES ('T2', 'LC', 1780315300000, 41.9, -87.7)").run();
    }
    process.stdout.write('held\\n');
    setInterval(() => {}, 1 << 30);
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  holder = child;
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('held')) resolve();
    });
    child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    child.on('exit', (code) => reject(new Error(`the lock holder exited (${code}): ${out}`)));
  });
}

/** The buffer's files with their size, mtime and content, to see that nothing wrote to them. */
function files(): Record<string, string> {
  const seen: Record<string, string> = {};
  for (const f of readdirSync(fx.dir).filter((n) => n.startsWith('buffer.db') && !n.endsWith('.lock'))) {
    const p = join(fx.dir, f);
    const st = statSync(p);
    // The -shm is SQLite's shared index, not data: readers write in it.
    seen[f] = f.endsWith('-shm') ? 'shm' : `${st.size} ${st.mtimeMs} ${createHash('sha256').update(readFileSync(p)).digest('hex')}`;
  }
  return seen;
}

/** user_version as the file's header says it (read without SQLite, so the look changes nothing). */
function headerVersion(): number {
  return readFileSync(fx.buffer).readUInt32BE(60);
}

describe('a newer CLI beside a daemon of an older schema', () => {
  /** `load start L9` on T9 goes through: exit 0, nothing said. */
  async function startsL9(): Promise<void> {
    const r = await runCli(['load', 'start', 'L9', '--resource', 'T9', '--config', fx.cfg]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
  }
  /** The buffer, opened read-only (it migrates nothing), is at this version's schema and holds L9. */
  function expectL9AtThisSchema(): void {
    const store = Store.open(fx.buffer, { readonly: true });
    try {
      expect(store.db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
      expect(store.getLoad('L9')?.resourceId).toBe('T9');
    } finally {
      store.close();
    }
  }

  it.each([
    ['load start', ['load', 'start', 'L9', '--resource', 'T9']],
    ['load end', ['load', 'end', 'LB']],
    ['milestone', ['milestone', '--load', 'LC', '--code', 'X1', '--stop', '2']],
    ['dead-letter retry', ['dead-letter', 'retry', '--all']],
    ['buffer salvage', ['buffer', 'salvage', FIXTURE]],
  ])('%s refuses to migrate a buffer the daemon holds: exit 75, the file untouched', async (_name, args) => {
    await holdLock();
    const before = files();
    expect(headerVersion()).toBe(6);
    const r = await runCli([...args, '--config', fx.cfg]);
    expect(r.stderr).toContain(`error: ${fx.buffer}: `);
    expect(r.stderr).toContain('the daemon holds it; restart the service to upgrade');
    expect(r.code).toBe(75);
    expect(files()).toEqual(before);
    expect(headerVersion()).toBe(6);
  });

  it('reads it without writing (status, load list, dead-letter list, milestone list) and says the daemon upgrades it', async () => {
    await holdLock();
    const before = files();
    const status = await runCli(['status', '--json', '--config', fx.cfg]);
    expect(status.stderr).toContain(`${fx.buffer} is at buffer schema 6 (this version's is ${SCHEMA_VERSION})`);
    expect(status.stderr).toContain('the daemon upgrades it at its next start');
    const report = JSON.parse(status.stdout) as { activeLoads: Array<{ loadNumber: string }>; queue: { deadLetters: number; pendingMilestones: number } };
    expect(report.activeLoads.map((l) => l.loadNumber)).toEqual(['LB', 'LC']);
    expect(report.queue).toMatchObject({ deadLetters: 1, pendingMilestones: 1 });

    const loads = await runCli(['load', 'list', '--all', '--json', '--config', fx.cfg]);
    expect(loads.code).toBe(0);
    expect((JSON.parse(loads.stdout) as Array<{ loadNumber: string }>).map((l) => l.loadNumber)).toEqual(['LA', 'LB', 'LC', 'LD']);
    const dead = await runCli(['dead-letter', 'list', '--json', '--config', fx.cfg]);
    expect(dead.code).toBe(0);
    expect(JSON.parse(dead.stdout)).toHaveLength(1);
    const milestones = await runCli(['milestone', 'list', '--load', 'LC', '--json', '--config', fx.cfg]);
    expect(milestones.code).toBe(0);
    expect((JSON.parse(milestones.stdout) as Array<{ code: string; state: string }>).map((m) => [m.code, m.state])).toEqual([
      ['X3', 'sent'],
      ['AF', 'pending'],
    ]);

    // Nothing written: no -wal or -shm created, the file as it was, its schema still 6.
    expect(files()).toEqual(before);
    expect(headerVersion()).toBe(6);
  });

  it('reads what the older daemon committed into its WAL, and leaves both files as they were', async () => {
    await holdLock(true);
    expect(existsSync(`${fx.buffer}-wal`)).toBe(true);
    const before = files();
    const loads = await runCli(['load', 'list', '--json', '--config', fx.cfg]);
    expect(loads.code).toBe(0);
    const backlog = (JSON.parse(loads.stdout) as Array<{ loadNumber: string; backlog: number }>).find((l) => l.loadNumber === 'LC')?.backlog;
    const refused = await runCli(['load', 'start', 'L9', '--resource', 'T9', '--config', fx.cfg]);
    expect(refused.code).toBe(75);
    expect(files()).toEqual(before);

    // The old daemon dies (its WAL stays): the reading it committed was seen, and the schema is still 6.
    const gone = new Promise((r) => holder!.once('exit', r));
    holder!.kill('SIGKILL');
    await gone;
    const db = new Database(fx.buffer, { readonly: true });
    try {
      expect(db.pragma('user_version', { simple: true })).toBe(6);
      const waiting = db.prepare("SELECT count(*) FROM readings r JOIN loads l USING (load_number) WHERE load_number = 'LC' AND r.state = 0 AND r.id > l.acked_id").pluck().get();
      expect(backlog).toBe(waiting);
    } finally {
      db.close();
    }
  });

  it('beside a daemon of this version that is still migrating at its start: waits for it, then writes', async () => {
    // Seen in CI: `load start` right after the daemon's start found schema 5 of 11 between two
    // of its steps and refused with 75, as if an older daemon held the buffer.
    await holdLock(false, 500);
    await startsL9();
    expectL9AtThisSchema();
  });

  it('migrates it as before once no daemon holds it', async () => {
    await startsL9();
    expectL9AtThisSchema();
  });

  it('writes beside the daemon as before when the buffer needs no migration', async () => {
    const up = Store.open(fx.buffer);
    up.close();
    await holdLock();
    await startsL9();
  });
});

describe('reading commands open the buffer read-only', () => {
  it('status and load list on a current buffer create no -wal or -shm and change nothing', async () => {
    const store = Store.open(fx.buffer);
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: Date.now() });
    store.close();
    const before = files();
    expect(Object.keys(before)).toEqual(['buffer.db']);
    // A read-write open makes a -wal and deletes it again at close: watched as it happens.
    const created: string[] = [];
    const watcher = watch(fx.dir, (_event, name) => {
      if (name && name !== 'buffer.db' && name.startsWith('buffer.db')) created.push(name);
    });
    try {
      expect((await runCli(['status', '--config', fx.cfg])).code).toBe(3);
      const loads = await runCli(['load', 'list', '--config', fx.cfg]);
      expect(loads.stderr).toBe('');
      expect(loads.stdout).toMatch(/^L1\tT1\t/m);
    } finally {
      watcher.close();
    }
    expect(created).toEqual([]);
    expect(files()).toEqual(before);
  });
});

describe('openForReading', () => {
  it('reads an older buffer from a copy upgraded in memory, which takes no writes', () => {
    const { db, upgradedFrom } = openForReading(fx.buffer);
    try {
      expect(upgradedFrom).toBe(6);
      expect(db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
      expect(() => db.prepare("DELETE FROM loads WHERE load_number = 'LA'").run()).toThrow(/readonly|query_only/i);
    } finally {
      db.close();
    }
    expect(readdirSync(fx.dir).filter((f) => f.startsWith('buffer.db'))).toEqual(['buffer.db']);
    expect(headerVersion()).toBe(6);
  });

  it('an older buffer too large to copy: exit 75, the daemon upgrades it at its next start; nothing changed', () => {
    const before = readFileSync(fx.buffer);
    let error: unknown;
    try {
      openForReading(fx.buffer, { copyLimitBytes: 16 * 1024 }).db.close();
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(BufferError);
    expect((error as BufferError).exitCode).toBe(75);
    expect((error as BufferError).message).toBe(
      `${fx.buffer}: the buffer is at schema 6, older than this version's ${SCHEMA_VERSION}, and too large (${Math.round(before.length / 1024)} KB) to read from a copy upgraded in memory (up to 16 KB); nothing was changed. The daemon upgrades it at its next start: restart the service (systemctl restart telematics-agent), then run this again.`,
    );
    expect(readFileSync(fx.buffer).equals(before)).toBe(true);
    expect(readdirSync(fx.dir).filter((f) => f.startsWith('buffer.db'))).toEqual(['buffer.db']);
  });

  it('a current buffer too large to copy is read in place, read-only', () => {
    const store = Store.open(fx.buffer);
    store.close();
    const { db, upgradedFrom } = openForReading(fx.buffer, { copyLimitBytes: 16 * 1024 });
    try {
      expect(upgradedFrom).toBeUndefined();
      expect(db.readonly).toBe(true);
      expect(db.prepare('SELECT count(*) FROM loads').pluck().get()).toBe(4);
    } finally {
      db.close();
    }
  });
});
