/**
 * What the commands share: writing lines, the --config option, loading the config with its
 * warnings, a buffer opened for one command (to write, or only to read), and checks of
 * numbers typed as options.
 */
import { existsSync } from 'node:fs';
import { Option } from 'commander';
import { accessProblem, corrupt, SCHEMA_VERSION } from '../buffer/db.js';
import { openForReading } from '../buffer/read.js';
import { Store } from '../buffer/store.js';
import { loadConfig, resolveConfigPath, type LoadedConfig } from '../config/load.js';
import { CliError, isCorruption } from '../errors.js';
import { BufferError } from '../errors.js';
import { EXIT } from '../exit.js';
import { isReadOnly, notThisUser, readProblem } from './access.js';

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

/**
 * Open the buffer for one command that writes, and close it whatever happens. An older
 * buffer is migrated, unless a daemon holds it (exit 75, see db.ts).
 */
export function withStore<T>(loaded: LoadedConfig, fn: (store: Store) => T): T {
  const b = loaded.config.buffer;
  let store: Store;
  try {
    store = Store.open(b.path, { synchronous: b.synchronous, cacheKb: b.cache_kb, reserveKb: b.reserve_kb });
  } catch (e) {
    if (e instanceof BufferError && e.problem === 'access') throw notThisUser(b.path, 'write', accessProblem(b.path) ?? e.message);
    throw e;
  }
  try {
    return closing(store, fn);
  } catch (e) {
    // SQLite opens a file this user may only read read-only, and says so at the first write.
    if (isReadOnly(e)) throw notThisUser(b.path, 'write', accessProblem(b.path) ?? (e as Error).message);
    throw e;
  }
}

/**
 * Open the buffer for one command that only reads, and close it whatever happens: nothing is
 * written, migrated or created (../buffer/read.ts). A buffer that is not there reads as empty;
 * one of an older schema is read from a copy upgraded in memory, and the command says so.
 */
export function withReader<T>(loaded: LoadedConfig, fn: (store: Store) => T): T {
  const b = loaded.config.buffer;
  // Not "no buffer" for a buffer this user cannot see: a directory it may not look into.
  const unreadable = b.path === ':memory:' ? undefined : readProblem(b.path);
  if (unreadable) throw notThisUser(b.path, 'read', unreadable);
  if (b.path === ':memory:' || !existsSync(b.path)) return closing(Store.open(':memory:'), fn);
  const { db, upgradedFrom } = openForReading(b.path, { cacheKb: b.cache_kb });
  if (upgradedFrom !== undefined) {
    err(
      `note: ${b.path} is at buffer schema ${upgradedFrom} (this version's is ${SCHEMA_VERSION}): read from a copy upgraded in memory, the file is unchanged; the daemon upgrades it at its next start (restart the service after upgrading the package)`,
    );
  }
  return closing(new Store(db), fn, b.path);
}

/**
 * Run a command on an open buffer and close it. A page found damaged while the command reads
 * is the buffer's corruption, with the daemon's guidance and exit 65, not a bare SQLite
 * message and exit 1.
 */
function closing<T>(store: Store, fn: (store: Store) => T, file = store.db.name): T {
  try {
    return fn(store);
  } catch (error) {
    if (isCorruption(error)) throw corrupt(file, (error as Error).message);
    throw error;
  } finally {
    store.close();
  }
}

export function parseCoordinate(value: string, what: string, max: number): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || Math.abs(n) > max) throw new CliError(`${what}: expected a number from -${max} to ${max}, got ${JSON.stringify(value)}`, EXIT.USAGE);
  return n;
}

/** A whole number typed as an option, at least `min`; else exit 64 naming the option. */
export function parseIntArg(value: string, what: string, min = 0): number {
  if (!/^\d+$/.test(value) || Number(value) < min) throw new CliError(`${what}: expected a whole number${min > 0 ? ` from ${min}` : ''}, got ${JSON.stringify(value)}`, EXIT.USAGE);
  return Number(value);
}

/** A number typed as an option, within what `ok` allows; else exit 64 saying what was expected. */
export function parseNumberArg(value: string, what: string, expected: string, ok: (n: number) => boolean): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || !ok(n)) throw new CliError(`${what}: expected ${expected}, got ${JSON.stringify(value)}`, EXIT.USAGE);
  return n;
}
