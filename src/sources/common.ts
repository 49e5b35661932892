/**
 * Small parts every device source needs: a line splitter that never holds more than a cap
 * (a peer printing 10 MB without a newline must not cost 10 MB), a source's health with
 * the counts admission keeps, and a logging policy for peers that are not there yet.
 */
import type { MqttClient } from 'mqtt';
import type { Logger } from 'pino';
import type { SourceContext, SourceHealth } from './types.js';

export interface LineSplitterHandlers {
  /** A complete line (without `\n` or a trailing `\r`), numbered from 1. */
  line(text: string, lineNo: number): void;
  /** A line longer than the cap: its bytes were discarded as they came, never buffered. */
  overlong(lineNo: number, bytes: number): void;
}

/**
 * Splits a byte stream into lines of at most `maxLineBytes`. A longer line is dropped as
 * it arrives: what was held is released and bytes are skipped until the next newline.
 */
export class LineSplitter {
  private parts: Buffer[] = [];
  private size = 0;
  private discarding = false;
  private discarded = 0;
  private lineNo = 0;

  constructor(
    private readonly maxLineBytes: number,
    private readonly on: LineSplitterHandlers,
  ) {}

  /** Bytes held for the line in progress (at most maxLineBytes). */
  get pendingBytes(): number {
    return this.size;
  }

  /** Lines seen so far, overlong ones included. */
  get lines(): number {
    return this.lineNo;
  }

  push(chunk: Buffer): void {
    let start = 0;
    while (start < chunk.length) {
      const nl = chunk.indexOf(10, start);
      const end = nl === -1 ? chunk.length : nl;
      const piece = end - start;
      if (this.discarding) {
        this.discarded += piece;
      } else if (this.size + piece > this.maxLineBytes) {
        this.discarding = true;
        this.discarded = this.size + piece;
        this.parts = [];
        this.size = 0;
      } else if (piece > 0) {
        // A copy, so a small remainder does not pin the whole chunk it came in.
        this.parts.push(Buffer.from(chunk.subarray(start, end)));
        this.size += piece;
      }
      if (nl === -1) return;
      this.endLine();
      start = nl + 1;
    }
  }

  /** End of the stream: a last line without a newline still counts (it is often truncated). */
  end(): void {
    if (this.discarding || this.size > 0) this.endLine();
  }

  /** Forget a partial line (after a reconnect the rest of it will never come). */
  reset(): void {
    this.parts = [];
    this.size = 0;
    this.discarding = false;
    this.discarded = 0;
  }

  private endLine(): void {
    this.lineNo += 1;
    if (this.discarding) {
      const bytes = this.discarded;
      this.discarding = false;
      this.discarded = 0;
      this.on.overlong(this.lineNo, bytes);
      return;
    }
    const buf = this.parts.length === 1 ? this.parts[0] : Buffer.concat(this.parts, this.size);
    this.parts = [];
    this.size = 0;
    let text = buf.toString('utf8');
    if (text.endsWith('\r')) text = text.slice(0, -1);
    this.on.line(text, this.lineNo);
  }
}

/** A source's health: its own state, with the counts admission keeps for it. */
export function sourceHealth(ctx: SourceContext, state: { healthy: boolean; detail?: string; finished?: boolean }, counters: Record<string, number>): SourceHealth & { counters: Record<string, number> } {
  const c = ctx.counts;
  return { healthy: state.healthy, readings: c.readings, rejected: c.rejected, lastReadingMs: c.lastReadingMs, detail: state.detail, finished: state.finished ?? false, counters: { ...counters } };
}

/** A short, printable excerpt of bad input for a log line (control bytes escaped). */
export function preview(text: string, max = 60): string {
  const cut = text.length > max ? `${text.slice(0, max)}...` : text;
  return JSON.stringify(cut);
}

/**
 * How a source logs failed attempts to reach its peer. The first failure is info (gpsd is
 * often started after us at boot), repeated ones debug, one warning once the backoff is at
 * its cap (it is really gone), and a note when it comes back: a peer that stays away for a
 * week produces three log lines, not ten thousand.
 */
export class AttemptLog {
  private warned = false;

  constructor(
    private readonly log: Logger,
    private readonly what: string,
  ) {}

  failed(err: string, failures: number, retryMs: number, atMax: boolean): void {
    const fields = { err, failures, retryInMs: retryMs };
    if (failures === 1) this.log.info(fields, `${this.what} not available yet; retrying`);
    else if (atMax && !this.warned) {
      this.warned = true;
      this.log.warn(fields, `${this.what} still not available after ${failures} attempts; retrying every ${Math.round(retryMs / 1000)} s`);
    } else this.log.debug(fields, `${this.what} not available; retrying`);
  }

  succeeded(failures: number): void {
    if (failures > 0 || this.warned) this.log.info({ failures }, `${this.what} available again`);
    else this.log.debug(`${this.what} available`);
    this.warned = false;
  }
}

/** `setTimeout` that does not keep the process alive on its own. */
export function timer(fn: () => void, ms: number): NodeJS.Timeout {
  const t = setTimeout(fn, ms);
  t.unref();
  return t;
}

/**
 * An MQTT client's end (an mqtt source, the fleet link): when connected, `before` (the
 * link's last status) and then a DISCONNECT, so a persistent session stays at the broker and
 * keeps what comes meanwhile; not connected yet, or a broker that does not answer within
 * `waitMs`, the socket is closed at once (a connect under way would otherwise hold the
 * process for its timeout).
 */
export function endMqtt(client: MqttClient, connected: boolean, waitMs: number, before?: (then: () => void) => void): Promise<void> {
  return new Promise<void>((resolve) => {
    const force = () => {
      client.end(true, {}, () => undefined);
      client.stream?.destroy();
      resolve();
    };
    if (!connected) return force();
    const t = timer(force, waitMs);
    const disconnect = () =>
      client.end(false, {}, () => {
        clearTimeout(t);
        resolve();
      });
    if (before) before(disconnect);
    else disconnect();
  });
}

/** A client given up for a new one: what it may still emit is of no interest (and an 'error' with no listener would throw). */
export function dropMqtt(old: MqttClient | undefined): void {
  if (!old) return;
  old.removeAllListeners();
  old.on('error', () => undefined);
  old.end(true);
}
