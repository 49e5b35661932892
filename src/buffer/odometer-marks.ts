/**
 * Where the GNSS odometer (src/admission/odometer.ts) stands for each resource, as the buffer
 * holds it: the newest committed reading of the resource with a position and an odometer
 * (each row carries its total), or, once such rows are delivered and purged (or were never
 * kept: no load), the totals written under the state key `odometer` with a commit of readings
 * about once a minute. The newer of the two wins. No table of its own: the state row's page
 * is written with those commits anyway.
 */
import type { DB } from './db.js';

/** A resource's total at one of its fixes: the count goes on from there. */
export interface OdometerMark {
  km: number;
  timeMs: number;
  lat: number;
  lon: number;
}

export const ODOMETER_STATE_KEY = 'odometer';

/** What the marks need of the buffer (Store has it). */
export interface OdometerBuffer {
  db: DB;
  getState<T>(key: string): { value: T; updatedMs: number } | undefined;
  setState(key: string, value: unknown, nowMs: number): void;
}

export class OdometerMarks {
  private saved: Record<string, OdometerMark> | undefined;

  constructor(private readonly buffer: OdometerBuffer) {}

  /** The newest mark of a resource, or undefined when the buffer has none. */
  mark(resourceId: string): OdometerMark | undefined {
    // Newest first along readings_by_resource, to the first row with a total.
    const row = this.buffer.db
      .prepare('SELECT odometer AS km, time_ms AS timeMs, lat, lon FROM readings WHERE resource_id = ? AND odometer IS NOT NULL AND lat IS NOT NULL AND lon IS NOT NULL ORDER BY id DESC LIMIT 1')
      .get(resourceId) as OdometerMark | undefined;
    const saved = this.savedMarks()[resourceId];
    if (!row) return saved;
    if (!saved) return row;
    return saved.timeMs > row.timeMs ? saved : row;
  }

  /**
   * Write these marks, keeping those of the other resources (not seen by this process), in a
   * commit of readings: it throws rather than logs.
   */
  save(marks: Record<string, OdometerMark>, nowMs: number): void {
    const all = { ...this.savedMarks(), ...marks };
    this.buffer.setState(ODOMETER_STATE_KEY, all, nowMs);
    this.saved = all;
  }

  private savedMarks(): Record<string, OdometerMark> {
    this.saved ??= this.buffer.getState<Record<string, OdometerMark>>(ODOMETER_STATE_KEY)?.value ?? {};
    return this.saved;
  }
}
