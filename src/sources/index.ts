/**
 * Builds the configured sources. Each `[[sources]]` entry picks its implementation by `type`.
 */
import type { SourceConfig } from '../config/schema.js';
import type { Source, SourceContext } from './types.js';

/**
 * Each implementation is loaded when a source of its type is configured: a truck with only
 * the gpsd source does not carry the NMEA, 1-Wire, exec and plug-in code in its memory.
 */
export async function createSource(cfg: SourceConfig, ctx: SourceContext): Promise<Source> {
  switch (cfg.type) {
    case 'simulator':
      return new (await import('./simulator.js')).SimulatorSource(cfg, ctx);
    case 'gpsd':
      return new (await import('./gpsd.js')).GpsdSource(cfg, ctx);
    case 'nmea':
      return new (await import('./nmea.js')).NmeaSource(cfg, ctx);
    case 'onewire':
      return new (await import('./onewire.js')).OnewireSource(cfg, ctx);
    case 'exec':
      return new (await import('./exec.js')).ExecSource(cfg, ctx);
    case 'mqtt':
      return new (await import('./mqtt.js')).MqttSource(cfg, ctx);
    case 'module':
      return new (await import('./module.js')).ModuleSource(cfg, ctx);
  }
}

export function sourceName(cfg: SourceConfig, index: number): string {
  return cfg.name ?? `${cfg.type}[${index}]`;
}
