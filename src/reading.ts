/**
 * What a source hands over and the buffer stores: its own file because sources/ (which make
 * readings), admission/ (which judges and batches them), buffer/ (which stores them) and
 * milestones/ (which follows them) all speak it, and none of them should import another only
 * for this type.
 */

/** One observation of one resource. Positions and temperatures may come separately. */
export interface Reading {
  resourceId: string;
  /** Epoch milliseconds of the observation (GPS time where there is one). */
  timeMs: number;
  lat?: number;
  lon?: number;
  /** Metres per second. */
  speed?: number;
  /** Degrees clockwise from true north. */
  heading?: number;
  /** Kilometres. */
  odometer?: number;
  /**
   * The receiver's estimate of its horizontal error, metres, where it gives one (gpsd's eph,
   * NMEA HDOP): the GNSS odometer counts no move within it. Not stored.
   */
  errorM?: number;
  /** Degrees Celsius (sources convert). */
  temperatureC?: number;
  /**
   * Which clock stamped `timeMs`: a GNSS fix's own time (gpsd, NMEA), or this computer's
   * clock at receipt (1-Wire, exec lines without `time`, modules); absent: the device's own
   * clock (an exec line's `time`, MQTT). Decides how the time is judged and whether it is
   * re-stamped while the system clock is not synchronised (src/gnss-clock.ts). Not stored.
   */
  clock?: 'gnss' | 'system';
  /**
   * The date of a GNSS fix was carried from an earlier sentence (an NMEA GGA-only epoch takes
   * the last RMC's date): not a witness of its own to the date, so it does not count towards
   * the two fixes that must agree before GNSS time is taken (src/gnss-first-fix.ts). Not stored.
   */
  dateCarried?: boolean;
  /**
   * A receiver's own time admitted before any true time was known this run (no GNSS time yet,
   * the clock not synchronised): it may be a garbled date, set aside once the time is known
   * (src/admission/garbled-fixes.ts), so the milestone detector does not judge an arrival, a
   * departure or a delay by it. Set at admission (time-guard.ts). Not stored.
   */
  untimed?: boolean;
}
