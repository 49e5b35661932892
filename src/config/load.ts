/**
 * Finding, reading and validating the config file and its drop-ins (drop-ins.ts), and finding
 * the subscription key. Every problem is collected and reported at once as `path: problem`,
 * after the file and line it came from; nothing falls back silently to a default the
 * operator did not ask for.
 */
import { accessSync, constants, existsSync, readFileSync, statSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { parse as parseToml, TomlError } from 'smol-toml';
import { AgentError } from '../errors.js';
import { deviceZone } from '../geo/device-zone.js';
import { EXIT } from '../exit.js';
import { check, problemLine } from '../validation.js';
import { configSchema, type Config } from './schema.js';
import { type ConfigPart, dropInFiles, mergeToml, Origins } from './drop-ins.js';
import { placeholderProblems } from './fake-data.js';
import { readCaFile } from '../api/transport.js';
import { loadRoute } from '../sources/routes.js';
import { uiFileProblems } from './ui-files.js';
import { FLEET_FILES, fleetFileProblems } from './fleet.js';

export const DEFAULT_CONFIG_PATH = '/etc/telematics-agent/agent.toml';
export const CONFIG_ENV = 'TELEMATICS_AGENT_CONFIG';
export const KEY_ENV = 'TELEMATICS_AGENT_SUBSCRIPTION_KEY';
/** Name of the credential in `LoadCredential=subscription-key:/etc/...` of the unit. */
export const CREDENTIAL_NAME = 'subscription-key';
/** The file the unit loads the credential from (its LoadCredential=). */
export const CREDENTIAL_FILE = '/etc/telematics-agent/subscription-key';

/** The config file cannot be read or is invalid, or the key cannot be found: exit 78, and the unit does not restart. */
export class ConfigError extends AgentError {
  readonly code = 'ECONFIG';
  readonly exitCode = EXIT.CONFIG;
  /** `at[i]`: the `file:line` that problems[i] came from, when known. */
  constructor(
    readonly file: string,
    readonly problems: string[],
    readonly at: Array<string | undefined> = [],
  ) {
    super(`${file}: invalid configuration\n${problems.map((p, i) => `  ${at[i] ? `${at[i]}: ` : ''}${p}`).join('\n')}`);
  }

  /** Each problem after the `file:line` it came from, when known. */
  located(): string[] {
    return this.problems.map((p, i) => (this.at[i] ? `${this.at[i]}: ${p}` : p));
  }

  /** The message names the file and lists one problem a line: no `error:` before it. */
  override report(): string {
    return this.message;
  }
}

/** A loaded config plus where it came from, with relative paths made absolute. */
export interface LoadedConfig {
  file: string;
  config: Config;
  deviceId: string;
  warnings: string[];
  /** The drop-ins merged over `file`, in the order they were applied. */
  dropIns?: string[];
  /** Where each setting was written, for problems found after loading (the key, the sources' files). */
  origins?: Origins;
}

/** The path of a problem (`sources[1].route: ...`), as written by problemLine. */
const problemPath = (problem: string) => /^([A-Za-z_][\w-]*(?:\[\d+\]|\.[\w-]+)*): /.exec(problem)?.[1];

/** Where each problem came from, by its path. */
export function locate(problems: string[], origins: Origins | undefined): Array<string | undefined> {
  return problems.map((p) => {
    const path = problemPath(p);
    return origins && path ? origins.where(path) : undefined;
  });
}

export function resolveConfigPath(option: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  return option ?? env[CONFIG_ENV] ?? DEFAULT_CONFIG_PATH;
}

function readConfigText(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const why = e.code === 'ENOENT' ? 'file not found' : e.code === 'EACCES' ? 'permission denied' : e.message;
    throw new ConfigError(file, [`${file}: cannot read the config file (${why})`]);
  }
}

/** Parse TOML text and validate it. Relative paths in it are taken relative to `baseDir`. */
export function parseConfigText(text: string, file: string, baseDir = dirname(resolve(file))): Config {
  return parseConfigParts([{ file, text }], baseDir).config;
}

/**
 * Parse a config file and its drop-ins (each TOML text on its own), merge them in order
 * (drop-ins.ts) and validate the result; every problem is named with the file and line it
 * came from. Relative paths are taken relative to `baseDir`, the main file's directory.
 */
export function parseConfigParts(parts: ConfigPart[], baseDir: string): { config: Config; origins: Origins } {
  const main = parts[0].file;
  const origins = new Origins();
  const merged: Record<string, unknown> = {};
  const syntax: string[] = [];
  const syntaxAt: string[] = [];
  for (const part of parts) {
    try {
      const raw = parseToml(part.text) as Record<string, unknown>;
      origins.add(part, raw);
      mergeToml(merged, structuredClone(raw));
    } catch (err) {
      if (!(err instanceof TomlError)) throw err;
      syntax.push(`TOML syntax error: ${err.message.split('\n')[0]}`);
      // file:line:column, where every other problem says file:line.
      syntaxAt.push(`${part.file}:${err.line}:${err.column}`);
    }
  }
  // Each file's syntax errors at once; the settings of a file that does not parse are unknown.
  if (syntax.length) throw new ConfigError(main, syntax, syntaxAt);
  const result = check(configSchema, merged, 'toml');
  const placeholders = placeholderProblems(merged);
  if (!result.success || placeholders.length) {
    const left = new Set(placeholders.map(problemPath));
    const problems = [...placeholders, ...(result.success ? [] : result.problems.map(problemLine).filter((p) => !left.has(problemPath(p))))];
    throw new ConfigError(main, problems, locate(problems, origins));
  }
  return { config: absolutise(result.data, baseDir), origins };
}

function absolutise(config: Config, baseDir: string): Config {
  const abs = (p: string) => (isAbsolute(p) || p === ':memory:' ? p : resolve(baseDir, p));
  config.buffer.path = abs(config.buffer.path);
  if (config.api.subscription_key_file) config.api.subscription_key_file = abs(config.api.subscription_key_file);
  if (config.api.ca_file) config.api.ca_file = abs(config.api.ca_file);
  for (const k of ['pin_file', 'tls_cert', 'tls_key'] as const) if (config.ui[k]) config.ui[k] = abs(config.ui[k]);
  const fleet = config.fleet;
  if (fleet) for (const k of FLEET_FILES) if (fleet[k]) fleet[k] = abs(fleet[k]);
  for (const s of config.sources) {
    if (s.type === 'simulator' && !s.route.startsWith('builtin:')) s.route = abs(s.route);
    if (s.type === 'nmea') s.device = abs(s.device);
    if (s.type === 'onewire') s.sysfs_root = abs(s.sysfs_root);
    if (s.type === 'module') s.path = abs(s.path);
    if (s.type === 'exec' && s.cwd) s.cwd = abs(s.cwd);
    if (s.type === 'mqtt') {
      if (s.password_file) s.password_file = abs(s.password_file);
      if (s.ca_file) s.ca_file = abs(s.ca_file);
    }
  }
  return config;
}

/** An MQTT source's client id when the config gives none: the device's, stable across restarts. */
export function mqttClientId(deviceId: string, name?: string): string {
  return `telematics-agent-${deviceId}${name === undefined ? '' : `-${name}`}`;
}

/**
 * The device id when the config gives none: the host name plus the first 8 hex digits of the
 * machine id. Thousands of Raspberry Pis are called `raspberrypi`, and the device id names
 * every trace point to the service (`traceId`): with the host name alone, trucks collide.
 */
export function defaultDeviceId(host = hostname(), machineIdFile = '/etc/machine-id'): string {
  let id = '';
  try {
    id = readFileSync(machineIdFile, 'utf8').trim().toLowerCase();
  } catch {
    // No machine id (a container, a minimal image): the host name alone.
  }
  const suffix = /^[0-9a-f]{8}/.exec(id)?.[0];
  const name = host.slice(0, suffix ? 55 : 64);
  return suffix ? `${name}-${suffix}` : name;
}

export function loadConfig(file: string): LoadedConfig {
  const text = readConfigText(file);
  let dropIns: string[];
  try {
    dropIns = dropInFiles(file);
  } catch (err) {
    throw new ConfigError(file, [`${file}: cannot read its drop-in directory (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`]);
  }
  const parts = [{ file, text }, ...dropIns.map((f) => ({ file: f, text: readConfigText(f) }))];
  const { config, origins } = parseConfigParts(parts, dirname(resolve(file)));
  // A misspelt TZ would put the schedule and every positionless time in UTC without a word.
  const zone = deviceZone();
  if (zone.problem) throw new ConfigError(file, [zone.problem]);
  const warnings: string[] = [];
  if (config.api.subscription_key) {
    warnings.push(
      config.api.subscription_key_file
        ? 'api.subscription_key: not used, api.subscription_key_file comes first; remove the inline key from the config file (it is a secret readable there to no purpose)'
        : 'api.subscription_key: the key is inline in the config file; prefer api.subscription_key_file or a systemd credential',
    );
  }
  const service = new URL(config.api.base_url);
  if (service.protocol === 'http:' && !/^(127\.\d+\.\d+\.\d+|localhost|\[::1\])$/.test(service.hostname)) {
    warnings.push(
      `api.base_url: ${service.origin} is plain HTTP to another host: the subscription key and every position would cross the network unencrypted; use https:// (plain HTTP is for the sandbox on this machine)`,
    );
  }
  if (config.codes.known) {
    // Old configs kept one list for both kinds of code: its codes stay accepted as either.
    const extra = config.codes.known;
    config.codes.events = [...new Set([...config.codes.events, ...extra])];
    config.codes.reasons = [...new Set([...config.codes.reasons, ...extra])];
    warnings.push('codes.known: replaced by codes.events (event codes) and codes.reasons (reason codes); its codes are accepted as both for now, move them to the right list');
  }
  const deviceId = config.device_id ?? defaultDeviceId();
  // A persistent session is found again by its client id: the device's (with the source's
  // name when there are several MQTT sources: the schema asks for one), after every restart.
  const mqtt = config.sources.filter((s) => s.type === 'mqtt');
  for (const s of mqtt) s.client_id ??= mqttClientId(deviceId, mqtt.length > 1 ? s.name : undefined);
  return { file, config, deviceId, warnings, dropIns, origins };
}

/**
 * A key file other users can read is a key anyone on the device can copy: warned about at
 * start and by `validate-config` (the service itself still starts).
 */
export function keyFileWarning(key: KeyLookup): string | undefined {
  if (!key.file) return undefined;
  try {
    const mode = statSync(key.file).mode & 0o777;
    if (mode & 0o004) {
      return `${key.file} is readable by every user on this device (mode ${mode.toString(8).padStart(4, '0')}); make it 0640 root:telematics-agent or 0600: chmod o-rwx ${key.file}`;
    }
  } catch {
    // Read a moment ago; gone now: nothing to warn about.
  }
  return undefined;
}

/**
 * The private CA of api.ca_file, read and checked (undefined when none is set). A ConfigError
 * naming api.ca_file when it cannot be used: the daemon refuses to start, a reload is refused.
 */
export function resolveCa(loaded: LoadedConfig): string | undefined {
  const path = loaded.config.api.ca_file;
  if (!path) return undefined;
  try {
    return readCaFile(path);
  } catch (err) {
    throw new ConfigError(loaded.file, [`api.ca_file: ${(err as Error).message}`]);
  }
}

/**
 * The files the sources read at start (a simulator's route, a module, an MQTT source's
 * password and CA), checked: a file that is not there is a mistake in the config, so the
 * daemon refuses to start (exit 78, which systemd does not restart) and a reload is refused,
 * naming the field, instead of a restart every 10 s. Devices (a tty, gpsd, 1-Wire) are not
 * checked: they come and go with the hardware, and their sources wait for them.
 */
function sourceFileProblems(config: Config): string[] {
  const problems: string[] = [];
  const readable = (field: string, path: string) => {
    try {
      accessSync(path, constants.R_OK);
    } catch (err) {
      problems.push(`${field}: ${path}: cannot read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
  };
  for (const [i, s] of config.sources.entries()) {
    const at = `sources[${i}]`;
    if (s.type === 'simulator') {
      try {
        loadRoute(s.route);
      } catch (err) {
        problems.push(`${at}.route: ${(err as Error).message}`);
      }
    } else if (s.type === 'module') {
      readable(`${at}.path`, s.path);
    } else if (s.type === 'mqtt') {
      if (s.password_file) readable(`${at}.password_file`, s.password_file);
      if (s.ca_file) readable(`${at}.ca_file`, s.ca_file);
    }
  }
  return problems;
}

/** Every problem of `checks` (each throwing a ConfigError or not), as one ConfigError, each named with where it came from. */
export function allProblems(file: string, checks: Array<() => unknown>, origins?: Origins): void {
  const problems: string[] = [];
  const at: Array<string | undefined> = [];
  for (const c of checks) {
    try {
      c();
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      const found = locate(err.problems, origins);
      problems.push(...err.problems);
      at.push(...err.problems.map((_, i) => err.at[i] ?? found[i]));
    }
  }
  if (problems.length) throw new ConfigError(file, problems, at);
}

/**
 * What the daemon needs from outside the config file before it starts or takes a reload:
 * the key, api.ca_file, the sources' files and the driver page's, every problem at once.
 * Returns the key.
 */
export function preflight(loaded: LoadedConfig, ...more: Array<() => unknown>): KeyLookup {
  let key: KeyLookup | undefined;
  allProblems(
    loaded.file,
    [
      () => {
        key = resolveSubscriptionKey(loaded);
      },
      () => resolveCa(loaded),
      () => {
        const problems = [...sourceFileProblems(loaded.config), ...uiFileProblems(loaded.config.ui), ...fleetFileProblems(loaded.config.fleet)];
        if (problems.length) throw new ConfigError(loaded.file, problems);
      },
      ...more,
    ],
    loaded.origins,
  );
  return key!;
}

export interface KeyLookup {
  key: string;
  /** Where the key came from, for logs (never the key itself). */
  origin: string;
  /** The file it was read from, when it was read from one. */
  file?: string;
  /**
   * Read from the systemd credential: systemd copies the key file there when the service
   * starts and not on a reload, so a new key file takes effect only with a restart.
   */
  credential?: true;
}

/**
 * The subscription key, in order: api.subscription_key_file, $TELEMATICS_AGENT_SUBSCRIPTION_KEY,
 * the systemd credential `subscription-key` (outside the unit, for a config beside it: the
 * file the unit loads it from, `unitKeyFile`), the inline api.subscription_key.
 * Throws a ConfigError naming what was tried; the message never contains the key.
 */
export function resolveSubscriptionKey(loaded: LoadedConfig, env: NodeJS.ProcessEnv = process.env, unitKeyFile = CREDENTIAL_FILE): KeyLookup {
  const { config, file } = loaded;
  const fromFile = (path: string, origin: string, ifEmpty = ''): KeyLookup => {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      throw new ConfigError(file, [`${origin}: cannot read ${path} (${e.code ?? e.message})`]);
    }
    const key = text.trim();
    if (!key) throw new ConfigError(file, [`${origin}: ${path} is empty${ifEmpty}`]);
    return checked({ key, origin: `${origin} (${path})`, file: path }, `${origin}: ${path}`);
  };
  /**
   * A key that cannot go in the Ocp-Apim-Subscription-Key header (a line break, a control
   * character, a byte of another encoding) failed every request for ever while the agent
   * looked healthy: refused here, like any invalid setting, without showing it.
   */
  const checked = (found: KeyLookup, what: string): KeyLookup => {
    if (/\s/.test(found.key)) throw new ConfigError(file, [`${what} holds more than one word; expected only the key`]);
    if (/[^\x21-\x7e]/.test(found.key)) {
      throw new ConfigError(file, [`${what} holds a character an HTTP header cannot carry (a control character or non-ASCII); expected only the key's printable ASCII characters`]);
    }
    return found;
  };
  if (config.api.subscription_key_file) return fromFile(config.api.subscription_key_file, 'api.subscription_key_file');
  const envKey = env[KEY_ENV]?.trim();
  if (envKey) return checked({ key: envKey, origin: `$${KEY_ENV}` }, `$${KEY_ENV}:`);
  if (env.CREDENTIALS_DIRECTORY) {
    const cred = join(env.CREDENTIALS_DIRECTORY, CREDENTIAL_NAME);
    let exists = false;
    try {
      exists = statSync(cred).isFile();
    } catch {
      exists = false;
    }
    // Empty is the unit's SetCredential= stand-in for a key file that is not there.
    const ifEmpty = `: there was no key to load into it; put the key in ${CREDENTIAL_FILE} (or where the unit's LoadCredential= says), then restart the service`;
    if (exists) return { ...fromFile(cred, 'systemd credential', ifEmpty), credential: true };
  } else if (dirname(resolve(file)) === dirname(unitKeyFile) && existsSync(unitKeyFile)) {
    // An operator's `sudo telematics-agent validate-config` (or `run` by hand) on a packaged
    // device: the key the service would get, not "no key found" while it is in place.
    return fromFile(unitKeyFile, "the unit's credential file");
  }
  if (config.api.subscription_key) return checked({ key: config.api.subscription_key, origin: 'api.subscription_key (inline)' }, 'api.subscription_key:');
  throw new ConfigError(file, [
    `api.subscription_key_file: no subscription key found (set api.subscription_key_file, $${KEY_ENV}, or the systemd credential "${CREDENTIAL_NAME}", which the unit loads from ${unitKeyFile})`,
  ]);
}
