/**
 * A stop's appointment times, read once, when the load starts (`load start --stops`, the
 * fleet link's `load-start`), as a typed `--time` is read (src/milestones/typed-time.ts):
 * with `Z` or an offset it is that instant; without one it is the wall clock of the stop's
 * own place, read in the zone at its coordinates, never in the device's: a Chicago dock's
 * 12:00 read on a device in UTC was six hours early, and the delay detector sent a false SD.
 * What is stored is the instant, written with the offset of that zone
 * (`2026-11-26T12:00:00-06:00`), so nothing reads the text again in another zone.
 */
import { DataError } from '../errors.js';
import { localTimeReadings, localTimeToInstant, readDateTime } from '../geo/localtime.js';
import { formatTime, zoneAt } from '../geo/timezone.js';
import type { Stop } from './stops.js';
import type { MilestoneWarning } from './warnings.js';

/** A stop's appointment that cannot be read: exit 65, no load started (an error answer on the fleet link). */
export class AppointmentError extends DataError {
  readonly code = 'EAPPOINTMENT';
}

type Field = 'start' | 'end';

/** The stops with every appointment time an instant, and what to tell the operator about clock changes. */
export function resolveAppointments(stops: readonly Stop[]): { stops: Stop[]; warnings: MilestoneWarning[] } {
  const warnings: MilestoneWarning[] = [];
  const resolved = stops.map((stop) => {
    const a = stop.appointment;
    if (!a) return stop;
    const out: Partial<Record<Field, string>> = {};
    for (const field of ['start', 'end'] as const) {
      const text = a[field];
      if (text !== undefined) out[field] = resolveOne(stop, field, text, warnings);
    }
    // An end before its start (a typo, or the two swapped) made the delay detector judge the truck late against the wrong time.
    const resolved = { ...stop, appointment: out };
    if (out.start !== undefined && out.end !== undefined && appointmentMs(resolved, 'end') < appointmentMs(resolved, 'start')) {
      throw new AppointmentError(`stop ${stop.sequence} appointment: its end (${out.end}) is before its start (${out.start}); check the two times`);
    }
    return resolved;
  });
  return { stops: resolved, warnings };
}

function resolveOne(stop: Stop, field: Field, text: string, warnings: MilestoneWarning[]): string {
  const name = `stop ${stop.sequence} appointment.${field}`;
  const read = readDateTime(text);
  // The schema checked the form; a stop built by a program may not have been.
  if (!read) throw new AppointmentError(`${name}: expected an ISO 8601 date and time, got ${JSON.stringify(text)}`);
  if (read.kind === 'instant') return text;
  if (stop.latitude === undefined || stop.longitude === undefined) {
    throw new AppointmentError(
      `${name}: ${text} has no UTC offset, and the stop has no latitude/longitude to tell its zone: give the offset (such as ${text}-06:00 for Central Standard Time) or the time in UTC with Z, or the stop's coordinates. A time without one is never read in this device's zone`,
    );
  }
  const zone = zoneAt(stop.latitude, stop.longitude);
  const readings = localTimeReadings(text, zone);
  const ms = readings[0] ?? localTimeToInstant(text, zone);
  const stored = formatTime(new Date(ms), zone, 'local').dateTime.replace('.000', '');
  // Clock changes as for a typed --time (src/geo/localtime.ts): the first of two, a gap moved forward.
  const change = { kind: 'appointment-clock-change', stop: stop.sequence, field, text, zone, readAs: stored } as const;
  if (readings.length === 0) warnings.push(change);
  else if (readings.length > 1) warnings.push({ ...change, second: formatTime(new Date(readings[1]), zone, 'local').dateTime.replace('.000', '') });
  return stored;
}

/**
 * The instant of a stop's appointment start or end; NaN without one. What `load start`
 * stores carries its offset; a load an older version stored may hold a local time, read here
 * as it would be today, in the zone at the stop's coordinates, else in `zone` if given (the
 * driver's page has one from the stop's city), else NaN: never in the device's zone.
 */
export function appointmentMs(stop: Stop, field: Field, zone?: string): number {
  const text = stop.appointment?.[field];
  const read = text === undefined ? undefined : readDateTime(text);
  if (!read) return Number.NaN;
  if (read.kind === 'instant') return read.ms;
  const at = stop.latitude !== undefined && stop.longitude !== undefined ? zoneAt(stop.latitude, stop.longitude) : zone;
  return at === undefined ? Number.NaN : localTimeToInstant(read.text, at);
}
