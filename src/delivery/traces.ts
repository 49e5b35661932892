/**
 * Turning buffered readings into trace-request bodies, one load and one chunk at a time.
 *
 * Sampling keeps at most one point per `samplingMs` of reading time, continuing from the
 * last point sent (`load.lastSampleMs`), so the same readings always give the same chunk:
 * a retry after a lost response sends the same body with the same idempotency key.
 */
import { createHash } from 'node:crypto';
import type { Trace, TraceBody } from '../api/schemas.js';
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

/**
 * Build the next chunk of a load from its readings (oldest first). Returns undefined when
 * there is nothing to send yet. `final` (the load has ended) lets the tail that sampling
 * skipped be consumed too, so an ended load does not linger.
 */
export function buildTraceChunk(load: LoadRow, readings: Iterable<StoredReading>, stopAt: (timeMs: number) => number | undefined, opts: TraceBuildOptions, final = false): TraceChunk | undefined {
  const traces: Trace[] = [];
  const readingIds: number[] = [];
  let lastSampleMs = load.lastSampleMs;
  let lastPointId = 0;
  let lastSeenId = 0;
  let temp: { c: number; timeMs: number } | undefined;

  for (const r of readings) {
    lastSeenId = r.id;
    if (r.temp_c !== null) temp = { c: r.temp_c, timeMs: r.time_ms };
    if (r.lat === null || r.lon === null) continue;
    if (opts.pointIds ? !opts.pointIds.has(r.id) : lastSampleMs !== null && r.time_ms - lastSampleMs < opts.samplingMs) continue;
    const trace: Trace = {
      time: eventTime(new Date(r.time_ms), r.lat, r.lon, opts.dateForm),
      resourceId: load.resourceId,
      resourceType: load.resourceType,
      coordinate: { latitude: round(r.lat, 6), longitude: round(r.lon, 6) },
      references: [{ name: 'traceId', value: `${opts.deviceId}-${r.id}` }],
    };
    const stop = stopAt(r.time_ms);
    if (stop !== undefined) trace.stopsequenceNumber = stop;
    if (r.odometer !== null) trace.odometer = round(r.odometer, 1);
    if (temp && r.time_ms - temp.timeMs <= opts.temperatureMaxAgeMs && temp.timeMs - r.time_ms <= opts.temperatureMaxAgeMs) {
      trace.temperature = {
        unitOfMeasure: opts.temperatureUnit,
        value: round(opts.temperatureUnit === 'F' ? toFahrenheit(temp.c) : temp.c, 2),
        // A temperature from this very reading has this point's time: no second zone lookup.
        dateTime: temp.timeMs === r.time_ms ? trace.time.dateTime : eventTime(new Date(temp.timeMs), r.lat, r.lon, opts.dateForm).dateTime,
      };
    }
    traces.push(trace);
    readingIds.push(r.id);
    lastSampleMs = r.time_ms;
    lastPointId = r.id;
    if (traces.length >= opts.maxPoints) break;
  }

  if (traces.length === 0) {
    if (final && lastSeenId > 0) {
      return { body: null, readingIds: [], lastId: lastSeenId, lastSampleMs, points: 0, idempotencyKey: '' };
    }
    return undefined;
  }
  const full = traces.length >= opts.maxPoints;
  const lastId = full || !final ? lastPointId : lastSeenId;
  return {
    body: traceBody(load.loadNumber, traces, opts.extraFields),
    readingIds,
    lastId,
    lastSampleMs,
    points: traces.length,
    idempotencyKey: idempotencyKeyFor('trace', opts.deviceId, load.loadNumber, traces),
  };
}

/** A trace-request body; eventCity/eventState are where the last point is. */
export function traceBody(loadNumber: string, traces: Trace[], extraFields: Record<string, string | number | boolean>): TraceBody {
  const body: Record<string, unknown> = { ...extraFields, loadNumber };
  const last = traces[traces.length - 1];
  const place = last && placeAt(last.coordinate.latitude, last.coordinate.longitude);
  if (place) {
    body.eventCity = place.city;
    body.eventState = place.state;
  }
  body.traces = traces;
  return body as TraceBody;
}

/** Stable across retries: derived from what the request carries, not from when it is sent. */
export function idempotencyKeyFor(kind: string, deviceId: string, loadNumber: string, traces: Trace[]): string {
  const h = createHash('sha256');
  h.update(`${kind}\n${deviceId}\n${loadNumber}\n`);
  // One update with the whole text (same digest as one update per point, a fraction of the calls).
  let text = '';
  for (const t of traces) text += `${t.references?.[0]?.value ?? ''}|${t.time.dateTime}\n`;
  h.update(text);
  return `${kind}-${h.digest('hex').slice(0, 32)}`;
}
