/**
 * A source from a JavaScript module named in the config, for devices no built-in source
 * speaks. The module exports a factory, `createSource(ctx, options)` (or `default`), that
 * returns (or resolves to) an object with `start()`, `stop()` and optionally `health()`:
 * the same interface as the built-in sources, with a `ctx` of `emit`, `reject` and `log`.
 *
 * What the module hands over goes through the same admission as a built-in source's
 * readings (validated and counted there), with only the fields of a reading and nothing
 * that is not an object, so `status` shows the truth whatever the module's own `health()`
 * says; a module that throws from `health()` or `stop()` is reported, not fatal.
 */
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { ModuleSourceConfig } from '../config/schema.js';
import type { Reading } from '../reading.js';
import { sourceHealth } from './common.js';
import type { Source, SourceContext, SourceHealth } from './types.js';

/** What a module is given: the README's contract (`emit(reading)`, `reject(reason)`, `log`). */
export type PluginContext = Pick<SourceContext, 'reject' | 'log'> & { emit(reading: Reading): void };

/** What a module's factory returns. `health()` may report `healthy` and `detail`; counts are kept by the agent. */
export interface PluginSource {
  start(): void | Promise<void>;
  stop(): void | Promise<void>;
  health?(): Partial<SourceHealth>;
}

export type PluginFactory = (ctx: PluginContext, options: Record<string, unknown>) => PluginSource | Promise<PluginSource>;

export class ModuleSource implements Source {
  readonly type = 'module';
  readonly name: string;
  private plugin: PluginSource | undefined;
  private running = false;
  private problem: string | undefined;

  constructor(
    private readonly cfg: ModuleSourceConfig,
    private readonly ctx: SourceContext,
  ) {
    this.name = cfg.name ?? `module:${cfg.path}`;
  }

  /** Absolute path of the module (a relative `path` is taken from the working directory). */
  get file(): string {
    return isAbsolute(this.cfg.path) ? this.cfg.path : resolve(process.cwd(), this.cfg.path);
  }

  async start(): Promise<void> {
    if (this.running) return;
    try {
      this.plugin = await this.load();
      await this.plugin.start();
      this.running = true;
      this.problem = undefined;
    } catch (err) {
      this.problem = (err as Error).message;
      throw new Error(`module source ${this.cfg.path}: ${this.problem}`);
    }
  }

  async stop(): Promise<void> {
    const p = this.plugin;
    this.running = false;
    if (!p) return;
    try {
      await p.stop();
    } catch (err) {
      this.ctx.log.warn({ err: (err as Error).message }, 'module source did not stop cleanly');
    }
  }

  health(): SourceHealth {
    let healthy = this.running;
    let detail = this.problem ?? (this.running ? undefined : 'stopped');
    if (this.running && this.plugin?.health) {
      try {
        const h = this.plugin.health();
        if (typeof h?.healthy === 'boolean') healthy = h.healthy;
        if (typeof h?.detail === 'string') detail = h.detail;
      } catch (err) {
        healthy = false;
        detail = `health() threw: ${(err as Error).message}`;
      }
    }
    return sourceHealth(this.ctx, { healthy, detail }, {});
  }

  private async load(): Promise<PluginSource> {
    const file = this.file;
    let mod: Record<string, unknown>;
    try {
      mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
    } catch (err) {
      throw new Error(`cannot load ${file}: ${(err as Error).message}`);
    }
    const factory = (typeof mod.createSource === 'function' ? mod.createSource : mod.default) as PluginFactory | undefined;
    if (typeof factory !== 'function') throw new Error(`${file} exports neither createSource(ctx, options) nor a default function`);
    // The module gets its own context: only reading objects, and only their fields, go on.
    const ctx: PluginContext = {
      log: this.ctx.log,
      emit: (r) => {
        if (typeof r !== 'object' || r === null) this.ctx.reject(`emit: expected a reading object, got ${r === null ? 'null' : typeof r}`);
        else this.ctx.emit(pick(r));
      },
      reject: (reason) => this.ctx.reject(String(reason)),
    };
    const plugin = await factory(ctx, structuredClone(this.cfg.options));
    if (!plugin || typeof plugin.start !== 'function' || typeof plugin.stop !== 'function') {
      throw new Error(`the factory of ${file} must return an object with start() and stop()`);
    }
    return plugin;
  }
}

/** Only the fields of a Reading: a module's extra properties never reach the buffer. */
function pick(r: Reading): Reading {
  const out: Reading = { resourceId: r.resourceId, timeMs: r.timeMs };
  for (const k of ['lat', 'lon', 'speed', 'heading', 'odometer', 'temperatureC', 'errorM'] as const) if (r[k] !== undefined) out[k] = r[k];
  return out;
}
