/**
 * The Debian packages (`npm run package`, scripts/package.sh) on Debian 13, as an operator gets
 * them: no npm, no compiler, no network on the device.
 *
 * amd64: a trixie root (scripts/deb-rootfs.sh, cached outside the clone) booted with
 * systemd-nspawn, a real systemd as PID 1 (test/nspawn.ts). `apt install ./x.deb` resolves the
 * Depends from apt's cache (apt is pointed at a dead proxy: nothing may be downloaded); the
 * agent is configured, started and delivers to a sandbox on the host's loopback (the container
 * shares the network). Then remove (buffer and user kept), purge (both gone); then the package
 * of an earlier commit whose buffer schema is older (OLD_COMMIT, packaged by this checkout's
 * scripts/package.sh from a `git worktree`), a backlog made while the service failed and was
 * down, the upgrade (everything delivered, the buffer migrated), the rollback (the old version
 * refuses the newer buffer with exit 65 and leaves it as it was), and the newer one again.
 *
 * arm64: a trixie arm64 root entered with chroot under qemu-user-static (binfmt_misc): the
 * arm64 .deb installed with apt, `--version`, `validate-config` and a short `run` that delivers
 * to a sandbox on the host. Start-up time and RSS under emulation go to .test-results/deb.json
 * (docs/performance.md).
 *
 * The packages of this checkout are dist/deb/*.deb: built here when missing (.ci/run builds them
 * with `npm run package` first). Needs root, systemd-nspawn, debootstrap, dpkg-dev,
 * g++-aarch64-linux-gnu and qemu-user-static; without them each suite says why and skips, except
 * where TA_NSPAWN=required (CI), where it fails.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SCHEMA_VERSION } from '../src/buffer/migrations.js';
import type { StatusReport } from '../src/cli/status.js';
import { Sandbox } from '../src/sandbox/server.js';
import { ROOT, waitFor } from './helpers.js';
import { cannotBoot, Container, type ExecResult, runHost } from './nspawn.js';

const NAME = 'telematics-agent';
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
const CACHE = process.env.TA_CI_CACHE ?? '/var/cache/telematics-agent-ci';
/** The last commit before buffer schema 11 (temperature without a fix): its buffers are schema 10. */
const OLD_COMMIT = 'd925e15';
const OLD_SCHEMA = 10;
const SCAC = 'TAUX';
const KEY = `ta-${createHash('sha256').update(String(process.pid)).digest('hex').slice(0, 32)}`;
const STATE = '/var/lib/telematics-agent';
const BUFFER = `${STATE}/buffer.db`;
/** apt must find everything in its cache: any download goes to a port nothing listens on. */
const OFFLINE = ['-o', 'Acquire::http::Proxy=http://127.0.0.1:9', '-o', 'Acquire::https::Proxy=http://127.0.0.1:9'];
/** An unattended upgrade keeps the operator's config (an older package's conffile differs). */
const KEEP_CONFIG = ['-o', 'Dpkg::Options::=--force-confdef', '-o', 'Dpkg::Options::=--force-confold'];
const debOf = (arch: string) => join(ROOT, 'dist', 'deb', `${NAME}_${PKG.version}_${arch}.deb`);
const required = process.env.TA_NSPAWN === 'required';
const report: Record<string, unknown> = {};

function onPath(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

/** Why the packages cannot be built here, or undefined. */
function cannotPackage(arch: string): string | undefined {
  if (existsSync(debOf(arch))) return undefined;
  for (const cmd of ['dpkg-deb', 'dpkg-buildflags', arch === 'arm64' ? 'aarch64-linux-gnu-g++' : 'g++']) {
    if (!onPath(cmd)) return `${cmd} not found to build ${debOf(arch)} (apt-get install dpkg-dev g++-aarch64-linux-gnu)`;
  }
  return undefined;
}

/** Why arm64 binaries cannot run here, or undefined. */
function cannotEmulate(): string | undefined {
  if (process.getuid?.() !== 0) return 'not root: chroot, mounts and debootstrap need root';
  if (!onPath('debootstrap')) return 'debootstrap not found (apt-get install debootstrap)';
  if (!existsSync('/usr/libexec/qemu-binfmt/aarch64-binfmt-P') && !onPath('qemu-aarch64-static')) return 'qemu-user-static not installed (apt-get install qemu-user-static binfmt-support)';
  if (!existsSync('/proc/sys/fs/binfmt_misc/qemu-aarch64')) return 'qemu-aarch64 is not registered in binfmt_misc (update-binfmts --enable qemu-aarch64; .ci/run does it)';
  return undefined;
}

const skipAmd64 = cannotBoot() ?? (onPath('debootstrap') ? undefined : 'debootstrap not found') ?? cannotPackage('amd64');
const skipArm64 = cannotEmulate() ?? cannotPackage('arm64');
if (skipAmd64 && !required) console.warn(`test/deb.test.ts (amd64) skipped: ${skipAmd64}`);
if (skipArm64 && !required) console.warn(`test/deb.test.ts (arm64) skipped: ${skipArm64}`);

async function mustRun(cmd: string, args: string[], opts: { timeoutMs?: number; cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<string> {
  const r = await runHost(cmd, args, { timeoutMs: 20 * 60_000, ...opts });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.status}\n${r.stdout.slice(-3000)}\n${r.stderr.slice(-3000)}`);
  return r.stdout;
}

/** The trixie root of `arch`, built once per machine (scripts/deb-rootfs.sh). */
async function rootfs(arch: string): Promise<string> {
  const out = await mustRun('sh', [join(ROOT, 'scripts', 'deb-rootfs.sh'), arch], { timeoutMs: 40 * 60_000 });
  return out.trim().split('\n').at(-1)!;
}

/** This checkout's package for `arch`, built if missing (dist/pkg must be built: npm test's pretest). */
async function currentPackage(arch: string): Promise<string> {
  if (!existsSync(debOf(arch))) {
    await mustRun('bash', [join(ROOT, 'scripts', 'package.sh'), '--arch', arch, '--no-build'], { env: { ...process.env, TA_NATIVE_CACHE: join(CACHE, 'native') } });
  }
  return debOf(arch);
}

/**
 * The amd64 package of OLD_COMMIT, made by this checkout's packaging from a `git worktree` of that
 * commit; kept in the cache under the commit and a hash of the packaging, so CI builds it once.
 */
async function oldPackage(): Promise<{ deb: string; version: string }> {
  const commit = (await mustRun('git', ['-C', ROOT, 'rev-parse', `${OLD_COMMIT}^{commit}`])).trim();
  // Its own version, as the fleet has it installed: the upgrade is to a higher one, as apt wants.
  const version = (JSON.parse(await mustRun('git', ['-C', ROOT, 'show', `${commit}:package.json`])) as { version: string }).version;
  const packaging = createHash('sha256');
  for (const f of ['scripts/package.sh', 'scripts/prune-modules.mjs', ...readdirSync(join(ROOT, 'packaging', 'deb')).map((f) => `packaging/deb/${f}`)].sort()) packaging.update(readFileSync(join(ROOT, f)));
  const dir = join(CACHE, 'debs', `${commit.slice(0, 12)}-${packaging.digest('hex').slice(0, 12)}`);
  const deb = join(dir, `${NAME}_${version}_amd64.deb`);
  if (existsSync(deb)) return { deb, version };
  const tree = mkdtempSync(join(tmpdir(), 'ta-old-'));
  rmSync(tree, { recursive: true });
  await mustRun('git', ['-C', ROOT, 'worktree', 'add', '--detach', tree, commit]);
  try {
    // Its own development dependencies for the build (tsc, esbuild): this checkout's when the
    // lockfile is the same, else installed from its lockfile.
    if (readFileSync(join(tree, 'package-lock.json'), 'utf8') === readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) {
      symlinkSync(join(ROOT, 'node_modules'), join(tree, 'node_modules'));
    } else {
      await mustRun('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund', '--prefer-offline'], { cwd: tree });
    }
    mkdirSync(dir, { recursive: true });
    await mustRun('bash', [join(ROOT, 'scripts', 'package.sh'), '--source', tree, '--arch', 'amd64', '--version', version, '--out', dir], {
      env: { ...process.env, TA_NATIVE_CACHE: join(CACHE, 'native') },
    });
  } finally {
    await runHost('git', ['-C', ROOT, 'worktree', 'remove', '--force', tree]);
  }
  return { deb, version };
}

/** A config for the test: every reading kept and sent, traces every 5 s, retries within seconds. */
function agentToml(baseUrl: string): string {
  return `[api]
base_url = "${baseUrl}"
scac = "${SCAC}"

[buffer]
flush_interval_ms = 1000

[schedule]
traces = "*/5 * * * * *"
splay_s = 0

[sampling]
interval_s = 0

[delivery]
retry_initial_s = 1
retry_max_s = 2

[[sources]]
type = "simulator"
resource_id = "TRUCK-1"
route = "builtin:chicago-indianapolis"
`;
}

/** The reading times of every trace point the sandbox got, by traceId; a traceId sent with two different times fails. */
function delivered(s: Sandbox): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of s.traces) {
    for (const t of r.body.traces) {
      const ref = t.references?.find((x) => x.name === 'traceId')?.value;
      if (!ref) continue;
      const time = Date.parse(t.time.dateTime);
      const seen = out.get(ref);
      if (seen !== undefined && seen !== time) throw new Error(`traceId ${ref} sent for two readings: ${seen} and ${time}`);
      out.set(ref, time);
    }
  }
  return out;
}

/** Gaps of more than `maxMs` between consecutive reading times up to `untilMs`: readings lost. */
function gaps(times: number[], untilMs: number, maxMs = 2500): string[] {
  const sorted = times.filter((t) => t <= untilMs).sort((a, b) => a - b);
  const out: string[] = [];
  for (let i = 1; i < sorted.length; i++) {
    if (sorted[i] - sorted[i - 1] > maxMs) out.push(`${new Date(sorted[i - 1]).toISOString()} .. ${new Date(sorted[i]).toISOString()}`);
  }
  return out;
}

/** The buffer's schema as its file header says (user_version, bytes 60-63): read without SQLite, which could write. */
function headerSchema(file: string): number {
  return readFileSync(file).readUInt32BE(60);
}

const sha256 = (file: string) => (existsSync(file) ? createHash('sha256').update(readFileSync(file)).digest('hex') : 'absent');

describe.skipIf(skipAmd64 !== undefined && !required)('the amd64 .deb on Debian 13 under a real systemd (systemd-nspawn)', () => {
  let c: Container;
  let deb: string;
  let old: { deb: string; version: string };
  const sandboxes: Sandbox[] = [];
  const newSandbox = async (): Promise<Sandbox> => {
    const s = new Sandbox({ key: KEY, scac: SCAC });
    await s.start();
    sandboxes.push(s);
    return s;
  };
  /** apt-get in /srv, where copyIn puts the packages (named ./x.deb, as an operator would). */
  const apt = (args: string[], timeoutMs = 180_000) => c.exec(['sh', '-c', 'cd /srv && exec "$@"', 'sh', 'apt-get', '-y', ...OFFLINE, ...args], { env: { DEBIAN_FRONTEND: 'noninteractive' }, timeoutMs });
  const cli = (args: string[]): Promise<ExecResult> => c.exec(['runuser', '-u', NAME, '--', NAME, ...args]);
  const status = async (): Promise<StatusReport> => JSON.parse((await cli(['status', '--json'])).stdout) as StatusReport;
  const show = async (...names: string[]): Promise<Record<string, string>> =>
    Object.fromEntries(
      (await c.exec(['systemctl', 'show', NAME, ...names.map((n) => `--property=${n}`)])).stdout
        .split('\n')
        .filter((l) => l.includes('='))
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
  const journal = async (): Promise<string> => (await c.exec(['journalctl', '-u', NAME, '-o', 'cat', '--no-pager'])).stdout;
  /** The config and key as an operator puts them: in place, keeping the modes the package set. */
  const configure = async (baseUrl: string): Promise<void> => {
    await c.ok(`cat > /etc/${NAME}/agent.toml`, { input: agentToml(baseUrl) });
    await c.ok(`install -m 0640 -o root -g ${NAME} /dev/null /etc/${NAME}/subscription-key && cat > /etc/${NAME}/subscription-key`, { input: `${KEY}\n` });
  };
  /** Copies a package into the container's /srv (its /tmp is a tmpfs of its own); returns its name as apt takes it there. */
  const copyIn = (file: string): string => {
    const name = file.split('/').at(-1)!;
    cpSync(file, c.path(`/srv/${name}`));
    return `./${name}`;
  };

  beforeAll(async () => {
    if (skipAmd64) throw new Error(`TA_NSPAWN=required, but the amd64 suite cannot run here: ${skipAmd64}`);
    deb = await currentPackage('amd64');
    old = await oldPackage();
    c = new Container(await rootfs('amd64'));
    await c.boot();
  }, 40 * 60_000);

  afterAll(async () => {
    try {
      const j = await c?.exec(['journalctl', '-b', '--no-pager', '-o', 'short-precise']).catch(() => undefined);
      if (j) {
        mkdirSync(join(ROOT, '.test-results'), { recursive: true });
        writeFileSync(join(ROOT, '.test-results', 'deb-journal.txt'), j.stdout);
      }
    } finally {
      await c?.stop();
      for (const s of sandboxes) await s.stop();
    }
  }, 90_000);

  it('installs with `apt install ./x.deb` on an image with no npm and no compiler, nothing downloaded: enabled, not started without config and key', async () => {
    expect((await c.sh('command -v npm node gcc cc g++ make; true')).stdout).toBe('');
    // As the README says: apt install ./x.deb.
    const r = await c.exec(['sh', '-c', 'cd /srv && exec "$@"', 'sh', 'apt', 'install', '-y', ...OFFLINE, copyIn(deb)], { env: { DEBIAN_FRONTEND: 'noninteractive' }, timeoutMs: 180_000 });
    expect(r.status, r.stdout + r.stderr).toBe(0);
    // The Depends came from Debian: its nodejs, 20.
    expect((await c.ok(`dpkg-query -W -f '\${Version}' nodejs`)).startsWith('20.')).toBe(true);
    expect((await c.ok(`${NAME} --version`)).trim()).toBe(PKG.version);
    // The example config has no key beside it: validate-config refuses, so postinst did not start it.
    expect(r.stdout + r.stderr).toContain(`${NAME}: not started: edit /etc/${NAME}/agent.toml`);
    expect((await c.exec(['systemctl', 'is-enabled', NAME])).stdout.trim()).toBe('enabled');
    expect((await c.exec(['systemctl', 'is-active', NAME])).stdout.trim()).toBe('inactive');
    // The installed config cannot ship fake data: it names the lines to edit, and has no source.
    expect(r.stdout + r.stderr).toMatch(/agent\.toml:\d+: api\.base_url: still "CHANGE-ME"/);
    expect(r.stdout + r.stderr).toMatch(/agent\.toml:\d+: sources: expected at least one \[\[sources\]\] table/);
    expect(await c.ok(`stat -c '%U:%G %a' /etc/${NAME} /etc/${NAME}/agent.toml /etc/${NAME}/agent.d ${STATE}`)).toBe(`root:${NAME} 750\nroot:${NAME} 640\nroot:${NAME} 750\n${NAME}:${NAME} 750\n`);
    expect(await c.ok(`getent passwd ${NAME} | cut -d: -f6,7`)).toBe(`${STATE}:/usr/sbin/nologin\n`);
    expect(await c.ok(`dpkg-query -W -f '\${Conffiles}' ${NAME}`)).toContain(`/etc/${NAME}/agent.toml`);
    expect(await c.ok(`systemctl show -p ExecStart --value ${NAME}`)).toContain(`path=/usr/bin/${NAME} `);
  }, 240_000);

  it("with another Node first on PATH and the key from a drop-in: runs with Debian's node, and an upgrade (a reinstall) starts the running agent again", async () => {
    const s = await newSandbox();
    await configure(s.url);
    // Where systemd's PATH looks first (NodeSource's tarball, nvm and n put a node there): not
    // the Node 20 the package depends on and its modules are compiled for.
    await c.ok(`printf '#!/bin/sh\\necho not Debian node >&2; exit 1\\n' > /usr/local/bin/node && chmod 0755 /usr/local/bin/node`);
    // The key as a drop-in gives it (operations.md: changes to the unit go in a drop-in), not
    // in the file postinst's check reads.
    const dropIn = `/etc/systemd/system/${NAME}.service.d`;
    await c.ok(`mkdir -p ${dropIn} && printf '[Service]\\nEnvironment=TELEMATICS_AGENT_SUBSCRIPTION_KEY=${KEY}\\n' > ${dropIn}/key.conf && rm /etc/${NAME}/subscription-key && systemctl daemon-reload`);
    const start = await c.exec(['systemctl', 'start', NAME], { timeoutMs: 120_000 });
    expect(start.status, `${start.stderr}\n${await journal()}`).toBe(0);
    expect((await c.ok(`${NAME} --version`)).trim()).toBe(PKG.version);
    const before = await show('ActiveState', 'MainPID');
    expect(before.ActiveState).toBe('active');

    const again = await apt(['install', '--reinstall', copyIn(deb)]);
    expect(again.status, again.stdout + again.stderr).toBe(0);
    const after = await show('ActiveState', 'MainPID', 'NRestarts');
    expect(after.ActiveState, again.stdout + again.stderr).toBe('active');
    expect(after.MainPID).not.toBe(before.MainPID);
    expect(after.NRestarts).toBe('0');
    expect(existsSync(c.path(`/run/${NAME}.dpkg-was-running`))).toBe(false);
    await c.ok(`systemctl stop ${NAME} && rm -r ${dropIn} /usr/local/bin/node && systemctl daemon-reload`);
  }, 240_000);

  it('configured and started, delivers a milestone and traces; remove keeps the buffer, config and user; purge removes them', async () => {
    const s = await newSandbox();
    await configure(s.url);
    const start = await c.exec(['systemctl', 'start', NAME], { timeoutMs: 120_000 });
    expect(start.status, `${start.stderr}\n${await journal()}`).toBe(0);
    expect(await show('ActiveState', 'SubState', 'User')).toEqual({ ActiveState: 'active', SubState: 'running', User: NAME });
    expect((await cli(['load', 'start', 'L-1', '--resource', 'TRUCK-1'])).status).toBe(0);
    const m = await cli(['milestone', '--load', 'L-1', '--code', 'X3']);
    expect(m.status, m.stderr).toBe(0);
    await waitFor(() => s.milestones.length === 1, 20_000, 'the milestone at the sandbox');
    expect(s.milestones[0].body).toMatchObject({ eventCode: 'X3', loadNumber: 'L-1' });
    await waitFor(() => s.stats.tracePoints >= 3, 30_000, 'trace points at the sandbox');
    expect(s.stats.unauthorized).toBe(0);

    // The service down: a milestone waits. Remove says what the kept buffer holds (purge
    // deletes it), counted once the agent has stopped.
    s.setFaults({ forceStatus: 503 });
    expect((await cli(['milestone', '--load', 'L-1', '--code', 'X6'])).status).toBe(0);
    const rm = await apt(['remove', NAME]);
    expect(rm.status, rm.stdout + rm.stderr).toBe(0);
    expect(rm.stdout).toContain(`${NAME}: what the buffer holds: remove keeps it, and installing the package again delivers it; purge deletes it.`);
    expect(rm.stdout).toMatch(new RegExp(`^buffer: +${BUFFER}$`, 'm'));
    expect(rm.stdout).toMatch(/^queue: +\d+ readings.*, 1 milestones pending, 1 sent$/m);
    expect((await c.exec(['systemctl', 'is-active', NAME])).stdout.trim()).toBe('inactive');
    expect(existsSync(c.path(`/usr/bin/${NAME}`))).toBe(false);
    expect(existsSync(c.path(BUFFER))).toBe(true);
    expect(existsSync(c.path(`/etc/${NAME}/agent.toml`))).toBe(true);
    expect((await c.exec(['getent', 'passwd', NAME])).status).toBe(0);

    const purge = await apt(['purge', NAME]);
    expect(purge.status, purge.stdout + purge.stderr).toBe(0);
    for (const gone of [STATE, `/etc/${NAME}`, `/etc/systemd/system/multi-user.target.wants/${NAME}.service`]) expect(existsSync(c.path(gone)), gone).toBe(false);
    expect((await c.exec(['getent', 'passwd', NAME])).status).toBe(2);
    expect((await c.exec(['getent', 'group', NAME])).status).toBe(2);
    expect(await c.ok(`dpkg-statoverride --list | grep ${NAME}; true`)).toBe('');
  }, 240_000);

  it('upgrades from an older package with a backlog made while the service failed and was down: every reading and milestone delivered, the buffer migrated', async () => {
    const s = await newSandbox();
    const install = await apt(['install', copyIn(old.deb)]);
    expect(install.status, install.stdout + install.stderr).toBe(0);
    await configure(s.url);
    expect((await c.exec(['systemctl', 'start', NAME], { timeoutMs: 120_000 })).status).toBe(0);
    expect((await cli(['load', 'start', 'L-7', '--resource', 'TRUCK-1'])).status).toBe(0);
    await waitFor(() => s.stats.tracePoints >= 3, 30_000, 'the old version delivering');

    // The service fails, then the agent is down: readings and a milestone wait in the buffer.
    s.setFaults({ forceStatus: 503 });
    expect((await cli(['milestone', '--load', 'L-7', '--code', 'X3'])).status).toBe(0);
    await new Promise((r) => setTimeout(r, 8000));
    expect((await c.exec(['systemctl', 'stop', NAME], { timeoutMs: 60_000 })).status).toBe(0);
    const stoppedMs = Date.now();
    expect((await cli(['milestone', '--load', 'L-7', '--code', 'X6'])).status).toBe(0);
    const before = await status();
    const backlog = before.activeLoads.find((l) => l.loadNumber === 'L-7')!.backlog;
    expect(backlog).toBeGreaterThanOrEqual(5);
    expect(before.queue.pendingMilestones).toBe(2);
    expect(headerSchema(c.path(BUFFER))).toBe(OLD_SCHEMA);
    const deliveredBefore = delivered(s).size;
    s.setFaults({ forceStatus: 0 });
    const journalBefore = (await journal()).length;

    const upgrade = await apt(['install', ...KEEP_CONFIG, copyIn(deb)]);
    expect(upgrade.status, upgrade.stdout + upgrade.stderr).toBe(0);
    expect(await show('ActiveState', 'NRestarts')).toEqual({ ActiveState: 'active', NRestarts: '0' });
    await waitFor(() => s.milestones.filter((m) => m.body.loadNumber === 'L-7').length === 2, 30_000, 'both milestones of the backlog');
    expect(s.milestones.map((m) => m.body.eventCode)).toEqual(['X3', 'X6']);
    await waitFor(() => delivered(s).size >= deliveredBefore + backlog, 60_000, 'the backlog of readings');
    const times = [...delivered(s).values()];
    // No reading of the whole time before the stop is missing (1 Hz, every reading sent).
    expect(gaps(times, stoppedMs)).toEqual([]);
    expect((await status()).queue.pendingMilestones).toBe(0);

    // Migrated, by the daemon, once: the file is at this version's schema after a clean stop,
    // and a second start finds nothing to do.
    expect((await c.exec(['systemctl', 'restart', NAME], { timeoutMs: 120_000 })).status).toBe(0);
    expect((await c.exec(['systemctl', 'stop', NAME], { timeoutMs: 60_000 })).status).toBe(0);
    expect(headerSchema(c.path(BUFFER))).toBe(SCHEMA_VERSION);
    // Nothing went wrong in the new version (error 50, fatal 60).
    expect((await journal()).slice(journalBefore)).not.toMatch(/"level":[56]0/);
    report.upgrade = { from: old.version, to: PKG.version, backlogReadings: backlog, schema: [OLD_SCHEMA, SCHEMA_VERSION] };
  }, 300_000);

  it('rolls back: the older package leaves the newer buffer untouched and the unit failed with 65 naming both schemas; the newer one again resumes delivery', async () => {
    const s = sandboxes.at(-1)!;
    const files = [BUFFER, `${BUFFER}-wal`, `${BUFFER}-shm`].map((f) => c.path(f));
    const hashes = files.map(sha256);
    const down = await apt(['install', '--allow-downgrades', ...KEEP_CONFIG, copyIn(old.deb)]);
    expect(down.status, down.stdout + down.stderr).toBe(0);
    await waitFor(async () => (await show('ActiveState')).ActiveState === 'failed', 30_000, 'the old version to fail');
    expect(await show('Result', 'ExecMainStatus', 'NRestarts')).toEqual({ Result: 'exit-code', ExecMainStatus: '65', NRestarts: '0' });
    expect(await journal()).toContain(`written by a newer version of telematics-agent (buffer schema ${SCHEMA_VERSION}; this version understands up to ${OLD_SCHEMA}); nothing was changed`);
    expect(files.map(sha256)).toEqual(hashes);

    const points = delivered(s).size;
    const again = await apt(['install', ...KEEP_CONFIG, copyIn(deb)]);
    expect(again.status, again.stdout + again.stderr).toBe(0);
    expect((await show('ActiveState')).ActiveState).toBe('active');
    expect((await cli(['milestone', '--load', 'L-7', '--code', 'X1'])).status).toBe(0);
    await waitFor(() => s.milestones.some((m) => m.body.eventCode === 'X1'), 30_000, 'a milestone after the rollback');
    await waitFor(() => delivered(s).size >= points + 3, 30_000, 'traces after the rollback');
  }, 240_000);
});

describe.skipIf(skipArm64 !== undefined && !required)('the arm64 .deb on Debian 13 arm64 under qemu-user-static (chroot)', () => {
  let dir: string;
  let root: string;
  let deb: string;
  let agent: ChildProcess | undefined;
  const mounts: string[] = [];
  const sandboxes: Sandbox[] = [];
  /** A command in the chroot, with a clean environment. */
  const inside = (args: string[], opts: { input?: string; timeoutMs?: number } = {}): Promise<ExecResult> =>
    new Promise((resolve, reject) => {
      const child = spawn('chroot', [root, 'env', '-i', 'PATH=/usr/sbin:/usr/bin:/sbin:/bin', 'LANG=C.UTF-8', 'DEBIAN_FRONTEND=noninteractive', ...args], {
        stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      if (opts.input !== undefined) child.stdin!.end(opts.input);
      const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000);
      child.on('error', reject);
      child.on('close', (status) => {
        clearTimeout(timer);
        resolve({ status, stdout, stderr });
      });
    });
  const mount = async (args: string[], target: string) => {
    await mustRun('mount', [...args, target]);
    mounts.unshift(target);
  };

  beforeAll(async () => {
    if (skipArm64) throw new Error(`TA_NSPAWN=required, but the arm64 suite cannot run here: ${skipArm64}`);
    deb = await currentPackage('arm64');
    const lower = await rootfs('arm64');
    // The cached root is never changed: an overlay takes what the test writes.
    dir = mkdtempSync(join(tmpdir(), 'ta-arm64-'));
    for (const d of ['upper', 'work', 'root']) mkdirSync(join(dir, d));
    root = join(dir, 'root');
    await mount(['-t', 'overlay', 'overlay', '-o', `lowerdir=${lower},upperdir=${join(dir, 'upper')},workdir=${join(dir, 'work')}`], root);
    await mount(['-t', 'proc', 'proc'], join(root, 'proc'));
    await mount(['--bind', '/dev'], join(root, 'dev'));
  }, 40 * 60_000);

  afterAll(async () => {
    if (agent && agent.exitCode === null) agent.kill('SIGKILL');
    for (const m of mounts) if (spawnSync('umount', [m]).status !== 0) spawnSync('umount', ['-l', m]);
    if (dir) rmSync(dir, { recursive: true, force: true });
    for (const s of sandboxes) await s.stop();
    mkdirSync(join(ROOT, '.test-results'), { recursive: true });
    writeFileSync(join(ROOT, '.test-results', 'deb.json'), `${JSON.stringify(report, null, 2)}\n`);
  }, 60_000);

  it('installs with apt from its cache, runs as aarch64: --version, validate-config', async () => {
    expect((await inside(['uname', '-m'])).stdout.trim()).toBe('aarch64');
    cpSync(deb, join(root, 'tmp', 'agent.deb'));
    // No systemd in a chroot: its Recommends are left out, as when building an image.
    const r = await inside(['sh', '-c', `cd /tmp && apt-get install -y --no-install-recommends ${OFFLINE.join(' ')} ./agent.deb`], { timeoutMs: 600_000 });
    expect(r.status, r.stdout + r.stderr).toBe(0);
    // An image being built: no systemd to start it, so the package says what the first boot still needs.
    expect(r.stdout + r.stderr).toContain(`${NAME}: no systemd is running here (an image being built?): the service starts at boot`);
    expect(r.stdout + r.stderr).toContain('api.base_url: still "CHANGE-ME"');
    const sqlite = join(root, `usr/lib/${NAME}/node_modules/better-sqlite3/build/Release/better_sqlite3.node`);
    expect((await mustRun('file', ['-b', sqlite])).startsWith('ELF 64-bit LSB shared object, ARM aarch64')).toBe(true);

    const t0 = Date.now();
    const v = await inside([NAME, '--version']);
    report.arm64VersionMs = Date.now() - t0;
    expect(v.stdout.trim()).toBe(PKG.version);

    const s = new Sandbox({ key: KEY, scac: SCAC });
    await s.start();
    sandboxes.push(s);
    writeFileSync(join(root, 'etc', NAME, 'agent.toml'), agentToml(s.url));
    writeFileSync(join(root, 'etc', NAME, 'subscription-key'), `${KEY}\n`, { mode: 0o600 });
    // As an operator checks it (README): the key found where the unit loads it from, no systemd needed.
    const check = await inside([NAME, 'validate-config']);
    expect(check.status, check.stderr).toBe(0);
    expect(check.stdout).toContain('ok (device');
    expect(check.stdout).toContain(`the unit's credential file (/etc/${NAME}/subscription-key)`);
  }, 700_000);

  it('runs: readings from the simulator committed and delivered to a sandbox on the host, with a milestone; start-up time and RSS under emulation', async () => {
    const s = sandboxes[0];
    const asAgent = ['setpriv', `--reuid=${NAME}`, `--regid=${NAME}`, '--init-groups', 'env', `CREDENTIALS_DIRECTORY=/etc/${NAME}`];
    const load = await inside([...asAgent, NAME, 'load', 'start', 'L-64', '--resource', 'TRUCK-1']);
    expect(load.status, load.stderr).toBe(0);
    // The key is the service user's to read, as systemd's credential would be.
    await mustRun('chroot', [root, 'chown', NAME, `/etc/${NAME}/subscription-key`]);
    const t0 = Date.now();
    // chroot, env and setpriv exec each other: this child's PID is the agent's (qemu's) own.
    const child = spawn(
      'chroot',
      [root, 'env', '-i', 'PATH=/usr/sbin:/usr/bin:/sbin:/bin', 'NODE_OPTIONS=--max-semi-space-size=4 --max-old-space-size=96', ...asAgent.slice(0, 4), 'env', `CREDENTIALS_DIRECTORY=/etc/${NAME}`, NAME, 'run'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    agent = child;
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    await waitFor(() => out.includes('"msg":"agent started"'), 120_000, `"agent started" (${out.slice(-2000)})`);
    const startMs = Date.now() - t0;
    const m = await inside([...asAgent, NAME, 'milestone', '--load', 'L-64', '--code', 'X3']);
    expect(m.status, m.stderr).toBe(0);
    await waitFor(() => s.milestones.length === 1, 60_000, 'the milestone from arm64');
    await waitFor(() => s.stats.tracePoints >= 5, 90_000, `trace points from arm64 (${out.slice(-2000)})`);
    expect(s.traces[0].body.traces[0]).toMatchObject({ resourceId: 'TRUCK-1' });
    const rss = (pid: number) => Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
    const rssBytes = rss(child.pid!);
    const exited = new Promise<number | null>((r) => child.on('close', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    report.arm64 = { startUpMs: startMs, rssAfterDeliveryBytes: rssBytes, versionMs: report.arm64VersionMs, tracePoints: s.stats.tracePoints };
    console.log(`arm64 under qemu-user-static: --version ${report.arm64VersionMs} ms, run to "agent started" ${startMs} ms, RSS ${(rssBytes / 1024 / 1024).toFixed(1)} MB after delivering`);
  }, 300_000);
});
