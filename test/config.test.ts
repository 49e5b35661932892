import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseConfigText, resolveConfigPath, resolveSubscriptionKey } from '../src/config/load.js';
import { ROOT, runCli, writeFile, tempFixture } from './helpers.js';

const tmp = tempFixture();

/** Every config needs a source; tests about other tables add this one. */
const SRC = '[[sources]]\ntype = "simulator"\nresource_id = "T1"\n';
/** A real device's source: validate-config warns about a simulator. */
const GPSD = '[[sources]]\ntype = "gpsd"\nresource_id = "T1"\n';

function problems(text: string): string[] {
  try {
    parseConfigText(text, 'agent.toml', '/etc/telematics-agent');
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as ConfigError).problems;
  }
  throw new Error('expected the config to be refused');
}

describe('config schema', () => {
  it('fills every default from the one schema', () => {
    const c = parseConfigText(`[api]\nscac = "ABCD"\n${SRC}`, 'agent.toml', '/etc/telematics-agent');
    expect(c.api.base_url).toBe('http://127.0.0.1:8787');
    expect(c.api.milestone_path).toBe('/rcsc/events/v1/loads/milestone-requests');
    expect(c.api.trace_path).toBe('/rcsc/events/v1/loads/trace-requests');
    expect(c.api.date_time_format).toBe('local');
    expect(c.schedule).toEqual({ traces: '*/15 * * * *', splay_s: 120 });
    expect(c.sampling.interval_s).toBe(60);
    expect(c.buffer.path).toBe('/var/lib/telematics-agent/buffer.db');
    expect(c.buffer.synchronous).toBe('FULL');
    expect(c.privacy.record_without_load).toBe(false);
    expect(c.codes.default_reason).toBe('NS');
    expect(c.sources).toMatchObject([{ type: 'simulator', resource_id: 'T1', resource_type: 'Truck' }]);
    expect(c.buffer).toMatchObject({ on_corrupt: 'stop', reserve_kb: 2048, max_pending: 20_000 });
    expect(c.delivery).toMatchObject({ shutdown_timeout_s: 20, conflict_is_delivered: true });
    expect(c.api).toMatchObject({ load_number_pattern: '^[A-Za-z0-9-]{1,35}$', correlation_id_field: 'correlationId', correlation_id_header: 'x-correlation-id' });
    expect(c.milestones.max_fix_age_s).toBe(1800);
    expect(c.codes.events).toEqual(expect.arrayContaining(['X3', 'AF', 'X1', 'D1', 'CD', 'X6', 'SD', 'AA', 'AB']));
    expect(c.codes.reasons).toEqual(expect.arrayContaining(['NS', 'AI', 'AO', 'BE', 'AH']));
    // Two lists: an event code is no reason code and the other way round.
    expect(c.codes.events).not.toContain('NS');
    expect(c.codes.reasons).not.toContain('X3');
  });

  it('refuses a wait past a day where the agent sets a timer for it (Node fires one of over 24.8 days at once), naming each key', () => {
    const huge = 1e12;
    const found = problems(`[api]
scac = "ABCD"
[delivery]
retry_initial_s = ${huge}
retry_max_s = ${huge}
reconnect_max_s = ${huge}
retry_after_max_s = ${huge}
auth_retry_s = ${huge}
[[sources]]
type = "gpsd"
resource_id = "T1"
no_data_timeout_s = ${huge}
reconnect_initial_s = ${huge}
reconnect_max_s = ${huge}
[[sources]]
type = "exec"
command = "reader"
restart_initial_s = ${huge}
restart_max_s = ${huge}
[[sources]]
type = "simulator"
resource_id = "T3"
interval_s = ${huge}
`);
    const keys = found.map((p) => /^([a-z_.[\]0-9]+): expected a number <= 86400, got 1000000000000$/.exec(p)?.[1]);
    expect(keys).toEqual([
      'delivery.retry_initial_s',
      'delivery.retry_max_s',
      'delivery.reconnect_max_s',
      'delivery.retry_after_max_s',
      'delivery.auth_retry_s',
      'sources[0].no_data_timeout_s',
      'sources[0].reconnect_initial_s',
      'sources[0].reconnect_max_s',
      'sources[1].restart_initial_s',
      'sources[1].restart_max_s',
      'sources[2].interval_s',
    ]);
    // A day is still a wait one may want (a service that asks for it), and 0 still turns a watch off.
    expect(() => parseConfigText(`[api]\nscac = "ABCD"\n[delivery]\nretry_after_max_s = 86400\n${GPSD}no_data_timeout_s = 0\n`, 'agent.toml', '/etc/telematics-agent')).not.toThrow();
  });

  it('reports every problem at once, each as path: problem', () => {
    expect(
      problems(`device_id = 5
[api]
scac = "abcd"
base_url = "ftp://x"
bogus = 1
[buffer]
synchronous = "SOMETIMES"
batch_size = -3
[schedule]
traces = "every now and then"
[[sources]]
type = "teleport"
[[sources]]
type = "simulator"
speed_kmh = "fast"
`),
    ).toEqual([
      'device_id: expected string, got 5',
      'api.base_url: expected an http:// or https:// URL, got "ftp://x"',
      'api.scac: expected a 2-4 letter SCAC code in capitals, got "abcd"',
      'api.bogus: unknown key',
      'buffer.synchronous: expected one of "OFF", "NORMAL", "FULL", got "SOMETIMES"',
      'buffer.batch_size: expected a number > 0, got -3',
      'schedule.traces: expected a cron expression such as */15 * * * * (5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, not 4), got "every now and then"',
      'sources[0].type: expected one of "simulator", "gpsd", "nmea", "onewire", "exec", "mqtt", "module", got "teleport"',
      'sources[1].resource_id: required (expected string)',
      'sources[1].speed_kmh: expected number, got "fast"',
    ]);
  });

  it('names a missing table and a TOML syntax error by line and column', () => {
    expect(problems(`device_id = "x"\n${SRC}`)).toEqual(['api: required table [api] is missing']);
    let refused: unknown;
    try {
      parseConfigText('[api\nscac = "ABCD"\n', 'agent.toml', '/etc/telematics-agent');
    } catch (e) {
      refused = e;
    }
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as ConfigError).located()).toEqual(['agent.toml:1:5: TOML syntax error: Invalid TOML document: illegal character in key']);
  });

  it('refuses a config without a source, and one whose detector codes are not on the lists', () => {
    expect(problems('[api]\nscac = "ABCD"\n')).toEqual(['sources: expected at least one [[sources]] table: an agent without a source collects nothing']);
    expect(problems(`sources = []\n[api]\nscac = "ABCD"\n`)).toEqual(['sources: expected at least one [[sources]] table: an agent without a source collects nothing']);
    expect(problems(`[api]\nscac = "ABCD"\n[codes]\nevents = ["X3"]\nreasons = ["ns"]\n[milestones.delay]\nreason = "AI"\n${SRC}`)).toEqual([
      'milestones.codes.pickup_depart: AF is not in codes.events; add it there',
      'milestones.codes.delivery_arrive: X1 is not in codes.events; add it there',
      'milestones.codes.delivery_depart: D1 is not in codes.events; add it there',
      'milestones.codes.other_arrive: X1 is not in codes.events; add it there',
      'milestones.codes.other_depart: CD is not in codes.events; add it there',
      'milestones.delay.code: SD is not in codes.events; add it there',
      'milestones.delay.reason: AI is not in codes.reasons; add it there',
    ]);
    // Codes are upper-cased where they are read; a resource type's case is fixed.
    const c = parseConfigText(`[api]\nscac = "ABCD"\n[codes]\ndefault_reason = "ns"\n[[sources]]\ntype = "simulator"\nresource_id = "T1"\nresource_type = "trailer"\n`, 'agent.toml', '/etc');
    expect(c.codes.default_reason).toBe('NS');
    expect(c.sources[0]).toMatchObject({ resource_type: 'Trailer' });
    expect(problems(`[api]\nscac = "ABCD"\n[[sources]]\ntype = "simulator"\nresource_id = "T1"\nresource_type = "Car"\n`)).toEqual([
      'sources[0].resource_type: expected one of Truck, Trailer, Driver, got "Car"',
    ]);
  });

  it("a simulator's start_time that is not a time is a problem of the config, not a start that fails with exit 1", () => {
    const sim = (t: string) => `[api]\nscac = "ABCD"\n[[sources]]\ntype = "simulator"\nresource_id = "T1"\nstart_time = ${JSON.stringify(t)}\n`;
    for (const bad of ['zzz', '', 'tomorrow 8am', '2026-02-30T08:00:00Z']) {
      expect(problems(sim(bad)), bad).toEqual([`sources[0].start_time: expected "now" or an ISO 8601 time such as 2026-01-15T08:00:00Z, got ${JSON.stringify(bad)}`]);
    }
    // The one reader of typed times (src/geo/localtime.ts): minutes without seconds, an offset without its colon.
    for (const ok of ['now', '2026-01-15T08:00:00Z', '2026-01-15T08:00:00-06:00', '2026-01-15T08:00:00', '2026-01-15T08:00Z', '2026-01-15T08:00:00+0100', '2026-01-15T08:00:00.250Z']) {
      expect(parseConfigText(sim(ok), 'agent.toml', '/etc').sources[0], ok).toMatchObject({ start_time: ok });
    }
  });

  it('still reads the old codes.known, with a warning, accepting its codes on both lists', () => {
    const old = loadConfig(writeFile(tmp.dir, 'old.toml', `[api]\nscac = "ABCD"\n[codes]\nknown = ["X3", "ZZ"]\n${SRC}`));
    expect(old.warnings).toEqual(['codes.known: replaced by codes.events (event codes) and codes.reasons (reason codes); its codes are accepted as both for now, move them to the right list']);
    expect(old.config.codes.events).toContain('ZZ');
    expect(old.config.codes.reasons).toContain('ZZ');
  });

  it('makes relative paths relative to the config file', () => {
    const c = parseConfigText(`[api]\nscac = "ABCD"\nsubscription_key_file = "key"\n[buffer]\npath = "data/b.db"\n${SRC}`, 'x', '/opt/ta');
    expect(c.buffer.path).toBe('/opt/ta/data/b.db');
    expect(c.api.subscription_key_file).toBe('/opt/ta/key');
  });

  it('finds the config from --config, then $TELEMATICS_AGENT_CONFIG, then /etc', () => {
    expect(resolveConfigPath('/a.toml', { TELEMATICS_AGENT_CONFIG: '/b.toml' })).toBe('/a.toml');
    expect(resolveConfigPath(undefined, { TELEMATICS_AGENT_CONFIG: '/b.toml' })).toBe('/b.toml');
    expect(resolveConfigPath(undefined, {})).toBe('/etc/telematics-agent/agent.toml');
  });
});

describe('subscription key', () => {
  const base = (extra = '') => `[api]\nscac = "ABCD"\n${extra}${SRC}`;

  it('prefers the key file, then the environment, then the systemd credential, then inline (with a warning)', () => {
    const keyFile = writeFile(tmp.dir, 'key', 'from-file\n', 0o600);
    const credDir = join(tmp.dir, 'creds');
    mkdirSync(credDir);
    writeFile(credDir, 'subscription-key', 'from-credential\n');

    const withFile = loadConfig(writeFile(tmp.dir, 'a.toml', base(`subscription_key_file = "${keyFile}"\nsubscription_key = "inline-key"\n`)));
    expect(resolveSubscriptionKey(withFile, { TELEMATICS_AGENT_SUBSCRIPTION_KEY: 'from-env', CREDENTIALS_DIRECTORY: credDir }).key).toBe('from-file');
    // Both set: the warning says which one is used, not only that a key is inline.
    expect(withFile.warnings).toEqual(['api.subscription_key: not used, api.subscription_key_file comes first; remove the inline key from the config file (it is a secret readable there to no purpose)']);

    const inline = loadConfig(writeFile(tmp.dir, 'b.toml', base('subscription_key = "inline-key"\n')));
    expect(inline.warnings).toEqual(['api.subscription_key: the key is inline in the config file; prefer api.subscription_key_file or a systemd credential']);
    expect(resolveSubscriptionKey(inline, { TELEMATICS_AGENT_SUBSCRIPTION_KEY: 'from-env', CREDENTIALS_DIRECTORY: credDir }).key).toBe('from-env');
    // Only the credential is marked: systemd copied it at the start, a reload does not renew it.
    expect(resolveSubscriptionKey(inline, { CREDENTIALS_DIRECTORY: credDir })).toMatchObject({ key: 'from-credential', credential: true });
    expect(resolveSubscriptionKey(withFile, { CREDENTIALS_DIRECTORY: credDir }).credential).toBeUndefined();
    expect(resolveSubscriptionKey(inline, {}).key).toBe('inline-key');
  });

  it("outside the unit, a config beside the unit's credential file takes the key from that file (an operator's sudo validate-config)", () => {
    const etc = join(tmp.dir, 'etc-ta');
    mkdirSync(etc);
    const unitKey = join(etc, 'subscription-key');
    const beside = loadConfig(writeFile(etc, 'agent.toml', base('subscription_key = "inline-key"\n')));
    const elsewhere = loadConfig(writeFile(tmp.dir, 'e.toml', base()));
    // No file yet: what was there before (inline), and for a config elsewhere, no key and where the unit looks.
    expect(resolveSubscriptionKey(beside, {}, unitKey).key).toBe('inline-key');
    writeFile(etc, 'subscription-key', 'from-unit-file\n', 0o640);
    expect(resolveSubscriptionKey(beside, {}, unitKey)).toEqual({ key: 'from-unit-file', origin: `the unit's credential file (${unitKey})`, file: unitKey });
    expect(() => resolveSubscriptionKey(elsewhere, {}, unitKey)).toThrow(`the systemd credential "subscription-key", which the unit loads from ${unitKey})`);
    // Under the unit its credential is what counts, and the environment comes first as before.
    const credDir = join(tmp.dir, 'creds-unit');
    mkdirSync(credDir);
    writeFile(credDir, 'subscription-key', 'from-credential\n');
    expect(resolveSubscriptionKey(beside, { CREDENTIALS_DIRECTORY: credDir }, unitKey).key).toBe('from-credential');
    expect(resolveSubscriptionKey(beside, { TELEMATICS_AGENT_SUBSCRIPTION_KEY: 'from-env' }, unitKey).key).toBe('from-env');
  });

  it('says what was tried when there is no key, and never prints a key', () => {
    const none = loadConfig(writeFile(tmp.dir, 'c.toml', base()));
    expect(() => resolveSubscriptionKey(none, {})).toThrow(ConfigError);
    try {
      resolveSubscriptionKey(none, {});
    } catch (e) {
      expect((e as ConfigError).problems).toEqual([
        'api.subscription_key_file: no subscription key found (set api.subscription_key_file, $TELEMATICS_AGENT_SUBSCRIPTION_KEY, or the systemd credential "subscription-key", which the unit loads from /etc/telematics-agent/subscription-key)',
      ]);
    }
    const unreadable = loadConfig(writeFile(tmp.dir, 'd.toml', base(`subscription_key_file = "${join(tmp.dir, 'nope')}"\n`)));
    expect(() => resolveSubscriptionKey(unreadable, {})).toThrow(/api.subscription_key_file: cannot read .*nope \(ENOENT\)/);
  });
});

describe('validate-config (real CLI)', () => {
  it('exits 0 on a good config and names where the key came from', async () => {
    const keyFile = writeFile(tmp.dir, 'key', 'secret-key-value\n', 0o600);
    const cfg = writeFile(tmp.dir, 'agent.toml', `[api]\nscac = "ABCD"\nsubscription_key_file = "${keyFile}"\n[buffer]\npath = "${join(tmp.dir, 'b.db')}"\n${GPSD}`);
    const r = await runCli(['validate-config', '--config', cfg]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`${cfg}: ok`);
    expect(r.stdout).toContain('key from api.subscription_key_file');
    expect(r.stdout + r.stderr).not.toContain('secret-key-value');
  });

  it('prints every problem and exits 78', async () => {
    const cfg = writeFile(tmp.dir, 'bad.toml', `[api]\nscac = "abcd"\n[sampling]\ninterval_s = -1\nfoo = 2\n${SRC}`);
    const r = await runCli(['validate-config', '--config', cfg]);
    expect(r.code).toBe(78);
    expect(r.stderr).toBe(
      `${cfg}: invalid configuration
  ${cfg}:2: api.scac: expected a 2-4 letter SCAC code in capitals, got "abcd"
  ${cfg}:4: sampling.interval_s: expected a number >= 0, got -1
  ${cfg}:5: sampling.foo: unknown key
`,
    );
  });

  it('warns when the key would cross the network in plain HTTP, not for the sandbox on this machine', async () => {
    const keyFile = writeFile(tmp.dir, 'key', 'secret-key-value\n', 0o600);
    const withUrl = (url: string) => writeFile(tmp.dir, 'agent.toml', `[api]\nbase_url = "${url}"\nscac = "ABCD"\nsubscription_key_file = "${keyFile}"\n${GPSD}`);
    const remote = await runCli(['validate-config', '--config', withUrl('http://user:pw@api.example.com:8080/base')]);
    expect(remote.code).toBe(0);
    expect(remote.stderr).toBe(
      'warning: api.base_url: http://api.example.com:8080 is plain HTTP to another host: the subscription key and every position would cross the network unencrypted; use https:// (plain HTTP is for the sandbox on this machine)\n',
    );
    for (const ok of ['https://api.example.com', 'http://127.0.0.1:8787', 'http://localhost:8787', 'http://[::1]:8787']) {
      expect((await runCli(['validate-config', '--config', withUrl(ok)])).stderr, ok).toBe('');
    }
    // The effective config shows a password in the URL masked, as api.proxy's.
    const json = await runCli(['validate-config', '--json', '--config', withUrl('https://user:base-url-secret@api.example.com/base')]);
    expect(JSON.parse(json.stdout).api.base_url).toBe('https://user:***@api.example.com/base');
    expect(json.stdout).not.toContain('base-url-secret');
  });

  it('a retry backoff that starts above its ceiling is refused, naming the key', () => {
    expect(problems(`[api]\nscac = "ABCD"\n[delivery]\nretry_initial_s = 120\nretry_max_s = 60\n${SRC}`)).toEqual(['delivery.retry_initial_s: expected at most retry_max_s (60), got 120']);
  });

  it('exits 78 on a missing file and finds the file through $TELEMATICS_AGENT_CONFIG', async () => {
    const missing = join(tmp.dir, 'missing.toml');
    const r = await runCli(['validate-config'], { env: { TELEMATICS_AGENT_CONFIG: missing } });
    expect(r.code).toBe(78);
    expect(r.stderr).toContain(`${missing}: cannot read the config file (file not found)`);
  });

  it('exits 78 when the key file cannot be read', async () => {
    const cfg = writeFile(tmp.dir, 'agent.toml', `[api]\nscac = "ABCD"\nsubscription_key_file = "${join(tmp.dir, 'absent-key')}"\n${SRC}`);
    const r = await runCli(['validate-config', '--config', cfg]);
    expect(r.code).toBe(78);
    expect(r.stderr).toContain('api.subscription_key_file: cannot read');
  });

  it("names every file the daemon could not use at once (the key, the CA, the sources' files, the buffer), exit 78; run refuses the same with 78", async () => {
    const missing = (name: string) => join(tmp.dir, name);
    const cfg = writeFile(
      tmp.dir,
      'agent.toml',
      `[api]
scac = "ABCD"
subscription_key_file = "${missing('absent-key')}"
ca_file = "${missing('absent-ca.pem')}"
[buffer]
path = "${join(writeFile(tmp.dir, 'a-file', ''), 'b.db')}"
[[sources]]
type = "simulator"
resource_id = "T1"
route = "${missing('route.gpx')}"
[[sources]]
type = "module"
path = "${missing('reader.mjs')}"
[[sources]]
type = "simulator"
resource_id = "T2"
route = "builtin:atlantis"
`,
    );
    const r = await runCli(['validate-config', '--config', cfg]);
    expect(r.code).toBe(78);
    for (const line of [
      `api.subscription_key_file: cannot read ${missing('absent-key')} (ENOENT)`,
      'api.ca_file: ',
      `sources[0].route: ${missing('route.gpx')}: cannot read route file (ENOENT)`,
      `sources[1].path: ${missing('reader.mjs')}: cannot read (ENOENT)`,
      'sources[2].route: builtin:atlantis: unknown built-in route (known: builtin:',
      `buffer.path: ${join(tmp.dir, 'a-file', 'b.db')}: `,
    ])
      expect(r.stderr).toContain(line);
    // A file that is not there is a mistake in the config: 78, which systemd does not restart
    // (exit 1 would be restarted every 10 s for ever), before anything is opened.
    const key = writeFile(tmp.dir, 'key', 'k\n', 0o600);
    const runCfg = writeFile(
      tmp.dir,
      'run.toml',
      `[api]\nscac = "ABCD"\nsubscription_key_file = "${key}"\n[buffer]\npath = "${join(tmp.dir, 'state', 'b.db')}"\n[[sources]]\ntype = "simulator"\nresource_id = "T1"\nroute = "${missing('route.gpx')}"\n`,
    );
    const run = await runCli(['run', '--config', runCfg]);
    expect(run.code).toBe(78);
    expect(run.stderr).toContain(`sources[0].route: ${missing('route.gpx')}: cannot read route file (ENOENT)`);
    expect(existsSync(join(tmp.dir, 'state'))).toBe(false);
  });

  it("[fleet]'s files are taken relative to the config file, and checked before a start as the sources' are (exit 78)", async () => {
    // runCli runs in the clone, not beside the config: a relative path read from the
    // process's directory (/ under systemd) left the link retrying for ever.
    const dir = join(tmp.dir, 'fleet-files');
    mkdirSync(dir, { recursive: true });
    writeFile(dir, 'key', 'k\n', 0o600);
    const fleet = `[fleet]\nurl = "mqtt://127.0.0.1:1883"\nusername = "truck-1"\npassword_file = "fleet-password"\nca_file = "ca.pem"\ncert_file = "fleet.crt"\nkey_file = "fleet.key"\n`;
    const cfg = writeFile(dir, 'agent.toml', `[api]\nscac = "ABCD"\nsubscription_key_file = "key"\n[buffer]\npath = "b.db"\n${fleet}${GPSD}`);
    const missing = await runCli(['validate-config', '--config', cfg]);
    expect(missing.code).toBe(78);
    for (const f of ['password_file', 'ca_file', 'cert_file', 'key_file']) {
      const name = { password_file: 'fleet-password', ca_file: 'ca.pem', cert_file: 'fleet.crt', key_file: 'fleet.key' }[f];
      expect(missing.stderr).toContain(`fleet.${f}: ${join(dir, name!)}: cannot read (ENOENT)`);
    }
    for (const name of ['fleet-password', 'ca.pem', 'fleet.crt', 'fleet.key']) writeFile(dir, name, 'x\n', 0o600);
    const ok = await runCli(['validate-config', '--json', '--config', cfg]);
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout).fleet).toMatchObject({
      password_file: join(dir, 'fleet-password'),
      ca_file: join(dir, 'ca.pem'),
      cert_file: join(dir, 'fleet.crt'),
      key_file: join(dir, 'fleet.key'),
    });
  });

  it('the example config shows every key of every table (outside [[sources]]), commented out or set', async () => {
    const r = await runCli(['validate-config', '--json', '--config', 'config/agent.example.toml'], { env: { TELEMATICS_AGENT_SUBSCRIPTION_KEY: 'example-key' } });
    const effective = JSON.parse(r.stdout) as Record<string, unknown>;
    const toml = readFileSync(join(ROOT, 'config', 'agent.example.toml'), 'utf8');
    /** The lines of one table (`''`: before the first), up to the next header. */
    const table = (name: string) => {
      const lines: string[] = [];
      let on = name === '';
      for (const line of toml.split('\n')) {
        const header = /^\[{1,2}([^\]]+)\]{1,2}\s*$/.exec(line);
        if (header) on = !line.startsWith('[[') && header[1] === name;
        else if (on) lines.push(line);
      }
      return lines.join('\n');
    };
    const missing: string[] = [];
    const walk = (o: Record<string, unknown>, path: string) => {
      for (const [k, v] of Object.entries(o)) {
        if (path === '' && k === 'sources') continue;
        if (v && typeof v === 'object' && !Array.isArray(v) && k !== 'extra_fields') walk(v as Record<string, unknown>, path ? `${path}.${k}` : k);
        else if (!new RegExp(`^#?\\s*${k}\\s*=`, 'm').test(table(path))) missing.push(path ? `${path}.${k}` : k);
      }
    };
    walk(effective, '');
    expect(missing).toEqual([]);
  });

  it('the example config in config/ is valid, and its simulator is warned about', async () => {
    const r = await runCli(['validate-config', '--config', 'config/agent.example.toml'], {
      env: { TELEMATICS_AGENT_SUBSCRIPTION_KEY: 'example-key' },
    });
    const line =
      readFileSync(join(ROOT, 'config', 'agent.example.toml'), 'utf8')
        .split('\n')
        .indexOf('[[sources]]') + 1;
    expect(r.stderr).toBe(
      `warning: config/agent.example.toml:${line}: sources[0]: a simulator source: its positions and temperatures are made up (route builtin:chicago-indianapolis) and are sent to the service as those of TRUCK-1; for trying the agent out and tests only, remove it on a device\n`,
    );
    expect(r.code).toBe(0);
  });
});

describe('config/agent.example.toml', () => {
  it("every key set in the example config has the schema's default (the schema is the one home of defaults)", () => {
    const file = join(ROOT, 'config', 'agent.example.toml');
    const text = readFileSync(file, 'utf8');
    const example = parseConfigText(text, file, '/etc/telematics-agent') as unknown as Record<string, unknown> & { api: { scac: string }; sources: Array<{ type: string; resource_id: string }> };
    expect(example.sources.map((s) => s.type)).toEqual(['simulator']);
    // The same required keys, and the same source with only its required key.
    const bare = parseConfigText(
      `[api]\nscac = ${JSON.stringify(example.api.scac)}\n[[sources]]\ntype = "simulator"\nresource_id = ${JSON.stringify(example.sources[0].resource_id)}\n`,
      file,
      '/etc/telematics-agent',
    ) as unknown as Record<string, unknown>;
    // The active source may differ from a bare one only where a line says "example".
    const active = text.slice(text.indexOf('\n[[sources]]'), text.indexOf('\n# Other source types'));
    let table: string[] = [];
    for (const line of active.split('\n')) {
      const header = /^\[{1,2}([^\]]+)\]{1,2}/.exec(line);
      if (header) table = header[1].split('.').slice(1);
      const key = /^(\w+)\s*=.*#.*\bexample\b/.exec(line)?.[1];
      if (!key) continue;
      for (const config of [example, bare]) {
        let o = (config.sources as Array<Record<string, unknown>>)[0];
        for (const t of table) o = o[t] as Record<string, unknown>;
        delete o[key];
      }
    }
    expect(example).toEqual(bare);
  });
});

describe('the installed config (config/agent.toml)', () => {
  const INSTALLED = join(ROOT, 'config', 'agent.toml');
  const text = readFileSync(INSTALLED, 'utf8');
  const lineOf = (re: RegExp) => text.split('\n').findIndex((l) => re.test(l)) + 1;

  it('refuses to start until edited, naming the lines to edit; with those lines edited it is valid and has no simulator', async () => {
    const cfg = writeFile(tmp.dir, 'agent.toml', text.replace('path = "/var/lib/telematics-agent/buffer.db"', `path = "${join(tmp.dir, 'state', 'buffer.db')}"`));
    const env = { TELEMATICS_AGENT_SUBSCRIPTION_KEY: 'k' };
    const r = await runCli(['validate-config', '--config', cfg], { env });
    expect(r.code).toBe(78);
    expect(r.stderr).toBe(
      `${cfg}: invalid configuration
  ${cfg}:${lineOf(/^base_url = /)}: api.base_url: still "CHANGE-ME", the installed config's placeholder: set it (docs/configuration.md, "The installed config")
  ${cfg}:${lineOf(/^scac = /)}: api.scac: still "CHANGE-ME", the installed config's placeholder: set it (docs/configuration.md, "The installed config")
  ${cfg}:${lineOf(/^# \[\[sources\]\]/)}: sources: expected at least one [[sources]] table: an agent without a source collects nothing
`,
    );
    // The daemon refuses the same way (78: systemd does not restart it), before it creates anything.
    const run = await runCli(['run', '--config', cfg], { env });
    expect(run.code).toBe(78);
    expect(run.stderr).toContain(`${cfg}:${lineOf(/^scac = /)}: api.scac: still "CHANGE-ME"`);
    expect(existsSync(join(tmp.dir, 'state'))).toBe(false);

    // The edits an operator makes: the two lines named, and the gpsd source uncommented.
    let edited = readFileSync(cfg, 'utf8').replace('base_url = "CHANGE-ME"', 'base_url = "https://events.example.com"').replace('scac = "CHANGE-ME"', 'scac = "ABCD"');
    const gpsd = edited.indexOf('# [[sources]]\n# type = "gpsd"');
    const end = edited.indexOf('#\n', gpsd);
    edited = edited.slice(0, gpsd) + edited.slice(gpsd, end).replace(/^# /gm, '') + edited.slice(end);
    writeFile(tmp.dir, 'agent.toml', edited);
    const ok = await runCli(['validate-config', '--config', cfg], { env });
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
  });

  it('every source it shows commented out is valid uncommented, alone', () => {
    const blocks = text.split(/^# \[\[sources\]\]$/m).slice(1);
    expect(blocks.length).toBe(6);
    for (const b of blocks) {
      const body = b
        .split('\n')
        .filter((l) => /^# \w+ = /.test(l))
        .map((l) => l.slice(2))
        .join('\n');
      expect(() => parseConfigText(`[api]\nscac = "ABCD"\n[[sources]]\n${body}\n`, 'agent.toml', '/etc/telematics-agent'), body).not.toThrow();
    }
  });
});

describe('drop-ins (agent.d/*.toml beside agent.toml)', () => {
  const MAIN = `[api]\nbase_url = "https://events.example.com"\nscac = "ABCD"\ntimeout_s = 7\n[schedule]\nsplay_s = 30\n${SRC}`;
  const setUp = (files: Record<string, string>) => {
    const cfg = writeFile(tmp.dir, 'agent.toml', MAIN);
    mkdirSync(join(tmp.dir, 'agent.d'));
    for (const [name, t] of Object.entries(files)) writeFile(join(tmp.dir, 'agent.d'), name, t);
    return cfg;
  };

  it('are merged in name order over agent.toml: tables key by key, [[sources]] appended, other files ignored', () => {
    const cfg = setUp({
      '20-truck.toml': 'device_id = "truck-042"\n[api]\nscac = "TRKS"\n[[sources]]\ntype = "gpsd"\nresource_id = "T42"\n',
      '10-fleet.toml': '[api]\nscac = "FLET"\ntimeout_s = 9\n[schedule]\ntraces = "*/5 * * * *"\n[[sources]]\ntype = "nmea"\nresource_id = "T42"\ndevice = "/dev/ttyUSB0"\n',
      'notes.txt': 'not toml',
      '.30-hidden.toml': '[api]\nscac = "HIDE"\n',
    });
    const loaded = loadConfig(cfg);
    expect(loaded.dropIns).toEqual([join(tmp.dir, 'agent.d', '10-fleet.toml'), join(tmp.dir, 'agent.d', '20-truck.toml')]);
    expect(loaded.deviceId).toBe('truck-042');
    // The last file that sets a key wins; keys no drop-in sets keep agent.toml's value.
    expect(loaded.config.api).toMatchObject({ base_url: 'https://events.example.com', scac: 'TRKS', timeout_s: 9 });
    expect(loaded.config.schedule).toEqual({ traces: '*/5 * * * *', splay_s: 30 });
    expect(loaded.config.sources.map((s) => s.type)).toEqual(['simulator', 'nmea', 'gpsd']);
  });

  it('name the file and line of every problem, a drop-in as well as agent.toml', async () => {
    const cfg = setUp({
      '10-fleet.toml': '[api]\ntimeout_s = 9\n\n[schedule]\nsplay_s = -1\n',
      '20-truck.toml': '# truck 42\n[[sources]]\ntype = "gpsd"\nresource_id = "T42"\nport = "2947"\n[[sources]]\ntype = "gpsd"\nhost = "127.0.0.1"\n',
    });
    writeFile(tmp.dir, 'agent.toml', MAIN.replace('scac = "ABCD"', 'scac = "abcd"'));
    const r = await runCli(['validate-config', '--config', cfg], { env: { TELEMATICS_AGENT_SUBSCRIPTION_KEY: 'k' } });
    expect(r.code).toBe(78);
    const d = (name: string) => join(tmp.dir, 'agent.d', name);
    expect(r.stderr).toBe(
      `${cfg}: invalid configuration
  ${cfg}:3: api.scac: expected a 2-4 letter SCAC code in capitals, got "abcd"
  ${d('10-fleet.toml')}:5: schedule.splay_s: expected a number >= 0, got -1
  ${d('20-truck.toml')}:5: sources[1].port: expected number, got "2947"
  ${d('20-truck.toml')}:6: sources[2].resource_id: required (expected string)
`,
    );
    // A syntax error names its file too.
    writeFile(join(tmp.dir, 'agent.d'), '10-fleet.toml', '[api]\ntimeout_s = = 9\n');
    writeFile(tmp.dir, 'agent.toml', MAIN);
    const syntax = await runCli(['validate-config', '--config', cfg], { env: { TELEMATICS_AGENT_SUBSCRIPTION_KEY: 'k' } });
    expect(syntax.code).toBe(78);
    expect(syntax.stderr).toMatch(new RegExp(`^  ${d('10-fleet.toml').replace(/[.]/g, '\\.')}:2:\\d+: TOML syntax error`, 'm'));
  });

  it('validate-config names the drop-ins it merged', async () => {
    const cfg = setUp({ '10-fleet.toml': '[api]\ntimeout_s = 9\n' });
    const r = await runCli(['validate-config', '--config', cfg], { env: { TELEMATICS_AGENT_SUBSCRIPTION_KEY: 'k' } });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`${cfg} with ${join(tmp.dir, 'agent.d', '10-fleet.toml')}: ok`);
  });
});

describe('references in the shipped configs', () => {
  it('name sections that exist: (docs/sources.md: "exec") is a heading of docs/sources.md', () => {
    const refs: string[] = [];
    for (const name of ['agent.example.toml', 'agent.toml']) {
      const text = readFileSync(join(ROOT, 'config', name), 'utf8');
      for (const m of text.matchAll(/\((?:see )?(README|docs\/[\w-]+\.md)(?:, |: )"([^"]+)"\)/g)) {
        const file = m[1] === 'README' ? 'README.md' : m[1];
        const headings = readFileSync(join(ROOT, file), 'utf8')
          .split('\n')
          .filter((l) => l.startsWith('#'))
          .map((l) => l.replace(/^#+\s*/, '').replace(/`/g, ''));
        refs.push(`${name}: ${m[0]}${headings.includes(m[2]) ? '' : ' (no such heading)'}`);
      }
    }
    expect(refs.length).toBeGreaterThan(0);
    expect(refs.filter((r) => r.endsWith('(no such heading)'))).toEqual([]);
  });
});
