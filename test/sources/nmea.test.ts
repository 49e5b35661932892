import { execFileSync, spawn } from 'node:child_process';
import { readdirSync, readFileSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { nmeaSourceSchema } from '../../src/config/schema.js';
import type { Reading } from '../../src/reading.js';
import { LineSplitter } from '../../src/sources/common.js';
import { HDOP_TO_M, nmeaChecksum, NmeaDecoder, NmeaSource, parseSentence } from '../../src/sources/nmea.js';
import { tempDir, waitFor } from '../helpers.js';
import { NMEA_LOG, recorder, sleep, startPty, stopProcess } from './support.js';

const cfg = (extra: Record<string, unknown>) => nmeaSourceSchema.parse({ type: 'nmea', resource_id: 'TRUCK-1', reopen_initial_s: 0.05, reopen_max_s: 0.2, ...extra });

/** A sentence with a correct checksum. */
const sentence = (body: string) => `$${body}*${nmeaChecksum(body)}`;

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()!();
});

function decode(lines: string[]): { readings: Reading[]; rejects: string[]; d: NmeaDecoder } {
  const readings: Reading[] = [];
  const rejects: string[] = [];
  const d = new NmeaDecoder('TRUCK-1', { reading: (r) => readings.push(r), reject: (r) => rejects.push(r) });
  lines.forEach((l, i) => d.line(l, i + 1));
  d.flush();
  return { readings, rejects, d };
}

describe('NMEA decoding', () => {
  it('verifies checksums and splits sentences', () => {
    expect(parseSentence('$GPRMC,143003.00,A,3946.06734,N,08609.47400,W,48.6,160.0,150625,,,A*7F')).toMatchObject({ ok: true, talker: 'GP', type: 'RMC' });
    expect(parseSentence('$GPRMC,143003.00,A,3946.06734,N,08609.47400,W,48.6,160.0,150625,,,A*7E')).toMatchObject({ ok: false, kind: 'checksum' });
    expect(parseSentence('$GPRMC,143003.00,A,3946.06')).toMatchObject({ ok: false, kind: 'checksum', reason: expect.stringContaining('no checksum') });
    expect(parseSentence('$PUBX,00,143003.00*' + nmeaChecksum('PUBX,00,143003.00'))).toMatchObject({ ok: true, type: 'PUBX' });
  });

  it('turns the recorded cold start and drive into one position per second, from the fix on', () => {
    const { readings, rejects, d } = decode(readFileSync(NMEA_LOG, 'utf8').split('\n'));
    expect(rejects).toEqual([]);
    expect(readings).toHaveLength(60);
    expect(readings[0]).toEqual({ resourceId: 'TRUCK-1', timeMs: Date.parse('2025-06-15T14:30:03Z'), lat: 39.767789, lon: -86.1579, speed: 25.002, heading: 160, errorM: 0.9 * HDOP_TO_M });
    expect(readings[59].timeMs).toBe(Date.parse('2025-06-15T14:31:02Z'));
    // 10 epochs without time, 23 with time but no fix; none without a date (RMC V carries it).
    expect(d.counters).toMatchObject({ noFix: 33, noDate: 0, badChecksum: 0, malformed: 0 });
    expect(d.counters.ignored).toBeGreaterThan(60); // GSA, GSV
  });

  it('takes the date from RMC only: a GGA fix before any RMC is skipped and counted', () => {
    const gga = sentence('GPGGA,235959.00,3946.06734,N,08609.47400,W,1,09,0.9,221.4,M,-33.9,M,,');
    const { readings, d } = decode([
      gga,
      sentence('GPRMC,235959.50,A,3946.06734,N,08609.47400,W,0.0,,311225,,,A'),
      // GGA-only epochs after midnight take the next day.
      sentence('GPGGA,000001.00,3946.06734,N,08609.47400,W,1,09,0.9,221.4,M,-33.9,M,,'),
    ]);
    expect(d.counters.noDate).toBe(1);
    expect(readings.map((r) => new Date(r.timeMs).toISOString())).toEqual(['2025-12-31T23:59:59.500Z', '2026-01-01T00:00:01.000Z']);
  });

  it('emits only valid fixes: GGA quality 0 or RMC status V (or mode N) make the epoch invalid', () => {
    const { readings, d } = decode([
      sentence('GPGGA,120000.00,3946.06734,N,08609.47400,W,0,00,99.9,,,,,,'),
      sentence('GPRMC,120000.00,A,3946.06734,N,08609.47400,W,10.0,90.0,150625,,,A'),
      sentence('GPRMC,120001.00,A,3946.06734,N,08609.47400,W,10.0,90.0,150625,,,N'),
      sentence('GPRMC,120002.00,V,3946.06734,N,08609.47400,W,10.0,90.0,150625,,,A'),
      sentence('GPRMC,120003.00,A,3946.06734,S,08609.47400,E,10.0,90.0,150625,,,A'),
    ]);
    expect(d.counters.noFix).toBe(3);
    expect(readings).toEqual([{ resourceId: 'TRUCK-1', timeMs: Date.parse('2025-06-15T12:00:03Z'), lat: -39.767789, lon: 86.1579, speed: 5.144, heading: 90 }]);
  });

  it('drops and counts garbage, bad checksums, truncated lines, NaN and latitude 200', () => {
    const good = sentence('GPRMC,143010.00,A,3946.06734,N,08609.47400,W,48.6,160.0,150625,,,A');
    const { readings, rejects, d } = decode([
      '\u0000\u00ff\u0080garbage\u001b[A',
      '$GPRMC,143003.00,A,3946.06734,N,08609.47400,W,48.6,160.0,150625,,,A*00',
      '$GPRMC,143004.00,A,3946.0',
      sentence('GPRMC,143005.00,A,NaN,N,08609.47400,W,48.6,160.0,150625,,,A'),
      sentence('GPRMC,143006.00,A,20000.000,N,08609.47400,W,48.6,160.0,150625,,,A'),
      sentence('GPRMC,143007.00,A,3946.06734,N,08609.47400,W,48.6,160.0,991325,,,A'),
      sentence('GPRMC,14300X.00,A,3946.06734,N,08609.47400,W,48.6,160.0,150625,,,A'),
      `$GPGGA,143008.${good}`, // a fragment glued to a whole sentence (bytes lost on the line)
      '',
    ]);
    // Latitude 200 is read as written (ddmm: 200 degrees); the reading check refuses it (next test).
    expect(readings.map((r) => r.lat)).toEqual([200, 39.767789]);
    expect(readings[1]).toEqual({ resourceId: 'TRUCK-1', timeMs: Date.parse('2025-06-15T14:30:10Z'), lat: 39.767789, lon: -86.1579, speed: 25.002, heading: 160 });
    expect(rejects).toEqual([
      expect.stringMatching(/^line 1: not an NMEA sentence: "\\u0000/),
      expect.stringMatching(/^line 2: bad checksum \(00, computed 7F\)/),
      expect.stringMatching(/^line 3: no checksum \(truncated\?\)/),
      expect.stringMatching(/^fix at 143005\.00: position not readable: "NaN,N,08609\.47400,W"/),
      'line 6: RMC date: malformed "991325"',
      'line 7: RMC time: malformed "14300X.00"',
      'line 8: truncated sentence: "$GPGGA,143008."',
    ]);
    expect(d.counters).toMatchObject({ badChecksum: 2, malformed: 5 });
  });
});

describe('line splitter', () => {
  it('never holds more than the cap, whatever arrives', () => {
    const lines: string[] = [];
    const overlong: Array<[number, number]> = [];
    const s = new LineSplitter(4096, { line: (t) => lines.push(t), overlong: (n, b) => overlong.push([n, b]) });
    let peak = 0;
    s.push(Buffer.from('first\r\nsec'));
    const chunk = Buffer.alloc(65_536, 0x42);
    for (let i = 0; i < 160; i++) {
      s.push(chunk); // 10 MB without a newline
      peak = Math.max(peak, s.pendingBytes);
    }
    s.push(Buffer.from('\nthird\nlast without newline'));
    s.end();
    expect(peak).toBe(0);
    expect(lines).toEqual(['first', 'third', 'last without newline']);
    expect(overlong).toEqual([[2, 3 + 160 * 65_536]]);
  });
});

describe('NMEA source', () => {
  it('replays a recorded file to its end and reports it finished', async () => {
    const rec = recorder();
    const src = new NmeaSource(cfg({ device: NMEA_LOG }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => src.health().detail?.startsWith('finished'), 5000, 'end of file');
    expect(rec.readings).toHaveLength(60);
    expect(src.health()).toMatchObject({ healthy: true, finished: true, readings: 60, rejected: 0, lastReadingMs: Date.parse('2025-06-15T14:31:02Z') });
    expect(src.health().detail).toBe('finished: end of file after 315 lines; 33 epochs without a fix, 0 without a date, 0 bad checksums, 0 malformed');
  });

  it('survives a file of bad input, a 10 MB line included, and counts it in health', async () => {
    const t = tempDir();
    cleanup.push(t.cleanup);
    const file = join(t.dir, 'bad.nmea');
    const good = sentence('GPRMC,143010.00,A,3946.06734,N,08609.47400,W,48.6,160.0,150625,,,A');
    writeFileSync(
      file,
      Buffer.concat([
        Buffer.from([0x00, 0xff, 0xfe, 0x0a]),
        Buffer.from(`${sentence('GPRMC,143006.00,A,20000.000,N,08609.47400,W,48.6,160.0,150625,,,A')}\r\n`),
        Buffer.alloc(10 * 1_048_576, 0x24), // 10 MB of '$'
        Buffer.from(`\r\n$GPRMC,143009.00,A,39\r\n${good}\r\n`),
      ]),
    );
    const rec = recorder();
    const src = new NmeaSource(cfg({ device: file }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => src.health().detail?.startsWith('finished'), 10_000, 'end of file');
    expect(rec.readings.map((r) => r.timeMs)).toEqual([Date.parse('2025-06-15T14:30:10Z')]);
    expect(rec.rejects).toEqual([
      expect.stringMatching(/^line 1: not an NMEA sentence/),
      'line 3: 10485761 bytes, longer than max_line_bytes (4096); skipped',
      expect.stringMatching(/^line 4: no checksum/),
      // An RMC-only epoch is complete when the next one starts.
      'fix at 143006.00: latitude: out of range (200)',
    ]);
    const h = src.health();
    expect(h).toMatchObject({ healthy: true, readings: 1, rejected: 4 });
    expect(h.counters).toMatchObject({ badChecksum: 1, malformed: 1, overlongLines: 1 });
  });

  it('reads a FIFO whose writers come and go, and reports silence', async () => {
    const t = tempDir();
    cleanup.push(t.cleanup);
    const fifo = join(t.dir, 'gps.fifo');
    execFileSync('mkfifo', [fifo]);
    const rec = recorder();
    const src = new NmeaSource(cfg({ device: fifo, no_data_timeout_s: 1 }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    const write = async () => {
      const w = spawn('sh', ['-c', 'cat "$1" > "$2"', 'sh', NMEA_LOG, fifo], { stdio: 'ignore' });
      cleanup.push(() => stopProcess(w));
      await new Promise((r) => w.once('exit', r));
    };
    await write();
    await waitFor(() => rec.readings.length === 60, 5000, 'the first writer');
    expect(src.health()).toMatchObject({ healthy: true });
    expect(src.health().detail).toMatch(/^reading .*gps\.fifo \(fifo\)/);
    await write(); // a second writer: no end of file in between
    await waitFor(() => rec.readings.length === 120, 5000, 'the second writer');
    await waitFor(() => !src.health().healthy, 3000, 'silence');
    expect(src.health().detail).toMatch(/gps\.fifo: no data for 1 s/);
    expect(src.health().counters.opens).toBe(1);
    await write();
    await waitFor(() => rec.readings.length === 180 && src.health().healthy, 5000, 'data again');
  });

  it('reads a tty at the configured baud rate and opens it again when it comes back', async () => {
    const t = tempDir();
    cleanup.push(t.cleanup);
    const fdsBefore = readdirSync('/proc/self/fd').length;
    // Like /dev/serial/by-id/...: a stable name for a device that may come back as another node.
    const link = join(t.dir, 'gps-by-id');
    let pty = await startPty(NMEA_LOG, 0.002, { loop: true });
    cleanup.push(() => stopProcess(pty.proc));
    symlinkSync(pty.path, link);
    const rec = recorder();
    const src = new NmeaSource(cfg({ device: link, baud: 9600, no_data_timeout_s: 2 }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    pty.go();
    await waitFor(() => rec.readings.length >= 30, 10_000, 'positions from the tty');
    const settings = execFileSync('stty', ['-F', pty.path, '-a']).toString();
    expect(settings).toContain('speed 9600 baud');
    expect(settings).toMatch(/ -echo /);
    expect(src.health()).toMatchObject({ healthy: true, detail: expect.stringContaining('(tty, 9600 baud)') });
    expect(rec.readings.every((r) => r.speed === 25.002 && r.heading === 160)).toBe(true);

    // The receiver is unplugged: reads fail, the device node disappears.
    await stopProcess(pty.proc);
    await waitFor(() => !src.health().healthy, 5000, 'unhealthy without the device');
    await sleep(300); // a few failed attempts
    expect(src.health().detail).toMatch(/not open: ENOENT/);
    expect(rec.logs.some((l) => l.level === 40 && l.msg === 'NMEA device closed; opening it again')).toBe(true);
    expect(rec.logs.filter((l) => l.level >= 50)).toEqual([]);

    // Plugged in again, under the same name.
    pty = await startPty(NMEA_LOG, 0.002, { loop: true });
    unlinkSync(link);
    symlinkSync(pty.path, link);
    pty.go();
    const before = rec.readings.length;
    await waitFor(() => rec.readings.length >= before + 10, 10_000, 'positions after the device came back');
    expect(src.health()).toMatchObject({ healthy: true });
    expect(src.health().counters.opens).toBeGreaterThanOrEqual(2);
    expect(rec.logs.some((l) => l.msg.includes('available again'))).toBe(true);

    await src.stop();
    await stopProcess(pty.proc);
    // Reopening must not leak the descriptor libuv duplicates for a tty.
    await waitFor(() => readdirSync('/proc/self/fd').length <= fdsBefore, 3000, 'no descriptor left open');
  });
});
