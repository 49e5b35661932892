/**
 * NMEA 0183 from a serial receiver, a FIFO, or a recorded file.
 *
 * Decoding (`NmeaDecoder`, pure): every sentence's checksum is verified (a bad or missing
 * one: dropped and counted); GGA and RMC of the same second are merged into one position;
 * a position is emitted only from a valid fix (GGA quality > 0 and RMC status A, whichever
 * came); the date comes from RMC, because GGA has only the time of day. Until the first RMC
 * with a date has been seen, fixes are skipped and counted (`noDate`).
 *
 * Reading (`NmeaSource`): a tty is set with `stty -F DEV BAUD raw -echo` and opened again
 * with capped backoff when it goes away (USB receivers re-enumerate); a FIFO is opened
 * read-write so that writers may come and go without an end of file; a regular file is read
 * once to its end (a recorded drive, replayed).
 */
import { execFile } from 'node:child_process';
import { close as closeFdCb, constants as fsConstants, createReadStream, open as openFdCb } from 'node:fs';
import { stat } from 'node:fs/promises';
import { Socket } from 'node:net';
import { ReadStream as TtyReadStream } from 'node:tty';
import type { Readable } from 'node:stream';
import type { NmeaSourceConfig } from '../config/schema.js';
import { Backoff } from '../backoff.js';
import { AttemptLog, LineSplitter, preview, sourceHealth, timer } from './common.js';
import type { Reading, Source, SourceContext, SourceHealth } from './types.js';

const KNOTS_TO_MS = 1852 / 3600;

export type SentenceResult =
  | { ok: true; talker: string; type: string; fields: string[] }
  | { ok: false; reason: string; kind: 'checksum' | 'malformed' };

/** XOR of the characters between `$` and `*`, as two upper-case hex digits. */
export function nmeaChecksum(body: string): string {
  let c = 0;
  for (let i = 0; i < body.length; i++) c ^= body.charCodeAt(i);
  return c.toString(16).toUpperCase().padStart(2, '0');
}

/** Split and verify one sentence. Only printable ASCII between `$` and `*hh` is accepted. */
export function parseSentence(line: string): SentenceResult {
  const text = line.trim();
  if (!text.startsWith('$')) return { ok: false, kind: 'malformed', reason: `not an NMEA sentence: ${preview(text)}` };
  const star = text.lastIndexOf('*');
  if (star === -1 || star !== text.length - 3) return { ok: false, kind: 'checksum', reason: `no checksum (truncated?): ${preview(text)}` };
  const body = text.slice(1, star);
  const given = text.slice(star + 1).toUpperCase();
  if (!/^[\x20-\x7e]*$/.test(body)) return { ok: false, kind: 'malformed', reason: `bytes that are not printable ASCII: ${preview(text)}` };
  const want = nmeaChecksum(body);
  if (given !== want) return { ok: false, kind: 'checksum', reason: `bad checksum (${given}, computed ${want}): ${preview(text)}` };
  const fields = body.split(',');
  const address = fields.shift()!;
  // Proprietary sentences ($PUBX, $PGRME...) have no talker; their type is the whole address.
  if (address.startsWith('P')) return { ok: true, talker: 'P', type: address, fields };
  if (!/^[A-Z]{2}[A-Z0-9]{3}$/.test(address)) return { ok: false, kind: 'malformed', reason: `bad address field ${preview(address)}` };
  return { ok: true, talker: address.slice(0, 2), type: address.slice(2), fields };
}

/** ddmm.mmmm / dddmm.mmmm plus hemisphere to signed degrees; NaN when malformed. */
export function nmeaCoordinate(value: string, hemisphere: string, negative: 'S' | 'W'): number {
  if (!/^\d+(\.\d+)?$/.test(value)) return Number.NaN;
  const v = Number(value);
  const deg = Math.trunc(v / 100);
  const min = v - deg * 100;
  if (min >= 60) return Number.NaN;
  const positive = negative === 'S' ? 'N' : 'E';
  if (hemisphere !== positive && hemisphere !== negative) return Number.NaN;
  const d = deg + min / 60;
  return hemisphere === negative ? -d : d;
}

/** hhmmss(.sss) to milliseconds since midnight; NaN when malformed. */
function timeOfDayMs(v: string): number {
  const m = /^(\d{2})(\d{2})(\d{2}(?:\.\d+)?)$/.exec(v);
  if (!m) return Number.NaN;
  const h = Number(m[1]);
  const min = Number(m[2]);
  const s = Number(m[3]);
  if (h > 23 || min > 59 || s >= 61) return Number.NaN;
  return Math.round(((h * 60 + min) * 60 + s) * 1000);
}

/** ddmmyy to the epoch ms of that midnight (UTC); NaN when malformed. Years 80-99 are 19xx. */
function dateMs(v: string): number {
  const m = /^(\d{2})(\d{2})(\d{2})$/.exec(v);
  if (!m) return Number.NaN;
  const day = Number(m[1]);
  const month = Number(m[2]);
  const yy = Number(m[3]);
  const year = yy >= 80 ? 1900 + yy : 2000 + yy;
  const ms = Date.UTC(year, month - 1, day);
  const d = new Date(ms);
  if (d.getUTCDate() !== day || d.getUTCMonth() !== month - 1) return Number.NaN;
  return ms;
}

const optionalNumber = (v: string | undefined): number | undefined => (v === undefined || v === '' ? undefined : /^-?\d+(\.\d+)?$/.test(v) ? Number(v) : Number.NaN);

interface Epoch {
  /** The time field as sent, so GGA and RMC of the same fix pair up. */
  key: string;
  todMs: number;
  gga?: { valid: boolean; lat: string; latH: string; lon: string; lonH: string };
  rmc?: { valid: boolean; lat: string; latH: string; lon: string; lonH: string; speedKn?: string; course?: string; dateMs: number };
}

export interface NmeaCounters {
  sentences: number;
  badChecksum: number;
  malformed: number;
  noFix: number;
  noDate: number;
  ignored: number;
}

/**
 * Sentences in, readings out. An epoch (one time of day) ends when a sentence with another
 * time arrives, when both its GGA and RMC have been seen, or at `flush()` (end of input).
 */
export class NmeaDecoder {
  readonly counters: NmeaCounters = { sentences: 0, badChecksum: 0, malformed: 0, noFix: 0, noDate: 0, ignored: 0 };
  private epoch: Epoch | undefined;
  private doneKey: string | undefined;
  /** Date of the latest RMC, and its time of day (to roll a GGA-only fix over midnight). */
  private lastDate: { dateMs: number; todMs: number } | undefined;

  constructor(
    private readonly resourceId: string,
    private readonly out: { reading(r: Reading, where: string): void; reject(reason: string): void },
  ) {}

  line(text: string, lineNo: number): void {
    if (text.trim() === '') return;
    // Bytes lost on a serial line glue a fragment to the next sentence: keep the sentence.
    const dollar = text.lastIndexOf('$');
    if (dollar > 0) {
      this.counters.malformed += 1;
      this.out.reject(`line ${lineNo}: truncated sentence: ${preview(text.slice(0, dollar))}`);
      text = text.slice(dollar);
    }
    const s = parseSentence(text);
    if (!s.ok) {
      if (s.kind === 'checksum') this.counters.badChecksum += 1;
      else this.counters.malformed += 1;
      this.out.reject(`line ${lineNo}: ${s.reason}`);
      return;
    }
    this.counters.sentences += 1;
    if (s.type === 'GGA') this.gga(s.fields, lineNo);
    else if (s.type === 'RMC') this.rmc(s.fields, lineNo);
    else this.counters.ignored += 1;
  }

  /** End of input: the last epoch is complete. */
  flush(): void {
    if (this.epoch) this.finish(this.epoch);
    this.epoch = undefined;
  }

  private at(key: string, lineNo: number, type: string): Epoch | undefined {
    // Before it has time, a receiver sends an empty time field: an epoch too, never a fix.
    const tod = key === '' ? Number.NaN : timeOfDayMs(key);
    if (key !== '' && Number.isNaN(tod)) {
      this.counters.malformed += 1;
      this.out.reject(`line ${lineNo}: ${type} time: malformed ${preview(key)}`);
      return undefined;
    }
    if (key !== '' && key === this.doneKey) return undefined;
    if (this.epoch && this.epoch.key !== key) this.flush();
    this.epoch ??= { key, todMs: tod };
    return this.epoch;
  }

  private gga(f: string[], lineNo: number): void {
    const e = this.at(f[0] ?? '', lineNo, 'GGA');
    if (!e) return;
    const quality = Number(f[5]);
    e.gga = { valid: Number.isInteger(quality) && quality > 0 && quality !== 6, lat: f[1] ?? '', latH: f[2] ?? '', lon: f[3] ?? '', lonH: f[4] ?? '' };
    if (e.rmc) this.complete(e);
  }

  private rmc(f: string[], lineNo: number): void {
    const dateField = f[8] ?? '';
    const date = dateMs(dateField);
    if (dateField !== '' && Number.isNaN(date)) {
      this.counters.malformed += 1;
      this.out.reject(`line ${lineNo}: RMC date: malformed ${preview(dateField)}`);
      return;
    }
    // First close the previous epoch (with the date known before this sentence), then learn the date.
    const e = this.at(f[0] ?? '', lineNo, 'RMC');
    const tod = timeOfDayMs(f[0] ?? '');
    if (!Number.isNaN(date) && !Number.isNaN(tod)) this.lastDate = { dateMs: date, todMs: tod };
    if (!e) return;
    // NMEA 2.3 adds a mode field: N (not valid) overrides an A status on some receivers.
    const valid = f[1] === 'A' && f[11]?.[0] !== 'N';
    e.rmc = { valid, lat: f[2] ?? '', latH: f[3] ?? '', lon: f[4] ?? '', lonH: f[5] ?? '', speedKn: f[6], course: f[7], dateMs: date };
    if (e.gga) this.complete(e);
  }

  private complete(e: Epoch): void {
    this.finish(e);
    this.doneKey = e.key || undefined;
    this.epoch = undefined;
  }

  private finish(e: Epoch): void {
    const valid = (e.gga?.valid ?? true) && (e.rmc?.valid ?? true);
    if (!valid) {
      this.counters.noFix += 1;
      return;
    }
    if (Number.isNaN(e.todMs)) {
      this.counters.malformed += 1;
      this.out.reject('a fix without a time of day');
      return;
    }
    const src = e.rmc ?? e.gga!;
    let day = e.rmc && !Number.isNaN(e.rmc.dateMs) ? e.rmc.dateMs : undefined;
    if (day === undefined && this.lastDate) {
      // A GGA-only epoch after midnight, with the last RMC date from before it.
      day = this.lastDate.dateMs + (e.todMs < this.lastDate.todMs - 12 * 3_600_000 ? 86_400_000 : 0);
    }
    if (day === undefined) {
      this.counters.noDate += 1;
      return;
    }
    const lat = nmeaCoordinate(src.lat, src.latH, 'S');
    const lon = nmeaCoordinate(src.lon, src.lonH, 'W');
    if (Number.isNaN(lat) || Number.isNaN(lon)) {
      this.counters.malformed += 1;
      this.out.reject(`fix at ${e.key}: position not readable: ${preview(`${src.lat},${src.latH},${src.lon},${src.lonH}`)}`);
      return;
    }
    const speedKn = optionalNumber(e.rmc?.speedKn);
    const course = optionalNumber(e.rmc?.course);
    this.out.reading({
      resourceId: this.resourceId,
      timeMs: day + e.todMs,
      lat,
      lon,
      speed: speedKn === undefined ? undefined : Math.round(speedKn * KNOTS_TO_MS * 1000) / 1000,
      heading: course,
    }, `fix at ${e.key}`);
  }
}

type Kind = 'tty' | 'fifo' | 'file';

export class NmeaSource implements Source {
  readonly type = 'nmea';
  readonly name: string;
  private readonly decoder: NmeaDecoder;
  private readonly backoff: Backoff;
  private readonly attempts: AttemptLog;
  private stream: Readable | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private watchdog: NodeJS.Timeout | undefined;
  private running = false;
  /** An open in progress (stat, stty, open), which stop() waits for. */
  private opening: Promise<void> | undefined;
  private kind: Kind | undefined;
  private open = false;
  private silent = false;
  private ended = false;
  private lastError: string | undefined;
  private overlongLines = 0;
  private opens = 0;
  private lines = 0;

  constructor(
    private readonly cfg: NmeaSourceConfig,
    private readonly ctx: SourceContext,
  ) {
    this.name = cfg.name ?? `nmea:${cfg.resource_id}`;
    this.decoder = new NmeaDecoder(cfg.resource_id, { reading: (r, where) => ctx.emit(r, where), reject: (reason) => ctx.reject(reason) });
    this.backoff = new Backoff({ initialMs: cfg.reopen_initial_s * 1000, maxMs: cfg.reopen_max_s * 1000 });
    this.attempts = new AttemptLog(ctx.log, `NMEA device ${cfg.device}`);
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.ended = false;
    await this.openDevice();
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.retryTimer);
    clearTimeout(this.watchdog);
    this.retryTimer = undefined;
    this.watchdog = undefined;
    await this.opening; // sees !running and closes what it opened
    const s = this.stream;
    this.stream = undefined;
    this.open = false;
    if (s && !s.destroyed) {
      const closed = new Promise<void>((resolve) => s.once('close', () => resolve()));
      s.destroy();
      await closed;
    }
    this.decoder.flush();
  }

  health(): SourceHealth & { counters: Record<string, number> } {
    const c = this.decoder.counters;
    let detail: string;
    if (!this.running) detail = 'stopped';
    else if (this.ended) detail = `finished: end of file after ${this.lines} lines`;
    else if (!this.open) detail = `${this.cfg.device} not open${this.lastError ? `: ${this.lastError}` : ''} (${this.backoff.failures} attempts)`;
    else if (this.silent) detail = `${this.cfg.device}: no data for ${this.cfg.no_data_timeout_s} s`;
    else detail = `reading ${this.cfg.device} (${this.kind === 'tty' ? `tty, ${this.cfg.baud} baud` : this.kind})`;
    const bad = c.badChecksum + c.malformed + this.overlongLines;
    if (bad || c.noFix || c.noDate) detail += `; ${c.noFix} epochs without a fix, ${c.noDate} without a date, ${c.badChecksum} bad checksums, ${c.malformed + this.overlongLines} malformed`;
    const healthy = this.running && (this.ended || (this.open && !this.silent));
    return sourceHealth(this.ctx, { healthy, detail, finished: this.ended }, { ...c, overlongLines: this.overlongLines, opens: this.opens });
  }

  private openDevice(): Promise<void> {
    if (this.opening || !this.running) return this.opening ?? Promise.resolve();
    this.opening = this.tryOpen().finally(() => (this.opening = undefined));
    return this.opening;
  }

  private async tryOpen(): Promise<void> {
    try {
      const stream = await this.openStream();
      if (!this.running) {
        stream.destroy();
        return;
      }
      this.attach(stream);
    } catch (err) {
      this.lastError = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      this.retry(true);
    }
  }

  private async openStream(): Promise<Readable> {
    const st = await stat(this.cfg.device);
    if (st.isFile()) {
      this.kind = 'file';
      return createReadStream(this.cfg.device, { highWaterMark: 16 * 1024 });
    }
    if (st.isFIFO()) {
      this.kind = 'fifo';
      // Read-write: the FIFO then always has a writer (us), so a writer that closes and
      // another that opens later never look like an end of file.
      const fd = await openFd(this.cfg.device, fsConstants.O_RDWR | fsConstants.O_NONBLOCK);
      try {
        return new Socket({ fd, readable: true, writable: false });
      } catch (err) {
        await closeFd(fd);
        throw err;
      }
    }
    if (st.isCharacterDevice()) {
      this.kind = 'tty';
      await setLine(this.cfg.device, this.cfg.baud);
      const fd = await openFd(this.cfg.device, fsConstants.O_RDONLY | fsConstants.O_NOCTTY | fsConstants.O_NONBLOCK);
      let tty: TtyReadStream;
      try {
        tty = new TtyReadStream(fd);
      } catch (err) {
        await closeFd(fd);
        throw err;
      }
      // libuv reopens a tty by its name (so its non-blocking mode is private) and keeps
      // our descriptor as a duplicate it never closes: close it, or every reopen leaks one.
      const handleFd = (tty as unknown as { _handle?: { fd?: number } })._handle?.fd;
      if (typeof handleFd === 'number' && handleFd >= 0 && handleFd !== fd) await closeFd(fd);
      return tty;
    }
    throw new Error('not a tty, FIFO or regular file');
  }

  private attach(stream: Readable): void {
    this.stream = stream;
    this.open = true;
    this.opens += 1;
    this.lastError = undefined;
    if (this.opens === 1) this.ctx.log.info({ device: this.cfg.device, kind: this.kind }, 'reading NMEA');
    else this.ctx.log.debug({ device: this.cfg.device, kind: this.kind }, 'NMEA device open');
    const splitter = new LineSplitter(this.cfg.max_line_bytes, {
      line: (text, n) => {
        this.lines = n;
        this.decoder.line(text, n);
      },
      overlong: (n, bytes) => {
        this.lines = n;
        this.overlongLines += 1;
        this.ctx.reject(`line ${n}: ${bytes} bytes, longer than max_line_bytes (${this.cfg.max_line_bytes}); skipped`);
      },
    });
    this.armWatchdog(stream);
    stream.on('data', (chunk: Buffer) => {
      if (this.stream !== stream) return;
      // Data, not a successful open, ends the backoff: a device that opens and fails at
      // once must not be reopened in a tight loop.
      if (this.backoff.failures > 0) this.attempts.succeeded(this.backoff.failures);
      this.backoff.reset();
      if (this.silent) this.ctx.log.info({ device: this.cfg.device }, 'NMEA data again');
      this.silent = false;
      this.armWatchdog(stream);
      splitter.push(chunk);
    });
    stream.on('error', (err) => {
      this.lastError = (err as NodeJS.ErrnoException).code ?? err.message;
    });
    stream.on('end', () => {
      if (this.stream !== stream) return;
      splitter.end();
      this.decoder.flush();
    });
    stream.on('close', () => {
      if (this.stream !== stream) return;
      this.stream = undefined;
      this.open = false;
      clearTimeout(this.watchdog);
      if (!this.running) return;
      if (this.kind === 'file' && !this.lastError) {
        this.ended = true;
        this.ctx.log.info({ device: this.cfg.device, lines: this.lines }, 'end of NMEA file');
        return;
      }
      splitter.end();
      this.decoder.flush();
      if (!this.silent) this.ctx.log.warn({ device: this.cfg.device, err: this.lastError }, 'NMEA device closed; opening it again');
      this.retry(false);
    });
  }

  private retry(failedToOpen: boolean): void {
    if (!this.running) return;
    const wait = this.backoff.next();
    if (failedToOpen) this.attempts.failed(this.lastError ?? 'cannot open', this.backoff.failures, wait, this.backoff.atMax);
    clearTimeout(this.retryTimer);
    this.retryTimer = timer(() => {
      this.retryTimer = undefined;
      void this.openDevice();
    }, wait);
  }

  private armWatchdog(stream: Readable): void {
    clearTimeout(this.watchdog);
    if (this.cfg.no_data_timeout_s <= 0 || this.kind === 'file') return;
    this.watchdog = timer(() => {
      if (this.stream !== stream || !this.running) return;
      if (!this.silent) this.ctx.log.warn({ device: this.cfg.device, timeoutS: this.cfg.no_data_timeout_s }, 'no NMEA data');
      this.silent = true;
      this.lastError = `no data for ${this.cfg.no_data_timeout_s} s`;
      // A tty that went quiet is opened again (a re-enumerated USB receiver is a new device
      // behind the same name); a FIFO just waits for its next writer.
      if (this.kind === 'tty') stream.destroy();
    }, this.cfg.no_data_timeout_s * 1000);
  }
}

// Plain descriptors (not FileHandles): the stream owns them, and a FileHandle would be
// closed under it when garbage-collected.
function openFd(path: string, flags: number): Promise<number> {
  return new Promise((resolve, reject) => openFdCb(path, flags, (err, fd) => (err ? reject(err) : resolve(fd))));
}

function closeFd(fd: number): Promise<void> {
  return new Promise((resolve) => closeFdCb(fd, () => resolve()));
}

/** `stty -F DEV BAUD raw -echo`: line speed, no line editing, no echo back to the receiver. */
function setLine(device: string, baud: number): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile('stty', ['-F', device, String(baud), 'raw', '-echo'], { timeout: 5000 }, (err, _stdout, stderr) => {
      if (err) reject(new Error(`stty -F ${device} ${baud} raw -echo failed: ${(stderr || err.message).trim()}`));
      else resolve();
    });
  });
}
