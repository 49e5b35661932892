/**
 * A garbled first GNSS fix, refused as time but kept as a reading, is set aside once GNSS time
 * is taken (src/admission/garbled-fixes.ts): real NMEA lines through the decoder, the ingest
 * and the GNSS clock on test clocks, into a real buffer file. Before, the reading dated a
 * year ahead (and the GGA-only epoch carrying its date) stayed the truck's last fix.
 */
import { describe, expect, it } from 'vitest';
import { watchGarbledFixes } from '../../src/admission/garbled-fixes.js';
import { Ingest } from '../../src/admission/ingest.js';
import { salvage } from '../../src/buffer/salvage.js';
import { Store } from '../../src/buffer/store.js';
import { TrustedClock } from '../../src/clock.js';
import { configSchema } from '../../src/config/schema.js';
import { MilestoneDetector } from '../../src/milestones/detector.js';
import { GnssClock } from '../../src/gnss-clock.js';
import { NmeaDecoder } from '../../src/sources/nmea.js';
import { logFixture, tempFixture } from '../helpers.js';
import { nmeaFrom } from '../nmea-lines.js';

const TRUE_NOW = Date.parse('2026-11-26T12:00:00Z');
const BEHIND = 12 * 3_600_000;
const DAY = 86_400_000;
const LIMITS = { maxFutureS: 300, maxPastDays: 30 };

const tmp = tempFixture();
const logs = logFixture();

/** A daemon's admission on a wall clock 12 h behind, not synchronised, with a buffer that holds a reading of an earlier run. */
function agent() {
  const c = { wallMs: TRUE_NOW - BEHIND, monoMs: 1000 };
  const clocks = { wall: () => c.wallMs, mono: () => c.monoMs };
  const tick = (ms: number) => {
    c.wallMs += ms;
    c.monoMs += ms;
  };
  const store = Store.open(tmp.buffer);
  logs.open.push(store);
  // The earlier run's last fix, two hours ago: outside this run's window, and good.
  store.insertReadings([{ resourceId: 'T1', timeMs: TRUE_NOW - 2 * 3_600_000, lat: 41.7, lon: -87.7 }], true, ['nmea:T1']);
  const log = logs.logger();
  const gnss = new GnssClock(clocks);
  gnss.setSync({ synchronised: false, from: 'test' });
  const ingest = new Ingest(store, { batchSize: 500, flushIntervalMs: 60_000, keepWithoutLoad: true }, log, clocks.wall);
  watchGarbledFixes(gnss, store, ingest, log);
  const base = { ...LIMITS, clock: new TrustedClock(undefined, clocks), gnss };
  const gps = ingest.intake('nmea:T1', log, { ...base, stamp: 'gnss' });
  const decoder = new NmeaDecoder('T1', { reading: (r, where) => gps.emit(r, where), reject: gps.reject });
  let n = 0;
  const feed = (lines: string[]) => {
    for (const l of lines) decoder.line(l, ++n);
  };
  const times = () => (store.db.prepare('SELECT time_ms AS t FROM readings ORDER BY id').all() as Array<{ t: number }>).map((r) => r.t);
  /** `n` good epochs a second apart from `fromMs`; then what the decoder and the ingest hold goes into the buffer. */
  const goodFixes = (n: number, fromMs = TRUE_NOW) => {
    for (let i = 0; i < n; i++) {
      tick(1000);
      feed(epoch(fromMs + i * 1000));
    }
    decoder.flush();
    ingest.flush();
  };
  return { tick, store, ingest, gnss, gps, decoder, feed, goodFixes, times, clocks, c };
}

const epoch = (atMs: number) => nmeaFrom(atMs, 1).text.trim().split('\r\n');

describe('a garbled first fix is set aside once GNSS time is taken', () => {
  it('an RMC dated a year ahead and the GGA-only epoch carrying its date go; the good fixes and the earlier run stay', () => {
    const a = agent();
    const iso = (ms: number) => new Date(ms).toISOString();
    // The first epoch's RMC a year ahead; a GGA-only epoch a second later takes its date.
    a.feed(epoch(TRUE_NOW - 2000 + 365 * DAY));
    a.tick(1000);
    a.feed(epoch(TRUE_NOW - 1000).slice(0, 1));
    // The garbled fix was committed at once (the first reading is), and a minute's flush of
    // the last fix took it (Readings.flushFixes): it is the truck's last fix now.
    a.store.flushFixes();
    expect(a.store.lastFix('T1')?.timeMs).toBe(TRUE_NOW - 2000 + 365 * DAY);
    a.goodFixes(4);
    expect(a.gnss.state()).toBe('gnss');

    // Only the earlier run's fix and the good ones are left, and the last fix is the newest good one.
    expect(a.times()).toEqual([TRUE_NOW - 2 * 3_600_000, TRUE_NOW, TRUE_NOW + 1000, TRUE_NOW + 2000, TRUE_NOW + 3000]);
    expect(a.store.lastFix('T1')?.timeMs).toBe(TRUE_NOW + 3000);
    expect(a.store.lastFixes().map((f) => f.timeMs)).toEqual([TRUE_NOW + 3000]);
    expect(a.ingest.fixes.get('T1')?.timeMs).toBe(TRUE_NOW + 3000);
    // Counted with the other drops (status, /metrics), and said once, with the source, the reading's time and GNSS time.
    expect(a.store.counters().readings_dropped_garbled_date).toBe(2);
    const warned = logs.lines.filter((l) => l.level === 40 && /set aside/.test(l.msg));
    expect(warned).toHaveLength(1);
    expect(warned[0]!.msg).toContain(`2 reading(s) of this run set aside: their receiver's date is garbled`);
    expect(warned[0]!.readings).toEqual([
      `time: nmea:T1's reading of T1 at ${iso(TRUE_NOW - 2000 + 365 * DAY)} is 365 days after GNSS time ${iso(TRUE_NOW + 1000)} (run up 3 s): a garbled date, set aside`,
      `time: nmea:T1's reading of T1 at ${iso(TRUE_NOW - 1000 + 365 * DAY)} is 365 days after GNSS time ${iso(TRUE_NOW + 1000)} (run up 3 s): a garbled date, set aside`,
    ]);
  });

  it('a first fix 20 days behind goes too; a reading of another source with its own clock and the earlier run stay', () => {
    const a = agent();
    const exec = a.ingest.intake('exec:T1', logs.logger(), { ...LIMITS, clock: new TrustedClock(undefined, a.clocks), gnss: a.gnss });
    exec.emit({ resourceId: 'T1', timeMs: TRUE_NOW - 20 * DAY, temperatureC: -18 });
    a.feed(epoch(TRUE_NOW - 20 * DAY - 2000));
    a.goodFixes(3);
    expect(a.gnss.state()).toBe('gnss');
    expect(a.times()).toEqual([TRUE_NOW - 2 * 3_600_000, TRUE_NOW - 20 * DAY, TRUE_NOW, TRUE_NOW + 1000, TRUE_NOW + 2000]);
    expect(a.store.counters().readings_dropped_garbled_date).toBe(1);
    expect(logs.lines.find((l) => /set aside/.test(l.msg))?.readings).toEqual([
      `time: nmea:T1's reading of T1 at ${new Date(TRUE_NOW - 20 * DAY - 2000).toISOString()} is 20 days before GNSS time ${new Date(TRUE_NOW + 1000).toISOString()} (run up 2 s): a garbled date, set aside`,
    ]);
  });

  it('nothing is set aside when the first fixes are good', () => {
    const a = agent();
    a.goodFixes(3);
    expect(a.gnss.state()).toBe('gnss');
    expect(a.times()).toHaveLength(4);
    expect(a.store.counters().readings_dropped_garbled_date).toBeUndefined();
    expect(logs.lines.filter((l) => /set aside/.test(l.msg))).toEqual([]);
  });
});

describe('a garbled first fix is set aside once the clock is synchronised, before two fixes agree', () => {
  it('an RMC a year ahead and its GGA-only epoch go, judged by the synchronised clock; a good fix of the run and the earlier run stay; once a run', () => {
    const a = agent();
    const iso = (ms: number) => new Date(ms).toISOString();
    const known: string[] = [];
    a.gnss.onTimeKnown((t) => known.push(t.by));
    a.feed(epoch(TRUE_NOW - 2000 + 365 * DAY));
    a.tick(1000);
    a.feed(epoch(TRUE_NOW - 1000).slice(0, 1));
    a.tick(1000);
    // One good epoch: it disagrees with the garbled RMC, so no GNSS time is taken.
    a.feed(epoch(TRUE_NOW));
    a.decoder.flush();
    a.store.flushFixes();
    expect(a.gnss.state()).toBe('unsynchronised');
    expect(a.store.lastFix('T1')?.timeMs).toBe(TRUE_NOW - 2000 + 365 * DAY);

    // A time daemon sets the clock (12 h forward) and the answer turns synchronised.
    a.tick(1000);
    a.c.wallMs = TRUE_NOW + 1000;
    a.gnss.setSync({ synchronised: true, from: 'test' });
    expect(a.gnss.state()).toBe('synchronised');
    a.ingest.flush();
    expect(a.times()).toEqual([TRUE_NOW - 2 * 3_600_000, TRUE_NOW]);
    expect(a.store.lastFix('T1')?.timeMs).toBe(TRUE_NOW);
    expect(a.store.lastFixes().map((f) => f.timeMs)).toEqual([TRUE_NOW]);
    // The newest in memory was the garbled one: forgotten, the buffer's is read.
    expect(a.ingest.fixes.get('T1')).toBeUndefined();
    expect(a.store.counters().readings_dropped_garbled_date).toBe(2);
    const warned = () => logs.lines.filter((l) => l.level === 40 && /set aside/.test(l.msg));
    expect(warned()).toHaveLength(1);
    expect(warned()[0]!.msg).toContain(`2 reading(s) of this run set aside: their receiver's date is garbled, outside what the synchronised clock allows`);
    expect(warned()[0]!.clockTime).toBe(iso(TRUE_NOW + 1000));
    expect(warned()[0]!.readings).toEqual([
      `time: nmea:T1's reading of T1 at ${iso(TRUE_NOW - 2000 + 365 * DAY)} is 365 days after the synchronised clock ${iso(TRUE_NOW + 1000)} (run up 3 s): a garbled date, set aside`,
      `time: nmea:T1's reading of T1 at ${iso(TRUE_NOW - 1000 + 365 * DAY)} is 365 days after the synchronised clock ${iso(TRUE_NOW + 1000)} (run up 3 s): a garbled date, set aside`,
    ]);

    // The clock loses its synchronisation and two fixes then agree: GNSS time is taken, the set-aside does not run again.
    a.gnss.setSync({ synchronised: false, from: 'test' });
    a.goodFixes(3, TRUE_NOW + 2000);
    expect(a.gnss.state()).toBe('gnss');
    expect(known).toEqual(['clock']);
    expect(warned()).toHaveLength(1);
    expect(a.store.counters().readings_dropped_garbled_date).toBe(2);
    expect(a.times()).toHaveLength(5);
  });

  it('nothing is looked at when the clock was synchronised before any fix, or turns synchronised again', () => {
    const a = agent();
    const known: string[] = [];
    a.gnss.onTimeKnown((t) => known.push(t.by));
    a.c.wallMs = TRUE_NOW;
    a.gnss.setSync({ synchronised: true, from: 'test' });
    a.tick(1000);
    a.feed(epoch(TRUE_NOW));
    a.decoder.flush();
    a.gnss.setSync({ synchronised: false, from: 'test' });
    a.gnss.setSync({ synchronised: true, from: 'test' });
    a.ingest.flush();
    expect(known).toEqual([]);
    expect(a.times()).toEqual([TRUE_NOW - 2 * 3_600_000, TRUE_NOW]);
  });
});

describe('the milestone detector judges fixes only once their time can be', () => {
  it('a first RMC a year ahead at the stop does not hold it "entering" for a year: the truck parked there arrives on the good fixes', () => {
    const a = agent();
    // A load whose pick-up is where the truck is parked (every epoch of nmeaFrom(t, 1) is at 41.6, -87.6).
    a.store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [{ sequence: 1, type: 'pickup', latitude: 41.6, longitude: -87.6, radiusM: 300 }], nowMs: TRUE_NOW - 60_000 });
    const config = configSchema.parse({ api: { scac: 'ABCD' }, milestones: { dwell_s: 2, min_fixes: 2 }, sources: [{ type: 'simulator', resource_id: 'T1' }] });
    const detector = new MilestoneDetector(
      a.store,
      () => config,
      logs.logger(),
      () => {},
    );
    a.ingest.onAdmitted((batch) => detector.process(batch));
    // The receiver's first epoch a year ahead, handed over on its own (the first of a 5 s hand-over), then a good one a second.
    a.feed(epoch(TRUE_NOW - 2000 + 365 * DAY));
    a.decoder.flush();
    a.ingest.handOver();
    for (let i = 0; i < 6; i++) {
      a.tick(1000);
      a.feed(epoch(TRUE_NOW + i * 1000));
      a.decoder.flush();
      a.ingest.handOver();
    }
    expect(a.gnss.state()).toBe('gnss');
    const timeOf = (m: { body: Record<string, unknown> }) => Date.parse((m.body.time as { dateTime: string }).dateTime);
    const arrivals = a.store.listMilestones().filter((m) => m.body.eventCode === 'X3');
    // Arrived at the first fix of known time there (GNSS time was taken from the second good one).
    expect(arrivals).toHaveLength(1);
    const at = timeOf(arrivals[0]!);
    expect(at).toBeGreaterThanOrEqual(TRUE_NOW);
    expect(at).toBeLessThanOrEqual(TRUE_NOW + 2000);
    // Nothing was judged by the garbled date: no milestone a year ahead.
    expect(a.store.listMilestones().filter((m) => timeOf(m) > TRUE_NOW + DAY)).toEqual([]);
  });
});

describe('what the set-aside leaves alone', () => {
  it('a garbled reading a fixed trace request holds stays: the request goes again with the same points under its key', () => {
    const a = agent();
    a.store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: TRUE_NOW - 3_600_000, fromMs: undefined });
    a.feed(epoch(TRUE_NOW - 2000 + 365 * DAY));
    a.tick(1000);
    a.feed(epoch(TRUE_NOW - 1000).slice(0, 1));
    a.ingest.flush();
    // The first garbled reading is committed (the GGA-only epoch waits in the decoder for the next).
    const ids = (a.store.db.prepare('SELECT id FROM readings ORDER BY id').pluck().all() as number[]).slice(1);
    expect(ids).toHaveLength(1);
    // A push sent it, and its answer was lost: the request is fixed with its key.
    const held = ids[0]!;
    a.store.requests.fix({ loadNumber: 'L1', kind: 'chunk', afterId: held - 1, lastId: held, lastSampleMs: null, pointIds: [held], key: 'key-of-the-first-try', dropped: 0 });
    a.goodFixes(3);
    expect(a.gnss.state()).toBe('gnss');
    // It stays for its request; the GGA-only epoch that took its date goes.
    expect(a.times()).toEqual([TRUE_NOW - 2 * 3_600_000, TRUE_NOW - 2000 + 365 * DAY, TRUE_NOW, TRUE_NOW + 1000, TRUE_NOW + 2000]);
    expect(a.store.requests.fixed('L1', 'chunk')?.pointIds).toEqual([held]);
    expect(a.store.counters().readings_dropped_garbled_date).toBe(1);
  });

  it("readings a salvage copied in during the run stay, though of the same source's name and far older than the run", () => {
    const old = `${tmp.dir}/old.db`;
    const before = Store.open(old);
    before.startLoad({ loadNumber: 'L0', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: TRUE_NOW - 4 * DAY });
    before.insertReadings(
      [0, 1, 2].map((i) => ({ resourceId: 'T1', timeMs: TRUE_NOW - 3 * DAY + i * 1000, lat: 41.8, lon: -87.6 })),
      false,
      ['nmea:T1', 'nmea:T1', 'nmea:T1'],
    );
    before.close();
    const a = agent();
    // The daemon started on a new buffer (the old one moved aside); the operator salvages it beside the daemon.
    const report = salvage(old, a.store, { nowMs: TRUE_NOW - BEHIND });
    expect(report.readings).toBe(3);
    a.feed(epoch(TRUE_NOW - 2000 + 365 * DAY));
    a.goodFixes(3);
    expect(a.gnss.state()).toBe('gnss');
    expect(a.times()).toEqual([TRUE_NOW - 2 * 3_600_000, TRUE_NOW - 3 * DAY, TRUE_NOW - 3 * DAY + 1000, TRUE_NOW - 3 * DAY + 2000, TRUE_NOW, TRUE_NOW + 1000, TRUE_NOW + 2000]);
    expect(a.store.counters().readings_dropped_garbled_date).toBe(1);
  });
});
