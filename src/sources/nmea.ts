/**
 * NMEA 0183 from a serial receiver, a FIFO, or a recorded file.
 *
 * Decoding (`NmeaDecoder`, pure): every sentence's checksum is verified (a bad or missing
 * one: dropped and counted); GGA and RMC of the same second are merged into one position;
 * a position is emitted only from a valid fix (GGA quality > 0 and RMC status A, whichever
 * came); the date comes from RMC, because GGA has only the time of day. Until the first RMC
 * with a date has been seen, fixes are skipped and counted (`noDate`).
 *
 * Reading (`NmeaSource`): the device (a tty, a FIFO or a recorded file, see device.ts) is
 * kept open by a Reconnector, which opens it again with capped backoff when it goes away
 * (USB receivers re-enumerate); a file read to its end is finished.
 */
import type { NmeaSourceConfig } from '../config/schema.js';
import type { Reading } from '../reading.js';
import { preview, sourceHealth } from './common.js';
import { openDevice, type OpenedDevice } from './device.js';
import { Reconnector } from './reconnector.js';
import type { Source, SourceContext, SourceHealth } from './types.js';

const KNOTS_TO_MS = 1852 / 3600;
/**
 * Metres of horizontal error per unit of HDOP: a consumer receiver's range error (UERE) of
 * some 5 m. GGA gives no error in metres; HDOP times this is the usual estimate.
 */
export const HDOP_TO_M = 5;

export type SentenceResult = { ok: true; talker: string; type: string; fields: string[] } | { ok: false; reason: string; kind: 'checksum' | 'malformed' };

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
  gga?: { valid: boolean; lat: string; latH: string; lon: string; lonH: string; hdop?: string };
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
    e.gga = { valid: Number.isInteger(quality) && quality > 0 && quality !== 6, lat: f[1] ?? '', latH: f[2] ?? '', lon: f[3] ?? '', lonH: f[4] ?? '', hdop: f[7] };
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
    const dateCarried = day === undefined;
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
    const hdop = optionalNumber(e.gga?.hdop);
    this.out.reading(
      {
        resourceId: this.resourceId,
        timeMs: day + e.todMs,
        lat,
        lon,
        speed: speedKn === undefined ? undefined : Math.round(speedKn * KNOTS_TO_MS * 1000) / 1000,
        heading: course,
        // For the GNSS odometer only (not stored): a bad HDOP field is no reason to drop a fix.
        errorM: hdop !== undefined && Number.isFinite(hdop) && hdop > 0 ? hdop * HDOP_TO_M : undefined,
        ...(dateCarried ? { dateCarried } : {}),
      },
      `fix at ${e.key}`,
    );
  }
}

export class NmeaSource implements Source {
  readonly type = 'nmea';
  readonly name: string;
  private readonly decoder: NmeaDecoder;
  private readonly link: Reconnector<OpenedDevice>;

  constructor(
    private readonly cfg: NmeaSourceConfig,
    private readonly ctx: SourceContext,
  ) {
    this.name = cfg.name ?? `nmea:${cfg.resource_id}`;
    this.decoder = new NmeaDecoder(cfg.resource_id, { reading: (r, where) => ctx.emit(r, where), reject: (reason) => ctx.reject(reason) });
    const device = cfg.device;
    this.link = new Reconnector<OpenedDevice>({
      ctx,
      open: () => openDevice(device, cfg.baud),
      initialMs: cfg.reopen_initial_s * 1000,
      maxMs: cfg.reopen_max_s * 1000,
      noDataTimeoutS: cfg.no_data_timeout_s,
      maxLineBytes: cfg.max_line_bytes,
      peer: `NMEA device ${device}`,
      data: 'alive',
      lastLine: 'decode',
      line: (text, n) => this.decoder.line(text, n),
      opened: ({ kind }) => {
        if (this.link.counters.opens === 1) ctx.log.info({ device, kind }, 'reading NMEA');
        else ctx.log.debug({ device, kind }, 'NMEA device open');
      },
      // A FIFO just waits for its next writer; a tty is opened again (reopenWhenSilent).
      silent: () => ctx.log.warn({ device, timeoutS: cfg.no_data_timeout_s }, 'no NMEA data'),
      resumed: () => ctx.log.info({ device }, 'NMEA data again'),
      closed: ({ kind }) => {
        this.decoder.flush();
        if (kind === 'file' && !this.link.lastError) {
          ctx.log.info({ device, lines: this.link.lines }, 'end of NMEA file');
          return 'finished';
        }
        if (!this.link.silent) ctx.log.warn({ device, err: this.link.lastError }, 'NMEA device closed; opening it again');
        return 'reopen';
      },
    });
  }

  async start(): Promise<void> {
    await this.link.start();
  }

  async stop(): Promise<void> {
    await this.link.stop();
    this.decoder.flush();
  }

  health(): SourceHealth & { counters: Record<string, number> } {
    const c = this.decoder.counters;
    const link = this.link;
    const open = link.current;
    const { overlongLines, opens } = link.counters;
    let detail: string;
    if (!link.active) detail = 'stopped';
    else if (link.finished) detail = `finished: end of file after ${link.lines} lines`;
    else if (!open) detail = `${this.cfg.device} not open${link.lastError ? `: ${link.lastError}` : ''} (${link.failures} attempts)`;
    else if (link.silent) detail = `${this.cfg.device}: no data for ${this.cfg.no_data_timeout_s} s`;
    else detail = `reading ${this.cfg.device} (${open.kind === 'tty' ? `tty, ${this.cfg.baud} baud` : open.kind})`;
    const bad = c.badChecksum + c.malformed + overlongLines;
    if (bad || c.noFix || c.noDate) detail += `; ${c.noFix} epochs without a fix, ${c.noDate} without a date, ${c.badChecksum} bad checksums, ${c.malformed + overlongLines} malformed`;
    const healthy = link.active && (link.finished || (!!open && !link.silent));
    return sourceHealth(this.ctx, { healthy, detail, finished: link.finished }, { ...c, overlongLines, opens });
  }
}
