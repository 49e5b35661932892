/**
 * Builds the configured sources. Each `[[sources]]` entry picks its implementation by `type`.
 */
import type { SourceConfig } from '../config/schema.js';
import { ExecSource } from './exec.js';
import { GpsdSource } from './gpsd.js';
import { ModuleSource } from './module.js';
import { NmeaSource } from './nmea.js';
import { OnewireSource } from './onewire.js';
import { SimulatorSource } from './simulator.js';
import type { Source, SourceContext } from './types.js';

export function createSource(cfg: SourceConfig, ctx: SourceContext): Source {
  switch (cfg.type) {
    case 'simulator':
      return new SimulatorSource(cfg, ctx);
    case 'gpsd':
      return new GpsdSource(cfg, ctx);
    case 'nmea':
      return new NmeaSource(cfg, ctx);
    case 'onewire':
      return new OnewireSource(cfg, ctx);
    case 'exec':
      return new ExecSource(cfg, ctx);
    case 'module':
      return new ModuleSource(cfg, ctx);
  }
}

export function sourceName(cfg: SourceConfig, index: number): string {
  return cfg.name ?? `${cfg.type}[${index}]`;
}
