/**
 * Where and when, in the config: the position history, the GNSS odometer, the system clock and
 * which reading times are believed. Part of the one schema (schema.ts), kept here so that file
 * stays readable; the defaults live here and nowhere else.
 */
import * as z from 'zod';
import { nonNegative, positiveInt } from './sources.js';

/** Where each resource was, kept after its readings are delivered (src/buffer/history.ts): what places a milestone typed after the event. */
export const historySchema = z
  .strictObject({
    /** At most one position per resource per this many seconds (the first fix of each interval). */
    interval_s: positiveInt.min(5).max(3600).default(60),
    /** Positions are kept this many days; 0: no history (what there is goes at the next purge). */
    keep_days: nonNegative.max(366).default(14),
  })
  .prefault({});

/** [history] as the buffer takes it (src/buffer/history.ts HistoryOptions). */
export const historyOptions = (h: z.infer<typeof historySchema>) => ({ intervalS: h.interval_s, keepDays: h.keep_days });

/** The GNSS odometer of sources with `odometer = "gnss"` (src/admission/odometer.ts). */
export const odometerSchema = z
  .strictObject({
    /** A fix slower than this (km/h) adds nothing: a parked receiver's scatter is not distance. */
    min_speed_kmh: nonNegative.max(50).default(3),
    /** A move since the last fix counted that implies more than this (km/h) adds nothing (a wrong fix, a gap). */
    max_speed_kmh: z.number().positive().max(1000).default(200),
  })
  .prefault({});
/** The system clock's standing, and GNSS time while it is not synchronised (src/gnss-clock.ts). */
export const clockSchema = z
  .strictObject({
    /**
     * Whether the system clock is set: `auto` asks the system (systemd-timesyncd's flag file,
     * else the kernel's flag through timedatectl, which chrony and ntpd set too); `yes` and
     * `no` say so for a device where that cannot tell (an RTC and no time daemon: `yes`).
     */
    synchronised: z.enum(['auto', 'yes', 'no']).default('auto'),
    /**
     * While the clock is not synchronised and a GNSS source runs, readings only the system
     * clock stamps wait up to this long (s) for a GNSS time to re-stamp them by, then are
     * kept with the system clock's time and a warning. 0: never held.
     */
    unsynced_hold_s: nonNegative.max(86_400).default(900),
  })
  .prefault({});
/** Which reading times are believed (see src/admission/time-guard.ts). Not applied to the simulator. */
export const sourcesTimeSchema = z
  .strictObject({
    /** A reading more than this far ahead of the system clock is refused. */
    max_future_s: nonNegative.default(300),
    /** A reading older than this is refused. */
    max_past_days: z.number().positive().default(30),
  })
  .prefault({});
