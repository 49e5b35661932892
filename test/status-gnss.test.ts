/**
 * `status` while the daemon runs on GNSS time (the system clock booted hours wrong): the ages
 * of readings are taken from GNSS now, those of the daemon's own doings from the system clock.
 * A real SQLite buffer with the daemon's state row as a running daemon writes it.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Store } from '../src/buffer/store.js';
import { buildStatus, formatStatus } from '../src/cli/status.js';
import { DAEMON_STATE_KEY } from '../src/daemon-state.js';
import { tempFixture } from './helpers.js';

const H = 3_600_000;
const tmp = tempFixture();
let store: Store;
beforeEach(() => {
  store = Store.open(join(tmp.dir, 'buffer.db'));
});
afterEach(() => {
  store.close();
});

/** The state row of a daemon running in this process, its clock as given, last push 5 min ago on the system clock. */
function daemonState(systemNowMs: number, clock: Record<string, unknown>): void {
  const sender = {
    lastSuccessMs: systemNowMs - 300_000,
    lastTracePushMs: systemNowMs - 300_000,
    lastAnswer: 'HTTP 202',
    lastAnswerMs: systemNowMs - 300_000,
    sent: { milestones: 0, traceRequests: 1, tracePoints: 1 },
  };
  store.setState(
    DAEMON_STATE_KEY,
    {
      pid: process.pid,
      deviceId: 'dev',
      configFile: '(test)',
      startedMs: systemNowMs - H,
      updatedMs: systemNowMs,
      running: true,
      keyOrigin: 'test',
      sender,
      ingest: {},
      sources: [],
      nextTracePushMs: null,
      clock: { held: 0, heldExpired: 0, ...clock },
    },
    systemNowMs,
  );
}

describe('status on GNSS time', () => {
  it('a fix 30 s old on GNSS time reads "30 s ago" with the system clock 12 h behind; the last push keeps its system-clock age', () => {
    const systemNow = Date.UTC(2026, 10, 26, 0, 0, 0);
    const gnssNow = systemNow + 12 * H;
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: gnssNow - H });
    store.insertReadings([{ resourceId: 'T1', timeMs: gnssNow - 30_000, lat: 41.8, lon: -87.6, source: 'gpsd' }]);
    daemonState(systemNow, { state: 'gnss', from: 'clock.synchronised = "no"', offsetMs: 12 * H });
    const report = buildStatus(store, { deviceId: 'dev', configFile: '(test)', buffer: 'buffer.db' }, systemNow);
    expect(report.lastFixes[0]!.ageS).toBe(30);
    const text = formatStatus(report, systemNow);
    expect(text).toMatch(/^last fix: +T1 41\.80000, -87\.60000 at 2026-11-26 11:59:30Z \(30 s ago\)$/m);
    expect(text).toMatch(/^queue: +1 readings \(oldest 2026-11-26 11:59:30Z \(30 s ago\)\)/m);
    expect(text).toMatch(/^last push: +2026-11-25 23:55:00Z \(5 min 0 s ago\)$/m);
    expect(text).toMatch(/^last answer: +HTTP 202 2026-11-25 23:55:00Z \(5 min 0 s ago\)$/m);
  });

  it('with the clock synchronised, or an offset within GNSS latency, ages are on the system clock as before', () => {
    const now = Date.UTC(2026, 10, 26, 0, 0, 0);
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: now - H });
    store.insertReadings([{ resourceId: 'T1', timeMs: now - 30_000, lat: 41.8, lon: -87.6, source: 'gpsd' }]);
    for (const clock of [
      { state: 'synchronised', from: 'systemd-timesyncd', offsetMs: 12 * H },
      { state: 'gnss', from: 'clock.synchronised = "no"', offsetMs: 900 },
    ]) {
      daemonState(now, clock);
      const text = formatStatus(buildStatus(store, { deviceId: 'dev', configFile: '(test)', buffer: 'buffer.db' }, now), now);
      expect(text).toMatch(/^last fix: +T1 .* \(30 s ago\)$/m);
    }
  });
});
