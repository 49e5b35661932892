/**
 * A reload (SIGHUP) must never say it applied what it did not. Every setting of the schema
 * is changed at once; each one is then either in force in the part that uses it, or named
 * as waiting for a restart (and still at its old value). A setting added to the schema
 * without a decision here fails the first test.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync, readlinkSync, writeSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Agent, changedSettings } from '../src/agent.js';
import { KEY_NEEDS_RESTART } from '../src/cli/commands/run.js';
import { CREDENTIAL_NAME, type LoadedConfig } from '../src/config/load.js';
import { configSchema, restartSettings, type Config } from '../src/config/schema.js';
import { createLogger } from '../src/log.js';
import { type Daemon, startDaemon, TEST_KEY, TEST_SCAC, waitFor, writeFile, agentConfig, daemonFixture } from './helpers.js';
import { makePki } from './pki.js';

// The in-process agent is this fixture's daemon: stopped after each test.
const fx = daemonFixture<Agent>({ prefix: 'ta-reload-' });

const silent = createLogger({ level: 'silent', destination: process.stdout });

/** The daemon's first log line that contains `text`, once it comes. */
const lineWith = (d: Daemon, text: string, what: string) =>
  waitFor(
    () =>
      d
        .output()
        .split('\n')
        .find((l) => l.includes(text)),
    10_000,
    what,
  );

function moduleSource(name: string): string {
  return writeFile(fx.tmp.dir, `${name}.mjs`, 'export function createSource() { return { start() {}, stop() {} }; }\n');
}

/** Two configs that differ in every setting there is. */
function configs(url: string): { a: Config; b: Config } {
  const a = configSchema.parse({
    device_id: 'dev-a',
    api: { base_url: url, scac: TEST_SCAC, subscription_key: TEST_KEY, timeout_s: 5 },
    buffer: { path: join(fx.tmp.dir, 'a.db'), flush_interval_ms: 5000 },
    health: { listen: '127.0.0.1:0' },
    ui: { listen: '127.0.0.1:0' },
    log: { level: 'info' },
    sources: [{ type: 'module', name: 'src-a', path: moduleSource('a') }],
    // Nothing listens there: the link keeps trying in the background.
    fleet: { url: 'mqtt://127.0.0.1:1' },
  });
  const b = configSchema.parse({
    device_id: 'dev-b',
    api: {
      base_url: url.replace('127.0.0.1', 'localhost'),
      milestone_path: '/m',
      trace_path: '/t',
      scac: 'WXYZ',
      subscription_key_file: join(fx.tmp.dir, 'key-b'),
      subscription_key: 'other-inline-key',
      timeout_s: 7,
      connect_timeout_s: 3,
      proxy: 'direct',
      ca_file: makePki(fx.tmp.dir).caFile,
      date_time_format: 'utc',
      temperature_unit: 'F',
      extra_fields: { source: 'carrier' },
      load_number_pattern: '^[0-9-]{4,20}$',
      correlation_id_field: 'cid',
      correlation_id_header: 'x-cid',
      compress: 'gzip',
      compress_min_bytes: 512,
      tls_hello: 'node',
    },
    buffer: {
      path: join(fx.tmp.dir, 'b.db'),
      on_corrupt: 'move-aside',
      reserve_kb: 512,
      max_pending: 777,
      synchronous: 'NORMAL',
      cache_kb: 1024,
      batch_size: 7,
      flush_interval_ms: 150,
      max_size_mb: 99,
      max_age_days: 9,
    },
    schedule: { traces: '*/5 * * * *', splay_s: 3 },
    sampling: { interval_s: 5, temperature_max_age_s: 50 },
    delivery: {
      max_traces_per_request: 50,
      poll_interval_ms: 333,
      retry_initial_s: 2,
      retry_max_s: 20,
      reconnect_max_s: 7,
      retry_after_max_s: 200,
      auth_retry_s: 30,
      drain_interval_ms: 5,
      shutdown_timeout_s: 9,
      conflict_is_delivered: false,
    },
    loads: { late_readings_s: 600, keep_unassigned_s: 900 },
    traces: { temperature_without_fix: 'drop', references: 'none' },
    privacy: { record_without_load: true },
    codes: {
      default_reason: 'AI',
      departure: ['AF'],
      events: ['X3', 'AF', 'X1', 'D1', 'CD', 'SD', 'X6'],
      reasons: ['NS', 'AI'],
      appointments: ['AA'],
      repeatable: ['SD'],
      known: ['ZZ'],
    },
    milestones: {
      detect: false,
      radius_m: 200,
      exit_radius_factor: 2,
      dwell_s: 60,
      min_fixes: 2,
      max_fix_age_s: 600,
      codes: { pickup_arrive: 'X1', pickup_depart: 'CD', delivery_arrive: 'X3', delivery_depart: 'AF', other_arrive: 'X3', other_depart: 'AF' },
      delay: { enabled: false, code: 'X6', reason: 'AI', grace_s: 60, step_s: 60, road_factor: 1.5, speed_window_s: 60, min_speed_kmh: 20, planning_speed_kmh: 60 },
    },
    health: { listen: '127.0.0.2:0', source_silent_s: 60 },
    // makePki above wrote server.pem and server.key beside the CA.
    ui: {
      listen: '127.0.0.2:0',
      pin_file: writeFile(fx.tmp.dir, 'pin', '2468\n', 0o600),
      tls_cert: join(fx.tmp.dir, 'server.pem'),
      tls_key: join(fx.tmp.dir, 'server.key'),
      allow_plaintext: true,
      language: 'fr',
    },
    log: { level: 'debug' },
    sources: [{ type: 'module', name: 'src-b', path: moduleSource('b') }],
    sources_time: { max_future_s: 60, max_past_days: 3 },
    odometer: { min_speed_kmh: 5, max_speed_kmh: 150 },
    clock: { synchronised: 'no', unsynced_hold_s: 60 },
    history: { interval_s: 30, keep_days: 7 },
    fleet: {
      url: 'mqtt://127.0.0.2:1',
      client_id: 'b-fleet',
      username: 'dev-b',
      password_file: join(fx.tmp.dir, 'fleet-password'),
      ca_file: join(fx.tmp.dir, 'fleet-ca.pem'),
      cert_file: join(fx.tmp.dir, 'fleet-cert.pem'),
      key_file: join(fx.tmp.dir, 'fleet-key.pem'),
      topic_prefix: 'carrier/dev-b',
      status_interval_s: 10,
      keepalive_s: 30,
      commands: false,
      max_command_bytes: 2048,
      allow_plaintext: true,
      protocol_version: 4,
    },
  });
  return { a, b };
}

const loaded = (config: Config): LoadedConfig => ({ file: '(test)', config, deviceId: config.device_id!, warnings: [] });

function get(port: number, path: string, host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host, port, path }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('reload (SIGHUP)', () => {
  it('every setting either takes effect in the part that uses it, or is named as waiting for a restart', async () => {
    const { url } = await fx.sandbox.start();
    const { a, b } = configs(url);
    // The two configs really differ in every setting the schema has.
    const every = [...new Set([...changedSettings(a, {}), ...changedSettings({}, b)])];
    expect(changedSettings(a, b).sort()).toEqual(every.sort());
    expect(every.length).toBeGreaterThan(70);

    const agent = (fx.daemon = new Agent(loaded(a), { key: TEST_KEY, origin: 'test' }, silent));
    await agent.start();
    const before = agent.effectiveSettings();
    const oldHealthPort = agent.healthPort!;
    const oldUiPort = before['ui.port'] as number;
    expect(before).toMatchObject({ 'ui.listen': '127.0.0.1:0', 'ui.pin': false, 'ui.tls': false, 'ui.language': undefined });
    expect(await get(oldHealthPort, '/metrics')).toBe(200);

    const result = await agent.reload(loaded(b), { key: 'key-b', origin: 'test' });
    const restart = restartSettings();
    expect(result.needsRestart.sort()).toEqual(['buffer.on_corrupt', 'buffer.path', 'buffer.reserve_kb', 'device_id']);
    expect(result.needsRestart.every((p) => restart.includes(p))).toBe(true);
    expect([...result.applied, ...result.needsRestart].sort()).toEqual(every.sort());

    // What the agent says it runs with: the new value of every applied setting...
    const now = agent.config as unknown as Record<string, Record<string, unknown>>;
    const value = (c: unknown, path: string) => path.split('.').reduce<unknown>((o, k) => (o as Record<string, unknown>)?.[k], c);
    for (const p of result.applied) expect(value(now, p), p).toEqual(value(b, p));
    // ...and the old value of every one that waits.
    for (const p of result.needsRestart) expect(value(now, p), p).toEqual(value(a, p));

    // What the parts really run with, read from the parts themselves.
    const eff = agent.effectiveSettings();
    expect(eff).toMatchObject({
      'buffer.path': before['buffer.path'],
      device_id: 'dev-a',
      'buffer.synchronous': 'NORMAL',
      'buffer.cache_kb': 1024,
      'buffer.batch_size': 7,
      'buffer.flush_interval_ms': 150,
      'buffer.max_pending': 777,
      'privacy.record_without_load': true,
      'loads.late_readings_s': 600,
      'loads.keep_unassigned_s': 900,
      'delivery.poll_interval_ms': 333,
      'api.base_url': b.api.base_url,
      'api.timeout_s': 7,
      'api.connect_timeout_s': 3,
      'api.proxy': 'direct',
      'api.private_ca': true,
      'api.compress': 'gzip from 512 B',
      'api.tls_hello': 'node',
      'log.level': 'debug',
      'schedule.traces': '*/5 * * * *',
      'clock.synchronised': 'clock.synchronised = "no"',
      'clock.unsynced_hold_s': 60,
      sources: ['src-b'],
      'fleet.url': 'mqtt://127.0.0.2:1',
      'fleet.client_id': 'b-fleet',
      'fleet.topic_prefix': 'carrier/dev-b',
      'fleet.status_interval_s': 10,
      'fleet.keepalive_s': 30,
    });
    // The position history: the next commit of readings writes it at the new interval.
    expect(agent.ingest.options.history).toEqual({ intervalS: 30, keepDays: 7 });
    // The health endpoint moved: the new port answers, the old one is closed.
    expect(eff['health.port']).not.toBe(oldHealthPort);
    expect(eff['health.listen']).toBe('127.0.0.2:0');
    expect(await get(eff['health.port'] as number, '/metrics', '127.0.0.2')).toBe(200);
    await expect(get(oldHealthPort, '/metrics')).rejects.toThrow(/ECONNREFUSED/);
    // The driver's page moved too, now with a PIN and over TLS; the old port is closed.
    expect(eff).toMatchObject({ 'ui.listen': '127.0.0.2:0', 'ui.pin': true, 'ui.tls': true, 'ui.language': 'fr' });
    expect(eff['ui.port']).not.toBe(oldUiPort);
    await expect(get(oldUiPort, '/')).rejects.toThrow(/ECONNREFUSED/);
  });

  it('a reload that turns on record_without_load keeps readings without a load from then on', async () => {
    const { url } = await fx.sandbox.start();
    const a = structuredClone(configs(url).a);
    // Not even for a load started late (loads.keep_unassigned_s).
    a.loads.keep_unassigned_s = 0;
    const agent = (fx.daemon = new Agent(loaded(a), { key: TEST_KEY, origin: 'test' }, silent));
    await agent.start();
    agent.ingest.admit({ resourceId: 'LOOSE', timeMs: Date.now(), lat: 41.8, lon: -87.6 });
    agent.ingest.flush(true);
    expect(agent.store.counts().unassignedReadings).toBe(0);
    const on = structuredClone(a);
    on.privacy.record_without_load = true;
    const r = await agent.reload(loaded(on), { key: TEST_KEY, origin: 'test' });
    expect(r).toEqual({ applied: ['privacy.record_without_load'], needsRestart: [] });
    agent.ingest.admit({ resourceId: 'LOOSE', timeMs: Date.now(), lat: 41.8, lon: -87.6 });
    agent.ingest.flush(true);
    expect(agent.store.counts().unassignedReadings).toBe(1);
  });

  it('the daemon logs which changed settings wait for a restart', async () => {
    const { url } = await fx.sandbox.start();
    const cfg = agentConfig(fx.tmp.dir, url);
    const d = startDaemon(['--config', cfg]);
    try {
      await d.started();
      const { readFileSync, writeFileSync } = await import('node:fs');
      const text = readFileSync(cfg, 'utf8').replace('device_id = "test-device"', 'device_id = "renamed"').replace('poll_interval_ms = 100', 'poll_interval_ms = 250');
      writeFileSync(cfg, text);
      d.child.kill('SIGHUP');
      const line = await lineWith(d, 'configuration reloaded', 'the reload');
      expect(JSON.parse(line)).toMatchObject({ applied: ['delivery.poll_interval_ms'], needsRestart: ['device_id'] });
      const warn = d
        .output()
        .split('\n')
        .find((l) => l.includes('apply only after a restart'));
      expect(JSON.parse(warn!).msg).toBe('changed settings that apply only after a restart (systemctl restart telematics-agent): device_id');
      // The key came from a file: nothing is said about systemd's copy of it.
      expect(d.output()).not.toContain(KEY_NEEDS_RESTART);
    } finally {
      await d.stop();
    }
  });

  it('refuses a reload whose source file is not there, naming it, and runs on with the config it had', async () => {
    const { url } = await fx.sandbox.start();
    const cfg = agentConfig(fx.tmp.dir, url);
    const d = startDaemon(['--config', cfg]);
    try {
      await d.started();
      const { readFileSync, writeFileSync } = await import('node:fs');
      const route = join(fx.tmp.dir, 'route.gpx');
      writeFileSync(cfg, `${readFileSync(cfg, 'utf8')}\n[[sources]]\ntype = "simulator"\nresource_id = "T9"\nroute = "${route}"\n`);
      d.child.kill('SIGHUP');
      const line = await lineWith(d, 'new configuration refused', 'the refusal');
      const at = readFileSync(cfg, 'utf8').split('\n').indexOf(`route = "${route}"`) + 1;
      expect(JSON.parse(line).problems).toEqual([`${cfg}:${at}: sources[1].route: ${route}: cannot read route file (ENOENT)`]);
      expect(d.output()).not.toContain('configuration reloaded');
      expect(await d.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    } finally {
      await d.stop();
    }
  });

  it('reads the drop-ins again: a new one is applied, a bad one refused naming its file and line', async () => {
    const { url } = await fx.sandbox.start();
    const cfg = agentConfig(fx.tmp.dir, url);
    const d = startDaemon(['--config', cfg]);
    try {
      await d.started();
      const { mkdirSync } = await import('node:fs');
      mkdirSync(join(fx.tmp.dir, 'agent.d'));
      writeFile(join(fx.tmp.dir, 'agent.d'), '50-poll.toml', '# faster\n[delivery]\npoll_interval_ms = 250\n');
      d.child.kill('SIGHUP');
      const line = await lineWith(d, 'configuration reloaded', 'the reload');
      expect(JSON.parse(line)).toMatchObject({ applied: ['delivery.poll_interval_ms'], needsRestart: [] });
      const bad = writeFile(join(fx.tmp.dir, 'agent.d'), '60-bad.toml', '[delivery]\n\npoll_interval_ms = -5\n');
      d.child.kill('SIGHUP');
      const refused = await lineWith(d, 'new configuration refused', 'the refusal');
      expect(JSON.parse(refused).problems).toEqual([`${bad}:3: delivery.poll_interval_ms: expected a number > 0, got -5`]);
    } finally {
      await d.stop();
    }
  });

  it('a SIGHUP while the agent starts is kept and done once it is up, not the death it is by default', async () => {
    const { url } = await fx.sandbox.start();
    // A source that takes 2 s to start, and says when it begins: the agent is half-way up.
    const mark = join(fx.tmp.dir, 'starting');
    const slow = writeFile(
      fx.tmp.dir,
      'slow-source.mjs',
      `import { writeFileSync } from 'node:fs';\nexport function createSource() { return { async start() { writeFileSync(${JSON.stringify(mark)}, 'x'); await new Promise((r) => setTimeout(r, 2000)); }, stop() {}, health: () => ({ healthy: true, readings: 0, rejected: 0, detail: 'slow' }) }; }\n`,
    );
    const cfg = agentConfig(fx.tmp.dir, url, `[[sources]]\ntype = "module"\nname = "slow"\npath = "${slow}"\n`);
    const d = startDaemon(['--config', cfg]);
    try {
      const { existsSync } = await import('node:fs');
      await waitFor(() => existsSync(mark), 15_000, 'the source starting');
      d.child.kill('SIGHUP');
      await lineWith(d, 'configuration reloaded', 'the reload once the agent is up');
      expect(d.output()).toContain('agent started');
      expect(d.child.exitCode).toBeNull();
      expect(d.child.signalCode).toBeNull();
    } finally {
      expect(await d.stop()).toEqual({ code: 0, signal: null });
    }
  });

  it('a SIGHUP before the daemon has installed its handler (the config still being read) is kept too, not the death it is by default', async () => {
    const { url } = await fx.sandbox.start();
    const text = readFileSync(agentConfig(fx.tmp.dir, url), 'utf8');
    // The config a FIFO: the agent waits in its first read of it, before the daemon's code has
    // installed its own handler, until the test writes it.
    const fifo = join(fx.tmp.dir, 'agent-fifo.toml');
    execFileSync('mkfifo', [fifo]);
    const d = startDaemon(['--config', fifo]);
    const linkOf = (fd: string) => {
      try {
        return readlinkSync(`/proc/${d.child.pid}/fd/${fd}`);
      } catch {
        return undefined; // closed meanwhile
      }
    };
    const reading = () => readdirSync(`/proc/${d.child.pid}/fd`).some((fd) => linkOf(fd) === fifo);
    /** Write the config once the agent has the FIFO open (the test's own writer lets its open return at once); `meanwhile` runs in between. */
    const feed = async (what: string, meanwhile = () => {}) => {
      const fd = openSync(fifo, 'r+');
      try {
        await waitFor(reading, 15_000, what);
        meanwhile();
        writeSync(fd, text);
      } finally {
        closeSync(fd);
      }
    };
    try {
      await feed('the agent reading its config', () => d.child.kill('SIGHUP'));
      await d.started('the agent up after the early SIGHUP');
      // The reload reads the config again, from the FIFO.
      await feed('the reload reading the config');
      await lineWith(d, 'configuration reloaded', 'the reload once the agent is up');
      expect(d.child.exitCode).toBeNull();
      expect(d.child.signalCode).toBeNull();
    } finally {
      expect(await d.stop()).toEqual({ code: 0, signal: null });
    }
  });

  it('says at a reload that a key from the systemd credential is the copy made at the start', async () => {
    const { url } = await fx.sandbox.start();
    // The key only as systemd hands it over: no key file in the config.
    const cfg = agentConfig(fx.tmp.dir, url);
    const { readFileSync, writeFileSync, mkdirSync } = await import('node:fs');
    writeFileSync(cfg, readFileSync(cfg, 'utf8').replace(/^subscription_key_file = .*$/m, ''));
    const creds = join(fx.tmp.dir, 'creds');
    mkdirSync(creds);
    writeFile(creds, CREDENTIAL_NAME, `${TEST_KEY}\n`, 0o400);
    const d = startDaemon(['--config', cfg], { CREDENTIALS_DIRECTORY: creds });
    try {
      await d.started();
      d.child.kill('SIGHUP');
      const line = await lineWith(d, KEY_NEEDS_RESTART, 'the note about the key');
      expect(JSON.parse(line)).toMatchObject({ level: 30, keyOrigin: `systemd credential (${join(creds, CREDENTIAL_NAME)})` });
      expect(d.output()).not.toContain(TEST_KEY);
    } finally {
      await d.stop();
    }
  });
});
