/**
 * The ledger: the one statement of what a load and a reading are at any moment, and of every
 * change between those states. The record modules (loads.ts, readings.ts, windows.ts,
 * reclaim.ts, salvage) run these statements; none of them writes the rules out again, so a
 * rule cannot drift in one place and not in another. Shipped migrations keep frozen copies
 * of their own (migrations.ts): this SQL may change, theirs never does.
 *
 * A load: open (`load start`: its window opens at that time by reading time, its cursor
 * `acked_id` at the highest reading id so far) -> ended (`load end`: the window's end,
 * `window_until_ms`, is set; readings the daemon still holds from before it may join) ->
 * closed (the daemon committed what it held from before the end: `end_id`, no higher id is
 * the load's) -> late (closed, still within `loads.late_readings_s` of its end: a reading of
 * its window arriving now raises `end_id` to it, windows.ts) -> done (closed with its cursor
 * at `end_id`: nothing due, out of the partial index loads_undone).
 *
 * A reading: admitted (validated, in the daemon's memory) -> committed, either WAITING (some
 * load's window holds it) or UNASSIGNED (none does; kept only with
 * `privacy.record_without_load`) -> due to each load whose window holds it, above its cursor
 * (DUE) -> in that load's fixed request (requests.ts: the same points under the same key until
 * an answer) -> acknowledged (the load's cursor passes it, or it is marked SENT ahead of the
 * cursor) or parked (a dead letter: marked PARKED for that load, the row HELD) -> purged
 * once no load still waits for it (AWAITED false; reclaim.ts), or dropped by a limit and
 * counted.
 */
import { MarkState, ReadingState } from './types.js';

/**
 * The late period, `loads.late_readings_s` (`lateMs`): a load ended at or after
 * lateSince(now) still takes the readings of its window; it does until lateUntil(its end).
 */
export const lateSince = (nowMs: number, lateMs: number): number => nowMs - lateMs;
export const lateUntil = (endedMs: number, lateMs: number): number => endedMs + lateMs;

/** Far beyond any reading id or time: the open end of a window. */
export const FAR = 9_007_199_254_740_991;

// --- The window, in SQL and in JS: the same rule, kept side by side. ---

/**
 * A reading `r` in the window of load `l`: its resource, its time, and no later than the
 * load's last id once the load is closed (`l.end_id`). The cursor is DUE's.
 */
export const IN_WINDOW = `r.resource_id = l.resource_id AND r.id <= coalesce(l.end_id, ${FAR}) AND r.time_ms >= l.window_from_ms AND r.time_ms < coalesce(l.window_until_ms, ${FAR})`;

/** IN_WINDOW's times, in JS (a window read into memory: the batch's loads, a salvaged file's). */
export function holdsTime(fromMs: number, untilMs: number | null, timeMs: number): boolean {
  return timeMs >= fromMs && timeMs < (untilMs ?? FAR);
}

/** IN_WINDOW in JS: the times and the last id (`endId` null: not closed). */
export function inWindow(fromMs: number, untilMs: number | null, endId: number | null, id: number, timeMs: number): boolean {
  return id <= (endId ?? FAR) && holdsTime(fromMs, untilMs, timeMs);
}

/**
 * The window with its bounds as parameters (resource, after id, up to id, from, until),
 * for queries of `readings` alone: one range of readings_by_resource, the times checked on
 * the rows it reads. windowBounds gives the parameters.
 */
export const BOUND_WINDOW = 'resource_id = ? AND id > ? AND id <= ? AND time_ms >= ? AND time_ms < ?';

/** A load's window as stored (loads' columns). */
export interface StoredWindow {
  resource_id: string;
  acked_id: number;
  end_id: number | null;
  window_from_ms: number;
  window_until_ms: number | null;
}

/** BOUND_WINDOW's parameters for a load's window: its ids after `afterId` (and its cursor) up to `maxId`. */
export function windowBounds(w: StoredWindow, afterId: number, maxId = FAR): [resourceId: string, after: number, upTo: number, fromMs: number, untilMs: number] {
  return [w.resource_id, Math.max(afterId, w.acked_id), Math.min(w.end_id ?? FAR, maxId), w.window_from_ms, w.window_until_ms ?? FAR];
}

// --- Which loads, which readings. ---

/** A reading `r` load `l` still has to send: in its window, above its cursor, not sent ahead or parked for it. */
export const DUE = `${IN_WINDOW} AND r.id > l.acked_id AND NOT EXISTS (SELECT 1 FROM load_marks m WHERE m.load_number = l.load_number AND m.reading_id = r.id)`;

/** A load `l` that may still have something to send: open, or closed with its cursor short of its last id (the partial index loads_undone). */
export const UNDONE = '(l.end_id IS NULL OR l.acked_id < l.end_id)';

/** A load `l` a reading committed now may join without being late: not closed (UNDONE too, for loads_undone). */
export const OPEN = `${UNDONE} AND l.end_id IS NULL`;

/**
 * A row `r` some load still has to send: a load whose window holds it has its cursor below
 * it, and did not send it ahead. Through loads_undone: only the open loads and the closed
 * ones not yet done are looked at, however many loads the resource carried before.
 */
export const AWAITED = `EXISTS (SELECT 1 FROM loads l WHERE l.resource_id = r.resource_id AND ${UNDONE} AND ${DUE})`;

/** The id of a load's oldest reading still due (NULL when none), for a query over `loads l`. */
export const FIRST_DUE = `(SELECT r.id FROM readings r WHERE ${DUE} ORDER BY r.id LIMIT 1)`;

/** The highest reading id the buffer ever held, purged or not (0 before the first). */
export const HIGHEST_READING_ID = `SELECT max(coalesce((SELECT max(id) FROM readings), 0), coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'readings'), 0))`;
/** The id the next reading gets: never one used before (see migration 5 -> 6). */
export const NEXT_READING_ID = `${HIGHEST_READING_ID} + 1`;

// --- A load's changes of state. ---

/**
 * Open a load (load_number, resource_id, resource_type, stops, started_ms, window_from_ms,
 * next_stop, resource_id again): its cursor at the highest id so far, its fix at the cursor
 * the resource's newest.
 */
export const START_LOAD = `INSERT INTO loads (load_number, resource_id, resource_type, stops, started_ms, window_from_ms, next_stop, acked_id, fix_ms, fix_lat, fix_lon)
  SELECT ?, ?, ?, ?, ?, ?, ?, (${HIGHEST_READING_ID}), f.time_ms, f.lat, f.lon FROM (SELECT 1) LEFT JOIN newest_fix f ON f.resource_id = ?`;

/**
 * End a load (ended_ms, the end of its window, load_number): the window ends then, and never
 * before a reading above its cursor in it already.
 */
export const END_LOAD = `UPDATE loads AS l SET ended_ms = ?, window_until_ms = max(?, l.window_from_ms,
    coalesce((SELECT max(r.time_ms) + 1 FROM readings r WHERE r.resource_id = l.resource_id AND r.id > l.acked_id AND r.time_ms >= l.window_from_ms), 0))
  WHERE load_number = ?`;

/**
 * A load started with a `from` time takes the unassigned readings of its resource stamped
 * since then (resource, from). Its cursor goes back to below the first of them (EARLY_FIRST),
 * and the resource's other rows between that are in its window by time (another load's)
 * are marked as not its own (EARLY_NOT_OURS: load_number, resource, first id, from), so the
 * load takes exactly those readings and everything committed after its start.
 */
export const EARLY_FIRST = `SELECT min(id) FROM readings WHERE resource_id = ? AND state = ${ReadingState.UNASSIGNED} AND time_ms >= ?`;
export const EARLY_NOT_OURS = `INSERT INTO load_marks (load_number, reading_id, state) SELECT ?, id, ${MarkState.SENT} FROM readings
  WHERE resource_id = ? AND id >= ? AND time_ms >= ? AND state <> ${ReadingState.UNASSIGNED} ON CONFLICT DO NOTHING`;
/** (resource, first id, from): the early readings join the load. */
export const TAKE_EARLY = `UPDATE readings SET state = ${ReadingState.WAITING} WHERE resource_id = ? AND id >= ? AND time_ms >= ? AND state = ${ReadingState.UNASSIGNED}`;
/** (first id - 1, load_number): the cursor below them; no fix known at it. */
export const EARLY_CURSOR = 'UPDATE loads SET acked_id = ?, fix_ms = NULL, fix_lat = NULL, fix_lon = NULL WHERE load_number = ?';

/** Close the loads ended at or before a time (every reading admitted before it is committed): their last id is the highest so far. */
export const CLOSE_ENDED = `UPDATE loads SET end_id = (${NEXT_READING_ID}) - 1 WHERE end_id IS NULL AND ended_ms IS NOT NULL AND ended_ms <= ?`;

/** A closed load takes readings up to a higher id (id, load_number, id): late readings, salvaged ones. */
export const RAISE_END = 'UPDATE loads SET end_id = ? WHERE load_number = ? AND end_id < ?';

/**
 * The service took a load's readings up to an id (id, last sample time twice, correlation
 * id, the fix there: time, lat, lon; load_number): its cursor moves, never back.
 */
export const ACK_LOAD =
  'UPDATE loads SET acked_id = max(acked_id, ?), last_sample_ms = CASE WHEN ? IS NULL THEN last_sample_ms ELSE max(coalesce(last_sample_ms, 0), ?) END, correlation_id = coalesce(?, correlation_id), fix_ms = coalesce(?, fix_ms), fix_lat = coalesce(?, fix_lat), fix_lon = coalesce(?, fix_lon) WHERE load_number = ?';

/** Closed loads with nothing due: done, their cursor at their last id (out of loads_undone). */
export const SETTLE_LOADS = `UPDATE loads AS l SET acked_id = l.end_id
  WHERE l.end_id IS NOT NULL AND l.acked_id < l.end_id AND NOT EXISTS (SELECT 1 FROM readings r WHERE ${DUE})`;

// --- A reading's changes of state for one load (load_marks) and for all (its row). ---

/** A reading of a load sent ahead of its cursor (load_number, reading_id). */
export const MARK_SENT = `INSERT INTO load_marks (load_number, reading_id, state) VALUES (?, ?, ${MarkState.SENT}) ON CONFLICT DO NOTHING`;

/** A reading the service refused for a load (load_number, reading_id): a dead letter's. */
export const MARK_PARKED = `INSERT INTO load_marks (load_number, reading_id, state) VALUES (?, ?, ${MarkState.PARKED}) ON CONFLICT DO UPDATE SET state = excluded.state`;

/** A reading a dead letter or a retry needs (id): neither purged nor dropped by a limit while so. */
export const HOLD_READING = `UPDATE readings SET state = ${ReadingState.HELD} WHERE id = ? AND state = ${ReadingState.WAITING}`;
