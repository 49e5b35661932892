/**
 * The rows the buffer hands out and takes in, shared by its modules and their callers.
 */
import type { Stop } from '../milestones/stops.js';

export type { HistoryOptions } from './history.js';

/**
 * What a stored reading is: WAITING (the loads whose windows hold it take it in turn, and it
 * goes once every one has its cursor past it), HELD (a dead letter or a retry of some load
 * needs it: see load_marks; never purged, never dropped by a limit), or UNASSIGNED (kept
 * without a load, `privacy.record_without_load`: no window holds it, never sent). Value 2
 * was "retry requested" before buffer schema 7; such rows are HELD now, the retry in
 * load_marks.
 */
export const ReadingState = { WAITING: 0, HELD: 1, UNASSIGNED: 3 } as const;

/**
 * What a reading is to one load, where it differs from the load's cursor (load_marks):
 * SENT (delivered ahead of the cursor: the newest position after an outage, part of a split
 * request before a failure), PARKED (the service refused it for this load: a dead letter),
 * RETRY (the operator put that dead letter back).
 */
export const MarkState = { SENT: 0, PARKED: 1, RETRY: 2 } as const;

/** What a dead letter keeps of an answer: all of it up to this size. */
export const MAX_ANSWER_CHARS = 65_536;

export interface LoadRow {
  loadNumber: string;
  resourceId: string;
  resourceType: string;
  stops: Stop[];
  /** When `load start` ran. */
  startedMs: number;
  /** When `load end` ran. */
  endedMs: number | null;
  /** The load's window by reading time: readings from this time on... */
  windowFromMs: number;
  /** ...and before this one (null: open). */
  windowUntilMs: number | null;
  /** Once closed (ended, and every reading from before the end committed): no reading above this id is the load's. */
  endId: number | null;
  nextStop: number | null;
  lastSampleMs: number | null;
  /** Readings of this load with an id up to this one are delivered (or sampled away); none below it ever joins. */
  ackedId: number;
  /** The correlation id the service gave the last trace request of this load. */
  correlationId: string | null;
  /**
   * The resource's newest fix at or below the cursor: where a temperature-only reading just
   * after it is placed (`traces.temperature_without_fix`). Null when the resource had none.
   * Kept with the cursor: the fix's own row may be purged long before the temperatures go.
   */
  cursorFix: Fix | null;
}

/** A position and its time. */
export interface Fix {
  timeMs: number;
  lat: number;
  lon: number;
}

export interface StoredReading {
  id: number;
  resource_id: string;
  /** The load it was read for (a reading is stored once, for every load whose window holds it). */
  load_number: string | null;
  time_ms: number;
  lat: number | null;
  lon: number | null;
  speed: number | null;
  heading: number | null;
  odometer: number | null;
  temp_c: number | null;
  /** The traceId it had in a buffer it was salvaged from (null: the device and its id). */
  trace_id?: string | null;
}

/**
 * A reading as a trace point takes it, a row of the chunk query as SQLite returns it: no
 * object per row, no resource or load (the same on every row of a chunk).
 */
export type TraceRow = readonly [id: number, timeMs: number, lat: number | null, lon: number | null, odometer: number | null, tempC: number | null, traceId?: string | null];

export type MilestoneOrigin = 'detected' | 'manual';

export interface MilestoneRow {
  id: number;
  loadNumber: string;
  ref: string;
  body: Record<string, unknown>;
  createdMs: number;
  attempts: number;
  lastError: string | null;
  sentMs: number | null;
  parkedMs: number | null;
  code: string;
  stop: number | null;
  /** Null for milestones recorded before the origin was kept. */
  origin: MilestoneOrigin | null;
  /** Recorded without a position: the daemon fills the place in from its newest fix when it sends. */
  needsPlace: boolean;
  lastStatus: number | null;
  correlationId: string | null;
}

/** A milestone about to be committed. */
export interface NewMilestone {
  loadNumber: string;
  ref: string;
  body: Record<string, unknown>;
  origin: MilestoneOrigin;
  needsPlace?: boolean;
  /**
   * One per load, code and stop: an earlier one makes a detected milestone be skipped and a
   * manual one be refused (DuplicateEventError), checked inside the commit's transaction.
   */
  unique?: boolean;
}

/** The newest known position of a resource, kept when its readings are purged. */
export interface LastFix {
  resourceId: string;
  timeMs: number;
  lat: number;
  lon: number;
  speed: number | null;
  heading: number | null;
}

/** What the service said when it took a record. */
export interface Receipt {
  status: number;
  correlationId?: string;
  /** 409: the service already had it. */
  duplicate?: boolean;
}

/** Geofence and delay state of one stop of a load (see milestones/detector.ts). */
export interface StopState {
  state: 'outside' | 'entering' | 'inside' | 'departed';
  firstInsideMs: number | null;
  lastInsideMs: number | null;
  insideFixes: number;
  outsideFixes: number;
  arrivedMs: number | null;
  departedMs: number | null;
  delayReportedS: number | null;
}

export interface DeadLetter {
  id: number;
  kind: 'milestone' | 'trace';
  loadNumber: string;
  /** Milestone id or reading id. */
  recordId: number;
  /** Every reading a trace request refused as a whole parks (recordId is the first); null for one record. */
  recordIds: number[] | null;
  status: number | null;
  response: string | null;
  /** The answer's headers, when there was an answer. */
  headers: Record<string, string> | null;
  body: unknown;
  createdMs: number;
}
