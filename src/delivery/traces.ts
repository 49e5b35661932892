/**
 * Turning buffered readings into trace-request bodies, one load and one chunk at a time.
 *
 * Sampling keeps at most one point per `samplingMs` of reading time, continuing from the
 * last point sent (`load.lastSampleMs`), so the same readings always give the same chunk:
 * a retry after a lost response sends the same body with the same idempotency key. A
 * reading an interval or more older than that point (a late reading, docs/delivery.md) is
 * thinned against the older points of its chunk instead.
 *
 * A temperature-only reading (a parked reefer's 1-Wire sensor while no fix comes) is a point
 * of its own where the fixes stopped: placed at the resource's last fix before it, or, with no
 * fix recent enough (or `traces.temperature_without_fix = "drop"`), passed by the cursor and
 * counted as dropped. Either way it never waits for a fix that may not come.
 */
import type { TimeObject, Trace, TraceBody } from '../api/schemas.js';
import type { Fix, LoadRow, MilestoneRow, StoredReading, TraceRow } from '../buffer/store.js';
import { eventTime } from '../geo/timezone.js';
import { bodyEnvelope, decimalText, keyFromText, keyLine, NON_ASCII, num, round, TRACES_MARK, TRACES_MARK_JSON, traceBody, traceIdOf } from './trace-text.js';

export { decimalText, idempotencyKeyFor, traceBody } from './trace-text.js';

export interface TraceBuildOptions {
  samplingMs: number;
  maxPoints: number;
  dateForm: 'local' | 'utc';
  deviceId: string;
  /** A temperature older than this (relative to the point) is not attached to it. */
  temperatureMaxAgeMs: number;
  temperatureUnit: 'C' | 'F';
  extraFields: Record<string, string | number | boolean>;
  /**
   * A temperature-only reading with no fix for a sampling interval before it (and a sampling
   * interval after the last point): a point at the last fix (`last_fix`), or dropped (`drop`).
   */
  temperatureWithoutFix: 'last_fix' | 'drop';
  /** traces.references: `none` leaves out each point's traceId reference (default: sent). */
  references?: 'trace-id' | 'none';
  /** The last fix places such a reading only if taken at most this long from its time. */
  maxFixAgeMs: number;
  /** Only these readings become points (sampling is not applied): a chunk built again exactly. */
  pointIds?: ReadonlySet<number>;
}

export interface TraceChunk {
  /** Null when the chunk only consumes readings: what sampling skipped (an ended load's tail), temperatures dropped. */
  body: TraceBody | null;
  /** The reading behind each trace point, in the same order as body.traces. */
  readingIds: number[];
  /** Every reading of the load with id <= lastId is covered by this chunk. */
  lastId: number;
  lastSampleMs: number | null;
  points: number;
  idempotencyKey: string;
  /** Temperature-only readings up to lastId sent nowhere (no fix recent enough, or "drop"): counted with the acknowledgement. */
  dropped: number;
  /** The resource's newest fix at or below lastId: the load's fix at its next cursor (from load.cursorFix on). */
  fix: Fix | null;
}

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
 * What a chunk is built from: readings as objects (a retry, a test), or the pages of rows
 * the buffer's chunk query returns (`store.tracePages`: a drain's million rows).
 */
export type TraceReadings = Iterable<StoredReading> | { pages: Iterable<readonly TraceRow[]> };

/** Readings as objects, as pages of trace rows (lazily: a walk stops at its chunk's size). */
function* pagesOf(readings: Iterable<StoredReading>): Generator<TraceRow[]> {
  let page: TraceRow[] = [];
  for (const r of readings) {
    page.push([r.id, r.time_ms, r.lat, r.lon, r.odometer, r.temp_c, r.trace_id]);
    if (page.length >= 256) {
      yield page;
      page = [];
    }
  }
  if (page.length > 0) yield page;
}

const pagesFrom = (readings: TraceReadings) => ('pages' in readings ? readings.pages : pagesOf(readings));

/** One trace point as the walk found it, for a sink to make an object or JSON text of. */
type PointSink = (r: TraceRow, lat: number, lon: number, time: TimeObject, stop: number | undefined, tempValue: number | undefined, tempDateTime: string | undefined) => void;

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
  /** See TraceChunk. */
  dropped: number;
  fix: Fix | null;
}

/** A fix from the walk's numbers (NaN time: none). */
const fixOf = (timeMs: number, lat: number, lon: number): Fix | null => (Number.isNaN(timeMs) ? null : { timeMs, lat, lon });

/**
 * Which readings become the chunk's points, with their times, stops and temperatures: the one
 * walk behind both forms of a chunk (buildTraceChunk, buildTraceJson). Undefined when there is
 * nothing to send; a Walk with no points when readings are only consumed (an ended load's
 * skipped tail, temperatures dropped).
 */
function walkChunk(load: LoadRow, readings: TraceReadings, stopAt: (timeMs: number) => number | undefined, opts: TraceBuildOptions, final: boolean, sink: PointSink): Walk | undefined {
  const readingIds: number[] = [];
  let lastSampleMs = load.lastSampleMs;
  // The last point older than lastSampleMs: late readings (which fill a gap of the trace the
  // load sent before) are thinned among themselves, not dropped for being older.
  let backSampleMs: number | null = null;
  let lastSeenId = 0;
  let tempC: number | undefined;
  let tempMs = 0;
  let keyText = '';
  let lastLat = 0;
  let lastLon = 0;
  // The resource's newest fix so far (NaN time: none), from the load's at its cursor on: the
  // fix's own row may be long purged. Numbers, not an object a fix: a million rows a drain.
  let fixMs = load.cursorFix?.timeMs ?? Number.NaN;
  let fixLat = load.cursorFix?.lat ?? 0;
  let fixLon = load.cursorFix?.lon ?? 0;
  const placeTemperatures = opts.temperatureWithoutFix === 'last_fix';
  let dropped = 0;
  // The last reading the chunk covers (its last point or drop), and the newest fix there.
  let coveredId = 0;
  let coveredMs = fixMs;
  let coveredLat = fixLat;
  let coveredLon = fixLon;
  /** Whether sampling leaves this reading out: within an interval of the last point, or, behind it, of the last point behind it. */
  const sampledOut = (timeMs: number): boolean => {
    if (lastSampleMs === null) return false;
    const behind = lastSampleMs - timeMs;
    return behind <= 0 ? -behind < opts.samplingMs : behind < opts.samplingMs || (backSampleMs !== null && Math.abs(timeMs - backSampleMs) < opts.samplingMs);
  };

  pages: for (const page of pagesFrom(readings)) {
    for (let i = 0; i < page.length; i++) {
      const r = page[i];
      const [id, timeMs, rawLat, rawLon, , rawTemp] = r;
      lastSeenId = id;
      if (rawTemp !== null) {
        tempC = rawTemp;
        tempMs = timeMs;
      }
      let lat: number;
      let lon: number;
      if (rawLat !== null && rawLon !== null) {
        fixMs = timeMs;
        fixLat = rawLat;
        fixLon = rawLon;
        if (opts.pointIds ? !opts.pointIds.has(id) : sampledOut(timeMs)) continue;
        lat = rawLat;
        lon = rawLon;
      } else {
        if (rawTemp === null) continue;
        // A temperature-only reading stands for itself only where the fixes stopped: while
        // they come, at least one a sampling interval, their points carry its value.
        // A fix after it (a late reading, a parked request sent again) carries nothing of it.
        if (opts.pointIds ? !opts.pointIds.has(id) : sampledOut(timeMs) || (timeMs >= fixMs && timeMs - fixMs < opts.samplingMs)) continue;
        if (!placeTemperatures || !(Math.abs(timeMs - fixMs) <= opts.maxFixAgeMs)) {
          // Sent nowhere: the cursor passes it (counted), it does not wait for a fix.
          if (!opts.pointIds) {
            dropped += 1;
            coveredId = id;
            coveredMs = fixMs;
            coveredLat = fixLat;
            coveredLon = fixLon;
          }
          continue;
        }
        lat = fixLat;
        lon = fixLon;
      }
      const time = eventTime(new Date(timeMs), lat, lon, opts.dateForm);
      let tempValue: number | undefined;
      let tempDateTime: string | undefined;
      if (tempC !== undefined && timeMs - tempMs <= opts.temperatureMaxAgeMs && tempMs - timeMs <= opts.temperatureMaxAgeMs) {
        tempValue = round(opts.temperatureUnit === 'F' ? toFahrenheit(tempC) : tempC, 2);
        // A temperature from this very reading has this point's time: no second zone lookup.
        tempDateTime = tempMs === timeMs ? time.dateTime : eventTime(new Date(tempMs), lat, lon, opts.dateForm).dateTime;
      }
      lastLat = round(lat, 6);
      lastLon = round(lon, 6);
      sink(r, lastLat, lastLon, time, stopAt(timeMs), tempValue, tempDateTime);
      keyText += keyLine(r[6] ?? traceIdOf(opts.deviceId, id), time.dateTime);
      readingIds.push(id);
      if (lastSampleMs === null || timeMs >= lastSampleMs) lastSampleMs = timeMs;
      else backSampleMs = timeMs;
      coveredId = id;
      coveredMs = fixMs;
      coveredLat = fixLat;
      coveredLon = fixLon;
      if (readingIds.length >= opts.maxPoints) break pages;
    }
  }

  const points = readingIds.length;
  const walk = { readingIds, lastSampleMs, points, keyText, lastLat, lastLon, dropped };
  if (points === 0 && dropped === 0) return final && lastSeenId > 0 ? { ...walk, lastId: lastSeenId, fix: fixOf(fixMs, fixLat, fixLon) } : undefined;
  // An active load's readings after the last point or drop wait: the next may join them.
  if (points >= opts.maxPoints || !final) return { ...walk, lastId: coveredId, fix: fixOf(coveredMs, coveredLat, coveredLon) };
  return { ...walk, lastId: lastSeenId, fix: fixOf(fixMs, fixLat, fixLon) };
}

/**
 * Build the next chunk of a load from its readings (oldest first). Returns undefined when
 * there is nothing to send yet. `final` (the load has ended) lets the tail that sampling
 * skipped be consumed too, so an ended load does not linger.
 */
export function buildTraceChunk(load: LoadRow, readings: TraceReadings, stopAt: (timeMs: number) => number | undefined, opts: TraceBuildOptions, final = false): TraceChunk | undefined {
  const traces: Trace[] = [];
  const walk = walkChunk(load, readings, stopAt, opts, final, (r, latitude, longitude, time, stop, tempValue, tempDateTime) => {
    const trace: Trace = {
      time,
      resourceId: load.resourceId,
      resourceType: load.resourceType,
      coordinate: { latitude, longitude },
    };
    if (opts.references !== 'none') trace.references = [{ name: 'traceId', value: r[6] ?? traceIdOf(opts.deviceId, r[0]) }];
    if (stop !== undefined) trace.stopsequenceNumber = stop;
    if (r[4] !== null) trace.odometer = round(r[4], 1);
    if (tempValue !== undefined) trace.temperature = { unitOfMeasure: opts.temperatureUnit, value: tempValue, dateTime: tempDateTime! };
    traces.push(trace);
  });
  if (!walk) return undefined;
  const { keyText, lastLat, lastLon, ...rest } = walk;
  if (walk.points === 0) return { ...rest, body: null, idempotencyKey: '' };
  return { ...rest, body: traceBody(load.loadNumber, traces, opts.extraFields), idempotencyKey: keyFromText('trace', opts.deviceId, load.loadNumber, keyText) };
}

/** A chunk as its request body's bytes, which is what the drain sends. */
export interface TraceJsonChunk extends Omit<TraceChunk, 'body'> {
  /** JSON.stringify of buildTraceChunk's body in UTF-8, byte for byte; null as body is there. */
  bytes: Buffer | null;
}

/**
 * Where a body's points are written as they are made, one short string each, and reused from
 * chunk to chunk. A body built as one string is some 200 KB: V8 keeps each in its large-object
 * space, joins its thousands of pieces to encode it (some 0.2 ms a request) and collects it
 * with full collections only. Grown as needed; at 500 points it stays about 256 KB.
 */
let scratch = Buffer.allocUnsafe(0);

/**
 * buildTraceChunk's chunk, written straight to the bytes of its JSON text: no trace objects
 * to build, keep across a request and stringify, and no text of the whole body. A drain
 * sends a million points this way (bench row 2a). test/traces.test.ts checks the bytes
 * against JSON.stringify of buildTraceChunk's body.
 */
export function buildTraceJson(load: LoadRow, readings: TraceReadings, stopAt: (timeMs: number) => number | undefined, opts: TraceBuildOptions, final = false): TraceJsonChunk | undefined {
  // The parts every point shares, escaped once: `"bench-device-` waits for the reading's id
  // (a traceId kept from a salvaged buffer is written whole after `reference`).
  const resource = `,"resourceId":${JSON.stringify(load.resourceId)},"resourceType":${JSON.stringify(load.resourceType)},"coordinate":{"latitude":`;
  const reference = '},"references":[{"name":"traceId","value":';
  const traceId = `${reference}${JSON.stringify(`${opts.deviceId}-`).slice(0, -1)}`;
  const unit = `,"temperature":{"unitOfMeasure":${JSON.stringify(opts.temperatureUnit)},"value":`;
  let length = 0;
  // A time's zone fields, written once while they stay the same (the same strings: formatTime
  // takes them from its cache of the zone's hours). A dateTime is formatted here, digits and
  // signs only: it needs no escaping.
  let zoneCode: string | undefined;
  let zoneOffset: string | undefined;
  let zoneText = '';
  // A point's text is ASCII when the parts it shares with the others are (the rest is digits,
  // signs and names written here): its bytes are then its characters, written as such, which
  // is faster than encoding it as UTF-8 (the same bytes).
  const sharedAscii = !NON_ASCII.test(resource) && !NON_ASCII.test(traceId) && !NON_ASCII.test(unit);
  let encoding: 'latin1' | 'utf8' = 'utf8';
  const walk = walkChunk(load, readings, stopAt, opts, final, (r, lat, lon, time, stop, tempValue, tempDateTime) => {
    if (time.timeZoneCode !== zoneCode || time.timeZoneOffset !== zoneOffset) {
      zoneCode = time.timeZoneCode;
      zoneOffset = time.timeZoneOffset;
      zoneText = `",${JSON.stringify({ timeZoneCode: zoneCode, timeZoneOffset: zoneOffset }).slice(1)}`;
      encoding = sharedAscii && !NON_ASCII.test(zoneText) ? 'latin1' : 'utf8';
    }
    const kept = r[6];
    const ref = opts.references === 'none' ? '}' : `${kept == null ? `${traceId}${r[0]}"` : `${reference}${JSON.stringify(kept)}`}}]`;
    let text = `${length === 0 ? '{' : ',{'}"time":{"dateTime":"${time.dateTime}${zoneText}${resource}${decimalText(lat, 6)},"longitude":${decimalText(lon, 6)}${ref}`;
    if (stop !== undefined) text += `,"stopsequenceNumber":${num(stop)}`;
    if (r[4] !== null) text += `,"odometer":${decimalText(round(r[4], 1), 1)}`;
    if (tempValue !== undefined) text += `${unit}${decimalText(tempValue, 2)},"dateTime":"${tempDateTime}"}`;
    text += '}';
    // At most 3 bytes a UTF-16 unit (a surrogate pair, 2 units, is 4 bytes).
    if (scratch.length - length < text.length * 3) {
      const grown = Buffer.allocUnsafe(Math.max(2 * scratch.length, length + text.length * 3, 64 * 1024));
      scratch.copy(grown, 0, 0, length);
      scratch = grown;
    }
    length += scratch.write(text, length, kept == null || !NON_ASCII.test(kept) ? encoding : 'utf8');
  });
  if (!walk) return undefined;
  const { keyText, lastLat, lastLon, ...rest } = walk;
  if (walk.points === 0) return { ...rest, bytes: null, idempotencyKey: '' };
  const envelope = JSON.stringify(bodyEnvelope(load.loadNumber, lastLat, lastLon, opts.extraFields, TRACES_MARK));
  const at = envelope.lastIndexOf(TRACES_MARK_JSON);
  const head = `${envelope.slice(0, at)}[`;
  const tail = `]${envelope.slice(at + TRACES_MARK_JSON.length)}`;
  const headBytes = Buffer.byteLength(head);
  const bytes = Buffer.allocUnsafe(headBytes + length + Buffer.byteLength(tail));
  bytes.write(head, 0);
  scratch.copy(bytes, headBytes, 0, length);
  bytes.write(tail, headBytes + length);
  return { ...rest, bytes, idempotencyKey: keyFromText('trace', opts.deviceId, load.loadNumber, keyText) };
}
