/**
 * The amd64 .deb installed with dpkg on a Debian 13 root that scripts/install.sh (the npm
 * tarball, the only way 0.1.0 was installed) had set up: the move a fleet makes to the package.
 * A chroot over an overlay of the cached root (scripts/deb-rootfs.sh), no systemd booted: what
 * is checked is what the maintainer scripts leave on disk. Needs root and dpkg-deb; builds
 * dist/deb/ when missing (dist/pkg must be built).
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from './helpers.js';

const NAME = 'telematics-agent';
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
const DEB = join(ROOT, 'dist', 'deb', `${NAME}_${PKG.version}_amd64.deb`);
const CACHE = process.env.TA_CI_CACHE ?? '/var/cache/telematics-agent-ci';
const UNITS = '/etc/systemd/system';
const onPath = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
const skip =
  process.getuid?.() !== 0
    ? 'not root: overlay mounts and chroot need root'
    : !onPath('dpkg-deb')
      ? 'dpkg-deb not found (apt-get install dpkg-dev)'
      : !onPath('debootstrap')
        ? 'debootstrap not found (apt-get install debootstrap)'
        : undefined;
if (skip) console.warn(`test/deb-migrate.test.ts skipped: ${skip}`);

function must(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8', env: opts.env ?? process.env, timeout: opts.timeoutMs ?? 600_000, maxBuffer: 64 * 1024 * 1024 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.status}\n${r.stdout.slice(-2000)}\n${r.stderr.slice(-2000)}`);
  return r.stdout;
}

describe.skipIf(skip !== undefined)('from the npm tarball (scripts/install.sh) to the package', () => {
  let dir: string;
  let root: string;
  let mounted = false;
  let install: { status: number | null; out: string };
  const at = (path: string) => join(root, path);

  beforeAll(() => {
    if (!existsSync(DEB))
      must('bash', [join(ROOT, 'scripts', 'package.sh'), '--arch', 'amd64', '--no-build'], { env: { ...process.env, TA_NATIVE_CACHE: process.env.TA_NATIVE_CACHE ?? join(CACHE, 'native') } });
    const lower = must('sh', [join(ROOT, 'scripts', 'deb-rootfs.sh'), 'amd64'], { timeoutMs: 40 * 60_000 })
      .trim()
      .split('\n')
      .at(-1)!;
    dir = mkdtempSync(join(tmpdir(), 'ta-deb-migrate-'));
    root = join(dir, 'root');
    for (const d of ['upper', 'work', 'root']) mkdirSync(join(dir, d));
    must('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${lower},upperdir=${join(dir, 'upper')},workdir=${join(dir, 'work')}`, root]);
    mounted = true;

    // What install.sh leaves: its user, its unit in /etc/systemd/system enabled (the link
    // `systemctl enable` makes), the config it copied, and npm's command in /usr/local/bin.
    must('chroot', [root, 'useradd', '--system', '--user-group', '--home-dir', '/var/lib/telematics-agent', '--no-create-home', '--shell', '/usr/sbin/nologin', NAME]);
    copyFileSync(join(ROOT, 'systemd', `${NAME}.service`), at(`${UNITS}/${NAME}.service`));
    mkdirSync(at(`${UNITS}/multi-user.target.wants`), { recursive: true });
    symlinkSync(`${UNITS}/${NAME}.service`, at(`${UNITS}/multi-user.target.wants/${NAME}.service`));
    mkdirSync(at(`/etc/${NAME}`));
    copyFileSync(join(ROOT, 'config', 'agent.example.toml'), at(`/etc/${NAME}/agent.toml`));
    mkdirSync(at('/usr/local/lib/node_modules/telematics-agent/bin'), { recursive: true });
    symlinkSync('../lib/node_modules/telematics-agent/bin/telematics-agent.js', at(`/usr/local/bin/${NAME}`));

    copyFileSync(DEB, at('/x.deb'));
    // dpkg alone, nodejs not installed: with no systemd running, the scripts never run the agent.
    // --force-confold: the config install.sh copied is kept, as operations.md says to.
    const r = spawnSync('chroot', [root, 'dpkg', '--force-depends', '--force-confold', '-i', '/x.deb'], { encoding: 'utf8', input: '', timeout: 300_000 });
    install = { status: r.status, out: r.stdout + r.stderr };
  }, 45 * 60_000);

  afterAll(() => {
    if (mounted) spawnSync('umount', [root]);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("sets install.sh's unit aside, which would override the package's and keep the service running the tarball's older agent from /usr/local", () => {
    expect(install.status, install.out).toBe(0);
    expect(existsSync(at(`${UNITS}/${NAME}.service`))).toBe(false);
    expect(readFileSync(at(`${UNITS}/${NAME}.service.dpkg-bak`), 'utf8')).toContain(`ExecStart=/usr/local/bin/${NAME} run`);
    expect(install.out).toContain(`${UNITS}/${NAME}.service (from scripts/install.sh, starting /usr/local/bin/${NAME}) set aside as ${UNITS}/${NAME}.service.dpkg-bak`);
    // systemd's own view: no unit of the package is overridden.
    expect(must('chroot', [root, 'systemd-delta', '--no-pager', '--type=overridden'])).not.toContain(NAME);
  });

  it("stays enabled: the link to the unit set aside is replaced by one to the package's", () => {
    const link = at(`${UNITS}/multi-user.target.wants/${NAME}.service`);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe(`/usr/lib/systemd/system/${NAME}.service`);
  });

  it("keeps the operator's config and says the tarball's command, first on PATH, is still there and how to remove it", () => {
    expect(readFileSync(at(`/etc/${NAME}/agent.toml`), 'utf8')).toBe(readFileSync(join(ROOT, 'config', 'agent.example.toml'), 'utf8'));
    expect(install.out).toContain(`/usr/local/bin/${NAME} (the npm tarball's agent) is still installed`);
    expect(install.out).toContain(`sudo npm uninstall -g --prefix /usr/local ${NAME}`);
  });
});
