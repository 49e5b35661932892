/**
 * What the commands share: writing lines, the --config option, loading the config with its
 * warnings, a buffer opened for one command, and checks of numbers typed as options.
 */
import { Option } from 'commander';
import { Store } from '../buffer/store.js';
import { loadConfig, resolveConfigPath, type LoadedConfig } from '../config/load.js';
import { CliError } from '../errors.js';
import { EXIT } from './exit.js';

export const out = (s: string): void => {
  process.stdout.write(`${s}\n`);
};
export const err = (s: string): void => {
  process.stderr.write(`${s}\n`);
};

export const configOption = () => new Option('-c, --config <file>', 'config file (default: $TELEMATICS_AGENT_CONFIG, else /etc/telematics-agent/agent.toml)');

/** The config named by --config (else the environment, else /etc), its warnings printed. */
export function load(configPath: string | undefined): LoadedConfig {
  const loaded = loadConfig(resolveConfigPath(configPath));
  for (const w of loaded.warnings) err(`warning: ${w}`);
  return loaded;
}

/** Open the buffer for one command and close it whatever happens. */
export function withStore<T>(loaded: LoadedConfig, fn: (store: Store) => T): T {
  const b = loaded.config.buffer;
  const store = Store.open(b.path, { synchronous: b.synchronous, cacheKb: b.cache_kb, reserveKb: b.reserve_kb });
  try {
    return fn(store);
  } finally {
    store.close();
  }
}

export function parseCoordinate(value: string, what: string, max: number): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || Math.abs(n) > max) throw new CliError(`${what}: expected a number from -${max} to ${max}, got ${JSON.stringify(value)}`, EXIT.USAGE);
  return n;
}

export function parseIntArg(value: string, what: string): number {
  if (!/^\d+$/.test(value)) throw new CliError(`${what}: expected a whole number, got ${JSON.stringify(value)}`, EXIT.USAGE);
  return Number(value);
}
