import { describe, expect, it } from 'vitest';
import { traceBodySchema } from '../src/api/schemas.js';
import type { LoadRow, MilestoneRow, StoredReading } from '../src/buffer/store.js';
import { buildTraceChunk, buildTraceJson, decimalText, idempotencyKeyFor, nextStopResolver, type TraceBuildOptions } from '../src/delivery/traces.js';

const load: LoadRow = {
  loadNumber: 'L1',
  resourceId: 'TRAILER-9',
  resourceType: 'Trailer',
  stops: [
    { sequence: 1, type: 'pickup' },
    { sequence: 2, type: 'delivery' },
  ],
  startedMs: 0,
  endedMs: null,
  windowFromMs: 0,
  windowUntilMs: null,
  endId: null,
  nextStop: 1,
  lastSampleMs: null,
  ackedId: 0,
  correlationId: null,
  cursorFix: null,
};
const T0 = Date.UTC(2026, 0, 15, 18, 0, 0); // 12:00 CST in Chicago
const opts: TraceBuildOptions = {
  samplingMs: 60_000,
  maxPoints: 500,
  dateForm: 'local',
  deviceId: 'dev',
  temperatureMaxAgeMs: 300_000,
  temperatureUnit: 'C',
  extraFields: {},
  temperatureWithoutFix: 'last_fix',
  maxFixAgeMs: 1_800_000,
};
function readings(n: number, everyS = 10, from = 1): StoredReading[] {
  return Array.from({ length: n }, (_, i) => ({
    id: from + i,
    resource_id: 'TRAILER-9',
    load_number: 'L1',
    time_ms: T0 + i * everyS * 1000,
    lat: 41.85,
    lon: -87.65 + i * 0.001,
    speed: 20,
    heading: 90,
    odometer: 1000 + i * 0.2,
    temp_c: -18.04,
  }));
}
const noStop = () => undefined;

describe('trace chunks', () => {
  it('fills every trace field the data allows, and the body passes the shared schema', () => {
    const chunk = buildTraceChunk(load, readings(1), () => 1, opts)!;
    expect(traceBodySchema.safeParse(chunk.body).success).toBe(true);
    expect(chunk.body).toEqual({
      loadNumber: 'L1',
      eventCity: 'Chicago',
      eventState: 'IL',
      traces: [
        {
          time: { dateTime: '2026-01-15T12:00:00.000-06:00', timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' },
          stopsequenceNumber: 1,
          resourceId: 'TRAILER-9',
          resourceType: 'Trailer',
          odometer: 1000,
          temperature: { unitOfMeasure: 'C', value: -18.04, dateTime: '2026-01-15T12:00:00.000-06:00' },
          coordinate: { latitude: 41.85, longitude: -87.65 },
          references: [{ name: 'traceId', value: 'dev-1' }],
        },
      ],
    });
  });

  it('samples at the interval, continuing from the last point sent', () => {
    // 10 minutes at 10 s: one point a minute.
    const chunk = buildTraceChunk(load, readings(60), noStop, opts)!;
    expect(chunk.points).toBe(10);
    expect(chunk.body!.traces.map((t) => t.references![0].value)).toEqual(['dev-1', 'dev-7', 'dev-13', 'dev-19', 'dev-25', 'dev-31', 'dev-37', 'dev-43', 'dev-49', 'dev-55']);
    // The tail after the last point stays for the next push (the load is still active).
    expect(chunk.lastId).toBe(55);
    const next = buildTraceChunk(
      { ...load, lastSampleMs: chunk.lastSampleMs },
      readings(10, 10, 56).map((r, i) => ({ ...r, time_ms: T0 + (55 + i) * 10_000 })),
      noStop,
      opts,
    )!;
    expect(next.body!.traces[0].references![0].value).toBe('dev-61');
  });

  it('builds exactly the given points again, whatever sampling would pick from what is left', () => {
    const sent = buildTraceChunk(load, readings(60), noStop, opts)!;
    const ids = new Set(sent.readingIds);
    // A limit dropped the first point's reading meanwhile: sampling alone would now pick
    // readings 2, 8, ... and skip the ones that were sent.
    const left = readings(60).filter((r) => r.id !== 1);
    const again = buildTraceChunk(load, left, noStop, { ...opts, pointIds: ids }, true)!;
    expect(again.readingIds).toEqual(sent.readingIds.filter((id) => id !== 1));
    expect(again.body!.traces).toEqual(sent.body!.traces.slice(1));
  });

  it('cuts chunks at max_traces_per_request and gives the same chunk the same idempotency key', () => {
    const small = { ...opts, samplingMs: 0, maxPoints: 25 };
    const a = buildTraceChunk(load, readings(100), noStop, small)!;
    const b = buildTraceChunk(load, readings(100), noStop, small)!;
    expect(a.points).toBe(25);
    expect(a.lastId).toBe(25);
    expect(a.idempotencyKey).toMatch(/^trace-[0-9a-f]{32}$/);
    expect(b.idempotencyKey).toBe(a.idempotencyKey);
    const other = buildTraceChunk(load, readings(100, 10, 26), noStop, small)!;
    expect(other.idempotencyKey).not.toBe(a.idempotencyKey);
  });

  it('uses the UTC form by option, converts to Fahrenheit, drops stale temperatures, adds extra fields', () => {
    const r = readings(2, 600);
    r[1].temp_c = null; // the second point's latest temperature is 10 minutes old
    const chunk = buildTraceChunk(load, r, noStop, { ...opts, dateForm: 'utc', temperatureUnit: 'F', extraFields: { source: 'carrier' } })!;
    const body = chunk.body as Record<string, unknown> & { traces: { time: { dateTime: string }; temperature?: { value: number; unitOfMeasure: string } }[] };
    expect(body.source).toBe('carrier');
    expect(body.traces[0].time.dateTime).toBe('2026-01-15T18:00:00Z');
    expect(body.traces[0].temperature).toMatchObject({ unitOfMeasure: 'F', value: -0.47 });
    expect(body.traces[1].temperature).toBeUndefined();
  });

  it('skips temperature-only readings as points but attaches their value; returns nothing when nothing is due', () => {
    const r = readings(2, 60);
    r[0] = { ...r[0], lat: null, lon: null, temp_c: 4.5 };
    r[1] = { ...r[1], temp_c: null };
    const chunk = buildTraceChunk(load, r, noStop, opts)!;
    expect(chunk.points).toBe(1);
    expect(chunk.body!.traces[0].temperature?.value).toBe(4.5);
    expect(buildTraceChunk(load, [], noStop, opts)).toBeUndefined();
  });

  it('places a temperature-only reading where the fixes stopped at the last fix before it, kept with the cursor', () => {
    // The load's fix at its cursor: its row may be long purged.
    const parked = { ...load, lastSampleMs: T0 - 60_000, cursorFix: { timeMs: T0 - 60_000, lat: 41.85, lon: -87.65 } };
    const r = readings(4, 60).map((x) => ({ ...x, lat: null, lon: null, temp_c: 3 + x.id / 10 }));
    const chunk = buildTraceChunk(parked, r, noStop, opts)!;
    expect(chunk.readingIds).toEqual([1, 2, 3, 4]);
    expect(chunk.body!.traces.map((t) => [t.coordinate, t.temperature?.value, t.temperature?.dateTime === t.time.dateTime])).toEqual(r.map((x) => [{ latitude: 41.85, longitude: -87.65 }, x.temp_c, true]));
    expect(chunk.body!.traces[1].time.dateTime).toBe('2026-01-15T12:01:00.000-06:00');
    expect(chunk).toMatchObject({ lastId: 4, dropped: 0, fix: parked.cursorFix });
    // Built again from its ids (a split, a retry), the same points.
    expect(buildTraceChunk(parked, r, noStop, { ...opts, pointIds: new Set(chunk.readingIds) }, true)!.body).toEqual(chunk.body);
  });

  it('drops one with no fix within maxFixAgeMs (or by option), and lets the cursor pass it; while fixes come it is no point of its own', () => {
    const stale = { ...load, cursorFix: { timeMs: T0 - 31 * 60_000, lat: 41.85, lon: -87.65 } };
    const r = readings(6, 60);
    for (const i of [0, 1, 3, 5]) r[i] = { ...r[i], lat: null, lon: null };
    r[3] = { ...r[3], time_ms: r[2].time_ms + 30_000 }; // half a minute after a fix: its point carries it
    const chunk = buildTraceChunk(stale, r, noStop, opts)!;
    // 1 and 2 have no fix recent enough; 3 is a fix; 4 rides along; 5 a point; 6 is at 5's fix.
    expect(chunk.readingIds).toEqual([3, 5, 6]);
    expect(chunk.body!.traces[2].coordinate).toEqual(chunk.body!.traces[1].coordinate);
    expect(chunk).toMatchObject({ lastId: 6, dropped: 2, fix: { timeMs: r[4].time_ms, lat: r[4].lat, lon: r[4].lon } });
    // Only drops: nothing to send, the cursor goes past the last of them (the rest may join a point).
    const only = buildTraceChunk(stale, r.slice(0, 2), noStop, opts)!;
    expect(only).toMatchObject({ body: null, points: 0, dropped: 2, lastId: 2, fix: stale.cursorFix });
    // "drop": however recent the fix.
    const dropped = buildTraceChunk(stale, r, noStop, { ...opts, temperatureWithoutFix: 'drop' })!;
    expect(dropped).toMatchObject({ readingIds: [3, 5], dropped: 3, lastId: 6 });
  });

  it("consumes an ended load's tail that sampling skipped", () => {
    const r = readings(3, 10);
    const chunk = buildTraceChunk({ ...load, endedMs: 1, lastSampleMs: T0 }, r, noStop, opts, true)!;
    expect(chunk.body).toBeNull();
    expect(chunk.lastId).toBe(3);
  });
});

describe('trace chunks written straight to JSON (what the drain sends)', () => {
  /** Readings of every kind: across zones and the date line, with and without odometer, temperature and position. */
  function mixed(n: number, seed: number): StoredReading[] {
    let x = seed;
    const rand = () => {
      x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
      return x / 2_147_483_648;
    };
    return Array.from({ length: n }, (_, i) => {
      const kind = rand();
      return {
        id: 1000 + i * 3,
        resource_id: 'TRAILER-9',
        load_number: 'L1',
        time_ms: T0 + i * 7_000 + Math.floor(rand() * 1000),
        lat: kind < 0.1 ? null : -60 + rand() * 130,
        lon: kind < 0.1 ? null : -179.999 + rand() * 359.998,
        speed: null,
        heading: null,
        odometer: rand() < 0.3 ? null : rand() * 1e6,
        temp_c: rand() < 0.4 ? null : -40 + rand() * 80,
      };
    });
  }

  it('writes a number rounded to 0-6 decimals as JSON.stringify does', () => {
    let x = 7;
    const rand = () => {
      x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
      return x / 2_147_483_648;
    };
    const round = (n: number, places: number) => Math.round(n * 10 ** places) / 10 ** places;
    const wrong: string[] = [];
    const check = (n: number, places: number) => {
      const r = round(n, places);
      if (decimalText(r, places) !== JSON.stringify(r)) wrong.push(`${n} to ${places}: ${decimalText(r, places)} vs ${JSON.stringify(r)}`);
    };
    // Positions, odometers, temperatures and far beyond: 10^-7 to 10^12, either sign.
    for (let i = 0; i < 200_000; i++) check((rand() - 0.5) * 2 * 10 ** (rand() * 19 - 7), i % 7);
    for (const n of [0, -0, 1e-7, -4e-7, 5e-7, 1e-6, -1e-6, 0.1, 0.7, 1.005, 2.675, 180, -180, -87.6298, 41.878113, 999_999_999.999_999, 1e15, 1e16, 1e21, 1e300])
      for (let places = 0; places <= 6; places++) check(n, places);
    expect(wrong.slice(0, 5)).toEqual([]);
    expect(decimalText(Number.NaN, 2)).toBe('null');
  });

  it('writes, character for character, JSON.stringify of the body buildTraceChunk makes, with the same key and cursor', () => {
    const stopAt = (ms: number) => ((ms - T0) % 3 === 0 ? undefined : 1 + ((ms - T0) % 4));
    const variants: Array<[string, Partial<TraceBuildOptions>, boolean]> = [
      ['local, C', {}, false],
      ['UTC, F, extra fields, sampling off', { dateForm: 'utc', temperatureUnit: 'F', samplingMs: 0, extraFields: { source: 'carrier', n: 1.5, ok: true } }, false],
      ['extra fields named like the body', { samplingMs: 0, extraFields: { traces: 'x', loadNumber: 'other', eventCity: 'Nowhere' } }, false],
      ['a device id to escape, small chunks, ended load', { deviceId: 'dev"1\\', maxPoints: 7, samplingMs: 0 }, true],
      ['old temperatures dropped', { temperatureMaxAgeMs: 5_000, samplingMs: 0 }, false],
      ['temperatures without a fix dropped', { temperatureWithoutFix: 'drop' }, false],
      ['fixes too old to place temperatures', { maxFixAgeMs: 10_000, samplingMs: 0 }, false],
      ['no traceId references (traces.references = "none")', { references: 'none', samplingMs: 0 }, false],
    ];
    let compared = 0;
    let placed = 0;
    let dropped = 0;
    // A name outside ASCII (the text is encoded as UTF-8) and one within it (written as it is),
    // with and without a fix at the cursor.
    const cursorFixes = [null, { timeMs: T0 - 1000, lat: 19.4326, lon: -99.1332 }];
    for (const [name, o, final, resource] of ['TRK "7"\\ü', 'TRK "7"\\'].flatMap((resourceId) =>
      cursorFixes.flatMap((cursorFix) => variants.map(([n, v, f]) => [`${n}, ${resourceId}, ${cursorFix ? 'a' : 'no'} fix`, v, f, { ...load, resourceId, resourceType: 'Truck', cursorFix }] as const)),
    )) {
      for (const seed of [1, 2, 3]) {
        const rs = mixed(120, seed);
        const object = buildTraceChunk(resource, rs, stopAt, { ...opts, ...o }, final);
        const json = buildTraceJson(resource, rs, stopAt, { ...opts, ...o }, final);
        expect(object, name).toBeDefined();
        const { body, ...rest } = object!;
        expect({ name, ...json, bytes: undefined }).toEqual({ name, ...rest, bytes: undefined });
        expect(json!.bytes?.toString('utf8'), name).toBe(body === null ? undefined : JSON.stringify(body));
        if (json!.bytes) expect(json!.bytes.length, name).toBe(Buffer.byteLength(JSON.stringify(body)));
        compared += object!.points;
        placed += object!.readingIds.filter((id) => rs.find((r) => r.id === id)!.lat === null).length;
        dropped += object!.dropped;
      }
    }
    expect(compared).toBeGreaterThan(500);
    // traces.references = "none": no point carries one, and the key is the same as with them
    // (made of the traceIds whether sent or not), so a setting changed between two sends of a chunk changes no key.
    const rs = mixed(120, 1);
    const without = buildTraceJson(load, rs, stopAt, { ...opts, samplingMs: 0, references: 'none' });
    const withRefs = buildTraceJson(load, rs, stopAt, { ...opts, samplingMs: 0 });
    expect(without!.bytes!.toString()).not.toContain('references');
    expect(withRefs!.bytes!.toString()).toContain('"references":[{"name":"traceId"');
    expect(without!.idempotencyKey).toBe(withRefs!.idempotencyKey);
    // Temperature-only readings among them, placed at a fix and dropped.
    expect(placed).toBeGreaterThan(20);
    expect(dropped).toBeGreaterThan(20);
    // An ended load whose readings sampling skips: consumed, nothing to send, both ways.
    const tail = readings(3, 10);
    const ended = { ...load, endedMs: 1, lastSampleMs: T0 };
    expect(buildTraceJson(ended, tail, noStop, opts, true)).toEqual({ ...buildTraceChunk(ended, tail, noStop, opts, true), body: undefined, bytes: null });
    expect(buildTraceJson(load, [], noStop, opts)).toBeUndefined();
  });

  it('a reading salvaged from another buffer goes under the traceId it had there, in both forms and in the key', () => {
    const stopAt = (ms: number) => ((ms - T0) % 3 === 0 ? undefined : 1);
    for (const seed of [1, 2, 3]) {
      // Kept traceIds among the rest: plain, one to escape, one outside ASCII.
      const rs = mixed(120, seed).map((r, i) => (i % 4 === 0 ? { ...r, trace_id: i % 8 === 0 ? `old"dev\\ü-${r.id}` : `old-dev-${r.id}` } : r));
      const o = { ...opts, samplingMs: 0 };
      const object = buildTraceChunk(load, rs, stopAt, o);
      const json = buildTraceJson(load, rs, stopAt, o);
      const { body, ...rest } = object!;
      expect({ ...json, bytes: undefined }).toEqual({ ...rest, bytes: undefined });
      expect(json!.bytes?.toString('utf8')).toBe(JSON.stringify(body));
      const named = new Map(rs.map((r) => [r.id, r.trace_id ?? `${opts.deviceId}-${r.id}`]));
      expect(body!.traces.map((t) => t.references?.[0]?.value)).toEqual(object!.readingIds.map((id) => named.get(id)));
      expect(body!.traces.some((t) => t.references?.[0]?.value.startsWith('old'))).toBe(true);
      // The key is made of what goes out: renamed points, another key.
      expect(object!.idempotencyKey).toBe(idempotencyKeyFor('trace', opts.deviceId, load.loadNumber, body!.traces));
      expect(object!.idempotencyKey).not.toBe(buildTraceChunk(load, mixed(120, seed), stopAt, o)!.idempotencyKey);
    }
  });
});

describe('next stop of a trace point', () => {
  it('follows the departures recorded for the load, by their time', () => {
    const dep = (seq: number, iso: string, code = 'AF'): MilestoneRow => ({
      id: seq,
      loadNumber: 'L1',
      ref: 'r',
      createdMs: 0,
      attempts: 0,
      lastError: null,
      sentMs: null,
      parkedMs: null,
      code,
      stop: seq,
      origin: 'manual',
      needsPlace: false,
      lastStatus: null,
      correlationId: null,
      body: { eventCode: code, stopsequenceNumber: seq, time: { dateTime: iso } },
    });
    const at = nextStopResolver(load, [dep(1, '2026-01-15T13:00:00-06:00'), dep(1, '2026-01-15T12:30:00-06:00', 'X3')], ['AF', 'CD']);
    expect(at(Date.parse('2026-01-15T12:59:59-06:00'))).toBe(1);
    expect(at(Date.parse('2026-01-15T13:00:00-06:00'))).toBe(2);
    const done = nextStopResolver(load, [dep(2, '2026-01-15T20:00:00-06:00', 'CD')], ['AF', 'CD']);
    expect(done(Date.parse('2026-01-15T21:00:00-06:00'))).toBeUndefined();
  });
});
