/**
 * Turning buffered readings into trace-request bodies, one load and one chunk at a time.
 *
 * Sampling keeps at most one point per `samplingMs` of reading time, continuing from the
 * last point sent (`load.lastSampleMs`), so the same readings always give the same chunk:
 * a retry after a lost response sends the same body with the same idempotency key.
 */
import { createHash } from 'node:crypto';
import type { TimeObject, Trace, TraceBody } from '../api/schemas.js';
import type { LoadRow, MilestoneRow, StoredReading } from '../buffer/store.js';
import { eventTime } from '../geo/timezone.js';
import { placeAt } from '../geo/places.js';

export interface TraceBuildOptions {
  samplingMs: number;
  maxPoints: number;
  dateForm: 'local' | 'utc';
  deviceId: string;
  /** A temperature older than this (relative to the point) is not attached to it. */
  temperatureMaxAgeMs: number;
  temperatureUnit: 'C' | 'F';
  extraFields: Record<string, string | number | boolean>;
  /** Only these readings become points (sampling is not applied): a chunk built again exactly. */
  pointIds?: ReadonlySet<number>;
}

export interface TraceChunk {
  /** Null when the chunk only consumes readings that sampling skipped (an ended load's tail). */
  body: TraceBody | null;
  /** The reading behind each trace point, in the same order as body.traces. */
  readingIds: number[];
  /** Every reading of the load with id <= lastId is covered by this chunk. */
  lastId: number;
  lastSampleMs: number | null;
  points: number;
  idempotencyKey: string;
}

const round = (n: number, places: number) => Math.round(n * 10 ** places) / 10 ** places;

/** Which stop is next at a given time, from the departures recorded for the load. */
export function nextStopResolver(load: LoadRow, milestones: MilestoneRow[], departureCodes: string[]): (timeMs: number) => number | undefined {
  const sequences = load.stops.map((s) => s.sequence).sort((a, b) => a - b);
  const departures = milestones
    .filter((m) => departureCodes.includes(String(m.body.eventCode)) && typeof m.body.stopsequenceNumber === 'number')
    .map((m) => ({
      at: Date.parse(String((m.body.time as { dateTime?: string } | undefined)?.dateTime)),
      seq: m.body.stopsequenceNumber as number,
    }))
    .filter((d) => Number.isFinite(d.at));
  return (timeMs) => {
    let departed = 0;
    for (const d of departures) if (d.at <= timeMs && d.seq > departed) departed = d.seq;
    return sequences.find((s) => s > departed);
  };
}

function toFahrenheit(c: number): number {
  return c * 1.8 + 32;
}

/** One trace point as the walk found it, for a sink to make an object or JSON text of. */
type PointSink = (r: StoredReading, lat: number, lon: number, time: TimeObject, stop: number | undefined, tempValue: number | undefined, tempDateTime: string | undefined) => void;

interface Walk {
  readingIds: number[];
  lastId: number;
  lastSampleMs: number | null;
  points: number;
  /** What the idempotency key is made of (see idempotencyKeyFor). */
  keyText: string;
  /** The last point's position (where eventCity/eventState are found). */
  lastLat: number;
  lastLon: number;
}

/**
 * Which readings become the chunk's points, with their times, stops and temperatures: the one
 * walk behind both forms of a chunk (buildTraceChunk, buildTraceJson). Undefined when there is
 * nothing to send; a Walk with no points when an ended load's skipped tail is only consumed.
 */
function walkChunk(load: LoadRow, readings: Iterable<StoredReading>, stopAt: (timeMs: number) => number | undefined, opts: TraceBuildOptions, final: boolean, sink: PointSink): Walk | undefined {
  const readingIds: number[] = [];
  let lastSampleMs = load.lastSampleMs;
  let lastPointId = 0;
  let lastSeenId = 0;
  let tempC: number | undefined;
  let tempMs = 0;
  let keyText = '';
  let lastLat = 0;
  let lastLon = 0;

  for (const r of readings) {
    lastSeenId = r.id;
    if (r.temp_c !== null) {
      tempC = r.temp_c;
      tempMs = r.time_ms;
    }
    if (r.lat === null || r.lon === null) continue;
    if (opts.pointIds ? !opts.pointIds.has(r.id) : lastSampleMs !== null && r.time_ms - lastSampleMs < opts.samplingMs) continue;
    const time = eventTime(new Date(r.time_ms), r.lat, r.lon, opts.dateForm);
    let tempValue: number | undefined;
    let tempDateTime: string | undefined;
    if (tempC !== undefined && r.time_ms - tempMs <= opts.temperatureMaxAgeMs && tempMs - r.time_ms <= opts.temperatureMaxAgeMs) {
      tempValue = round(opts.temperatureUnit === 'F' ? toFahrenheit(tempC) : tempC, 2);
      // A temperature from this very reading has this point's time: no second zone lookup.
      tempDateTime = tempMs === r.time_ms ? time.dateTime : eventTime(new Date(tempMs), r.lat, r.lon, opts.dateForm).dateTime;
    }
    lastLat = round(r.lat, 6);
    lastLon = round(r.lon, 6);
    sink(r, lastLat, lastLon, time, stopAt(r.time_ms), tempValue, tempDateTime);
    keyText += keyLine(traceIdOf(opts.deviceId, r.id), time.dateTime);
    readingIds.push(r.id);
    lastSampleMs = r.time_ms;
    lastPointId = r.id;
    if (readingIds.length >= opts.maxPoints) break;
  }

  const points = readingIds.length;
  if (points === 0) return final && lastSeenId > 0 ? { readingIds, lastId: lastSeenId, lastSampleMs, points, keyText, lastLat, lastLon } : undefined;
  const lastId = points >= opts.maxPoints || !final ? lastPointId : lastSeenId;
  return { readingIds, lastId, lastSampleMs, points, keyText, lastLat, lastLon };
}

/**
 * Build the next chunk of a load from its readings (oldest first). Returns undefined when
 * there is nothing to send yet. `final` (the load has ended) lets the tail that sampling
 * skipped be consumed too, so an ended load does not linger.
 */
export function buildTraceChunk(load: LoadRow, readings: Iterable<StoredReading>, stopAt: (timeMs: number) => number | undefined, opts: TraceBuildOptions, final = false): TraceChunk | undefined {
  const traces: Trace[] = [];
  const walk = walkChunk(load, readings, stopAt, opts, final, (r, latitude, longitude, time, stop, tempValue, tempDateTime) => {
    const trace: Trace = {
      time,
      resourceId: load.resourceId,
      resourceType: load.resourceType,
      coordinate: { latitude, longitude },
      references: [{ name: 'traceId', value: traceIdOf(opts.deviceId, r.id) }],
    };
    if (stop !== undefined) trace.stopsequenceNumber = stop;
    if (r.odometer !== null) trace.odometer = round(r.odometer, 1);
    if (tempValue !== undefined) trace.temperature = { unitOfMeasure: opts.temperatureUnit, value: tempValue, dateTime: tempDateTime! };
    traces.push(trace);
  });
  if (!walk) return undefined;
  const { keyText, lastLat, lastLon, ...rest } = walk;
  if (walk.points === 0) return { ...rest, body: null, idempotencyKey: '' };
  return { ...rest, body: traceBody(load.loadNumber, traces, opts.extraFields), idempotencyKey: keyFromText('trace', opts.deviceId, load.loadNumber, keyText) };
}

/** A chunk as the JSON text of its request body, which is what the drain sends. */
export interface TraceJsonChunk extends Omit<TraceChunk, 'body'> {
  /** JSON.stringify of buildTraceChunk's body, character for character; null as body is there. */
  json: string | null;
}

/** A number as JSON.stringify writes it. */
const num = (n: number) => (Number.isFinite(n) ? String(n) : 'null');

/**
 * buildTraceChunk's chunk, written straight to JSON text: no trace objects to build, keep
 * across a request and stringify. A drain sends a million points this way; making and
 * serialising the objects took a third of its time and most of its garbage (bench row 2a).
 * test/traces.test.ts checks the text against JSON.stringify of buildTraceChunk's body.
 */
export function buildTraceJson(load: LoadRow, readings: Iterable<StoredReading>, stopAt: (timeMs: number) => number | undefined, opts: TraceBuildOptions, final = false): TraceJsonChunk | undefined {
  // The parts every point shares, escaped once: `"bench-device-` waits for the reading's id.
  const resource = `,"resourceId":${JSON.stringify(load.resourceId)},"resourceType":${JSON.stringify(load.resourceType)},"coordinate":{"latitude":`;
  const traceId = `},"references":[{"name":"traceId","value":${JSON.stringify(`${opts.deviceId}-`).slice(0, -1)}`;
  const unit = `,"temperature":{"unitOfMeasure":${JSON.stringify(opts.temperatureUnit)},"value":`;
  let text = '';
  const walk = walkChunk(load, readings, stopAt, opts, final, (r, lat, lon, time, stop, tempValue, tempDateTime) => {
    text += `${text === '' ? '{' : ',{'}"time":${JSON.stringify(time)}${resource}${num(lat)},"longitude":${num(lon)}${traceId}${r.id}"}]`;
    if (stop !== undefined) text += `,"stopsequenceNumber":${num(stop)}`;
    if (r.odometer !== null) text += `,"odometer":${num(round(r.odometer, 1))}`;
    if (tempValue !== undefined) text += `${unit}${num(tempValue)},"dateTime":${JSON.stringify(tempDateTime)}}`;
    text += '}';
  });
  if (!walk) return undefined;
  const { keyText, lastLat, lastLon, ...rest } = walk;
  if (walk.points === 0) return { ...rest, json: null, idempotencyKey: '' };
  const envelope = JSON.stringify(bodyEnvelope(load.loadNumber, lastLat, lastLon, opts.extraFields, TRACES_MARK));
  const at = envelope.lastIndexOf(TRACES_MARK_JSON);
  const json = `${envelope.slice(0, at)}[${text}]${envelope.slice(at + TRACES_MARK_JSON.length)}`;
  return { ...rest, json, idempotencyKey: keyFromText('trace', opts.deviceId, load.loadNumber, keyText) };
}

/** Where the traces go in an envelope written by JSON.stringify (no service field holds control characters). */
const TRACES_MARK = '\u0000traces\u0000';
const TRACES_MARK_JSON = JSON.stringify(TRACES_MARK);

/** A trace-request body; eventCity/eventState are where the last point is. */
export function traceBody(loadNumber: string, traces: Trace[], extraFields: Record<string, string | number | boolean>): TraceBody {
  const last = traces[traces.length - 1];
  return bodyEnvelope(loadNumber, last?.coordinate.latitude, last?.coordinate.longitude, extraFields, traces) as TraceBody;
}

/** The body's fields in the order the service has always received them: extra fields, loadNumber, place, traces. */
function bodyEnvelope(loadNumber: string, lat: number | undefined, lon: number | undefined, extraFields: Record<string, string | number | boolean>, traces: unknown): Record<string, unknown> {
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
const traceIdOf = (deviceId: string, readingId: number) => `${deviceId}-${readingId}`;

/** A point's line in what its chunk's idempotency key is made of. */
const keyLine = (traceId: string, dateTime: string) => `${traceId}|${dateTime}\n`;

/** The key from each point's `traceId|dateTime` line (one hash update for all: the same digest as one per point). */
function keyFromText(kind: string, deviceId: string, loadNumber: string, text: string): string {
  const h = createHash('sha256');
  h.update(`${kind}\n${deviceId}\n${loadNumber}\n`);
  h.update(text);
  return `${kind}-${h.digest('hex').slice(0, 32)}`;
}
