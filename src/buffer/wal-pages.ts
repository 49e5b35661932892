/**
 * Which pages the WAL beside a database holds in committed, intact frames, read without
 * SQLite (https://sqlite.org/fileformat.html#the_write_ahead_log). A checkpoint that runs out
 * of room writes page 1, with the new page count, before the pages that make the file longer:
 * the file is then shorter than its header says, yet sound, as its missing pages are in the
 * WAL. Only frames whose salts match the WAL header and whose running checksum holds count,
 * up to the last commit frame, as SQLite itself reads them.
 */
import { existsSync, readFileSync } from 'node:fs';

const MAGIC_LE = 0x377f0682;
const MAGIC_BE = 0x377f0683;
const WAL_HEADER = 32;
const FRAME_HEADER = 24;

/** SQLite's WAL checksum of `buf[from, to)`, carried on from `s`. */
function checksum(buf: Buffer, from: number, to: number, bigEndian: boolean, s: [number, number]): [number, number] {
  let [s1, s2] = s;
  for (let i = from; i < to; i += 8) {
    const x0 = bigEndian ? buf.readUInt32BE(i) : buf.readUInt32LE(i);
    const x1 = bigEndian ? buf.readUInt32BE(i + 4) : buf.readUInt32LE(i + 4);
    s1 = (s1 + x0 + s2) >>> 0;
    s2 = (s2 + x1 + s1) >>> 0;
  }
  return [s1, s2];
}

/** The pages of `<dbPath>-wal`'s committed frames (empty without a usable WAL of `pageSize`). */
export function walCommittedPages(dbPath: string, pageSize: number): Set<number> {
  const committed = new Set<number>();
  const file = `${dbPath}-wal`;
  if (!existsSync(file)) return committed;
  const wal = readFileSync(file);
  if (wal.length < WAL_HEADER) return committed;
  const magic = wal.readUInt32BE(0);
  if ((magic !== MAGIC_LE && magic !== MAGIC_BE) || wal.readUInt32BE(8) !== pageSize) return committed;
  const bigEndian = magic === MAGIC_BE;
  let s = checksum(wal, 0, 24, bigEndian, [0, 0]);
  if (s[0] !== wal.readUInt32BE(24) || s[1] !== wal.readUInt32BE(28)) return committed;
  const pending: number[] = [];
  for (let at = WAL_HEADER; at + FRAME_HEADER + pageSize <= wal.length; at += FRAME_HEADER + pageSize) {
    if (wal.readUInt32BE(at + 8) !== wal.readUInt32BE(16) || wal.readUInt32BE(at + 12) !== wal.readUInt32BE(20)) break;
    s = checksum(wal, at, at + 8, bigEndian, s);
    s = checksum(wal, at + FRAME_HEADER, at + FRAME_HEADER + pageSize, bigEndian, s);
    if (s[0] !== wal.readUInt32BE(at + 16) || s[1] !== wal.readUInt32BE(at + 20)) break;
    pending.push(wal.readUInt32BE(at));
    // A commit frame: what came before it is committed.
    if (wal.readUInt32BE(at + 4) !== 0) for (const page of pending.splice(0)) committed.add(page);
  }
  return committed;
}
