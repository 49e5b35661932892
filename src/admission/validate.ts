/**
 * Whether a reading is in a form the buffer can store: the first step of admission, the same
 * for every source (built-in or a module), so no source has to be trusted with it.
 */
import type { Reading } from '../reading.js';

/** Why a reading cannot be stored, or undefined when it can. */
export function readingProblem(r: Reading): string | undefined {
  if (typeof r.resourceId !== 'string' || r.resourceId.length === 0 || r.resourceId.length > 64) {
    return 'resourceId: expected a string of 1 to 64 characters';
  }
  if (!Number.isFinite(r.timeMs)) return 'time: not a valid time';
  const hasLat = r.lat !== undefined;
  const hasLon = r.lon !== undefined;
  if (hasLat !== hasLon) return 'position: latitude and longitude must come together';
  if (hasLat && (!Number.isFinite(r.lat) || r.lat! < -90 || r.lat! > 90)) return `latitude: out of range (${r.lat})`;
  if (hasLon && (!Number.isFinite(r.lon) || r.lon! < -180 || r.lon! > 180)) return `longitude: out of range (${r.lon})`;
  if (r.speed !== undefined && (!Number.isFinite(r.speed) || r.speed < 0 || r.speed > 150)) return `speed: out of range (${r.speed})`;
  if (r.heading !== undefined && (!Number.isFinite(r.heading) || r.heading < 0 || r.heading > 360)) {
    return `heading: out of range (${r.heading})`;
  }
  if (r.odometer !== undefined && (!Number.isFinite(r.odometer) || r.odometer < 0)) return `odometer: out of range (${r.odometer})`;
  if (r.temperatureC !== undefined && (!Number.isFinite(r.temperatureC) || r.temperatureC < -100 || r.temperatureC > 150)) {
    return `temperature: out of range (${r.temperatureC})`;
  }
  if (!hasLat && r.temperatureC === undefined) return 'reading has neither a position nor a temperature';
  return undefined;
}
