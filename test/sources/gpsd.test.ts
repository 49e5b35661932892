import { readFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { gpsdSourceSchema } from '../../src/config/schema.js';
import type { Reading } from '../../src/reading.js';
import { GpsdSource } from '../../src/sources/gpsd.js';
import { NmeaDecoder } from '../../src/sources/nmea.js';
import { waitFor } from '../helpers.js';
import { activeResources, freePort, NMEA_LOG, recorder, requireGpsd, sleep, startGpsd, startPty, stopProcess, type Pty } from './support.js';

const cfg = (extra: Record<string, unknown>) => gpsdSourceSchema.parse({ type: 'gpsd', resource_id: 'TRUCK-1', reconnect_initial_s: 0.05, reconnect_max_s: 0.2, ...extra });

/** The fixture decoded independently, by time: what gpsd must report. */
function expectedFixes(): Map<number, Reading> {
  const out = new Map<number, Reading>();
  const d = new NmeaDecoder('TRUCK-1', { reading: (r) => out.set(r.timeMs, r), reject: () => undefined });
  readFileSync(NMEA_LOG, 'utf8')
    .split('\n')
    .forEach((l, i) => d.line(l, i + 1));
  d.flush();
  return out;
}

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()!();
});

describe('gpsd source against a real gpsd', () => {
  // Each test fails at once without gpsd, saying so (and counts as failed, not skipped).
  beforeEach(() => void requireGpsd());

  it('waits quietly for gpsd, then turns TPV reports into positions and skips reports without a fix', async () => {
    const port = await freePort();
    const pty: Pty = await startPty(NMEA_LOG, 0.02);
    cleanup.push(() => stopProcess(pty.proc));
    const rec = recorder();
    const src = new GpsdSource(cfg({ port, no_data_timeout_s: 5 }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();

    // gpsd is not there yet: retries, unhealthy, and no error in the log.
    await waitFor(() => src.health().counters.connectFailures >= 3, 5000, 'three failed attempts');
    expect(src.health()).toMatchObject({ healthy: false, readings: 0 });
    expect(src.health().detail).toMatch(/^not connected to 127\.0\.0\.1:\d+: ECONNREFUSED/);
    const first = rec.logs.find((l) => l.msg.includes('not available'));
    expect(first?.level).toBe(30);
    expect(rec.logs.filter((l) => l.level >= 50)).toEqual([]);

    const gpsd = startGpsd(pty.path, port);
    cleanup.push(() => stopProcess(gpsd.proc));
    await waitFor(() => src.health().counters.connects >= 1, 10_000, 'connected to gpsd');
    pty.go();
    // 63 epochs at 30 ms each: the whole log in about 2.3 s.
    // A cold start (no time, then no fix for 20 s) and 60 s of driving, at 20 ms a line: about 6 s.
    await waitFor(() => rec.readings.length >= 40 && Date.parse('2025-06-15T14:31:02Z') === rec.readings.at(-1)!.timeMs, 15_000, 'the whole drive');

    const want = expectedFixes();
    expect(want.size).toBe(60);
    for (const r of rec.readings) {
      const w = want.get(r.timeMs);
      expect(w, new Date(r.timeMs).toISOString()).toBeDefined();
      expect(r.resourceId).toBe('TRUCK-1');
      expect(r.lat).toBeCloseTo(w!.lat!, 6);
      expect(r.lon).toBeCloseTo(w!.lon!, 6);
      expect(r.speed).toBeCloseTo(25.0, 2); // 48.6 kn from RMC
      expect(r.heading).toBe(160);
      // gpsd's error estimate (eph, or epx and epy), for the GNSS odometer: HDOP 0.9 is metres, not tens.
      expect(r.errorM).toBeGreaterThan(0.5);
      expect(r.errorM).toBeLessThan(30);
    }
    // In order, one per second of the log, although gpsd may report a second twice (after GGA and after RMC).
    for (let i = 1; i < rec.readings.length; i++) expect(rec.readings[i].timeMs - rec.readings[i - 1].timeMs).toBe(1000);
    const h = src.health();
    expect(h).toMatchObject({ healthy: true, readings: rec.readings.length, rejected: 0, lastReadingMs: Date.parse('2025-06-15T14:31:02Z') });
    expect(h.counters.noFix).toBeGreaterThan(0); // the epochs before the fix, reported as mode 1
    expect(h.detail).toMatch(/connected to 127\.0\.0\.1:\d+, 3D fix; \d+ reports without a fix/);
    expect(rec.rejects).toEqual([]);
  });

  it('reconnects when gpsd goes away and comes back on the same port', async () => {
    const port = await freePort();
    const pty = await startPty(NMEA_LOG, 0.005, { loop: true });
    cleanup.push(() => stopProcess(pty.proc));
    pty.go();
    let gpsd = startGpsd(pty.path, port);
    cleanup.push(() => stopProcess(gpsd.proc));
    const rec = recorder();
    const src = new GpsdSource(cfg({ port, no_data_timeout_s: 5 }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => rec.readings.length >= 5, 10_000, 'first positions');

    await stopProcess(gpsd.proc);
    await waitFor(() => !src.health().healthy, 5000, 'unhealthy after gpsd stopped');
    expect(rec.logs.some((l) => l.level === 40 && l.msg === 'connection to gpsd closed; reconnecting')).toBe(true);
    await sleep(300); // a few refused attempts
    const before = rec.readings.length;

    gpsd = startGpsd(pty.path, port);
    await waitFor(() => rec.readings.length >= before + 5, 10_000, 'positions after gpsd came back');
    const h = src.health();
    expect(h.healthy).toBe(true);
    expect(h.counters.connects).toBeGreaterThanOrEqual(2);
    expect(rec.logs.some((l) => l.msg.includes('available again'))).toBe(true);
    expect(rec.logs.filter((l) => l.level >= 50)).toEqual([]);
  });
});

/** A TCP peer that speaks as gpsd would if it were broken: for the bad input real gpsd never sends. */
async function fakeGpsd(onClient: (s: Socket, watch: string) => void): Promise<{ server: Server; port: number; clients: Socket[]; watches: string[] }> {
  const clients: Socket[] = [];
  const watches: string[] = [];
  const server = createServer((s) => {
    clients.push(s);
    s.on('error', () => undefined);
    let got = '';
    s.on('data', (d) => {
      got += d.toString();
      if (got.includes('\n')) {
        const watch = got.split('\n')[0];
        got = '';
        watches.push(watch);
        s.write('{"class":"VERSION","release":"3.22","rev":"3.22","proto_major":3,"proto_minor":14}\n');
        onClient(s, watch);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanup.push(
    () =>
      new Promise<void>((r) => {
        for (const c of clients) c.destroy();
        server.close(() => r());
      }),
  );
  return { server, port: (server.address() as { port: number }).port, clients, watches };
}

const tpv = (o: Record<string, unknown>) => `${JSON.stringify({ class: 'TPV', device: '/dev/ttyUSB0', ...o })}\n`;

describe('gpsd source on bad input', () => {
  it('counts garbage, NaN, latitude 200, truncated and 10 MB lines, and keeps going', async () => {
    const peer = await fakeGpsd((s) => {
      s.write(Buffer.from([0x00, 0xff, 0xfe, 0x1b, 0x5b, 0x41, 0x0a])); // garbage bytes
      s.write('{"class":"TPV","mode":3,"lat":NaN,"lon":-86.1,"time":"2026-01-15T12:00:00Z"}\n');
      s.write(tpv({ mode: 3, lat: 200, lon: -86.1, time: '2026-01-15T12:00:01Z' }));
      s.write('{"class":"TPV","mode":3,"lat":39.7,"lo'); // truncated: the rest of the line is lost
      s.write('\n');
      s.write(tpv({ mode: 1, time: '2026-01-15T12:00:02Z' })); // no fix
      s.write(tpv({ mode: 2, lat: 39.7, lon: -86.1 })); // fix without time
      s.write(tpv({ mode: 3, lat: 39.7, lon: -86.1, speed: 'fast', time: '2026-01-15T12:00:03Z' }));
      // 10 MB without a newline, in pieces, then the end of that line.
      const mb = Buffer.alloc(1_048_576, 0x41);
      for (let i = 0; i < 10; i++) s.write(mb);
      s.write('\n');
      s.write(tpv({ mode: 3, lat: 39.768, lon: -86.158, speed: 12.5, track: 181.5, time: '2026-01-15T12:00:04.250Z' }));
    });
    const rec = recorder();
    const src = new GpsdSource(cfg({ port: peer.port, device: '/dev/ttyUSB0' }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => rec.readings.length === 1, 10_000, 'the good report');

    expect(peer.watches).toEqual(['?WATCH={"enable":true,"json":true,"device":"/dev/ttyUSB0"}']);
    expect(rec.readings).toEqual([{ resourceId: 'TRUCK-1', timeMs: Date.parse('2026-01-15T12:00:04.250Z'), lat: 39.768, lon: -86.158, speed: 12.5, heading: 181.5 }]);
    expect(rec.rejects).toEqual([
      expect.stringMatching(/^line 2: not JSON: "\\u0000/),
      expect.stringMatching(/^line 3: not JSON: "{\\"class\\":\\"TPV\\",\\"mode\\":3,\\"lat\\":NaN/),
      expect.stringMatching(/^line 5: not JSON: .*\\"lo"$/),
      // A position is handed over when the next fix time arrives (reports of one time are merged).
      'line 4: latitude: out of range (200)',
      'line 9: 10485760 bytes, longer than max_line_bytes (65536); skipped',
      'line 8: speed: out of range (fast)',
    ]);
    const h = src.health();
    expect(h).toMatchObject({ healthy: true, readings: 1, rejected: 6 });
    expect(h.counters).toMatchObject({ noFix: 1, noTime: 1, badLines: 3, overlongLines: 1 });
  });

  it('marks a silent gpsd unhealthy after the no-data timeout and reconnects', async () => {
    let speak = false;
    const peer = await fakeGpsd((s) => {
      // Handshake only (gpsd with its receiver unplugged), until `speak`: then a fix every 100 ms.
      if (!speak) return;
      let t = Date.parse('2026-01-15T12:00:00Z');
      const every = setInterval(() => s.write(tpv({ mode: 3, lat: 39.7, lon: -86.1, time: new Date((t += 1000)).toISOString() })), 100);
      s.on('close', () => clearInterval(every));
    });
    const rec = recorder();
    const src = new GpsdSource(cfg({ port: peer.port, no_data_timeout_s: 0.3 }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => src.health().counters.timeouts >= 2, 5000, 'two timeouts');
    expect(src.health().healthy).toBe(false);
    expect(peer.watches.length).toBeGreaterThanOrEqual(2); // it reconnected and asked again
    expect(rec.logs.filter((l) => l.msg === 'no report from gpsd; reconnecting')).toHaveLength(1); // said once, not every 300 ms

    speak = true;
    await waitFor(() => rec.readings.length >= 1, 5000, 'a report after the silence');
    expect(src.health().healthy).toBe(true);
  });

  it('stop() closes the socket and leaves no timer behind', async () => {
    const before = activeResources();
    const peer = await fakeGpsd(() => undefined);
    const rec = recorder();
    const src = new GpsdSource(cfg({ port: peer.port, no_data_timeout_s: 30 }), rec.ctx);
    await src.start();
    await waitFor(() => peer.clients.length === 1 && peer.watches.length === 1, 5000, 'connected');
    await src.stop();
    await waitFor(() => peer.clients[0].readableEnded || peer.clients[0].destroyed, 2000, 'the peer sees the close');
    const after = activeResources();
    expect(after.Timeout ?? 0).toBeLessThanOrEqual(before.Timeout ?? 0);
    expect(after.TCPSocketWrap ?? 0).toBeLessThanOrEqual((before.TCPSocketWrap ?? 0) + 1); // the peer's own end, closed by cleanup
    expect(src.health()).toMatchObject({ healthy: false, detail: 'stopped' });
  });
});
