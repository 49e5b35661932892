/**
 * Keeps a source's link to its device open: opens it (a TCP socket, a tty, a FIFO, a file,
 * a command's output), splits what arrives into lines of at most `maxLineBytes`, notices
 * when it goes quiet, and opens it again with capped backoff when it closes. The gpsd,
 * NMEA and exec sources each did this by hand; one copy means a fix (a timer left behind at
 * stop, a watchdog armed for a link already gone) reaches them all.
 *
 * What it does not know is what the lines mean: the source decodes them, decides what a
 * closed link means for it (a file read to its end is finished), and says what to log.
 */
import { Backoff } from '../backoff.js';
import { AttemptLog, LineSplitter, timer } from './common.js';
import type { SourceContext } from './types.js';

/** What the reconnector needs of an open transport: Node's stream events, and a way to end it. */
export interface Link {
  on(event: 'data', fn: (chunk: Buffer) => void): unknown;
  on(event: 'end' | 'close', fn: () => void): unknown;
  on(event: 'error', fn: (err: Error) => void): unknown;
  once(event: 'close', fn: () => void): unknown;
  /** Close it; its 'close' follows. */
  destroy(): unknown;
}

/** A transport just opened, and how it is to be kept. */
export interface Opened<L extends Link = Link> {
  link: L;
  /** Read once to its end (a regular file): never silent, and its end is the source's end, not a reason to reopen. */
  finite?: boolean;
  /**
   * Closed and opened again when it goes silent: behind a TCP socket or a tty the peer may be
   * gone (gpsd restarted, a USB receiver re-enumerated) while the link looks alive. Such a
   * link stays silent across the reopen until it speaks. Any other link (a FIFO between two
   * writers, a command) stays open, marked silent, and a new one starts unsilenced.
   */
  reopenWhenSilent?: boolean;
}

export interface ReconnectorOptions<O extends Opened> {
  ctx: SourceContext;
  /** Opens the transport; a rejection is a failed attempt (its errno code is the error shown). */
  open(signal: AbortSignal): Promise<O>;
  initialMs: number;
  maxMs: number;
  /** Seconds without activity before the link is silent; 0: never. */
  noDataTimeoutS: number;
  maxLineBytes: number;
  /** The peer as the log names it ('gpsd at 127.0.0.1:2947'): failed opens are logged by AttemptLog. */
  peer?: string;
  /**
   * What a chunk of data shows: 'alive', the device works (the backoff starts over, the
   * silence ends); 'heard', only that it is not silent; 'nothing': the source calls
   * `alive()` itself (gpsd answers its handshake with no receiver attached).
   */
  data: 'alive' | 'heard' | 'nothing';
  /**
   * A last line without a newline, at the end of the stream or when the link closes while
   * running: 'decode' it (a recorded file's last line often lacks one) or 'drop' it (half a
   * report from a connection that broke).
   */
  lastLine: 'decode' | 'drop';
  /** The no-data timeout also bounds an open: a TCP connect to a host that drops packets would hang for minutes. */
  openTimeout?: boolean;
  /** A complete line of the open link, numbered from 1 on each link. */
  line(text: string, n: number): void;
  /** The link is open (after a failed attempt or not). */
  opened?(o: O): void;
  /** The link went silent (called once per silence). */
  silent?(o: O): void;
  /** The silence is over. */
  resumed?(): void;
  /** The link closed by itself while running: open it again, or stop here ('finished'). */
  closed?(o: O): 'reopen' | 'finished';
  /** An attempt to open failed; `lastError` says why. AttemptLog reports it when there is a peer. */
  failed?(): void;
  /** The link is opened again after `waitMs`: it closed, or an attempt failed and there is no peer to report it. */
  retrying?(waitMs: number): void;
}

export class Reconnector<O extends Opened> {
  readonly backoff: Backoff;
  /** Links opened, failed attempts to open one, no-data timeouts, lines over maxLineBytes. */
  readonly counters = { opens: 0, failedOpens: 0, timeouts: 0, overlongLines: 0 };
  /** Why the link is not open or not working: an errno code, a timeout. */
  lastError: string | undefined;
  private readonly attempts: AttemptLog | undefined;
  /** The open link. */
  private conn: O | undefined;
  private splitter: LineSplitter | undefined;
  private running = false;
  private quiet = false;
  private done = false;
  /** An open in progress, which stop() aborts and waits for. */
  private opening: Promise<void> | undefined;
  private abort: AbortController | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private watchdog: NodeJS.Timeout | undefined;

  constructor(private readonly opts: ReconnectorOptions<O>) {
    this.backoff = new Backoff({ initialMs: opts.initialMs, maxMs: opts.maxMs });
    this.attempts = opts.peer === undefined ? undefined : new AttemptLog(opts.ctx.log, opts.peer);
  }

  /** The open link, if there is one. */
  get current(): O | undefined {
    return this.conn;
  }

  get active(): boolean {
    return this.running;
  }

  get silent(): boolean {
    return this.quiet;
  }

  /** A finite link was read to its end: nothing more will come. */
  get finished(): boolean {
    return this.done;
  }

  /** Failed attempts (or closed links) in a row. */
  get failures(): number {
    return this.backoff.failures;
  }

  /** Lines of the open (or last) link, overlong ones included. */
  get lines(): number {
    return this.splitter?.lines ?? 0;
  }

  /** Resolves after the first attempt to open, whatever its outcome: failures are retried, never thrown. */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.done = false;
    await this.openLink();
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.retryTimer);
    clearTimeout(this.watchdog);
    this.retryTimer = undefined;
    this.watchdog = undefined;
    this.abort?.abort();
    await this.opening; // sees !running and closes what it opened
    const link = this.conn?.link;
    if (link) {
      const closed = new Promise<void>((resolve) => link.once('close', () => resolve()));
      link.destroy();
      await closed;
    }
  }

  /** The device proved it works: the backoff starts over, and the silence ends. */
  alive(): void {
    if (!this.conn) return;
    if (this.backoff.failures > 0) this.attempts?.succeeded(this.backoff.failures);
    this.backoff.reset();
    this.heard();
  }

  /** Activity on the link: the silence ends and the no-data timeout starts again. */
  heard(): void {
    if (!this.conn) return;
    if (this.quiet) this.opts.resumed?.();
    this.quiet = false;
    this.armWatchdog();
  }

  private openLink(): Promise<void> {
    if (this.opening || !this.running) return this.opening ?? Promise.resolve();
    this.opening = this.tryOpen().finally(() => (this.opening = undefined));
    return this.opening;
  }

  private async tryOpen(): Promise<void> {
    const abort = new AbortController();
    this.abort = abort;
    if (this.opts.openTimeout) this.armWatchdog();
    let o: O;
    try {
      o = await this.opts.open(abort.signal);
    } catch (err) {
      if (!this.running) return;
      clearTimeout(this.watchdog);
      this.watchdog = undefined;
      // Given up by the watchdog: the timeout is the reason, not the abort it caused.
      if (!abort.signal.aborted) this.lastError = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      this.counters.failedOpens += 1;
      this.opts.failed?.();
      this.retry(true);
      return;
    } finally {
      this.abort = undefined;
    }
    if (!this.running) {
      const closed = new Promise<void>((resolve) => o.link.once('close', () => resolve()));
      o.link.destroy();
      await closed;
      return;
    }
    this.attach(o);
  }

  private attach(o: O): void {
    const { link } = o;
    this.conn = o;
    this.counters.opens += 1;
    this.lastError = undefined;
    if (!o.reopenWhenSilent) this.quiet = false;
    const splitter = new LineSplitter(this.opts.maxLineBytes, {
      line: (text, n) => this.opts.line(text, n),
      overlong: (n, bytes) => {
        this.counters.overlongLines += 1;
        this.opts.ctx.reject(`line ${n}: ${bytes} bytes, longer than max_line_bytes (${this.opts.maxLineBytes}); skipped`);
      },
    });
    this.splitter = splitter;
    // A watchdog already running since the open began keeps its deadline (the connect counted).
    if (!this.opts.openTimeout || this.watchdog === undefined) this.armWatchdog();
    link.on('data', (chunk: Buffer) => {
      if (this.conn !== o) return;
      // Data, not a successful open, ends the backoff: a device that opens and fails at
      // once must not be reopened in a tight loop.
      if (this.opts.data === 'alive') this.alive();
      else if (this.opts.data === 'heard') this.heard();
      splitter.push(chunk);
    });
    link.on('error', (err: Error) => {
      this.lastError = (err as NodeJS.ErrnoException).code ?? err.message;
    });
    link.on('end', () => {
      if (this.conn === o && this.opts.lastLine === 'decode') splitter.end();
    });
    link.on('close', () => this.closed(o, splitter));
    this.opts.opened?.(o);
  }

  private closed(o: O, splitter: LineSplitter): void {
    if (this.conn !== o) return;
    this.conn = undefined;
    clearTimeout(this.watchdog);
    this.watchdog = undefined;
    if (!this.running) return;
    if (this.opts.lastLine === 'decode') splitter.end();
    if ((this.opts.closed?.(o) ?? 'reopen') === 'finished') {
      this.done = true;
      return;
    }
    this.retry(false);
  }

  private retry(failedToOpen: boolean): void {
    if (!this.running) return;
    const wait = this.backoff.next();
    if (failedToOpen && this.attempts) this.attempts.failed(this.lastError ?? 'cannot open', this.backoff.failures, wait, this.backoff.atMax);
    else this.opts.retrying?.(wait);
    clearTimeout(this.retryTimer);
    this.retryTimer = timer(() => {
      this.retryTimer = undefined;
      void this.openLink();
    }, wait);
  }

  private armWatchdog(): void {
    clearTimeout(this.watchdog);
    this.watchdog = undefined;
    const s = this.opts.noDataTimeoutS;
    if (s <= 0 || this.conn?.finite) return;
    this.watchdog = timer(() => this.noData(s), s * 1000);
  }

  private noData(s: number): void {
    this.watchdog = undefined;
    if (!this.running) return;
    this.counters.timeouts += 1;
    this.lastError = `no data for ${s} s`;
    const o = this.conn;
    if (!o) {
      // An open that hangs counts as silence too: it is given up and tried again.
      this.abort?.abort();
      return;
    }
    if (!this.quiet) this.opts.silent?.(o);
    this.quiet = true;
    if (o.reopenWhenSilent) o.link.destroy();
  }
}
