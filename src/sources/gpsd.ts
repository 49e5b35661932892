/**
 * gpsd over TCP: `?WATCH={"enable":true,"json":true}`, then one JSON report per line.
 * TPV reports with a 2D or 3D fix (mode >= 2) become positions; the rest of the protocol
 * (VERSION, DEVICES, SKY...) is read and ignored.
 *
 * Decoding (`GpsdDecoder`) is apart from the connection, which a Reconnector keeps up
 * forever with capped backoff: a connection that stays silent for `no_data_timeout_s` is
 * marked unhealthy and opened again (gpsd restarted under us, a USB receiver re-enumerated:
 * the socket can look alive and never speak again, which is how a tracker goes quiet for a
 * day without a log line).
 */
import type { Socket } from 'node:net';
import type { GpsdSourceConfig } from '../config/schema.js';
import { preview, sourceHealth, timer } from './common.js';
import { Reconnector, type Opened } from './reconnector.js';
import { connectTcp } from './tcp.js';
import type { Source, SourceContext, SourceHealth } from './types.js';

type Json = Record<string, unknown>;

/** The longest a position waits for more reports of the same fix time (a 1 Hz cycle, and some). */
const HOLD_MS = 1200;

/** Replies gpsd sends whether or not a receiver is attached. */
const HANDSHAKE = new Set(['VERSION', 'DEVICES', 'DEVICE', 'WATCH', 'ERROR']);

/** gpsd JSON lines in, readings out (through the source's context). */
export class GpsdDecoder {
  readonly counters = { noFix: 0, noTime: 0, duplicates: 0, badLines: 0 };
  /** Mode of the last TPV report (undefined: none yet). */
  lastMode: number | undefined;
  private pending: { timeMs: number; m: Json; line: number } | undefined;
  private holdTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly resourceId: string,
    /** Reports of this device only (gpsd may serve several); undefined: any. */
    private readonly device: string | undefined,
    private readonly ctx: SourceContext,
    /**
     * A report from a device arrived. gpsd answers VERSION, DEVICES and WATCH even with no
     * receiver attached, so only these prove the receiver works.
     */
    private readonly deviceReport: () => void,
  ) {}

  line(text: string, n: number): void {
    if (text.trim() === '') return;
    let msg: unknown;
    try {
      msg = JSON.parse(text);
    } catch {
      this.counters.badLines += 1;
      this.ctx.reject(`line ${n}: not JSON: ${preview(text)}`);
      return;
    }
    if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) {
      this.counters.badLines += 1;
      this.ctx.reject(`line ${n}: expected a JSON object: ${preview(text)}`);
      return;
    }
    const m = msg as Json;
    if (typeof m.class === 'string' && !HANDSHAKE.has(m.class)) this.deviceReport();
    if (m.class === 'TPV') this.tpv(m, n);
    else if (m.class === 'ERROR') this.ctx.log.warn({ message: m.message }, 'gpsd reported an error');
  }

  /** Hand over the position still held (the connection closed, or the source stops). */
  flush(): void {
    const p = this.pending;
    this.pending = undefined;
    clearTimeout(this.holdTimer);
    this.holdTimer = undefined;
    if (!p) return;
    const m = p.m;
    // Non-numbers (a string, null) fail the range checks of admission and are rejected by name.
    this.ctx.emit(
      {
        resourceId: this.resourceId,
        timeMs: p.timeMs,
        lat: m.lat as number,
        lon: m.lon as number,
        speed: m.speed === undefined ? undefined : (m.speed as number),
        heading: m.track === undefined ? undefined : (m.track as number),
        errorM: horizontalErrorM(m),
      },
      `line ${p.line}`,
    );
  }

  private tpv(m: Json, n: number): void {
    if (this.device && m.device !== undefined && m.device !== this.device) return;
    const mode = typeof m.mode === 'number' ? m.mode : 0;
    this.lastMode = mode;
    // Mode 0 (unknown) and 1 (no fix) carry no usable position; nor does a fix without one.
    if (mode < 2 || m.lat === undefined || m.lon === undefined) {
      this.counters.noFix += 1;
      return;
    }
    if (typeof m.time !== 'string') {
      this.counters.noTime += 1;
      return;
    }
    const timeMs = Date.parse(m.time);
    if (Number.isNaN(timeMs)) {
      this.ctx.reject(`line ${n}: TPV time: not an ISO 8601 time: ${preview(m.time)}`);
      return;
    }
    // gpsd sends a TPV per sentence when it cannot tell where a receiver's cycle ends: GGA
    // (position, speed derived, no track), then RMC (speed and track) of the same second.
    // Reports of one fix time are merged, later fields winning, and emitted as one position
    // when the next fix time arrives (or HOLD_MS later, for the last one).
    if (this.pending && this.pending.timeMs === timeMs) {
      this.counters.duplicates += 1;
      this.pending.m = { ...this.pending.m, ...m };
      return;
    }
    this.flush();
    this.pending = { timeMs, m, line: n };
    clearTimeout(this.holdTimer);
    this.holdTimer = timer(() => this.flush(), HOLD_MS);
  }
}

/**
 * gpsd's estimate of the horizontal error (95 %), metres: eph where the receiver gives it,
 * else from the longitude and latitude errors (epx, epy). Undefined when it gives neither.
 */
export function horizontalErrorM(m: Json): number | undefined {
  const ok = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;
  if (ok(m.eph)) return m.eph;
  if (ok(m.epx) && ok(m.epy)) return Math.hypot(m.epx, m.epy);
  return undefined;
}

export class GpsdSource implements Source {
  readonly type = 'gpsd';
  readonly name: string;
  private readonly decoder: GpsdDecoder;
  private readonly link: Reconnector<Opened<Socket>>;

  constructor(
    private readonly cfg: GpsdSourceConfig,
    private readonly ctx: SourceContext,
  ) {
    this.name = cfg.name ?? `gpsd:${cfg.resource_id}`;
    const address = this.address;
    this.decoder = new GpsdDecoder(cfg.resource_id, cfg.device, ctx, () => this.link.alive());
    this.link = new Reconnector<Opened<Socket>>({
      ctx,
      open: (signal) => connectTcp(cfg.host, cfg.port, signal),
      initialMs: cfg.reconnect_initial_s * 1000,
      maxMs: cfg.reconnect_max_s * 1000,
      noDataTimeoutS: cfg.no_data_timeout_s,
      maxLineBytes: cfg.max_line_bytes,
      peer: `gpsd at ${address}`,
      data: 'nothing',
      lastLine: 'drop',
      // A connect that hangs (host unreachable, SYN dropped) counts as silence too.
      openTimeout: true,
      line: (text, n) => this.decoder.line(text, n),
      opened: ({ link }) => {
        const watch: Json = { enable: true, json: true };
        if (cfg.device) watch.device = cfg.device;
        link.write(`?WATCH=${JSON.stringify(watch)}\n`);
        if (this.link.counters.opens === 1) ctx.log.info({ address }, 'connected to gpsd');
      },
      silent: () => ctx.log.warn({ address, timeoutS: cfg.no_data_timeout_s }, 'no report from gpsd; reconnecting'),
      resumed: () => ctx.log.info({ address }, 'gpsd reports again'),
      closed: () => {
        this.decoder.flush();
        if (!this.link.silent) ctx.log.warn({ address, err: this.link.lastError }, 'connection to gpsd closed; reconnecting');
        this.link.lastError ??= 'connection closed';
        return 'reopen';
      },
    });
  }

  private get address(): string {
    return `${this.cfg.host}:${this.cfg.port}`;
  }

  async start(): Promise<void> {
    // Not awaited: a connect to a host that drops packets must not hold up the other sources.
    void this.link.start();
  }

  async stop(): Promise<void> {
    await this.link.stop();
    this.decoder.flush();
  }

  health(): SourceHealth & { counters: Record<string, number> } {
    const link = this.link;
    const { noFix, noTime } = this.decoder.counters;
    const mode = this.decoder.lastMode;
    let detail: string;
    if (!link.active) detail = 'stopped';
    else if (!link.current) detail = `not connected to ${this.address}${link.lastError ? `: ${link.lastError}` : ''} (${link.failures} attempts)`;
    else if (link.silent) detail = `connected to ${this.address} but no report for ${this.cfg.no_data_timeout_s} s`;
    else detail = `connected to ${this.address}, ${mode === undefined ? 'no position report yet' : mode >= 2 ? `${mode}D fix` : 'no fix'}`;
    if (noFix + noTime) detail += `; ${noFix} reports without a fix, ${noTime} without time skipped`;
    const { opens, failedOpens, timeouts, overlongLines } = link.counters;
    const counters = { noFix, noTime, duplicates: this.decoder.counters.duplicates, badLines: this.decoder.counters.badLines, overlongLines, connects: opens, connectFailures: failedOpens, timeouts };
    return sourceHealth(this.ctx, { healthy: link.active && !!link.current && !link.silent, detail }, counters);
  }
}
