/**
 * The systemd unit and the install scripts: systemd's own checks on the unit, the settings
 * the agent relies on, and install/uninstall into a temporary root with a real npm.
 * Needs systemd-analyze (Debian package `systemd`); without it these tests fail, not skip,
 * so CI cannot pass while never checking the unit.
 */
import { spawn, spawnSync } from 'node:child_process';
import { accessSync, chmodSync, constants, existsSync, lstatSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { CREDENTIAL_NAME, parseConfigText } from '../src/config/load.js';
import { UNIT_TIMEOUT_STOP_S } from '../src/config/schema.js';
import { EXIT } from '../src/exit.js';
import { BIN, ROOT, runCli, tempDir, waitFor, writeFile, tempFixture } from './helpers.js';

const UNIT_FILE = join(ROOT, 'systemd', 'telematics-agent.service');
const INSTALL = join(ROOT, 'scripts', 'install.sh');
const UNINSTALL = join(ROOT, 'scripts', 'uninstall.sh');
const EXAMPLE_CONFIG = join(ROOT, 'config', 'agent.example.toml');
const EXEC_BIN = '/usr/local/bin/telematics-agent';

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Run {
  const r = spawnSync(cmd, args, { cwd: opts.cwd, env: { ...process.env, ...opts.env }, encoding: 'utf8', timeout: 60_000 });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Every `Key=value` of the unit, by key, in order (keys may repeat). */
function parseUnit(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#') || line.startsWith(';') || line.startsWith('[')) continue;
    const eq = line.indexOf('=');
    const key = line.slice(0, eq);
    out.set(key, [...(out.get(key) ?? []), line.slice(eq + 1)]);
  }
  return out;
}

const unitText = readFileSync(UNIT_FILE, 'utf8');
const unit = parseUnit(unitText);
const one = (key: string): string | undefined => unit.get(key)?.at(-1);
const words = (key: string): string[] => (unit.get(key) ?? []).flatMap((v) => v.split(/\s+/).filter(Boolean));
const mode = (p: string): number => statSync(p).mode & 0o777;

function systemdAnalyze(args: string[], cwd?: string): Run {
  const r = spawnSync('systemd-analyze', args, { cwd, encoding: 'utf8', timeout: 60_000 });
  if ((r.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    throw new Error('systemd-analyze not found: install the Debian package "systemd" (apt-get install systemd)');
  }
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('systemd unit: systemd-analyze', () => {
  const tmp = tempFixture('ta-unit-');

  /**
   * verify insists that ExecStart's binary exists. It is installed by install.sh, not in
   * this checkout, so verify a copy whose ExecStart runs this checkout's bin with the same
   * node; everything else is the file as shipped (the ExecStart path is checked below).
   */
  function verifyCopy(text: string): Run {
    expect(text).toContain(`ExecStart=${EXEC_BIN} `);
    const copy = writeFile(tmp.dir, 'telematics-agent.service', text.replace(`ExecStart=${EXEC_BIN} `, `ExecStart=${process.execPath} ${BIN} `));
    return systemdAnalyze(['verify', '--man=no', copy], tmp.dir);
  }

  it('passes systemd-analyze verify without a single warning', () => {
    const r = verifyCopy(unitText);
    expect(r.stderr + r.stdout).toBe('');
    expect(r.status).toBe(0);
  });

  it('verify is not vacuous: a misspelt directive is reported', () => {
    const r = verifyCopy(unitText.replace(/^ProtectSystem=strict$/m, 'ProtectSytem=strict'));
    expect(r.stderr + r.stdout).toMatch(/Unknown key 'ProtectSytem'/);
  });

  it('rates 2.0 or better in systemd-analyze security --offline=true', () => {
    const r = systemdAnalyze(['security', '--offline=true', UNIT_FILE]);
    expect(r.status).toBe(0);
    const m = /Overall exposure level for telematics-agent\.service: (\d+(?:\.\d+)?)/.exec(r.stdout);
    expect(m, r.stdout + r.stderr).not.toBeNull();
    expect(Number(m![1])).toBeLessThanOrEqual(2.0);
  });
});

describe('systemd unit: what the agent relies on', () => {
  it('gives node heap limits for a small device, in a form node accepts from NODE_OPTIONS', () => {
    const env = unit.get('Environment') ?? [];
    const options = env.map((e) => /^"?NODE_OPTIONS=([^"]*)"?$/.exec(e)?.[1]).find((o) => o !== undefined);
    expect(options).toBe('--max-semi-space-size=4 --max-old-space-size=96');
    // Node refuses to start at all on a flag it does not allow in NODE_OPTIONS.
    const r = run(process.execPath, ['-e', 'process.stdout.write(String(require("v8").getHeapStatistics().heap_size_limit))'], { env: { NODE_OPTIONS: options } });
    expect(r.status, r.stderr).toBe(0);
    const limitMb = Number(r.stdout) / 1024 / 1024;
    expect(limitMb).toBeGreaterThanOrEqual(96);
    expect(limitMb).toBeLessThan(110);
  });

  it('starts the installed binary with the default config path, as a static user', () => {
    expect(one('ExecStart')).toBe(`${EXEC_BIN} run --config /etc/telematics-agent/agent.toml`);
    expect(one('User')).toBe('telematics-agent');
    expect(unit.has('DynamicUser')).toBe(false);
    expect(one('WantedBy')).toBe('multi-user.target');
  });

  it("reloads with the shell's own kill, which a minimal image without procps still has", async () => {
    expect(one('ExecReload')).toBe("/bin/sh -c 'kill -HUP $MAINPID'");
    const script = /^\/bin\/sh -c '(.*)'$/.exec(one('ExecReload') ?? '')![1];
    // A main process that says when SIGHUP arrives, and the reload run as systemd runs it:
    // $MAINPID in the environment, and no PATH, so no /bin/kill can be found.
    const main = spawn(process.execPath, ['-e', 'process.on("SIGHUP", () => { process.stdout.write("hup\\n"); process.exit(0); }); process.stdout.write("ready\\n"); setInterval(() => {}, 1000);'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    main.stdout.on('data', (d: Buffer) => (out += d.toString()));
    await waitFor(() => out.includes('ready'), 10_000, 'the main process');
    const reload = run('/bin/sh', ['-c', script], { env: { MAINPID: String(main.pid), PATH: '/nonexistent' } });
    expect(reload.status, reload.stderr).toBe(0);
    await waitFor(() => out.includes('hup'), 10_000, 'SIGHUP at the main process');
    main.kill('SIGKILL');
  });

  it('is a notify service with a watchdog the agent feeds from its own process', () => {
    // src/notify.ts: READY=1 after start, WATCHDOG=1 every WatchdogSec/2 from the event loop.
    expect(one('Type')).toBe('notify');
    expect(one('NotifyAccess')).toBe('main');
    expect(one('WatchdogSec')).toBe('30s');
    // A watchdog timeout is a failure: restarted like a crash.
    expect(one('Restart')).toBe('on-failure');
    // systemd's default SIGABRT, as the README tells operators.
    expect(one('WatchdogSignal')).toBeUndefined();
    // The notify socket needs AF_UNIX, which journald needs anyway.
    expect(words('RestrictAddressFamilies')).toContain('AF_UNIX');
  });

  it('restarts on failure, but never on what a restart cannot fix (65 buffer unusable, 73 buffer not writable, 78 config)', () => {
    expect(one('Restart')).toBe('on-failure');
    expect([EXIT.DATA, EXIT.CANTCREAT, EXIT.CONFIG]).toEqual([65, 73, 78]);
    expect(words('RestartPreventExitStatus').sort()).toEqual(['65', '73', '78']);
  });

  it("keeps the agent's own stop bound below TimeoutStopSec: the schema refuses shutdown_timeout_s at or above it", () => {
    const m = /^(\d+)s?$/.exec(one('TimeoutStopSec') ?? '');
    expect(m).not.toBeNull();
    const timeoutStop = Number(m![1]);
    expect(UNIT_TIMEOUT_STOP_S).toBe(timeoutStop);
    const cfg = (extra: string) => `[api]\nscac = "ABCD"\n${extra}[[sources]]\ntype = "simulator"\nresource_id = "T1"\n`;
    const defaults = parseConfigText(cfg(''), 'agent.toml', '/etc/telematics-agent');
    expect(defaults.delivery.shutdown_timeout_s).toBeLessThan(timeoutStop);
    expect(parseConfigText(cfg('[delivery]\nshutdown_timeout_s = 44.5\n'), 'agent.toml', '/etc').delivery.shutdown_timeout_s).toBe(44.5);
    for (const v of [45, 600]) {
      expect(() => parseConfigText(cfg(`[delivery]\nshutdown_timeout_s = ${v}\n`), 'agent.toml', '/etc')).toThrow(
        `delivery.shutdown_timeout_s: expected a number below ${timeoutStop}, the unit's TimeoutStopSec (systemd kills the agent then), got ${v}`,
      );
    }
    expect(one('KillMode')).toBe('mixed');
  });

  it('state and config directories match the default buffer path and config location', () => {
    expect(one('StateDirectory')).toBe('telematics-agent');
    expect(one('StateDirectoryMode')).toBe('0750');
    expect(one('ConfigurationDirectory')).toBe('telematics-agent');
    const example = parseConfigText(readFileSync(EXAMPLE_CONFIG, 'utf8'), EXAMPLE_CONFIG, '/etc/telematics-agent');
    expect(example.buffer.path).toBe('/var/lib/telematics-agent/buffer.db');
    expect(one('ProtectSystem')).toBe('strict');
  });

  it('hands the key over as the credential the agent looks for', () => {
    expect(unit.get('LoadCredential')).toEqual([`${CREDENTIAL_NAME}:/etc/telematics-agent/subscription-key`]);
    expect(unit.get('SetCredential')).toEqual([`${CREDENTIAL_NAME}:\\n`]);
  });

  it('the fallback credential (key file missing) makes the agent exit 78, so the unit does not restart-loop', async () => {
    const tmp = tempDir('ta-cred-');
    try {
      const creds = join(tmp.dir, 'creds');
      mkdirSync(creds);
      // What SetCredential=subscription-key:\n leaves in $CREDENTIALS_DIRECTORY.
      writeFileSync(join(creds, CREDENTIAL_NAME), '\n', { mode: 0o400 });
      const config = writeFile(tmp.dir, 'agent.toml', `[api]\nscac = "ABCD"\n[buffer]\npath = "${join(tmp.dir, 'buffer.db')}"\n[[sources]]\ntype = "simulator"\nresource_id = "T1"\n`);
      const r = await runCli(['validate-config', '--config', config], { env: { CREDENTIALS_DIRECTORY: creds } });
      expect(r.code).toBe(EXIT.CONFIG);
      expect(r.stderr).toContain(`systemd credential: ${join(creds, CREDENTIAL_NAME)} is empty`);
      // Says where the key goes: the empty credential is the unit's stand-in for a missing file.
      expect(r.stderr).toContain(`put the key in ${unit.get('LoadCredential')![0].split(':')[1]}`);
    } finally {
      tmp.cleanup();
    }
  });

  it('lets the agent reach the network, serial devices and 1-Wire, and keeps Node.js JIT working', () => {
    expect(words('RestrictAddressFamilies').sort()).toEqual(['AF_INET', 'AF_INET6', 'AF_UNIX']);
    expect(one('PrivateNetwork')).toBeUndefined();
    expect(one('IPAddressDeny')).toBeUndefined();
    expect(one('DevicePolicy')).toBe('closed');
    expect(unit.get('DeviceAllow')).toEqual(expect.arrayContaining(['char-ttyUSB rw', 'char-ttyACM rw', 'char-ttyAMA rw']));
    expect(words('SupplementaryGroups')).toContain('dialout');
    // PrivateDevices=yes would hide /dev/ttyUSB*; /sys stays readable for /sys/bus/w1.
    expect(one('PrivateDevices')).toBeUndefined();
    expect(unit.has('InaccessiblePaths')).toBe(false);
    // V8 needs writable+executable memory.
    expect(one('MemoryDenyWriteExecute')).toBeUndefined();
    // A filtered system call must fail, not kill the process (V8 probes pkey_alloc).
    expect(one('SystemCallErrorNumber')).toBe('EPERM');
    expect(one('StandardOutput')).toBe('journal');
  });
});

describe('install.sh and uninstall.sh into a temporary root', () => {
  const tmp = tempFixture('ta-install-');
  let root: string;
  let tarball: string;
  // A real npm, kept off the network and out of the user's cache.
  let npmEnv: NodeJS.ProcessEnv;

  beforeEach(() => {
    root = join(tmp.dir, 'root');
    mkdirSync(root);
    npmEnv = {
      npm_config_cache: join(tmp.dir, 'npm-cache'),
      npm_config_audit: 'false',
      npm_config_fund: 'false',
      npm_config_update_notifier: 'false',
      npm_config_offline: 'true',
    };
    // A stand-in package with the same name and bin, no dependencies: installing the real
    // one compiles better-sqlite3 for over a minute. npm and the layout it makes are real.
    const pkg = join(tmp.dir, 'pkg');
    mkdirSync(join(pkg, 'bin'), { recursive: true });
    writeFile(pkg, 'package.json', JSON.stringify({ name: 'telematics-agent', version: '0.0.0-test', bin: { 'telematics-agent': 'bin/telematics-agent.js' } }));
    writeFile(pkg, 'bin/telematics-agent.js', '#!/usr/bin/env node\nconsole.log("stand-in");\n', 0o755);
    const packed = run('npm', ['pack', '--pack-destination', tmp.dir, '--silent'], { cwd: pkg, env: npmEnv });
    expect(packed.status, packed.stderr).toBe(0);
    tarball = join(tmp.dir, packed.stdout.trim());
  });

  const sh = (script: string, args: string[]): Run => run('sh', [script, ...args], { cwd: tmp.dir, env: npmEnv });
  const r = (p: string): string => join(root, p);

  it('installs package, directories, config and unit with the right modes, and prints what needs a real system', () => {
    const res = sh(INSTALL, ['--root', root, '--tarball', tarball]);
    expect(res.status, res.stderr).toBe(0);

    expect(statSync(r('etc/telematics-agent')).isDirectory()).toBe(true);
    expect(mode(r('etc/telematics-agent'))).toBe(0o750);
    expect(mode(r('var/lib/telematics-agent'))).toBe(0o750);
    expect(mode(r('etc/telematics-agent/agent.toml'))).toBe(0o640);
    // The installed config (placeholders, no source: it refuses to start until edited), not the example.
    expect(readFileSync(r('etc/telematics-agent/agent.toml'), 'utf8')).toBe(readFileSync(join(ROOT, 'config', 'agent.toml'), 'utf8'));
    expect(mode(r('etc/telematics-agent/agent.d'))).toBe(0o750);
    expect(res.stdout).toContain('would run: chown root:telematics-agent /etc/telematics-agent /etc/telematics-agent/agent.d');
    expect(mode(r('etc/systemd/system/telematics-agent.service'))).toBe(0o644);
    expect(readFileSync(r('etc/systemd/system/telematics-agent.service'), 'utf8')).toBe(unitText);
    // No key is invented; the operator is told how to put one.
    expect(existsSync(r('etc/telematics-agent/subscription-key'))).toBe(false);
    expect(res.stdout).toContain('install -m 0640 -o root -g telematics-agent /dev/stdin /etc/telematics-agent/subscription-key');

    // The unit's ExecStart is exactly where npm put the bin.
    expect(lstatSync(r(EXEC_BIN)).isSymbolicLink()).toBe(true);
    accessSync(r(EXEC_BIN), constants.X_OK);
    expect(res.stdout).toContain(`+ npm install -g --prefix ${r('usr/local')} ${tarball}`);

    expect(res.stdout).toContain('would run: useradd --system --user-group --home-dir /var/lib/telematics-agent');
    expect(res.stdout).toContain('would run: chown root:telematics-agent /etc/telematics-agent/agent.toml');
    expect(res.stdout).toContain('would run: chown telematics-agent:telematics-agent /var/lib/telematics-agent');
    expect(res.stdout).toContain('would run: systemctl daemon-reload');
    expect(res.stdout).toContain('would run: systemctl enable telematics-agent.service');
    expect(res.stdout).not.toMatch(/^(\+|would run:) systemctl (start|restart|try-restart)/m);
  });

  it('running it again keeps an edited config and the key, and tightens directory modes', () => {
    expect(sh(INSTALL, ['--root', root, '--tarball', tarball]).status).toBe(0);
    const config = r('etc/telematics-agent/agent.toml');
    writeFileSync(config, '[api]\nscac = "WXYZ"\n');
    const key = writeFile(r('etc/telematics-agent'), 'subscription-key', 'k\n', 0o640);
    chmodSync(r('var/lib/telematics-agent'), 0o755);

    const again = sh(INSTALL, ['--root', root, '--no-package']);
    expect(again.status, again.stderr).toBe(0);
    expect(readFileSync(config, 'utf8')).toBe('[api]\nscac = "WXYZ"\n');
    expect(readFileSync(key, 'utf8')).toBe('k\n');
    expect(again.stdout).toContain('/etc/telematics-agent/agent.toml exists: kept as it is');
    expect(again.stdout).toContain('/etc/telematics-agent/subscription-key exists (mode 640): kept');
    expect(again.stdout).not.toContain('npm install');
    expect(mode(r('var/lib/telematics-agent'))).toBe(0o750);

    chmodSync(key, 0o644);
    const loose = sh(INSTALL, ['--root', root, '--no-package']);
    expect(loose.status).toBe(0);
    expect(loose.stderr).toContain('warning: /etc/telematics-agent/subscription-key has mode 644');
  });

  it('uninstall removes unit and package but keeps the buffer and config; --purge removes them', () => {
    expect(sh(INSTALL, ['--root', root, '--tarball', tarball]).status).toBe(0);
    writeFile(r('var/lib/telematics-agent'), 'buffer.db', 'not yet delivered');
    writeFile(r('etc/telematics-agent'), 'subscription-key', 'k\n', 0o640);

    const un = sh(UNINSTALL, ['--root', root]);
    expect(un.status, un.stderr).toBe(0);
    expect(existsSync(r('etc/systemd/system/telematics-agent.service'))).toBe(false);
    expect(existsSync(r(EXEC_BIN))).toBe(false);
    expect(existsSync(r('usr/local/lib/node_modules/telematics-agent'))).toBe(false);
    expect(readFileSync(r('var/lib/telematics-agent/buffer.db'), 'utf8')).toBe('not yet delivered');
    expect(existsSync(r('etc/telematics-agent/agent.toml'))).toBe(true);
    expect(existsSync(r('etc/telematics-agent/subscription-key'))).toBe(true);
    expect(un.stdout).toContain('would run: systemctl disable --now telematics-agent.service');
    expect(un.stdout).not.toContain('userdel');

    // Twice is fine: nothing left to remove is not an error.
    expect(sh(UNINSTALL, ['--root', root]).status).toBe(0);

    const purge = sh(UNINSTALL, ['--root', root, '--purge']);
    expect(purge.status, purge.stderr).toBe(0);
    expect(existsSync(r('var/lib/telematics-agent'))).toBe(false);
    expect(existsSync(r('etc/telematics-agent'))).toBe(false);
    expect(purge.stdout).toContain('would run: userdel telematics-agent');
    // Only what it installed: the rest of the root is untouched.
    expect(statSync(r('etc/systemd/system')).isDirectory()).toBe(true);
  });

  it('refuses unclear requests with exit 64 and does nothing', () => {
    const none = sh(INSTALL, ['--root', root]);
    expect(none.status).toBe(64);
    expect(none.stderr).toContain('give --tarball FILE (or --no-package)');
    const unknown = sh(UNINSTALL, ['--root', root, '--purg']);
    expect(unknown.status).toBe(64);
    expect(unknown.stderr).toContain('unknown option: --purg');
    const missing = sh(INSTALL, ['--root', root, '--tarball', join(tmp.dir, 'nope.tgz')]);
    expect(missing.status).toBe(1);
    expect(existsSync(r('etc'))).toBe(false);
  });

  it('the npm package carries what the install script needs, scripts executable', () => {
    const packed = run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT, env: npmEnv });
    expect(packed.status, packed.stderr).toBe(0);
    const files = (JSON.parse(packed.stdout) as { files: { path: string; mode: number }[] }[])[0].files;
    const byPath = new Map(files.map((f) => [f.path, f.mode]));
    expect(byPath.get('systemd/telematics-agent.service')).toBeDefined();
    expect(byPath.get('config/agent.example.toml')).toBeDefined();
    expect(byPath.get('scripts/install.sh')! & 0o111).toBe(0o111);
    expect(byPath.get('scripts/uninstall.sh')! & 0o111).toBe(0o111);
  });
});
