/**
 * The unit under a real systemd: a minimal Debian (scripts/nspawn-rootfs.sh) booted with
 * systemd-nspawn, the agent installed in it as the README's "Install on a device" says, line
 * by line, by an operator with sudo, and run under its own unit and every hardening line of it,
 * against sandboxes of the service on the host's loopback (the container shares the network).
 *
 * The install is `--tarball` with npm, as on a device: the image gets the node that runs
 * these tests (better-sqlite3's compiled module must match it; bookworm's own is Node 18) and
 * that node's npm; `npm install -g` fetches the dependencies from the registry and builds
 * unix-dgram with the image's g++. Two things stand in for what this machine cannot reach:
 * better-sqlite3's prebuilt binary, which prebuild-install downloads from GitHub on a device,
 * is put in npm's cache where that download would land (the module this checkout built for
 * this node); and node-gyp is pointed at the node headers copied in (nodedir), where a device
 * downloads them. `npm pack` runs with --ignore-scripts: its prepack is `npm run build`, done
 * already by `npm test`, and rebuilding dist/ under the other test files running would race.
 *
 * The tests run in order on one container and build on each other (installed, started,
 * reloaded...). Needs root, systemd-nspawn and debootstrap (or the built root file system);
 * without them the suite says why and skips, except where TA_NSPAWN=required (CI), where it
 * fails. Memory figures are printed and written to .test-results/systemd-unit.json.
 */
import { randomBytes } from 'node:crypto';
import { copyFileSync, cpSync, existsSync, mkdirSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEY_NEEDS_RESTART } from '../src/cli/commands/run.js';
import type { StatusReport } from '../src/cli/status.js';
import { Sandbox } from '../src/sandbox/server.js';
import { nmeaChecksum } from '../src/sources/nmea.js';
import { ROOT, waitFor } from './helpers.js';
import { cannotBoot, Container, type ExecResult, prepareRootfs, runHost } from './nspawn.js';

const UNIT = 'telematics-agent';
const OPERATOR = 'fleetops';
const SCAC = 'TAUX';
const KEY = `ta-${randomBytes(16).toString('hex')}`;
/** Where the test's own helpers live in the container (outside /home: ProtectHome=). */
const HELPERS = '/usr/local/lib/telematics-agent-test';
const STATE = '/var/lib/telematics-agent';
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { name: string; version: string };
const TARBALL = `${PKG.name}-${PKG.version}.tgz`;
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const EXAMPLE = readFileSync(join(ROOT, 'config', 'agent.example.toml'), 'utf8');
const UNIT_TEXT = readFileSync(join(ROOT, 'systemd', `${UNIT}.service`), 'utf8');
const unitValue = (key: string): string => {
  const m = new RegExp(`^${key}=(.*)$`, 'm').exec(UNIT_TEXT);
  if (!m) throw new Error(`${key}= is not in the unit`);
  return m[1];
};
const seconds = (v: string): number => Number(/^(\d+)s?$/.exec(v)![1]);
const WATCHDOG_S = seconds(unitValue('WatchdogSec'));
const RESTART_S = seconds(unitValue('RestartSec'));
const TIMEOUT_STOP_S = seconds(unitValue('TimeoutStopSec'));

const skipReason = cannotBoot();
const required = process.env.TA_NSPAWN === 'required';
if (skipReason && !required) console.warn(`test/systemd-unit.test.ts skipped: ${skipReason}`);

/** The lines of the README's install block. */
function readmeInstallLines(): string[] {
  const section = README.split(/^## /m).find((s) => s.startsWith('Install on a device'));
  if (!section) throw new Error('README.md has no "## Install on a device" section');
  const block = /```sh\n([\s\S]*?)```/.exec(section);
  if (!block) throw new Error('the README\'s "Install on a device" has no ```sh block');
  return block[1].split('\n').filter((l) => l.trim());
}

/** One edit of the example config: `from` must be in it exactly once. */
function edit(text: string, from: string, to: string): string {
  const n = text.split(from).length - 1;
  if (n !== 1) throw new Error(`config/agent.example.toml: expected ${JSON.stringify(from)} once, found it ${n} times`);
  return text.replace(from, to);
}

interface DeviceConfig {
  baseUrl: string;
  logLevel?: string;
  /** More [[sources]] tables, appended. */
  sources?: string[];
}

/**
 * The example config as an operator edits it with sudoedit: the service's address and SCAC,
 * traces every 5 s (not every 15 min) and every reading sent (no sampling), retries capped at a
 * few seconds, commits every 2 s; the simulator (TRUCK-1, 1 Hz) stays as the example has it.
 */
function deviceConfig(c: DeviceConfig): string {
  let t = EXAMPLE;
  t = edit(t, 'base_url = "http://127.0.0.1:8787"', `base_url = "${c.baseUrl}"`);
  t = edit(t, 'scac = "ABCD"', `scac = "${SCAC}"`);
  t = edit(t, 'traces = "*/15 * * * *"', 'traces = "*/5 * * * * *"');
  t = edit(t, 'splay_s = 120', 'splay_s = 0');
  t = edit(t, '\ninterval_s = 60\n', '\ninterval_s = 0\n');
  t = edit(t, 'flush_interval_ms = 90000', 'flush_interval_ms = 2000');
  t = edit(t, 'retry_max_s = 900', 'retry_max_s = 5');
  t = edit(t, 'reconnect_max_s = 30', 'reconnect_max_s = 2');
  t = edit(t, 'level = "info"', `level = "${c.logLevel ?? 'info'}"`);
  return `${t}\n${(c.sources ?? []).join('\n')}`;
}

/** `K=V` lines of `systemctl show`. */
function props(text: string): Record<string, string> {
  return Object.fromEntries(
    text
      .split('\n')
      .filter((l) => l.includes('='))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** traceIds that came with two different readings (a reading id used twice), as deliveredPoints finds them. */
const collisions: string[] = [];

/** Every trace point any sandbox received, by its traceId: the reading's time. */
function deliveredPoints(sandboxes: Sandbox[], resourceId?: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const s of sandboxes) {
    for (const r of s.traces) {
      for (const t of r.body.traces) {
        if (resourceId && t.resourceId !== resourceId) continue;
        const ref = t.references?.find((x) => x.name === 'traceId')?.value;
        if (!ref) continue;
        const time = Date.parse(t.time.dateTime);
        const seen = out.get(ref);
        if (seen !== undefined && seen !== time) collisions.push(`${ref}: ${new Date(seen).toISOString()} and ${t.time.dateTime}`);
        out.set(ref, time);
      }
    }
  }
  return out;
}

interface Memory {
  memoryCurrentBytes: number;
  /** The cgroup's highest usage (v1 memory.max_usage_in_bytes, v2 memory.peak). */
  peakBytes: number | null;
  /** The cgroup's anonymous memory and page cache (memory.stat). */
  anonBytes: number | null;
  cacheBytes: number | null;
  mappedFileBytes: number | null;
  /** The agent's own process, /proc/PID/status. */
  vmRssBytes: number;
  rssAnonBytes: number;
}

describe.skipIf(skipReason !== undefined && !required)('the unit under a real systemd (systemd-nspawn)', () => {
  const c = new Container();
  const sandboxes: Sandbox[] = [];
  let main: Sandbox;
  const report: Record<string, unknown> = {};

  const newSandbox = async (port?: number): Promise<Sandbox> => {
    const s = new Sandbox({ key: KEY, scac: SCAC, port });
    await s.start();
    sandboxes.push(s);
    return s;
  };
  const systemctl = (...args: string[]) => c.exec(['systemctl', ...args]);
  const show = async (...names: string[]): Promise<Record<string, string>> => props((await c.exec(['systemctl', 'show', UNIT, ...names.map((n) => `--property=${n}`)])).stdout);
  /** The unit's journal, as `journalctl -o cat` prints it: the agent's JSON lines and systemd's own. */
  const journal = async (): Promise<string[]> => (await c.exec(['journalctl', '-u', UNIT, '-o', 'cat', '--no-pager'])).stdout.split('\n');
  /** The agent's JSON lines after line `from` of the journal. */
  const agentLines = async (from = 0): Promise<Array<Record<string, unknown>>> =>
    (await journal())
      .slice(from)
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  /** The CLI as the service user, as docs/operations.md says to run it. */
  const cli = (args: string[]): Promise<ExecResult> => c.exec(['sudo', '-u', 'telematics-agent', 'telematics-agent', ...args], { user: OPERATOR });
  const status = async (): Promise<{ code: number | null; json: StatusReport }> => {
    const r = await cli(['status', '--json']);
    return { code: r.status, json: JSON.parse(r.stdout) as StatusReport };
  };
  /** Replaces the config as an operator does, with sudoedit (the editor copies the new text in). */
  const putConfig = async (text: string): Promise<void> => {
    writeFileSync(c.path(`/home/${OPERATOR}/agent.toml.new`), text, { mode: 0o644 });
    const r = await c.exec(['sudoedit', '/etc/telematics-agent/agent.toml'], { user: OPERATOR, env: { SUDO_EDITOR: `/home/${OPERATOR}/put-config` } });
    if (r.status !== 0) throw new Error(`sudoedit: ${r.status} ${r.stderr}`);
  };
  const reload = async (): Promise<void> => {
    const r = await c.exec(['sudo', 'systemctl', 'reload', UNIT], { user: OPERATOR });
    if (r.status !== 0) throw new Error(`systemctl reload: ${r.status} ${r.stderr}`);
  };
  const memory = async (): Promise<Memory> => {
    const p = await show('MemoryCurrent', 'ControlGroup', 'MainPID');
    const cg = p.ControlGroup;
    const text = await c.ok(
      `d=/sys/fs/cgroup/memory${cg}; [ -d "$d" ] || d=/sys/fs/cgroup/unified${cg}; [ -d "$d" ] || d=/sys/fs/cgroup${cg}
       for f in memory.stat memory.max_usage_in_bytes memory.peak; do [ -f "$d/$f" ] && sed "s/^/$f /" "$d/$f"; done
       grep -E '^(VmRSS|RssAnon):' /proc/${p.MainPID}/status; true`,
    );
    const num = (re: RegExp, scale = 1): number | null => {
      const m = re.exec(text);
      return m ? Number(m[1]) * scale : null;
    };
    return {
      memoryCurrentBytes: Number(p.MemoryCurrent),
      peakBytes: num(/^memory\.max_usage_in_bytes (\d+)$/m) ?? num(/^memory\.peak (\d+)$/m),
      anonBytes: num(/^memory\.stat total_rss (\d+)$/m) ?? num(/^memory\.stat anon (\d+)$/m),
      cacheBytes: num(/^memory\.stat total_cache (\d+)$/m) ?? num(/^memory\.stat file (\d+)$/m),
      mappedFileBytes: num(/^memory\.stat total_mapped_file (\d+)$/m) ?? num(/^memory\.stat file_mapped (\d+)$/m),
      vmRssBytes: num(/^VmRSS:\s+(\d+) kB$/m, 1024)!,
      rssAnonBytes: num(/^RssAnon:\s+(\d+) kB$/m, 1024)!,
    };
  };
  const mb = (b: number | null) => (b === null ? 'n/a' : `${(b / 1024 / 1024).toFixed(1)} MB`);
  const describeMemory = (m: Memory) =>
    `MemoryCurrent ${mb(m.memoryCurrentBytes)} (anon ${mb(m.anonBytes)}, page cache ${mb(m.cacheBytes)} of which mapped ${mb(m.mappedFileBytes)}; cgroup peak ${mb(m.peakBytes)}); the agent's RSS ${mb(m.vmRssBytes)}, anon ${mb(m.rssAnonBytes)}`;

  beforeAll(async () => {
    if (skipReason) throw new Error(`TA_NSPAWN=required, but the container cannot boot here: ${skipReason}`);
    await prepareRootfs();
    main = await newSandbox();
    await c.boot();
    // The node running these tests, with the libraries it needs that the image lacks, its npm
    // and its headers (node-gyp builds unix-dgram against them).
    const prefix = dirname(dirname(process.execPath));
    cpSync(realpathSync(process.execPath), c.path(process.execPath));
    const ldd = await runHost('ldd', [process.execPath]);
    for (const lib of ldd.stdout.matchAll(/(\/\S+) \(0x/g)) {
      if (!existsSync(c.path(lib[1]))) cpSync(realpathSync(lib[1]), c.path(lib[1]));
    }
    const npmDir = join(prefix, 'lib', 'node_modules', 'npm');
    cpSync(npmDir, c.path(npmDir), { recursive: true });
    for (const [bin, file] of [
      ['npm', 'npm-cli.js'],
      ['npx', 'npx-cli.js'],
    ]) {
      if (!existsSync(c.path(join(prefix, 'bin', bin)))) symlinkSync(`../lib/node_modules/npm/bin/${file}`, c.path(join(prefix, 'bin', bin)));
    }
    cpSync(join(prefix, 'include', 'node'), c.path(join(prefix, 'include', 'node')), { recursive: true });
    // npm's config in the image, in the npmrc of npm itself (the one --prefix does not move):
    // this machine's global settings for reaching the registry (its CA bundle), and the
    // headers above for node-gyp.
    const hostNpmrc = join(prefix, 'etc', 'npmrc');
    writeFileSync(c.path(join(npmDir, 'npmrc')), `${existsSync(hostNpmrc) ? readFileSync(hostNpmrc, 'utf8') : ''}\nnodedir=${prefix}\n`);
    mkdirSync(c.path('/etc/ssl/certs'), { recursive: true });
    copyFileSync('/etc/ssl/certs/ca-certificates.crt', c.path('/etc/ssl/certs/ca-certificates.crt'));
    // better-sqlite3's prebuilt binary where prebuild-install keeps what it downloaded
    // (root's npm cache, as install.sh runs npm under sudo), named from the URL it would fetch.
    const req = createRequire(join(ROOT, 'node_modules', 'better-sqlite3', 'package.json'));
    const prebuild = req('prebuild-install/util.js') as { getDownloadUrl(o: object): string; cachedPrebuild(url: string): string };
    const sqlitePkg = req('./package.json') as object;
    const url = prebuild.getDownloadUrl({ pkg: sqlitePkg, runtime: 'node', abi: process.versions.modules, platform: process.platform, arch: process.arch, libc: '', 'tag-prefix': 'v' });
    mkdirSync(c.path('/root/.npm/_prebuilds'), { recursive: true });
    const tar = await runHost('tar', [
      '-czf',
      c.path(`/root/.npm/_prebuilds/${basename(prebuild.cachedPrebuild(url))}`),
      '-C',
      join(ROOT, 'node_modules', 'better-sqlite3'),
      'build/Release/better_sqlite3.node',
    ]);
    if (tar.status !== 0) throw new Error(`tar: ${tar.stderr}`);
    // The operator who follows the README: sudo without a password, and the journal.
    await c.ok(`useradd --create-home --groups systemd-journal --shell /bin/sh ${OPERATOR} && echo '${OPERATOR} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/${OPERATOR} && chmod 0440 /etc/sudoers.d/${OPERATOR}`);
    writeFileSync(c.path(`/home/${OPERATOR}/put-config`), '#!/bin/sh\n# The "editor" sudoedit runs: the test\'s new config replaces the file.\ncat "$HOME/agent.toml.new" > "$1"\n', { mode: 0o755 });
    // The test's own sources, never part of the package.
    mkdirSync(c.path(HELPERS), { recursive: true });
    copyFileSync(join(ROOT, 'test', 'fixtures', 'pty-feed.py'), c.path(`${HELPERS}/pty-feed.py`));
    writeFileSync(c.path(`${HELPERS}/hang.mjs`), HANG_MODULE);
    writeFileSync(c.path(`${HELPERS}/burst.mjs`), BURST_MODULE);
  }, 600_000);

  afterAll(async () => {
    try {
      // The container's whole journal, for a failure's post-mortem (the container goes now).
      const j = await c.exec(['journalctl', '-b', '--no-pager', '-o', 'short-precise']).catch(() => undefined);
      if (j) {
        mkdirSync(join(ROOT, '.test-results'), { recursive: true });
        writeFileSync(join(ROOT, '.test-results', 'systemd-unit-journal.txt'), j.stdout);
      }
    } finally {
      await c.stop();
      for (const s of sandboxes) await s.stop();
      mkdirSync(join(ROOT, '.test-results'), { recursive: true });
      writeFileSync(join(ROOT, '.test-results', 'systemd-unit.json'), `${JSON.stringify(report, null, 2)}\n`);
    }
  }, 90_000);

  it('installs as the README\'s "Install on a device" says, line by line, on an image without /bin/kill', async () => {
    const lines = readmeInstallLines();
    // A minimal Debian has no procps: the unit's reload must not need /bin/kill.
    expect(await c.sh('command -v kill; ls /bin/kill /usr/bin/kill 2>&1')).toMatchObject({ stdout: expect.stringMatching(/^kill\n.*No such file/) });
    // The block is the tarball install this suite says it follows, every step of it.
    for (const step of [
      'npm pack',
      `tar -xzf ${TARBALL}`,
      `install.sh --tarball ${TARBALL}`,
      'sudoedit /etc/telematics-agent/agent.toml',
      '/dev/stdin /etc/telematics-agent/subscription-key',
      'systemctl start telematics-agent',
    ]) {
      expect(
        lines.some((l) => l.includes(step)),
        step,
      ).toBe(true);
    }
    for (const line of lines) {
      const cmd = line.replace(/\s+#.*$/, '');
      if (cmd === 'npm pack') {
        // On the build machine: this checkout (see the header for --ignore-scripts).
        const r = await runHost('npm', ['pack', '--ignore-scripts', '--silent', '--pack-destination', c.path(`/home/${OPERATOR}`)], { cwd: ROOT, timeoutMs: 120_000 });
        expect(r.status, r.stderr).toBe(0);
        expect(r.stdout.trim()).toBe(TARBALL);
        await c.ok(`chown ${OPERATOR}: /home/${OPERATOR}/${TARBALL}`);
      } else if (cmd.startsWith('sudoedit ')) {
        writeFileSync(c.path(`/home/${OPERATOR}/agent.toml.new`), deviceConfig({ baseUrl: main.url }), { mode: 0o644 });
        const r = await c.sh(`cd && ${line}`, { user: OPERATOR, env: { SUDO_EDITOR: `/home/${OPERATOR}/put-config` } });
        expect(r.status, r.stderr).toBe(0);
      } else if (cmd.includes('/dev/stdin')) {
        const r = await c.sh(`cd && ${line}`, { user: OPERATOR, input: `${KEY}\n` });
        expect(r.status, r.stderr).toBe(0);
      } else if (cmd.includes('journalctl') && cmd.includes(' -f')) {
        // Started in the background; followed until the agent says it started.
        const follow = c.start(['sh', '-c', `cd && ${line}`], { user: OPERATOR, timeoutMs: 120_000 });
        try {
          await waitFor(() => follow.output().includes('"msg":"agent started"'), 90_000, 'journalctl -f to show "agent started"');
        } finally {
          await follow.stop();
        }
        expect(follow.output()).not.toContain(KEY);
      } else {
        const r = await c.sh(`cd && ${line}`, { user: OPERATOR, timeoutMs: 300_000 });
        expect(r.status, `${line}\n${r.stdout}\n${r.stderr}`).toBe(0);
        report[`install: ${cmd}`] = r.stdout.split('\n').filter((l) => /^(\+|==|added|warning)/.test(l));
      }
    }
    expect(await c.ok(`cat /etc/systemd/system/${UNIT}.service`)).toBe(UNIT_TEXT);
    expect((await systemctl('is-enabled', UNIT)).stdout.trim()).toBe('enabled');
    expect((await systemctl('is-active', UNIT)).stdout.trim()).toBe('active');
    // What install.sh prints as the check before a start works as printed.
    const check = await c.sh('sudo -u telematics-agent env CREDENTIALS_DIRECTORY=/etc/telematics-agent telematics-agent validate-config', { user: OPERATOR });
    expect(check.status, check.stderr).toBe(0);
  }, 600_000);

  it('runs under every hardening line: delivers traces and a milestone, the key from the credential, the same exposure as offline', async () => {
    const started = Date.now();
    const p = await show('ActiveState', 'SubState', 'MainPID', 'StatusText', 'NRestarts', 'User');
    expect(p).toMatchObject({ ActiveState: 'active', SubState: 'running', NRestarts: '0', User: 'telematics-agent', StatusText: 'running: 1 source(s)' });
    const lines = await agentLines();
    const startedLine = lines.find((l) => l.msg === 'agent started');
    expect(startedLine).toMatchObject({ keyOrigin: `systemd credential (/run/credentials/${UNIT}.service/subscription-key)`, sources: ['simulator:TRUCK-1'] });

    expect((await cli(['load', 'start', 'L-1001', '--resource', 'TRUCK-1'])).status).toBe(0);
    const m = await cli(['milestone', '--load', 'L-1001', '--code', 'X3']);
    expect(m.status, m.stderr).toBe(0);
    await waitFor(() => main.milestones.length === 1, 15_000, 'the milestone at the sandbox');
    expect(main.milestones[0].body).toMatchObject({ eventCode: 'X3', loadNumber: 'L-1001' });
    await waitFor(() => main.stats.tracePoints >= 3, 20_000, 'trace points at the sandbox');
    expect(main.traces[0].body.traces[0]).toMatchObject({ resourceId: 'TRUCK-1' });
    // The sandbox took the key (it answers 401 to any other) and the SCAC the operator set.
    expect(main.stats.unauthorized).toBe(0);
    expect(main.traces[0].headers.carrierscac).toBe(SCAC);
    expect((await journal()).join('\n')).not.toContain(KEY);

    // systemd-analyze security of the loaded unit inside, against the figure offline here.
    const offline = await runHost('systemd-analyze', ['security', '--offline=true', join(ROOT, 'systemd', `${UNIT}.service`)]);
    const inside = await c.exec(['systemd-analyze', 'security', '--no-pager', UNIT]);
    const exposure = (t: string) => /Overall exposure level for telematics-agent\.service: (\d+\.\d+)/.exec(t)?.[1];
    expect(exposure(offline.stdout), offline.stdout + offline.stderr).toBeDefined();
    expect(exposure(inside.stdout), inside.stdout + inside.stderr).toBe(exposure(offline.stdout));
    report.exposure = { offline: exposure(offline.stdout), inside: exposure(inside.stdout) };

    // Memory as an operator reads it, after 60 s at 1 Hz with a milestone sent.
    const startMs = Number((await c.ok(`date -d "$(systemctl show -p ActiveEnterTimestamp --value ${UNIT})" +%s`)).trim()) * 1000;
    await sleep(Math.max(0, startMs + 60_000 - Date.now()));
    const mem = await memory();
    report.memoryAfter60sAt1Hz = mem;
    console.log(`systemd unit, after 60 s at 1 Hz: ${describeMemory(mem)}`);
    expect(mem.memoryCurrentBytes).toBeGreaterThan(mem.rssAnonBytes);
    expect(mem.rssAnonBytes).toBeGreaterThan(5 * 1024 * 1024);
    report.startTestS = (Date.now() - started) / 1000;
  }, 120_000);

  it('reloads on a minimal image: a new base_url and log level apply, a broken config is refused and the unit stays active; a new key needs a restart', async () => {
    const second = await newSandbox();
    const pid = (await show('MainPID')).MainPID;
    let from = (await journal()).length;
    await putConfig(deviceConfig({ baseUrl: second.url, logLevel: 'debug' }));
    await reload();
    const reloaded = await waitFor(async () => (await agentLines(from)).find((l) => l.msg === 'configuration reloaded'), 10_000, 'configuration reloaded');
    expect(reloaded.applied).toEqual(expect.arrayContaining(['api.base_url', 'log.level']));
    expect(reloaded.needsRestart).toEqual([]);
    expect(await cli(['milestone', '--load', 'L-1001', '--code', 'X6'])).toMatchObject({ status: 0 });
    await waitFor(() => second.milestones.length === 1, 15_000, 'the milestone at the new base_url');
    expect(second.milestones[0].body.eventCode).toBe('X6');
    // debug: each trace request delivered is logged (level 20).
    await waitFor(async () => (await agentLines(from)).some((l) => l.level === 20 && l.msg === 'trace request delivered'), 15_000, 'a debug line after the reload');

    from = (await journal()).length;
    await putConfig(deviceConfig({ baseUrl: 'not an address', logLevel: 'debug' }));
    await reload();
    const refused = await waitFor(async () => (await agentLines(from)).find((l) => l.msg === 'new configuration refused; still running with the previous one'), 10_000, 'the refusal');
    expect(JSON.stringify(refused.problems)).toContain('api.base_url');
    const after = await show('ActiveState', 'SubState', 'MainPID');
    expect(after).toEqual({ ActiveState: 'active', SubState: 'running', MainPID: pid });
    // Still at work on the config it had (the CLI, which reads the file, would refuse it now).
    const before = second.stats.tracePoints;
    await waitFor(() => second.stats.tracePoints > before + 5, 20_000, 'traces, still to the previous base_url');

    from = (await journal()).length;
    await putConfig(deviceConfig({ baseUrl: main.url }));
    await reload();
    await waitFor(async () => (await agentLines(from)).some((l) => l.msg === 'configuration reloaded'), 10_000, 'configuration reloaded');
    const mark = (await journal()).length;
    const points = main.stats.tracePoints;
    await waitFor(() => main.stats.tracePoints > points + 5, 20_000, 'pushes at info level');
    expect((await agentLines(mark)).filter((l) => l.msg === 'trace request delivered')).toEqual([]);
    expect((await show('MainPID')).MainPID).toBe(pid);

    // A new key, put as the README says: systemd copied the old one at the start and a reload
    // does not renew that copy (the agent says so); a restart takes the new one.
    const newKey = `ta-${randomBytes(16).toString('hex')}`;
    const third = new Sandbox({ key: newKey, scac: SCAC });
    await third.start();
    sandboxes.push(third);
    const putKey = readmeInstallLines().find((l) => l.includes('/dev/stdin'))!;
    expect((await c.sh(`cd && ${putKey}`, { user: OPERATOR, input: `${newKey}\n` })).status).toBe(0);
    from = (await journal()).length;
    await putConfig(deviceConfig({ baseUrl: third.url }));
    await reload();
    await waitFor(async () => (await agentLines(from)).some((l) => l.msg === KEY_NEEDS_RESTART), 10_000, 'the note that the key needs a restart');
    await waitFor(() => third.stats.unauthorized > 0, 20_000, 'the old key at the new sandbox');
    expect(third.stats.accepted).toBe(0);
    expect((await c.exec(['sudo', 'systemctl', 'restart', UNIT], { user: OPERATOR })).status).toBe(0);
    await waitFor(() => third.stats.tracePoints > 0, 20_000, 'traces with the new key after the restart');
    expect((await journal()).join('\n')).not.toContain(newKey);
    // Back to the first key and sandbox for the tests that follow.
    expect((await c.sh(`cd && ${putKey}`, { user: OPERATOR, input: `${KEY}\n` })).status).toBe(0);
    await putConfig(deviceConfig({ baseUrl: main.url }));
    expect((await c.exec(['sudo', 'systemctl', 'restart', UNIT], { user: OPERATOR })).status).toBe(0);
    const at = main.stats.tracePoints;
    await waitFor(() => main.stats.tracePoints > at, 20_000, 'traces to the first sandbox again');
  }, 150_000);

  it('reads a serial receiver under the hardening: a pty named /dev/ttyUSB0 in the dialout group; DevicePolicy=closed keeps out what DeviceAllow= does not name', async () => {
    // What systemd applied: the unit's device classes that this kernel has (resolved from
    // /proc/devices at the start: ttyUSB, ttyACM and ttyAMA only exist once their driver is
    // loaded), and pseudo-terminals (136), which DevicePolicy=closed always allows.
    const cg = (await show('ControlGroup')).ControlGroup;
    // The list is readable with cgroup v1's devices controller; v2 keeps it in a BPF program
    // (the refusal below shows the policy either way).
    const list = await c.sh(`cat /sys/fs/cgroup/devices${cg}/devices.list`);
    if (list.status === 0) {
      const majors = (await c.ok('cat /proc/devices')).split('Block devices')[0];
      const applied = list.stdout.split('\n').filter(Boolean);
      report.devicesApplied = applied;
      expect(applied).not.toContain('a *:* rwm');
      expect(applied).toContain('c 136:* rw');
      for (const [name, major] of [
        ['ttyUSB', 188],
        ['ttyACM', 166],
        ['ttyAMA', 204],
        ['ttyS', 4],
      ] as const) {
        const present = new RegExp(`^\\s*${major} ${name}$`, 'm').test(majors);
        expect(applied.includes(`c ${major}:* rw`), `char-${name} (major ${major}) ${present ? 'registered' : 'not registered'} in /proc/devices`).toBe(present);
      }
    } else {
      report.devicesApplied = `not readable: ${list.stderr.trim()}`;
    }

    // The pty stands for a USB receiver: root:dialout 0660 under a ttyUSB name, as udev makes it.
    writeFileSync(c.path(`${HELPERS}/now.nmea`), nmeaSentences(Date.now(), 600));
    const pty = c.start(['python3', `${HELPERS}/pty-feed.py`, `${HELPERS}/now.nmea`, '0.5', 'once'], { input: 'go\n' });
    try {
      const dev = await waitFor(() => /^(\/dev\/pts\/\d+)$/m.exec(pty.output())?.[1], 10_000, 'the pty');
      // Beside it, a device the unit does not allow under a ttyUSB name (the hardware random
      // number generator: not a tty; opening it is harmless).
      await c.ok(`chgrp dialout ${dev} && chmod 0660 ${dev} && ln -sf ${dev} /dev/ttyUSB0 && mknod -m 0660 /dev/ttyUSB1 c 10 183 && chgrp dialout /dev/ttyUSB1`);
      expect((await cli(['load', 'start', 'L-2002', '--resource', 'TRUCK-2'])).status).toBe(0);
      const nmea = (name: string, device: string) => `[[sources]]\ntype = "nmea"\nname = "${name}"\nresource_id = "TRUCK-2"\ndevice = "${device}"\nbaud = 4800\n`;
      let from = (await journal()).length;
      await putConfig(deviceConfig({ baseUrl: main.url, sources: [nmea('gps', '/dev/ttyUSB0'), nmea('other', '/dev/ttyUSB1')] }));
      await reload();
      await waitFor(() => deliveredPoints(sandboxes, 'TRUCK-2').size >= 3, 30_000, 'positions from /dev/ttyUSB0 at the sandbox');
      const refused = await waitFor(async () => (await agentLines(from)).find((l) => l.source === 'other' && typeof l.err === 'string'), 15_000, 'the second device refused');
      expect(refused.err).toMatch(/Operation not permitted/);
      const s = await status();
      expect(s.json.sources.find((x: { name: string }) => x.name === 'gps')).toMatchObject({ healthy: true, detail: expect.stringContaining('tty, 4800 baud') });

      // A drop-in naming the device lets it through: now the error is the device's own.
      from = (await journal()).length;
      await c.ok(
        `mkdir -p /etc/systemd/system/${UNIT}.service.d && printf '[Service]\\nDeviceAllow=/dev/ttyUSB1 r\\n' > /etc/systemd/system/${UNIT}.service.d/other-serial.conf && systemctl daemon-reload && systemctl restart ${UNIT}`,
      );
      expect((await show('ActiveState')).ActiveState).toBe('active');
      const allowed = await waitFor(async () => (await agentLines(from)).find((l) => l.source === 'other' && typeof l.err === 'string'), 15_000, 'the second device tried again');
      expect(allowed.err).not.toMatch(/Operation not permitted/);
      expect(allowed.err).toMatch(/Inappropriate ioctl|No such device/);
    } finally {
      await pty.stop();
    }
    // Back to the simulator alone: the later tests count its readings.
    await putConfig(deviceConfig({ baseUrl: main.url }));
    await c.ok(`rm /etc/systemd/system/${UNIT}.service.d/other-serial.conf /dev/ttyUSB0 /dev/ttyUSB1 && systemctl daemon-reload`);
    await reload();
  }, 120_000);

  it('drains a backlog of 100,000 readings under the unit; memory as systemctl shows it', async () => {
    expect((await cli(['load', 'start', 'L-3003', '--resource', 'TRUCK-3'])).status).toBe(0);
    const cg = (await show('ControlGroup')).ControlGroup;
    // The cgroup's peak from here on (v1; on v2 memory.peak runs from the start).
    await c.sh(`f=/sys/fs/cgroup/memory${cg}/memory.max_usage_in_bytes; [ -f $f ] && echo 0 > $f; true`);
    const t0 = Date.now();
    // A module source, so that every byte counted is the agent's (an exec source's command
    // would run in the same cgroup).
    const burst = `[[sources]]\ntype = "module"\nname = "burst"\npath = "${HELPERS}/burst.mjs"\noptions = { count = 100000, resource_id = "TRUCK-3" }\n`;
    await putConfig(deviceConfig({ baseUrl: main.url, sources: [burst] }));
    await reload();
    await waitFor(() => deliveredPoints(sandboxes, 'TRUCK-3').size >= 100_000, 120_000, '100,000 points at the sandbox');
    const drainS = (Date.now() - t0) / 1000;
    expect(deliveredPoints(sandboxes, 'TRUCK-3').size).toBe(100_000);
    const mem = await memory();
    report.memoryAfter100kDrain = { ...mem, drainS };
    console.log(`systemd unit, after a 100,000-reading drain (${drainS.toFixed(1)} s from the reload): ${describeMemory(mem)}`);
    expect(mem.memoryCurrentBytes).toBeGreaterThan(0);
    const s = await status();
    expect(s.json.dropped).toEqual({});
    // The burst source off again (a restart would emit the 100,000 readings once more).
    await putConfig(deviceConfig({ baseUrl: main.url }));
    await reload();
  }, 180_000);

  it(`stops within TimeoutStopSec (${TIMEOUT_STOP_S} s) with nothing committed lost, also while the service is unreachable and a backlog is retried`, async () => {
    const stopOnce = async (label: string): Promise<{ elapsedS: number; queue: number; atMs: number }> => {
      const t = Date.now();
      const r = await c.exec(['sudo', 'systemctl', 'stop', UNIT], { user: OPERATOR, timeoutMs: (TIMEOUT_STOP_S + 15) * 1000 });
      const elapsedS = (Date.now() - t) / 1000;
      expect(r.status, r.stderr).toBe(0);
      const p = await show('ActiveState', 'Result', 'ExecMainStatus', 'ExecMainCode');
      // Exited by itself with 0 (code 1 = exited), not killed by systemd at TimeoutStopSec.
      expect(p, label).toMatchObject({ ActiveState: 'inactive', Result: 'success', ExecMainStatus: '0', ExecMainCode: '1' });
      expect(elapsedS).toBeLessThan(TIMEOUT_STOP_S);
      const st = await status();
      expect(st.code).toBe(3);
      return { elapsedS, queue: st.json.queue.readings as number, atMs: Date.now() };
    };

    // 1. The service unreachable (nothing listens): requests fail at once and are retried.
    const port = main.port;
    await main.stop();
    await waitFor(async () => (await status()).json.delivery?.lastError, 20_000, 'a failed push');
    await waitFor(async () => (await status()).json.queue.readings >= 10, 30_000, 'a backlog');
    const before = deliveredPoints(sandboxes, 'TRUCK-1');
    const unreachable = await stopOnce('unreachable');
    expect(unreachable.queue).toBeGreaterThanOrEqual(10);
    // Back: every reading the buffer held at the stop reaches the service after the start.
    main = await newSandbox(port);
    expect((await c.exec(['sudo', 'systemctl', 'start', UNIT], { user: OPERATOR })).status).toBe(0);
    // Points of readings taken before the stop: those delivered before it, and the queue.
    const owed = (m: Map<string, number>, atMs: number) => [...m.values()].filter((t) => t <= atMs).length;
    await waitFor(() => owed(deliveredPoints(sandboxes, 'TRUCK-1'), unreachable.atMs) >= owed(before, unreachable.atMs) + unreachable.queue, 30_000, 'the backlog delivered after the start');
    expect(owed(deliveredPoints(sandboxes, 'TRUCK-1'), unreachable.atMs)).toBe(owed(before, unreachable.atMs) + unreachable.queue);

    // 2. The service hangs on a request (a black hole): the agent gives it up within
    // delivery.shutdown_timeout_s; what the request carried stays buffered.
    main.setFaults({ latencyMs: 600_000 });
    await waitFor(async () => (await status()).json.queue.readings >= 5, 30_000, 'a backlog behind a hanging request');
    await sleep(6000);
    const before2 = deliveredPoints(sandboxes, 'TRUCK-1');
    const hanging = await stopOnce('hanging');
    main.setFaults({ latencyMs: 0 });
    expect((await c.exec(['sudo', 'systemctl', 'start', UNIT], { user: OPERATOR })).status).toBe(0);
    await waitFor(() => owed(deliveredPoints(sandboxes, 'TRUCK-1'), hanging.atMs) >= owed(before2, hanging.atMs) + hanging.queue, 30_000, 'the backlog delivered after the start');
    expect(owed(deliveredPoints(sandboxes, 'TRUCK-1'), hanging.atMs)).toBe(owed(before2, hanging.atMs) + hanging.queue);
    // The hanging request was given up at shutdown (its records went again after the start).
    expect(hanging.elapsedS).toBeGreaterThan(5);
    // A traceId never named two different readings: reading ids were not used twice across
    // the restarts and purges.
    expect(collisions).toEqual([]);
    report.stop = { unreachable, hanging };
  }, 180_000);

  it(`restarts an agent whose event loop hangs within WatchdogSec + RestartSec (${WATCHDOG_S} + ${RESTART_S} s)`, async () => {
    // A module source that blocks the event loop for good (Atomics.wait: no CPU) once a file
    // appears in the state directory, deleting it first so that the restarted agent runs.
    const hang = `[[sources]]\ntype = "module"\nname = "hang"\npath = "${HELPERS}/hang.mjs"\noptions = { trigger = "${STATE}/hang-now" }\n`;
    await putConfig(deviceConfig({ baseUrl: main.url, sources: [hang] }));
    await reload();
    const before = await show('MainPID', 'NRestarts');
    const t0 = Date.now();
    await c.ok(`touch ${STATE}/hang-now`);
    const after = await waitFor(
      async () => {
        const p = await show('MainPID', 'NRestarts', 'ActiveState', 'SubState');
        return p.NRestarts === String(Number(before.NRestarts) + 1) && p.ActiveState === 'active' && p.SubState === 'running' && p.MainPID !== before.MainPID && p;
      },
      (WATCHDOG_S + RESTART_S + 30) * 1000,
      'the restart after the watchdog',
    );
    const elapsedS = (Date.now() - t0) / 1000;
    const j = (await journal()).join('\n');
    expect(j).toContain(`Watchdog timeout (limit ${WATCHDOG_S}s)!`);
    expect(j).toContain(`Killing process ${before.MainPID} (node) with signal SIGABRT.`);
    expect(j).toContain("Failed with result 'watchdog'.");
    // The heartbeat comes every WatchdogSec/2: the kill is at least that long after the hang.
    expect(elapsedS).toBeGreaterThan(WATCHDOG_S / 2);
    expect(elapsedS).toBeLessThanOrEqual(WATCHDOG_S + RESTART_S + 5);
    report.watchdog = { elapsedS, mainPidBefore: before.MainPID, mainPidAfter: after.MainPID };
    // Delivery goes on after the restart.
    const points = deliveredPoints(sandboxes).size;
    await waitFor(() => deliveredPoints(sandboxes).size > points, 30_000, 'traces after the restart');
    await putConfig(deviceConfig({ baseUrl: main.url }));
    await reload();
  }, 150_000);

  it('does not restart on what a restart cannot fix (78 config, 65 buffer corrupt, 73 buffer not writable): NRestarts stays 0', async () => {
    // Each status the unit lists is tried below: one added there must be added here.
    expect(unitValue('RestartPreventExitStatus').split(/\s+/).sort()).toEqual(['65', '73', '78']);
    // RestartSec shortened for this test only, so that "did not restart" is seen after a few
    // seconds instead of ten; RestartPreventExitStatus= is the unit's own.
    await c.ok(`mkdir -p /etc/systemd/system/${UNIT}.service.d && printf '[Service]\\nRestartSec=1s\\n' > /etc/systemd/system/${UNIT}.service.d/fast.conf && systemctl daemon-reload`);
    const restart = async () => {
      await systemctl('reset-failed', UNIT);
      await systemctl('restart', UNIT);
    };
    // The control: a crash (SIGKILL) is restarted, and counted.
    await restart();
    expect(await show('ActiveState', 'NRestarts')).toEqual({ ActiveState: 'active', NRestarts: '0' });
    await systemctl('kill', '--kill-who=main', '--signal=SIGKILL', UNIT);
    await waitFor(async () => (await show('NRestarts', 'ActiveState')).NRestarts === '1', 15_000, 'the restart after SIGKILL');
    await waitFor(async () => (await show('ActiveState')).ActiveState === 'active', 30_000, 'active again');

    const failsWith = async (code: number, why: RegExp) => {
      const from = (await journal()).length;
      await restart();
      await sleep(4000);
      const p = await show('ActiveState', 'Result', 'ExecMainStatus', 'NRestarts');
      expect(p).toEqual({ ActiveState: 'failed', Result: 'exit-code', ExecMainStatus: String(code), NRestarts: '0' });
      // What the agent said last, before systemd's own lines about the failure.
      const said = (await journal()).slice(from).filter((l) => l && !/^(telematics-agent\.service: |Started |Starting |Stopped |Stopping |Failed to start )/.test(l));
      expect(said.join('\n')).toMatch(why);
      report[`exit ${code}`] = said.at(-1);
    };
    await putConfig(`${deviceConfig({ baseUrl: main.url })}\n[bogus]\n`);
    await failsWith(78, /bogus/);

    await putConfig(deviceConfig({ baseUrl: main.url }));
    await c.ok(
      `mv ${STATE}/buffer.db ${STATE}/buffer.db.good && head -c 65536 /dev/urandom > ${STATE}/buffer.db && chown telematics-agent: ${STATE}/buffer.db && rm -f ${STATE}/buffer.db-wal ${STATE}/buffer.db-shm`,
    );
    await failsWith(65, /corrupt|not a database/);
    await c.ok(`mv ${STATE}/buffer.db.good ${STATE}/buffer.db`);

    // A directory the user owns, outside StateDirectory=: read-only under ProtectSystem=strict.
    await c.ok('mkdir -p /var/lib/elsewhere && chown telematics-agent: /var/lib/elsewhere');
    await putConfig(deviceConfig({ baseUrl: main.url }).replace('path = "/var/lib/telematics-agent/buffer.db"', 'path = "/var/lib/elsewhere/buffer.db"'));
    await failsWith(73, /read-only file system|EROFS/);

    await putConfig(deviceConfig({ baseUrl: main.url }));
    await c.ok(`rm /etc/systemd/system/${UNIT}.service.d/fast.conf && systemctl daemon-reload && systemctl reset-failed ${UNIT} && systemctl start ${UNIT}`);
    expect((await show('ActiveState')).ActiveState).toBe('active');
  }, 120_000);
});

/** GGA and RMC of a fix a second from `startMs`, on I-65 south of Chicago, for `n` seconds. */
function nmeaSentences(startMs: number, n: number): string {
  const s = (body: string) => `$${body}*${nmeaChecksum(body)}\r\n`;
  const two = (v: number) => String(v).padStart(2, '0');
  let out = '';
  for (let i = 0; i < n; i++) {
    const d = new Date(startMs + i * 1000);
    const hms = `${two(d.getUTCHours())}${two(d.getUTCMinutes())}${two(d.getUTCSeconds())}.00`;
    const dmy = `${two(d.getUTCDate())}${two(d.getUTCMonth() + 1)}${two(d.getUTCFullYear() % 100)}`;
    const lat = 41.5 - i * 0.0003;
    const latM = ((lat - Math.floor(lat)) * 60).toFixed(5).padStart(8, '0');
    const la = `${Math.floor(lat)}${latM}`;
    out += s(`GPGGA,${hms},${la},N,08724.00000,W,1,08,0.9,190.0,M,-34.0,M,,`);
    out += s(`GPRMC,${hms},A,${la},N,08724.00000,W,55.0,180.0,${dmy},,,A`);
  }
  return out;
}

/** Test only: blocks the agent's event loop for good when `options.trigger` appears. */
const HANG_MODULE = `import { existsSync, unlinkSync } from 'node:fs';
export function createSource(ctx, options) {
  let timer;
  return {
    start() {
      timer = setInterval(() => {
        if (!existsSync(options.trigger)) return;
        unlinkSync(options.trigger);
        ctx.log.warn('test: blocking the event loop for good');
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
      }, 200);
    },
    stop() {
      clearInterval(timer);
    },
    health: () => ({ healthy: true, detail: 'idle' }),
  };
}
`;

/**
 * Test only: a module source that emits `count` readings of one resource at once, a
 * millisecond apart from its start: after the load's start, so every one is the load's (a
 * load's window begins at \`load start\`), and at most 100 s ahead (sources_time.max_future_s
 * is 300).
 */
const BURST_MODULE = `export function createSource(ctx, options) {
  const n = options.count;
  const start = Date.now() + 1000;
  let i = 0;
  let timer;
  const more = () => {
    for (let k = 0; k < 1000 && i < n; k++, i++) ctx.emit({ resourceId: options.resource_id, timeMs: start + i, lat: 41.8 + i * 1e-6, lon: -87.6 });
    if (i < n) timer = setTimeout(more, 5);
  };
  return {
    start() {
      timer = setTimeout(more, 0);
    },
    stop() {
      clearTimeout(timer);
    },
    health: () => ({ healthy: true, detail: \`\${i} of \${n} emitted\` }),
  };
}
`;
