/**
 * The readings half of `buffer salvage` (salvage.ts): which readings of the old file some
 * load still wants, and copying them a batch at a time into the running buffer, beside the
 * daemon committing its own.
 */
import type Database from 'better-sqlite3';
import { holdsTime, inWindow, NEXT_READING_ID, OPEN, RAISE_END } from './ledger.js';
import type { SalvageReport } from './salvage.js';
import { allRows, columns, deviceOf, type OldLoad, type Row } from './salvage-read.js';
import type { Store } from './store.js';
import { MarkState, ReadingState } from './types.js';

/**
 * The traceId a reading of the old file had, for it to keep (undefined: it gets one from its
 * new id). A traceId is the device and the reading's id. One of this same device with an id
 * this buffer had given before the salvage began (`floor`) could name a reading of its own:
 * such a reading is renamed. Those are the oldest of the old file, mostly delivered long ago;
 * the ids this buffer gives from then on are above every id of the old file (salvage.ts).
 */
export function traceIdKeeper(src: Database.Database, deviceId: string | undefined, floor: number): (oldId: number) => string | undefined {
  const device = deviceOf(src) ?? deviceId;
  if (device === undefined) return () => undefined;
  const own = device === deviceId;
  return (oldId) => (own && oldId <= floor ? undefined : `${device}-${oldId}`);
}

interface Copying {
  old: Map<string, OldLoad>;
  /** The old file's loads have windows (schema 7 and later). */
  windowed: boolean;
  /** Loads this salvage copied (every run of it), which take the readings as the old file said. */
  copiedLoads: ReadonlySet<string>;
  report: SalvageReport;
  deadByRecord: Map<string, Row>;
  copyDead: (d: Row | undefined, recordId: number) => void;
  traceIds: (oldId: number) => string | undefined;
}

/**
 * Copies a batch of readings (in id order), in the caller's transaction. Each goes to the
 * loads here whose windows hold it: the copied loads (their windows from the old file) and
 * the loads already here that are open. A copied load that had it already, or for which it
 * was parked, is told so (load_marks), so nothing is sent twice. A copied load that is closed
 * has its last id moved up to the readings given to it: above it they would never be its.
 */
export function readingCopier(src: Database.Database, target: Store, c: Copying): (rows: Row[]) => void {
  const db = target.db;
  const { old, windowed, copiedLoads, report } = c;
  const readingCols = columns(src, 'readings');
  const marks = windowed ? allRows(src, 'SELECT * FROM load_marks', 'load_marks', report.unreadable) : [];
  const oldMarks = new Map(marks.map((m) => [`${String(m.load_number)}:${String(m.reading_id)}`, Number(m.state)]));
  const byResource = (loads: Iterable<OldLoad>) => {
    const map = new Map<string, OldLoad[]>();
    for (const o of loads) map.set(o.resource, [...(map.get(o.resource) ?? []), o]);
    return map;
  };
  const oldByResource = byResource(old.values());
  const copiedByResource = byResource([...copiedLoads].map((n) => old.get(n)!));

  // Ids past every one the buffer ever gave (the table is not AUTOINCREMENT: migration 5 -> 6).
  const insertReading = db.prepare(
    `INSERT INTO readings (id, resource_id, time_ms, lat, lon, speed, heading, odometer, temp_c, source, state, trace_id) VALUES ((${NEXT_READING_ID}), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const insertMark = db.prepare('INSERT INTO load_marks (load_number, reading_id, state) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET state = excluded.state');
  const upsertFix = db.prepare(
    `INSERT INTO last_fix (resource_id, time_ms, lat, lon, speed, heading) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (resource_id) DO UPDATE SET time_ms = excluded.time_ms, lat = excluded.lat, lon = excluded.lon,
         speed = excluded.speed, heading = excluded.heading WHERE excluded.time_ms > last_fix.time_ms`,
  );
  const openHere = db.prepare(`SELECT l.load_number, l.window_from_ms, l.window_until_ms FROM loads l WHERE l.resource_id = ? AND ${OPEN}`).raw();
  const extend = db.prepare(RAISE_END);

  return (rows) => {
    const here = new Map<string, Array<[string, number, number | null]>>();
    // The highest new id each copied load was given in this batch.
    const lastOf = new Map<string, number>();
    for (const r of rows) {
      const id = Number(r.id);
      const resource = String(r.resource_id);
      const timeMs = Number(r.time_ms);
      const state = readingCols.has('state') ? Number(r.state) : 0;
      // What each load of the old file still wanted of it, or had parked.
      const wanted = new Set<string>();
      const parked = new Set<string>();
      let unassigned = false;
      if (windowed) {
        unassigned = state === ReadingState.UNASSIGNED;
        for (const o of oldByResource.get(resource) ?? []) {
          if (!inWindow(o.from, o.until, o.endId, id, timeMs)) continue;
          const mark = oldMarks.get(`${o.n}:${id}`);
          if (mark === MarkState.PARKED) parked.add(o.n);
          else if (mark === MarkState.RETRY || (mark === undefined && id > o.acked)) wanted.add(o.n);
        }
      } else if (r.load_number === null) {
        unassigned = true;
      } else {
        const n = String(r.load_number);
        if (state === 1) parked.add(n);
        else if (state === 2 || id > (old.get(n)?.acked ?? 0)) wanted.add(n);
      }
      if (!unassigned && wanted.size === 0 && parked.size === 0) {
        report.skippedDelivered += 1;
        continue;
      }
      for (const n of [...wanted, ...parked]) {
        if (!target.getLoad(n)) {
          wanted.delete(n);
          parked.delete(n);
        }
      }
      const copiedHolding = (copiedByResource.get(resource) ?? []).filter((o) => holdsTime(o.from, o.until, timeMs)).map((o) => o.n);
      let open = here.get(resource);
      if (!open) {
        open = (openHere.all(resource) as Array<[string, number, number | null]>).filter(([n]) => !copiedLoads.has(n));
        here.set(resource, open);
      }
      const heldHere = open.some(([, from, until]) => holdsTime(from, until, timeMs));
      if (!unassigned && parked.size === 0 && copiedHolding.length === 0 && !heldHere) {
        report.skippedNoLoad += 1;
        continue;
      }
      const dead = [...parked].map((n) => c.deadByRecord.get(`trace:${id}:${n}`));
      const rowState = unassigned ? ReadingState.UNASSIGNED : parked.size > 0 ? ReadingState.HELD : ReadingState.WAITING;
      const info = insertReading.run(
        resource,
        timeMs,
        r.lat,
        r.lon,
        r.speed,
        r.heading,
        r.odometer,
        r.temp_c,
        r.source ?? null,
        rowState,
        (typeof r.trace_id === 'string' ? r.trace_id : c.traceIds(id)) ?? null,
      );
      const newId = Number(info.lastInsertRowid);
      if (!unassigned) {
        for (const n of copiedHolding) {
          lastOf.set(n, newId);
          if (!wanted.has(n) && !parked.has(n)) insertMark.run(n, newId, MarkState.SENT);
        }
        for (const [i, n] of [...parked].entries()) {
          if (copiedLoads.has(n)) lastOf.set(n, newId);
          insertMark.run(n, newId, MarkState.PARKED);
          c.copyDead(dead[i], newId);
        }
      }
      if (r.lat !== null && r.lon !== null) upsertFix.run(r.resource_id, r.time_ms, r.lat, r.lon, r.speed, r.heading);
      report.readings += 1;
    }
    for (const [n, last] of lastOf) extend.run(last, n, last);
  };
}
