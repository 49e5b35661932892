/**
 * A checkpoint that runs out of room: on a real tmpfs (mounted by the test; needs root, as
 * disk-full.test.ts), SQLite writes page 1, with the new page count, before the pages that
 * make the file longer, and stops at the first one the disk has no room for. The WAL still
 * holds every page, so the buffer is sound; the header alone says "truncated". A daemon
 * restarted on that disk, even once there was room again, refused it as corrupt and told the
 * operator to move it aside.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase } from '../src/buffer/db.js';
import { tempDir, cannotMountTmpfs } from './helpers.js';

const skipReason = cannotMountTmpfs();

/** Fill the file system of `dir` to the last byte. */
function fill(file: string): void {
  const fd = openSync(file, 'w');
  const chunk = Buffer.alloc(4096);
  try {
    for (;;) writeSync(fd, chunk);
  } catch {
    // ENOSPC: full.
  } finally {
    closeSync(fd);
  }
}

describe.skipIf(skipReason)('a buffer whose checkpoint ran out of room', () => {
  let tmp: ReturnType<typeof tempDir>;
  let mnt: string;
  beforeEach(() => {
    tmp = tempDir('ta-ckpt-');
    mnt = join(tmp.dir, 'mnt');
    mkdirSync(mnt);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', mnt], { stdio: 'pipe' });
  });
  afterEach(() => {
    execFileSync('umount', [mnt], { stdio: 'pipe' });
    tmp.cleanup();
  });

  it('opens, with everything in it, on the full disk and once there is room again', () => {
    const path = join(mnt, 'buffer.db');
    const db = openDatabase(path);
    db.pragma('wal_autocheckpoint = 0');
    db.exec('CREATE TABLE payload (id INTEGER PRIMARY KEY, body BLOB)');
    const insert = db.prepare('INSERT INTO payload (body) VALUES (?)');
    for (let i = 0; i < 300; i++) insert.run(Buffer.alloc(2000, i % 251));
    const filler = join(mnt, 'filler');
    fill(filler);
    expect(() => db.pragma('wal_checkpoint(TRUNCATE)')).toThrow(/full/);
    db.close();
    // The state the daemon found: page 1 says more pages than the file has, the WAL holds them.
    const header = readFileSync(path).subarray(0, 100);
    expect(statSync(path).size).toBeLessThan(header.readUInt32BE(28) * header.readUInt16BE(16));
    expect(existsSync(`${path}-wal`)).toBe(true);

    const count = () => {
      const again = openDatabase(path);
      try {
        return again.prepare('SELECT count(*) FROM payload').pluck().get();
      } finally {
        again.close();
      }
    };
    expect(count()).toBe(300);
    rmSync(filler);
    expect(count()).toBe(300);
    const check = new Database(path, { readonly: true });
    expect(check.pragma('integrity_check', { simple: true })).toBe('ok');
    check.close();
  });
});
