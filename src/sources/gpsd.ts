/**
 * gpsd over TCP: `?WATCH={"enable":true,"json":true}`, then one JSON report per line.
 * TPV reports with a 2D or 3D fix (mode >= 2) become positions; the rest of the protocol
 * (VERSION, DEVICES, SKY...) is read and ignored.
 *
 * The connection is kept up by this source alone: it reconnects forever with capped backoff,
 * and a connection that stays silent for `no_data_timeout_s` is marked unhealthy and opened
 * again (gpsd restarted under us, a USB receiver re-enumerated: the socket can look alive
 * and never speak again, which is how a tracker goes quiet for a day without a log line).
 */
import { connect, type Socket } from 'node:net';
import type { GpsdSourceConfig } from '../config/schema.js';
import { Backoff } from '../backoff.js';
import { AttemptLog, LineSplitter, preview, sourceHealth, timer } from './common.js';
import type { Source, SourceContext, SourceHealth } from './types.js';

type Json = Record<string, unknown>;

/** The longest a position waits for more reports of the same fix time (a 1 Hz cycle, and some). */
const HOLD_MS = 1200;

/** Replies gpsd sends whether or not a receiver is attached. */
const HANDSHAKE = new Set(['VERSION', 'DEVICES', 'DEVICE', 'WATCH', 'ERROR']);

export class GpsdSource implements Source {
  readonly type = 'gpsd';
  readonly name: string;
  private readonly backoff: Backoff;
  private readonly attempts: AttemptLog;
  private socket: Socket | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private watchdog: NodeJS.Timeout | undefined;
  private running = false;
  private connected = false;
  private silent = false;
  private lastError: string | undefined;
  private lastMode: number | undefined;
  private everConnected = false;
  private pending: { timeMs: number; m: Json; line: number } | undefined;
  private holdTimer: NodeJS.Timeout | undefined;
  private readonly counters = { noFix: 0, noTime: 0, duplicates: 0, badLines: 0, overlongLines: 0, connects: 0, connectFailures: 0, timeouts: 0 };

  constructor(
    private readonly cfg: GpsdSourceConfig,
    private readonly ctx: SourceContext,
  ) {
    this.name = cfg.name ?? `gpsd:${cfg.resource_id}`;
    this.backoff = new Backoff({ initialMs: cfg.reconnect_initial_s * 1000, maxMs: cfg.reconnect_max_s * 1000 });
    this.attempts = new AttemptLog(ctx.log, `gpsd at ${this.address}`);
  }

  private get address(): string {
    return `${this.cfg.host}:${this.cfg.port}`;
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.connect();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.flushPending();
    clearTimeout(this.retryTimer);
    clearTimeout(this.watchdog);
    this.retryTimer = undefined;
    this.watchdog = undefined;
    const s = this.socket;
    this.socket = undefined;
    this.connected = false;
    if (s && !s.destroyed) {
      const closed = new Promise<void>((resolve) => s.once('close', () => resolve()));
      s.destroy();
      await closed;
    }
  }

  health(): SourceHealth & { counters: Record<string, number> } {
    let detail: string;
    if (!this.running) detail = 'stopped';
    else if (!this.connected) detail = `not connected to ${this.address}${this.lastError ? `: ${this.lastError}` : ''} (${this.backoff.failures} attempts)`;
    else if (this.silent) detail = `connected to ${this.address} but no report for ${this.cfg.no_data_timeout_s} s`;
    else detail = `connected to ${this.address}, ${this.lastMode === undefined ? 'no position report yet' : this.lastMode >= 2 ? `${this.lastMode}D fix` : 'no fix'}`;
    const skipped = this.counters.noFix + this.counters.noTime;
    if (skipped) detail += `; ${this.counters.noFix} reports without a fix, ${this.counters.noTime} without time skipped`;
    return sourceHealth(this.ctx, { healthy: this.running && this.connected && !this.silent, detail }, this.counters);
  }

  private connect(): void {
    const splitter = new LineSplitter(this.cfg.max_line_bytes, {
      line: (text, n) => this.onLine(text, n),
      overlong: (n, bytes) => {
        this.counters.overlongLines += 1;
        this.ctx.reject(`line ${n}: ${bytes} bytes, longer than max_line_bytes (${this.cfg.max_line_bytes}); skipped`);
      },
    });
    const s = connect({ host: this.cfg.host, port: this.cfg.port });
    this.socket = s;
    // A connect that hangs (host unreachable, SYN dropped) counts as silence too.
    this.armWatchdog(s);
    s.setNoDelay(true);
    s.on('connect', () => {
      this.connected = true;
      this.counters.connects += 1;
      this.lastError = undefined;
      const watch: Json = { enable: true, json: true };
      if (this.cfg.device) watch.device = this.cfg.device;
      s.write(`?WATCH=${JSON.stringify(watch)}\n`);
      if (!this.everConnected) this.ctx.log.info({ address: this.address }, 'connected to gpsd');
      this.everConnected = true;
    });
    s.on('data', (chunk: Buffer) => {
      if (this.socket === s) splitter.push(chunk);
    });
    s.on('error', (err) => {
      this.lastError = (err as NodeJS.ErrnoException).code ?? err.message;
    });
    s.on('close', () => {
      if (this.socket !== s) return;
      this.socket = undefined;
      const wasConnected = this.connected;
      this.connected = false;
      this.flushPending();
      clearTimeout(this.watchdog);
      if (!this.running) return;
      if (wasConnected) {
        if (!this.silent) this.ctx.log.warn({ address: this.address, err: this.lastError }, 'connection to gpsd closed; reconnecting');
        this.lastError ??= 'connection closed';
      } else this.counters.connectFailures += 1;
      const wait = this.backoff.next();
      if (!wasConnected) this.attempts.failed(this.lastError ?? 'no connection', this.backoff.failures, wait, this.backoff.atMax);
      this.retryTimer = timer(() => {
        this.retryTimer = undefined;
        if (this.running) this.connect();
      }, wait);
    });
  }

  /**
   * A device report arrived. gpsd answers VERSION, DEVICES and WATCH even with no receiver
   * attached, so only reports from a device prove it works: they reset the backoff, clear
   * the silence and re-arm the no-data timeout.
   */
  private alive(): void {
    const s = this.socket;
    if (!s) return;
    if (this.backoff.failures > 0) this.attempts.succeeded(this.backoff.failures);
    this.backoff.reset();
    if (this.silent) this.ctx.log.info({ address: this.address }, 'gpsd reports again');
    this.silent = false;
    this.armWatchdog(s);
  }

  private armWatchdog(s: Socket): void {
    clearTimeout(this.watchdog);
    if (this.cfg.no_data_timeout_s <= 0) return;
    this.watchdog = timer(() => {
      if (this.socket !== s || !this.running) return;
      this.counters.timeouts += 1;
      if (this.connected) {
        if (!this.silent) this.ctx.log.warn({ address: this.address, timeoutS: this.cfg.no_data_timeout_s }, 'no report from gpsd; reconnecting');
        this.silent = true;
      }
      this.lastError = `no data for ${this.cfg.no_data_timeout_s} s`;
      s.destroy();
    }, this.cfg.no_data_timeout_s * 1000);
  }

  private onLine(text: string, n: number): void {
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
    if (typeof m.class === 'string' && !HANDSHAKE.has(m.class)) this.alive();
    if (m.class === 'TPV') this.onTpv(m, n);
    else if (m.class === 'ERROR') this.ctx.log.warn({ message: m.message }, 'gpsd reported an error');
  }

  private onTpv(m: Json, n: number): void {
    if (this.cfg.device && m.device !== undefined && m.device !== this.cfg.device) return;
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
    this.flushPending();
    this.pending = { timeMs, m, line: n };
    clearTimeout(this.holdTimer);
    this.holdTimer = timer(() => this.flushPending(), HOLD_MS);
  }

  private flushPending(): void {
    const p = this.pending;
    this.pending = undefined;
    clearTimeout(this.holdTimer);
    this.holdTimer = undefined;
    if (!p) return;
    const m = p.m;
    // Non-numbers (a string, null) fail the range checks of admission and are rejected by name.
    this.ctx.emit({
      resourceId: this.cfg.resource_id,
      timeMs: p.timeMs,
      lat: m.lat as number,
      lon: m.lon as number,
      speed: m.speed === undefined ? undefined : (m.speed as number),
      heading: m.track === undefined ? undefined : (m.track as number),
    }, `line ${p.line}`);
  }
}
