/**
 * Time while the system clock is not synchronised: how the agent learns it (a real flag file,
 * a real child process in place of timedatectl), how fixes and system-stamped readings are
 * judged and re-stamped (src/gnss-clock.ts), and the hold of system-stamped readings until a
 * GNSS time comes (src/admission/clock-hold.ts), through a real buffer.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ClockHold } from '../../src/admission/clock-hold.js';
import { Ingest } from '../../src/admission/ingest.js';
import { judgeTime } from '../../src/admission/time-guard.js';
import { Store } from '../../src/buffer/store.js';
import { TrustedClock } from '../../src/clock.js';
import { clockSyncOf, probeClockSync } from '../../src/clock-sync.js';
import { GnssClock, LATENCY_MS } from '../../src/gnss-clock.js';
import type { Reading } from '../../src/reading.js';
import { NmeaDecoder } from '../../src/sources/nmea.js';
import { logFixture, tempFixture, writeFile } from '../helpers.js';
import { nmeaFrom } from '../nmea-lines.js';

const TRUE_NOW = Date.parse('2026-11-26T12:00:00Z');
const BEHIND = 12 * 3_600_000;
const LIMITS = { maxFutureS: 300, maxPastDays: 30 };

/** A wall clock 12 h behind and a monotonic clock, both moved by the test. */
function clocks() {
  const c = { wallMs: TRUE_NOW - BEHIND, monoMs: 1000 };
  return {
    c,
    sources: { wall: () => c.wallMs, mono: () => c.monoMs },
    tick(ms: number) {
      c.wallMs += ms;
      c.monoMs += ms;
    },
  };
}

/** A GNSS clock on the test's clocks (synchronised or not), the warnings it tells, and the limits to judge fixes with. */
function gnssTold(synchronised = false) {
  const k = clocks();
  const gnss = new GnssClock(k.sources);
  const told: string[] = [];
  gnss.onWarning((text) => told.push(text));
  gnss.setSync({ synchronised, from: 'test' });
  return { k, gnss, told, t: { ...LIMITS, clock: new TrustedClock(undefined, k.sources), gnss } };
}

const tmp = tempFixture();
const logs = logFixture();

function logger() {
  return logs.logger();
}

describe('is the system clock synchronised?', () => {
  it("systemd-timesyncd's flag file says yes without asking anything else", async () => {
    const flag = writeFile(tmp.dir, 'synchronized', '');
    expect(await probeClockSync({ flagFile: flag, timedatectl: ['false'] })).toEqual({ synchronised: true, from: flag });
  });

  it('else the kernel flag through timedatectl: yes, no, or unknown when it cannot answer', async () => {
    const flagFile = join(tmp.dir, 'absent');
    expect(await probeClockSync({ flagFile, timedatectl: ['sh', '-c', 'echo no'] })).toEqual({ synchronised: false, from: 'the kernel (timedatectl)' });
    expect(await probeClockSync({ flagFile, timedatectl: ['sh', '-c', 'echo yes'] })).toEqual({ synchronised: true, from: 'the kernel (timedatectl)' });
    const down = await probeClockSync({ flagFile, timedatectl: ['sh', '-c', 'echo "System has not been booted with systemd as init system (PID 1)." >&2; exit 1'] });
    expect(down.synchronised).toBeUndefined();
    expect(down.from).toMatch(/^unknown: no .*absent and timedatectl failed \(System has not been booted with systemd/);
    const missing = await probeClockSync({ flagFile, timedatectl: [join(tmp.dir, 'no-such-timedatectl')] });
    expect(missing.synchronised).toBeUndefined();
  });

  it('clock.synchronised = "yes" or "no" is the answer, without asking', async () => {
    expect(await clockSyncOf('no', { timedatectl: ['sh', '-c', 'echo yes'] })).toEqual({ synchronised: false, from: 'clock.synchronised = "no"' });
    expect(await clockSyncOf('yes', { timedatectl: ['sh', '-c', 'echo no'] })).toEqual({ synchronised: true, from: 'clock.synchronised = "yes"' });
    expect((await clockSyncOf('auto', { flagFile: join(tmp.dir, 'absent'), timedatectl: ['sh', '-c', 'echo no'] })).synchronised).toBe(false);
  });
});

describe('judging times with the system clock 12 h behind', () => {
  const fix = (timeMs: number): Reading => ({ resourceId: 'T1', timeMs, lat: 41.6, lon: -87.6, clock: 'gnss' });
  const temp = (timeMs: number): Reading => ({ resourceId: 'T1', timeMs, temperatureC: 4, clock: 'system' });

  it('synchronised: a fix 12 h ahead of the system clock is refused, as always', () => {
    const k = clocks();
    const gnss = new GnssClock(k.sources);
    gnss.setSync({ synchronised: true, from: 'test' });
    const t = { ...LIMITS, clock: new TrustedClock(undefined, k.sources), gnss };
    expect(judgeTime(fix(TRUE_NOW), t).problem).toMatch(/43200 s in the future/);
    expect(gnss.state()).toBe('synchronised');
  });

  it('not synchronised: fixes keep their own time, judged against GNSS time carried on the monotonic clock', () => {
    const k = clocks();
    const gnss = new GnssClock(k.sources);
    gnss.setSync({ synchronised: false, from: 'test' });
    const t = { ...LIMITS, clock: new TrustedClock(undefined, k.sources), gnss };
    expect(gnss.state()).toBe('unsynchronised');
    // Without GNSS time the agent would refuse this fix; now it is kept (marked untimed: no
    // milestone is judged by it), and with the next that agrees, it is the clock.
    expect(judgeTime(fix(TRUE_NOW - 1000), t)).toEqual({ reading: { ...fix(TRUE_NOW - 1000), untimed: true }, problem: undefined });
    expect(gnss.state()).toBe('unsynchronised');
    k.tick(1000);
    expect(judgeTime(fix(TRUE_NOW), t)).toEqual({ reading: fix(TRUE_NOW), problem: undefined });
    expect(gnss.view()).toEqual({ state: 'gnss', from: 'test', offsetMs: BEHIND - 1000 });
    k.tick(1000);
    expect(judgeTime(fix(TRUE_NOW + 1000), t).problem).toBeUndefined();
    // A fix an hour ahead of GNSS time carried forward is a receiver's error: refused.
    k.tick(1000);
    expect(judgeTime(fix(TRUE_NOW + 2000 + 3_600_000), t).problem).toMatch(/3600 s in the future \(sources_time\.max_future_s = 300\)/);
    // Still too old is too old, and before the floor is never right.
    expect(judgeTime(fix(Date.parse('2019-04-07T00:00:00Z')), t).problem).toMatch(/before 2025-01-01/);
  });

  it('re-stamps what only the system clock stamped by the GNSS offset; the device’s own clock is judged against GNSS time', () => {
    const k = clocks();
    const gnss = new GnssClock(k.sources);
    gnss.setSync({ synchronised: false, from: 'test' });
    const t = { ...LIMITS, clock: new TrustedClock(undefined, k.sources), gnss };
    // Before any fix: nothing to re-stamp by.
    expect(judgeTime(temp(k.c.wallMs), t).reading.timeMs).toBe(TRUE_NOW - BEHIND);
    k.tick(-1000);
    judgeTime(fix(TRUE_NOW - 1000), t);
    k.tick(1000);
    judgeTime(fix(TRUE_NOW), t);
    k.tick(5000);
    expect(judgeTime(temp(k.c.wallMs), t)).toEqual({ reading: temp(TRUE_NOW + 5000), problem: undefined });
    // An adapter with its own (right) clock: 12 h ahead of the system clock, not of GNSS time.
    expect(judgeTime({ resourceId: 'T1', timeMs: TRUE_NOW + 5000, temperatureC: 4 }, t).problem).toBeUndefined();
  });

  it('an offset under LATENCY_MS is the way from the receiver, not a wrong clock: nothing is re-stamped', () => {
    const k = clocks();
    k.c.wallMs = TRUE_NOW;
    const gnss = new GnssClock(k.sources);
    gnss.setSync({ synchronised: undefined, from: 'unknown' });
    const t = { ...LIMITS, clock: new TrustedClock(undefined, k.sources), gnss };
    judgeTime(fix(TRUE_NOW - LATENCY_MS + 100), t);
    judgeTime(fix(TRUE_NOW - LATENCY_MS + 100), t);
    expect(gnss.state()).toBe('gnss');
    expect(judgeTime(temp(TRUE_NOW), t).reading.timeMs).toBe(TRUE_NOW);
  });

  it('before GNSS time is known, a fix more than 512 weeks past the newest time known is refused; the buffer’s newest reading counts', () => {
    const k = clocks();
    k.c.wallMs = 0; // no RTC, no saved clock: 1970
    const gnss = new GnssClock(k.sources);
    gnss.setSync({ synchronised: false, from: 'test' });
    const at2045 = Date.parse('2045-06-01T00:00:00Z');
    // Nothing newer known than the release's floor (2025-01-01): 2045 is a rollover the wrong way.
    const bare = { ...LIMITS, clock: new TrustedClock(undefined, k.sources), gnss };
    expect(judgeTime(fix(at2045), bare, 'nmea:T1').problem).toMatch(
      /^time: 2045-06-01T00:00:00\.000Z is \d+ days after the newest time this agent knows \(2025-01-01T00:00:00\.000Z\) and no GNSS time is known yet/,
    );
    expect(gnss.state()).toBe('unsynchronised');
    // A buffer whose newest reading is of 2036: 2045 is within reach of a device switched off since.
    const seen = { ...LIMITS, clock: new TrustedClock(Date.parse('2036-01-01T00:00:00Z'), k.sources), gnss };
    expect(judgeTime(fix(at2045), seen).problem).toBeUndefined();
  });

  it('GNSS time is taken from two fixes that agree, not from one with a garbled date; the disagreement is told with the source', () => {
    const { k, gnss, told, t } = gnssTold();
    const YEAR = 365 * 86_400_000;
    judgeTime(fix(TRUE_NOW + 3 * YEAR), t, 'nmea:T1');
    k.tick(1000);
    judgeTime(fix(TRUE_NOW + 1000), t, 'nmea:T1');
    expect(gnss.state()).toBe('unsynchronised');
    expect(told).toEqual([
      "GNSS time not taken yet: nmea:T1's fix at 2029-11-25T12:00:00.000Z and nmea:T1's fix at 2026-11-26T12:00:01.000Z 1 s later disagree by -1095 d 0 h (a garbled date or a receiver's week rollover); GNSS time waits for two fixes that agree",
    ]);
    k.tick(1000);
    judgeTime(fix(TRUE_NOW + 2000), t, 'nmea:T1');
    expect(gnss.view()).toMatchObject({ state: 'gnss', offsetMs: BEHIND });
    // The commands' "now" is GNSS time, not three years ahead.
    expect(gnss.commandNow()).toBe(TRUE_NOW + 2000);
  });

  it("each source is compared with itself: a gateway's two receivers taking turns, one 90 s late, do not hold GNSS time back", () => {
    const { k, gnss, told, t } = gnssTold();
    // T2's receiver 90 s late (a lagging feed), T1's right, their fixes interleaved second by
    // second: compared across sources, no two in a row would ever agree.
    for (let i = 0; i < 3 && gnss.state() === 'unsynchronised'; i++) {
      judgeTime(fix(TRUE_NOW + i * 1000 - 90_000), t, 'nmea:T2');
      judgeTime(fix(TRUE_NOW + i * 1000), t, 'nmea:T1');
      k.tick(1000);
    }
    expect(gnss.view()).toMatchObject({ state: 'gnss', offsetMs: BEHIND });
    expect(gnss.commandNow()).toBe(TRUE_NOW + 2000);
    expect(told).toEqual([]);
  });

  it("a receiver's one garbled RMC date, carried to the GGA-only epochs after it, does not set GNSS time", () => {
    const { k, gnss, t: judged } = gnssTold();
    const t = { ...judged, stamp: 'gnss' as const };
    const kept: number[] = [];
    const decoder = new NmeaDecoder('T1', { reading: (r) => void (judgeTime(r, t, 'nmea:T1').problem ?? kept.push(r.timeMs)), reject: () => {} });
    // GGA every second, RMC every 5 s (lines in pairs: GGA, RMC); the first RMC dated a year ahead.
    const lines = nmeaFrom(TRUE_NOW, 11).text.trim().split('\n');
    const garbled = nmeaFrom(TRUE_NOW + 365 * 86_400_000, 1)
      .text.trim()
      .split('\n')[1]!;
    let n = 0;
    const states: string[] = [];
    for (let i = 0; i < 11; i++) {
      decoder.line(lines[2 * i]!, ++n);
      if (i % 5 === 0) decoder.line(i === 0 ? garbled : lines[2 * i + 1]!, ++n);
      states.push(gnss.state());
      k.tick(1000);
    }
    decoder.flush();
    // The carried dates agreed with their RMC; only the RMCs of 5 and 10 s later, agreeing, give GNSS time.
    expect(states.indexOf('gnss')).toBeGreaterThanOrEqual(9);
    expect(gnss.state()).toBe('gnss');
    expect(Math.abs(gnss.commandNow() - (TRUE_NOW + 11_000))).toBeLessThanOrEqual(1000);
    expect(kept.length).toBeGreaterThan(8);
  });

  it('a synchronised clock takes its anchor from the first fix and tells of no disagreement', () => {
    const { k, gnss, told } = gnssTold(true);
    gnss.noteFix(TRUE_NOW, 'nmea:T1');
    k.tick(1000);
    gnss.noteFix(TRUE_NOW + 86_400_000, 'nmea:T2');
    expect(told).toEqual([]);
    // The clock loses its synchronisation: GNSS time is there at once.
    gnss.setSync({ synchronised: false, from: 'test' });
    expect(gnss.state()).toBe('gnss');
  });

  it('a step of the wall clock measures the offset again from GNSS time', () => {
    const k = clocks();
    const gnss = new GnssClock(k.sources);
    gnss.setSync({ synchronised: false, from: 'test' });
    gnss.noteFix(TRUE_NOW);
    gnss.noteFix(TRUE_NOW);
    k.c.wallMs += BEHIND; // set by hand, right now
    gnss.clockStepped();
    expect(gnss.view().offsetMs).toBe(0);
  });
});

describe('system-stamped readings wait for a GNSS time', () => {
  function agent(holdMs: number) {
    const k = clocks();
    const store = Store.open(tmp.buffer);
    logs.open.push(store);
    const ingest = new Ingest(store, { batchSize: 500, flushIntervalMs: 60_000, keepWithoutLoad: true }, logger(), k.sources.wall);
    const gnss = new GnssClock(k.sources);
    gnss.setSync({ synchronised: false, from: 'test' });
    gnss.expectGnss = true;
    const hold = new ClockHold(gnss, holdMs, logger(), k.sources);
    logs.open.push({ close: () => hold.stop() });
    const base = { ...LIMITS, clock: new TrustedClock(undefined, k.sources), gnss, hold };
    const reefer = ingest.intake('onewire', logger(), { ...base, stamp: 'system' });
    const gps = ingest.intake('gpsd:T1', logger(), { ...base, stamp: 'gnss' });
    const stored = () => (store.db.prepare('SELECT time_ms AS t FROM readings WHERE temp_c IS NOT NULL ORDER BY id').all() as Array<{ t: number }>).map((r) => r.t);
    return { k, store, ingest, gnss, hold, reefer, gps, stored };
  }

  it('held until the first fix, then committed at the true time', async () => {
    const a = agent(900_000);
    a.reefer.emit({ resourceId: 'T1', timeMs: a.k.c.wallMs, temperatureC: -18 });
    a.k.tick(1000);
    a.reefer.emit({ resourceId: 'T1', timeMs: a.k.c.wallMs, temperatureC: -18.5 });
    expect(a.hold.count).toBe(2);
    a.ingest.flush();
    expect(a.stored()).toEqual([]);
    a.k.tick(1000);
    a.gps.emit({ resourceId: 'T1', timeMs: TRUE_NOW + 2000, lat: 41.6, lon: -87.6 });
    expect(a.hold.count).toBe(2);
    // GNSS time once a second fix agrees with the first.
    a.gps.emit({ resourceId: 'T1', timeMs: TRUE_NOW + 2000, lat: 41.6, lon: -87.6 });
    await new Promise((r) => setImmediate(r));
    expect(a.hold.count).toBe(0);
    a.ingest.flush();
    expect(a.stored()).toEqual([TRUE_NOW, TRUE_NOW + 1000]);
    // From now on, re-stamped on the way in.
    a.k.tick(1000);
    a.reefer.emit({ resourceId: 'T1', timeMs: a.k.c.wallMs, temperatureC: -19 });
    a.ingest.flush();
    expect(a.stored().at(-1)).toBe(TRUE_NOW + 3000);
    // The source's last reading, as `status` shows its age from GNSS now, is at its true time too.
    expect(a.reefer.counts.lastReadingMs).toBe(TRUE_NOW + 3000);
  });

  it('after clock.unsynced_hold_s with no fix: kept with the system clock’s time, warned once, counted', () => {
    const a = agent(900_000);
    a.reefer.emit({ resourceId: 'T1', timeMs: a.k.c.wallMs, temperatureC: -18 });
    a.k.tick(899_000);
    a.hold.tick();
    expect(a.hold.count).toBe(1);
    a.reefer.emit({ resourceId: 'T1', timeMs: a.k.c.wallMs, temperatureC: -17 });
    a.k.tick(1000);
    a.hold.tick();
    expect(a.hold.count).toBe(1);
    expect(a.hold.expired).toBe(1);
    a.ingest.flush();
    expect(a.stored()).toEqual([TRUE_NOW - BEHIND]);
    const warnings = logs.lines.filter((l) => l.level === 40 && /kept with its time, which is not synchronised/.test(l.msg));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.msg).toMatch(/clock\.unsynced_hold_s = 900 s/);
  });

  it('nothing waits when no GNSS source runs, the clock is synchronised, or the hold is 0', () => {
    const a = agent(900_000);
    a.gnss.expectGnss = false;
    expect(a.hold.wants('system')).toBe(false);
    a.gnss.expectGnss = true;
    expect(a.hold.wants('system')).toBe(true);
    expect(a.hold.wants('gnss')).toBe(false);
    expect(a.hold.wants(undefined)).toBe(false);
    a.gnss.setSync({ synchronised: true, from: 'test' });
    expect(a.hold.wants('system')).toBe(false);
    const b = agent(0);
    expect(b.hold.wants('system')).toBe(false);
  });

  it('a stop lets the held readings go on to be committed, not lost', () => {
    const a = agent(900_000);
    a.reefer.emit({ resourceId: 'T1', timeMs: a.k.c.wallMs, temperatureC: -18 });
    a.hold.stop();
    a.ingest.flush();
    expect(a.stored()).toEqual([TRUE_NOW - BEHIND]);
    expect(a.hold.expired).toBe(1);
  });
});
