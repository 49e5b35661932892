/**
 * A buffer read page by page, for salvage when SQLite cannot open it: a file cut short (a
 * torn copy, a card that lost its tail) or with damaged pages. SQLite stops at the first page
 * it cannot read, often the schema's or a b-tree's interior page past the cut, and then reads
 * nothing; most of the table's leaf pages, which hold the rows, are intact.
 *
 * This reads the file format directly (https://www.sqlite.org/fileformat2.html): the schema
 * from page 1's b-tree where it can, each table's pages from its root, and then every other
 * table leaf page (one whose parent was lost) by the shape of its records, matched against
 * the tables' columns. Only rowid tables are read (the WITHOUT ROWID ones hold marks and
 * fixed requests, which salvage does not copy). The WAL is not read: a buffer stopped
 * cleanly has none, and the rows of a torn one are partly in it; salvage says how many
 * pages it could not read.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

/** A column as the table's CREATE statement declares it. */
export interface Column {
  name: string;
  type: string;
}

export interface PageTable {
  name: string;
  columns: Column[];
  /** The column that is the rowid (INTEGER PRIMARY KEY), if any. */
  rowidColumn: number;
  rootPage: number;
  /** Its CREATE statement, as the file's schema has it (or the agent's own). */
  sql: string;
  withoutRowid: boolean;
}

export type Value = number | string | Buffer | null;

export interface PageRead {
  tables: Map<string, PageTable>;
  applicationId: number;
  userVersion: number;
  /** Rows by table: each the values of its columns, the rowid in its place. */
  rows: Map<string, Value[][]>;
  pages: number;
  /** Pages that could not be read: past the end, malformed, or a leaf no table's shape fits. */
  unreadablePages: number;
  /** Rows whose payload ran into a page that could not be read. */
  unreadableRows: number;
}

/** Big-endian unsigned varint at `at`: value and length. */
function varint(b: Buffer, at: number): [number, number] {
  let v = 0;
  for (let i = 0; i < 8; i++) {
    const byte = b[at + i];
    if (byte === undefined) throw new Error('varint past the page');
    v = v * 128 + (byte & 0x7f);
    if ((byte & 0x80) === 0) return [v, i + 1];
  }
  const last = b[at + 8];
  if (last === undefined) throw new Error('varint past the page');
  return [v * 256 + last, 9];
}

/** A record's values (https://www.sqlite.org/fileformat2.html#record_format). */
export function decodeRecord(p: Buffer): Value[] {
  const [headerSize, n0] = varint(p, 0);
  if (headerSize > p.length || headerSize < n0) throw new Error('record header past its payload');
  const types: number[] = [];
  for (let at = n0; at < headerSize; ) {
    const [t, n] = varint(p, at);
    types.push(t);
    at += n;
  }
  const values: Value[] = [];
  let at = headerSize;
  for (const t of types) {
    const size = t >= 12 ? Math.floor((t - 12) / 2) : [0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0][t];
    if (at + size > p.length) throw new Error('record value past its payload');
    if (t === 0) values.push(null);
    else if (t <= 6) values.push(size === 8 ? Number(p.readBigInt64BE(at)) : size === 6 ? p.readIntBE(at, 6) : p.readIntBE(at, size));
    else if (t === 7) values.push(p.readDoubleBE(at));
    else if (t === 8 || t === 9) values.push(t - 8);
    else if (t >= 12 && t % 2 === 0) values.push(Buffer.from(p.subarray(at, at + size)));
    else if (t >= 13) values.push(p.toString('utf8', at, at + size));
    else throw new Error(`reserved serial type ${t}`);
    at += size;
  }
  return values;
}

/** The columns of a CREATE TABLE statement (table constraints left out). */
export function columnsOf(sql: string): { columns: Column[]; rowidColumn: number; withoutRowid: boolean } {
  const open = sql.indexOf('(');
  const close = sql.lastIndexOf(')');
  const body = sql.slice(open + 1, close);
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (c === '(') depth += 1;
    else if (c === ')') depth -= 1;
    else if (c === ',' && depth === 0) {
      parts.push(body.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(body.slice(start));
  const columns: Column[] = [];
  let rowidColumn = -1;
  for (const raw of parts) {
    const text = raw.replace(/--[^\n]*/g, '').trim();
    if (text === '' || /^(PRIMARY|UNIQUE|CHECK|FOREIGN|CONSTRAINT)\b/i.test(text)) continue;
    const [name, type = ''] = text.split(/\s+/);
    if (/^INTEGER$/i.test(type) && /PRIMARY\s+KEY/i.test(text)) rowidColumn = columns.length;
    columns.push({ name: name.replace(/["`[\]]/g, ''), type: type.toUpperCase() });
  }
  return { columns, rowidColumn, withoutRowid: /WITHOUT\s+ROWID\s*$/i.test(sql.slice(close + 1).trim() || '') || /\)\s*WITHOUT\s+ROWID/i.test(sql) };
}

/** Whether a record's values fit a table's columns (an older row may lack columns added later). */
function fits(values: Value[], t: PageTable): boolean {
  if (values.length > t.columns.length || values.length < Math.min(2, t.columns.length)) return false;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null) continue;
    if (i === t.rowidColumn) return false; // stored as NULL: the rowid holds it
    const type = t.columns[i].type;
    if (type === 'TEXT' && typeof v !== 'string') return false;
    if ((type === 'INTEGER' || type === 'REAL') && typeof v !== 'number') return false;
    if (type === 'INTEGER' && !Number.isInteger(v)) return false;
  }
  return true;
}

class PageFile {
  readonly pageSize: number;
  readonly usable: number;
  readonly pages: number;
  /** The header's application_id: the buffer's identity. */
  readonly applicationId: number;
  /** The first freelist trunk page (0: none). */
  readonly freelist: number;
  /** The header's user_version: the buffer's schema version. */
  readonly userVersion: number;
  private readonly fd: number;

  constructor(path: string) {
    this.fd = openSync(path, 'r');
    const header = Buffer.alloc(100);
    const size = fstatSync(this.fd).size;
    if (size < 100 || readSync(this.fd, header, 0, 100, 0) < 100 || header.toString('latin1', 0, 16) !== 'SQLite format 3\u0000') {
      closeSync(this.fd);
      throw new Error('not an SQLite file (no header)');
    }
    const raw = header.readUInt16BE(16);
    this.pageSize = raw === 1 ? 65536 : raw;
    if (this.pageSize < 512 || (this.pageSize & (this.pageSize - 1)) !== 0) {
      closeSync(this.fd);
      throw new Error(`not an SQLite file (page size ${raw})`);
    }
    this.usable = this.pageSize - header[20];
    this.pages = Math.floor(size / this.pageSize);
    this.applicationId = header.readInt32BE(68);
    this.freelist = header.readUInt32BE(32);
    this.userVersion = header.readUInt32BE(60);
  }

  /** A whole page, or undefined past the end of the file. */
  page(n: number): Buffer | undefined {
    if (n < 1 || n > this.pages) return undefined;
    const b = Buffer.alloc(this.pageSize);
    return readSync(this.fd, b, 0, this.pageSize, (n - 1) * this.pageSize) === this.pageSize ? b : undefined;
  }

  close(): void {
    closeSync(this.fd);
  }
}

/** A b-tree page's type and cells (offsets), or undefined when it is no b-tree page. */
function cellsOf(f: PageFile, n: number, b: Buffer): { type: number; cells: number[]; right: number } | undefined {
  const at = n === 1 ? 100 : 0;
  const type = b[at];
  if (type !== 0x02 && type !== 0x05 && type !== 0x0a && type !== 0x0d) return undefined;
  const count = b.readUInt16BE(at + 3);
  const headerSize = type === 0x02 || type === 0x05 ? 12 : 8;
  if (at + headerSize + 2 * count > f.usable) return undefined;
  const cells: number[] = [];
  for (let i = 0; i < count; i++) {
    const off = b.readUInt16BE(at + headerSize + 2 * i);
    if (off < at + headerSize || off >= f.usable) return undefined;
    cells.push(off);
  }
  return { type, cells, right: headerSize === 12 ? b.readUInt32BE(at + 8) : 0 };
}

/** The payload of a table leaf cell, following its overflow pages; undefined when one cannot be read. */
function leafPayload(f: PageFile, b: Buffer, off: number): { rowid: number; payload: Buffer } | undefined {
  const [size, n1] = varint(b, off);
  const [rowid, n2] = varint(b, off + n1);
  const start = off + n1 + n2;
  const u = f.usable;
  const x = u - 35;
  let local = size;
  if (size > x) {
    const m = Math.floor(((u - 12) * 32) / 255) - 23;
    const k = m + ((size - m) % (u - 4));
    local = k <= x ? k : m;
  }
  if (start + local > u) return undefined;
  const parts = [b.subarray(start, start + local)];
  let got = local;
  let next = local < size ? b.readUInt32BE(start + local) : 0;
  for (let hops = 0; got < size; hops++) {
    const o = next > 0 && hops < f.pages ? f.page(next) : undefined;
    if (!o) return undefined;
    const take = Math.min(u - 4, size - got);
    parts.push(o.subarray(4, 4 + take));
    got += take;
    next = o.readUInt32BE(0);
  }
  return { rowid, payload: Buffer.concat(parts) };
}

/** The leaf pages of a table b-tree, as far as its interior pages can be read. */
function leavesOf(f: PageFile, root: number, seen: Set<number>): number[] {
  const leaves: number[] = [];
  const stack = [root];
  while (stack.length > 0) {
    const n = stack.pop()!;
    if (seen.has(n)) continue;
    const b = f.page(n);
    const c = b && cellsOf(f, n, b);
    if (!b || !c) continue;
    seen.add(n);
    if (c.type === 0x0d) leaves.push(n);
    else if (c.type === 0x05) {
      for (const off of c.cells) stack.push(b.readUInt32BE(off));
      stack.push(c.right);
    }
  }
  return leaves;
}

/** The freelist's trunk and leaf pages, as far as its trunk pages can be read, added to `seen`. */
function freePages(f: PageFile, seen: Set<number>): void {
  for (let trunk = f.freelist, hops = 0; trunk > 0 && hops < f.pages && !seen.has(trunk); hops++) {
    const b = f.page(trunk);
    if (!b) return;
    seen.add(trunk);
    const count = b.readUInt32BE(4);
    for (let i = 0; i < count && 8 + 4 * i + 4 <= f.usable; i++) seen.add(b.readUInt32BE(8 + 4 * i));
    trunk = b.readUInt32BE(0);
  }
}

/** The rows of a table leaf page; `bad` counts those whose payload cannot be read. */
function rowsOf(f: PageFile, n: number, bad: { rows: number }): Array<{ rowid: number; values: Value[] }> | undefined {
  const b = f.page(n);
  const c = b && cellsOf(f, n, b);
  if (!b || !c || c.type !== 0x0d) return undefined;
  const rows: Array<{ rowid: number; values: Value[] }> = [];
  for (const off of c.cells) {
    try {
      const cell = leafPayload(f, b, off);
      if (!cell) {
        bad.rows += 1;
        continue;
      }
      rows.push({ rowid: cell.rowid, values: decodeRecord(cell.payload) });
    } catch {
      bad.rows += 1;
    }
  }
  return rows;
}

/**
 * Every row that can be read. `known` gives the tables' CREATE statements to fall back on
 * when the file's own schema cannot be read (the agent's current schema).
 */
export function readPages(path: string, known: ReadonlyArray<{ name: string; sql: string }>): PageRead {
  const f = new PageFile(path);
  try {
    const bad = { rows: 0 };
    const seen = new Set<number>();
    // The schema: sqlite_schema's rows are (type, name, tbl_name, rootpage, sql).
    const tables = new Map<string, PageTable>();
    for (const leaf of leavesOf(f, 1, seen)) {
      for (const { values } of rowsOf(f, leaf, bad) ?? []) {
        const [type, name, , root, sql] = values;
        if (type !== 'table' || typeof name !== 'string' || typeof root !== 'number' || typeof sql !== 'string' || name.startsWith('sqlite_')) continue;
        const c = columnsOf(sql);
        tables.set(name, { name, columns: c.columns, rowidColumn: c.rowidColumn, rootPage: root, sql, withoutRowid: c.withoutRowid });
      }
    }
    // Tables the file's schema no longer shows take the agent's own definition (no root: found by shape).
    for (const k of known) {
      const c = columnsOf(k.sql);
      if (!tables.has(k.name)) tables.set(k.name, { name: k.name, columns: c.columns, rowidColumn: c.rowidColumn, rootPage: 0, sql: k.sql, withoutRowid: c.withoutRowid });
    }
    const rowTables = [...tables.values()].filter((t) => !t.withoutRowid);
    const rows = new Map<string, Value[][]>(rowTables.map((t) => [t.name, []]));
    // Free pages keep old copies of deleted rows (delivered readings): never read as rows.
    freePages(f, seen);
    const take = (t: PageTable, found: Array<{ rowid: number; values: Value[] }>) => {
      const out = rows.get(t.name)!;
      for (const { rowid, values } of found) {
        const row: Value[] = t.columns.map((_, i) => (i < values.length ? values[i] : null));
        if (t.rowidColumn >= 0) row[t.rowidColumn] = rowid;
        out.push(row);
      }
    };
    for (const t of rowTables) {
      if (t.rootPage <= 0) continue;
      for (const leaf of leavesOf(f, t.rootPage, seen)) take(t, rowsOf(f, leaf, bad) ?? []);
    }
    // Leaves whose interior pages were lost: by the shape of their records. A page that fits
    // more than one table, or none, is not guessed at.
    let unreadablePages = 0;
    for (let n = 2; n <= f.pages; n++) {
      if (seen.has(n)) continue;
      const b = f.page(n);
      const c = b && cellsOf(f, n, b);
      if (!c || c.type !== 0x0d) continue;
      const found = rowsOf(f, n, bad) ?? [];
      if (found.length === 0) continue;
      const owners = rowTables.filter((t) => found.every((r) => fits(r.values, t)));
      if (owners.length === 1) take(owners[0], found);
      else unreadablePages += 1;
    }
    return { tables, applicationId: f.applicationId, userVersion: f.userVersion, rows, pages: f.pages, unreadablePages, unreadableRows: bad.rows };
  } finally {
    f.close();
  }
}
