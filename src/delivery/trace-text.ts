/**
 * The text of a trace request: numbers as JSON.stringify writes them (faster, for the
 * drain's hot path: traces.ts writes a million points this way), the body's envelope, and the
 * Idempotency-Key its points make.
 */
import { createHash } from 'node:crypto';
import type { Trace, TraceBody } from '../api/schemas.js';
import { placeAt } from '../geo/places.js';

/** 10^places, for the places a number is written with (at most 6). */
export const POWERS_OF_TEN = [1, 10, 100, 1e3, 1e4, 1e5, 1e6];
/** A number rounded to `places` decimals. */
export const round = (n: number, places: number) => Math.round(n * POWERS_OF_TEN[places]) / POWERS_OF_TEN[places];

/** A number as JSON.stringify writes it. */
export const num = (n: number) => (Number.isFinite(n) ? String(n) : 'null');

/** A character outside ASCII (a surrogate half among them). */
export const NON_ASCII = /[\u0080-\uffff]/;

/** Zeros a fraction's digits start with, by how many. */
const ZEROS = ['', '0', '00', '000', '0000', '00000'];

/**
 * A number already rounded to `places` decimals (by round), as JSON.stringify writes
 * it, from its whole count of 10^-places: V8's shortest-form conversion of a double was 15% of
 * a chunk's build (some 2,000 numbers). Up to 15 significant digits a decimal and the double
 * nearest it print the same, and no shorter decimal names that double; 0 (and -0, written
 * 0), larger numbers and the rest go to V8.
 */
export function decimalText(x: number, places: number): string {
  const scale = POWERS_OF_TEN[places];
  const units = Math.round(x * scale);
  if (!(units !== 0 && units < 1e15 && units > -1e15)) return num(x);
  const negative = units < 0;
  const a = negative ? -units : units;
  const whole = Math.floor(a / scale);
  let frac = a - whole * scale;
  let text: string;
  if (frac === 0) text = `${whole}`;
  else {
    let digits = places;
    while (frac % 10 === 0) {
      frac /= 10;
      digits -= 1;
    }
    const f = `${frac}`;
    text = `${whole}.${ZEROS[digits - f.length]}${f}`;
  }
  return negative ? `-${text}` : text;
}

/** Where the traces go in an envelope written by JSON.stringify (no service field holds control characters). */
export const TRACES_MARK = '\u0000traces\u0000';
export const TRACES_MARK_JSON = JSON.stringify(TRACES_MARK);

/** A trace-request body; eventCity/eventState are where the last point is. */
export function traceBody(loadNumber: string, traces: Trace[], extraFields: Record<string, string | number | boolean>): TraceBody {
  const last = traces[traces.length - 1];
  return bodyEnvelope(loadNumber, last?.coordinate.latitude, last?.coordinate.longitude, extraFields, traces) as TraceBody;
}

/** The body's fields in the order the service has always received them: extra fields, loadNumber, place, traces. */
export function bodyEnvelope(loadNumber: string, lat: number | undefined, lon: number | undefined, extraFields: Record<string, string | number | boolean>, traces: unknown): Record<string, unknown> {
  const body: Record<string, unknown> = { ...extraFields, loadNumber };
  const place = lat !== undefined && lon !== undefined ? placeAt(lat, lon) : undefined;
  if (place) {
    body.eventCity = place.city;
    body.eventState = place.state;
  }
  body.traces = traces;
  return body;
}

/** Stable across retries: derived from what the request carries, not from when it is sent. */
export function idempotencyKeyFor(kind: string, deviceId: string, loadNumber: string, traces: Trace[]): string {
  let text = '';
  for (const t of traces) text += keyLine(t.references?.[0]?.value ?? '', t.time.dateTime);
  return keyFromText(kind, deviceId, loadNumber, text);
}

/** A point's traceId: the device and the reading's id, unique for as long as the buffer lives. */
export const traceIdOf = (deviceId: string, readingId: number) => `${deviceId}-${readingId}`;

/** A point's line in what its chunk's idempotency key is made of. */
export const keyLine = (traceId: string, dateTime: string) => `${traceId}|${dateTime}\n`;

/** The key from each point's `traceId|dateTime` line (one hash update for all: the same digest as one per point). */
export function keyFromText(kind: string, deviceId: string, loadNumber: string, text: string): string {
  const h = createHash('sha256');
  h.update(`${kind}\n${deviceId}\n${loadNumber}\n`);
  h.update(text);
  return `${kind}-${h.digest('hex').slice(0, 32)}`;
}
