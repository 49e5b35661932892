/**
 * The driver's page as a part of the daemon: started when `ui.listen` is set, restarted by a
 * reload that changes any `[ui]` setting (a new PIN file or certificate included), stopped
 * with the agent. The server itself is loaded only when the page is on, so an agent without
 * it pays nothing for it. Its files are checked before start and reload (config/ui-files.ts:
 * exit 78); a page that cannot start all the same (the port taken, a file changed since) is
 * logged, naming the setting, and the agent runs without it.
 */
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { UiServer } from './server.js';
import type { UiHost } from './view.js';

export class DriverPage {
  private server: UiServer | undefined;
  private running = '';

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
    try {
      const { readPin } = await import('./auth.js');
      const { UiServer } = await import('./server.js');
      const pin = ui.pin_file === undefined ? undefined : readPin(ui.pin_file);
      const tls = ui.tls_cert && ui.tls_key ? { cert: readTls(ui.tls_cert, 'ui.tls_cert'), key: readTls(ui.tls_key, 'ui.tls_key') } : undefined;
      const server = new UiServer(this.host, { listen: ui.listen, pin, tls, language: ui.language }, this.log);
      const port = await server.start();
      this.server = server;
      this.log.info({ listen: ui.listen, port, tls: tls !== undefined, pin: pin !== undefined }, 'driver page listening');
    } catch (err) {
      this.log.error({ listen: ui.listen, err: (err as Error).message }, 'driver page could not start; running without it');
    }
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    this.running = '';
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
