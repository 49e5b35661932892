/**
 * The driver's page as a part of the daemon: started when `ui.listen` is set, restarted by a
 * reload that changes any `[ui]` setting (a new PIN file or certificate included), stopped
 * with the agent. The server itself is loaded only when the page is on, so an agent without
 * it pays nothing for it. Its files are checked before start and reload (config/ui-files.ts:
 * exit 78); a page that cannot start all the same (the port taken, a file changed since) is
 * logged, naming the setting, tried again (after 5 s, doubling to a minute: the port may be
 * held by a program that is going away), and shown meanwhile in status and /healthz: a
 * driver without a shell has no other way to record a milestone.
 */
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import { Backoff } from '../backoff.js';
import type { Config } from '../config/schema.js';
import type { UiServer } from './server.js';
import type { UiHost } from './view.js';

/** Waits between attempts to start a page that could not: 5 s, doubling to a minute. */
export const PAGE_RETRY = { initialMs: 5000, maxMs: 60_000 };

/** What status and /healthz show of the page. */
export interface PageView {
  listen: string;
  port?: number;
  /** Why it is not running (it is tried again). */
  error?: string;
}

export class DriverPage {
  private server: UiServer | undefined;
  private running = '';
  private error: string | undefined;
  private readonly backoff = new Backoff(PAGE_RETRY);
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly host: UiHost,
    private readonly log: Logger,
  ) {}

  /** Start, restart or stop the page for `ui` (a no-op when nothing of it changed). */
  async apply(ui: Config['ui']): Promise<void> {
    const wanted = JSON.stringify(ui);
    if (wanted === this.running && (this.server !== undefined || ui.listen === undefined)) return;
    await this.stop();
    this.running = wanted;
    if (ui.listen === undefined) return;
    await this.start(ui, wanted);
  }

  /** One attempt to start the page for `ui` (`key`: the config it is for; a reload since ends the retries). */
  private async start(ui: Config['ui'], key: string): Promise<void> {
    if (key !== this.running || ui.listen === undefined) return;
    try {
      const { readPin } = await import('./auth.js');
      const { UiServer } = await import('./server.js');
      const pin = ui.pin_file === undefined ? undefined : readPin(ui.pin_file);
      const tls = ui.tls_cert && ui.tls_key ? { cert: readTls(ui.tls_cert, 'ui.tls_cert'), key: readTls(ui.tls_key, 'ui.tls_key') } : undefined;
      const server = new UiServer(this.host, { listen: ui.listen, pin, tls, language: ui.language }, this.log);
      const port = await server.start();
      if (key !== this.running) {
        await server.stop();
        return;
      }
      this.server = server;
      const attempts = this.backoff.failures;
      this.error = undefined;
      this.backoff.reset();
      this.log.info({ listen: ui.listen, port, tls: tls !== undefined, pin: pin !== undefined, ...(attempts ? { failedAttempts: attempts } : {}) }, 'driver page listening');
    } catch (err) {
      if (key !== this.running) return;
      const first = this.error === undefined;
      this.error = (err as Error).message;
      const retryInMs = this.backoff.next();
      if (first) this.log.error({ listen: ui.listen, err: this.error, retryInMs }, 'driver page could not start; running without it, trying again');
      else this.log.debug({ listen: ui.listen, err: this.error, retryInMs }, 'driver page could not start');
      this.retryTimer = setTimeout(() => void this.start(ui, key), retryInMs);
      this.retryTimer.unref();
    }
  }

  /** The page as configured: where, and why it is not running if it is not (undefined: no page). */
  view(): PageView | undefined {
    const listen = this.running ? (JSON.parse(this.running) as Config['ui']).listen : undefined;
    if (listen === undefined) return undefined;
    return this.server ? { listen, port: this.server.port } : { listen, error: this.error ?? 'starting' };
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    this.running = '';
    this.error = undefined;
    this.backoff.reset();
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    await s?.stop();
  }

  /** What the page runs with, read from the server itself (the reload test compares it with the file). */
  settings(): Record<string, unknown> {
    const s = this.server;
    return { 'ui.listen': s?.listen, 'ui.port': s?.port, 'ui.pin': s?.auth.needsPin ?? false, 'ui.tls': s?.tls ?? false, 'ui.language': s?.language };
  }
}

function readTls(file: string, field: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new Error(`${field}: ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}
