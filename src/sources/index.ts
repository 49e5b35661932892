/**
 * Builds the configured sources. Each `[[sources]]` entry picks its implementation by `type`.
 */
import type { SourceConfig } from '../config/schema.js';
import { SimulatorSource } from './simulator.js';
import type { Source, SourceContext } from './types.js';

export function createSource(cfg: SourceConfig, ctx: SourceContext): Source {
  switch (cfg.type) {
    case 'simulator':
      return new SimulatorSource(cfg, ctx);
  }
}

export function sourceName(cfg: SourceConfig, index: number): string {
  return cfg.name ?? `${cfg.type}[${index}]`;
}
