/**
 * The GNSS odometer: for a source whose device has no odometer (gpsd, NMEA), the distance
 * between a resource's fixes, added up as readings are admitted and written in each row's
 * `odometer` (km), so it is stored with the commit that holds the fix.
 *
 * A receiver standing still reports positions scattered over metres: summed at 1 Hz that is
 * kilometres a day of a parked truck. A move is not counted while the fix says the truck is
 * slower than `odometer.min_speed_kmh`, nor when it is within the receivers' own error
 * estimates (`Reading.errorM`: two fixes each within its error of one spot are up to the sum
 * of the two apart); the last counted fix stays the anchor, so a slow creep is
 * counted once the truck moves on. After a gap (no fix in a tunnel, the agent off) the
 * straight line from the anchor is counted when it implies a plausible speed (at most
 * `odometer.max_speed_kmh`); otherwise (a wrong fix, the device moved while off) nothing is
 * added and the count goes on from the new fix.
 *
 * The count goes on across restarts from the buffer's newest mark (buffer/odometer-marks.ts).
 */
import type { Logger } from 'pino';
import type { OdometerMark, OdometerMarks } from '../buffer/odometer-marks.js';
import { distanceM } from '../geo/distance.js';
import type { Reading } from '../reading.js';

/** How a source's readings get an odometer (from the config: the source's and `[odometer]`). */
export interface OdometerOptions {
  /** Where the count starts when the buffer has no total for the resource, or a higher one than it holds. */
  startKm?: number;
  minSpeedKmh: number;
  maxSpeedKmh: number;
}

/** The marks are written with a commit of readings at most this often (and at a stop). */
export const ODOMETER_SAVE_EVERY_MS = 60_000;

interface Track {
  km: number;
  /** The last fix counted (or where the count starts). */
  anchor?: { timeMs: number; lat: number; lon: number; errorM?: number };
  /** A gap was logged at info already (later ones at debug). */
  gapLogged: boolean;
}

const round = (km: number) => Math.round(km * 1000) / 1000;

export class GnssOdometers {
  private readonly tracks = new Map<string, Track>();
  /** A total moved since the marks were last handed to a commit. */
  private dirty = false;
  private lastSaveMs = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly log: Logger,
    /** Undefined (tools, tests without a buffer): the count starts again with each process. */
    private readonly marks: OdometerMarks | undefined,
    private readonly monotonic: () => number = () => performance.now(),
  ) {}

  /**
   * Give a reading with a position the resource's total. A reading that has its own
   * odometer (an exec line or a message that carries one) keeps it; one without a position
   * gets none; a fix older than the last one counted gets none (it has no place in the count).
   */
  apply(r: Reading, opts: OdometerOptions): void {
    if (r.lat === undefined || r.lon === undefined || r.odometer !== undefined) return;
    const t = this.track(r.resourceId, opts);
    const errorM = r.errorM !== undefined && Number.isFinite(r.errorM) && r.errorM >= 0 ? r.errorM : undefined;
    const fix = { timeMs: r.timeMs, lat: r.lat, lon: r.lon, errorM };
    const a = t.anchor;
    if (!a) {
      t.anchor = fix;
      this.dirty = true;
      r.odometer = round(t.km);
      return;
    }
    const dtS = (r.timeMs - a.timeMs) / 1000;
    if (dtS < 0) return;
    r.odometer = round(t.km);
    if (dtS === 0) return;
    const d = distanceM(a, fix);
    const slow = r.speed !== undefined && r.speed * 3.6 < opts.minSpeedKmh;
    const withinError = errorM !== undefined && d <= errorM + (a.errorM ?? 0);
    if (slow || withinError) return;
    t.anchor = fix;
    this.dirty = true;
    const kmh = (d / dtS) * 3.6;
    if (kmh > opts.maxSpeedKmh) {
      const fields = { resourceId: r.resourceId, km: Math.round(d / 100) / 10, gapS: Math.round(dtS), kmh: Math.round(kmh), maxKmh: opts.maxSpeedKmh };
      const msg = 'GNSS odometer: a jump faster than odometer.max_speed_kmh since the last fix counted; the gap adds nothing';
      if (t.gapLogged) this.log.debug(fields, msg);
      else this.log.info(fields, msg);
      t.gapLogged = true;
      return;
    }
    t.km += d / 1000;
    r.odometer = round(t.km);
  }

  /**
   * The write that saves every total, when one moved and the last save is ODOMETER_SAVE_EVERY_MS
   * old (or `now`); else undefined. It rides with a commit of readings.
   */
  due(now = false): ((nowMs: number) => void) | undefined {
    const marks = this.marks;
    if (!marks || !this.dirty) return undefined;
    if (!now && this.monotonic() - this.lastSaveMs < ODOMETER_SAVE_EVERY_MS) return undefined;
    this.lastSaveMs = this.monotonic();
    this.dirty = false;
    return (nowMs) => marks.save(this.snapshot(), nowMs);
  }

  /** The total and anchor of each resource counted by this process. */
  snapshot(): Record<string, OdometerMark> {
    const out: Record<string, OdometerMark> = {};
    for (const [id, t] of this.tracks) if (t.anchor) out[id] = { km: round(t.km), timeMs: t.anchor.timeMs, lat: t.anchor.lat, lon: t.anchor.lon };
    return out;
  }

  private track(resourceId: string, opts: OdometerOptions): Track {
    let t = this.tracks.get(resourceId);
    if (t) return t;
    const mark = this.marks?.mark(resourceId);
    const start = opts.startKm ?? 0;
    if (mark && mark.km >= start) {
      t = { km: mark.km, anchor: { timeMs: mark.timeMs, lat: mark.lat, lon: mark.lon }, gapLogged: false };
      this.log.debug({ resourceId, km: mark.km }, 'GNSS odometer goes on from the buffer');
    } else {
      // odometer_start_km above the buffer's total: the operator set the truck's own reading.
      t = { km: start, gapLogged: false };
      this.log.info({ resourceId, km: start, bufferKm: mark?.km }, 'GNSS odometer starts');
    }
    this.tracks.set(resourceId, t);
    return t;
  }
}
