/**
 * What the amd64 .deb (`npm run package`) holds, read with dpkg-deb, without installing it: the
 * mistakes that show only on some devices, or only later, which test/deb.test.ts's install on a
 * clean Debian 13 does not meet. Needs dpkg-deb; builds dist/deb/ when missing, as
 * test/deb.test.ts does (dist/pkg must be built).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from './helpers.js';

const NAME = 'telematics-agent';
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
const DEB = join(ROOT, 'dist', 'deb', `${NAME}_${PKG.version}_amd64.deb`);
const CACHE = process.env.TA_CI_CACHE ?? '/var/cache/telematics-agent-ci';
const onPath = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
const skip = onPath('dpkg-deb') ? undefined : 'dpkg-deb not found (apt-get install dpkg-dev)';
if (skip) console.warn(`test/deb-contents.test.ts skipped: ${skip}`);

describe.skipIf(skip !== undefined)('the amd64 .deb as built', () => {
  let dir: string;
  /** Every path in the package, as dpkg lists it (./usr/bin/x). */
  let paths: string[];
  const read = (path: string) => readFileSync(join(dir, path), 'utf8');
  const changelog = () => gunzipSync(readFileSync(join(dir, `usr/share/doc/${NAME}/changelog.gz`))).toString('utf8');

  beforeAll(() => {
    if (!existsSync(DEB)) {
      const r = spawnSync('bash', [join(ROOT, 'scripts', 'package.sh'), '--arch', 'amd64', '--no-build'], {
        encoding: 'utf8',
        env: { ...process.env, TA_NATIVE_CACHE: process.env.TA_NATIVE_CACHE ?? join(CACHE, 'native') },
      });
      if (r.status !== 0) throw new Error(`scripts/package.sh: ${r.stdout.slice(-2000)}${r.stderr.slice(-2000)}`);
    }
    dir = mkdtempSync(join(tmpdir(), 'ta-deb-contents-'));
    for (const args of [
      ['-x', DEB, dir],
      ['-e', DEB, join(dir, 'DEBIAN')],
    ]) {
      const r = spawnSync('dpkg-deb', args, { encoding: 'utf8' });
      if (r.status !== 0) throw new Error(`dpkg-deb ${args.join(' ')}: ${r.stderr}`);
    }
    const list = spawnSync('dpkg-deb', ['--fsys-tarfile', DEB], { maxBuffer: 256 * 1024 * 1024 });
    paths = spawnSync('tar', ['-t'], { input: list.stdout, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
      .stdout.split('\n')
      .filter(Boolean)
      .map((p) => p.replace(/\/$/, ''));
  }, 300_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('has nothing under /bin, /sbin or /lib*: on Debian 13 they are links into /usr (DEP17), and a file shipped there can be lost in an upgrade', () => {
    // /lib/systemd/system was the place before the /usr merge; trixie's packages ship units in
    // /usr/lib/systemd/system, and dpkg warns on purge about the directory it believes it owns.
    const aliased = paths.filter((p) => /^\.\/(bin|sbin|lib|lib32|lib64|libx32)(\/|$)/.test(p));
    expect(aliased).toEqual([]);
    expect(paths).toContain(`./usr/lib/systemd/system/${NAME}.service`);
  });

  it("runs with Debian's node, the one it depends on and its modules are compiled for, whatever else is first on PATH", () => {
    // systemd's PATH has /usr/local/bin before /usr/bin: with `#!/usr/bin/env node` a Node
    // installed there (NodeSource's tarball, nvm, n) ran the agent, and failed to load its
    // Node 20 modules, or ran something that is not Node at all, restarted every 10 s.
    expect(readlinkSync(join(dir, 'usr/bin', NAME))).toBe(`../lib/${NAME}/bin/${NAME}.js`);
    expect(read(`usr/lib/${NAME}/bin/${NAME}.js`).split('\n')[0]).toBe('#!/usr/bin/node');
  });

  it('names only documentation it ships: every /usr/share/doc path in the config, the unit, the manual page and the maintainer scripts is in the package', () => {
    const texts = [
      read(`etc/${NAME}/agent.toml`),
      read(`usr/lib/systemd/system/${NAME}.service`),
      gunzipSync(readFileSync(join(dir, `usr/share/man/man1/${NAME}.1.gz`)))
        .toString('utf8')
        .replace(/\\-/g, '-'),
      ...readdirSync(join(dir, 'DEBIAN')).map((f) => read(`DEBIAN/${f}`)),
      changelog(),
    ];
    const named = new Set(texts.flatMap((t) => [...t.matchAll(/\/usr\/share\/doc\/telematics-agent[^\s"'`,;)]*/g)].map((m) => m[0].replace(/[.:]$/, ''))));
    expect(named.size).toBeGreaterThan(0);
    expect([...named].filter((p) => !paths.includes(`.${p.replace(/\/$/, '')}`))).toEqual([]);
  });

  it('is a higher version than the first package (commit d925e15): apt upgrades a device only to a higher version, and a repository refuses a second file under the same one', () => {
    const control = read('DEBIAN/control');
    expect(control).toMatch(new RegExp(`^Version: ${PKG.version.replace(/\./g, '\\.')}$`, 'm'));
    const first = spawnSync('git', ['-C', ROOT, 'show', 'd925e15:package.json'], { encoding: 'utf8' });
    expect(first.status, first.stderr).toBe(0);
    const firstVersion = (JSON.parse(first.stdout) as { version: string }).version;
    const newer = spawnSync('dpkg', ['--compare-versions', PKG.version, 'gt', firstVersion]);
    expect(newer.status, `${PKG.version} is not newer than ${firstVersion}`).toBe(0);
  });

  it("says what changed: its changelog points at docs/releases.md, which has this version's section", () => {
    expect(changelog()).toContain(`${NAME} (${PKG.version}) unstable`);
    expect(changelog()).toContain(`/usr/share/doc/${NAME}/docs/releases.md`);
    expect(read(`usr/share/doc/${NAME}/docs/releases.md`)).toMatch(new RegExp(`^## ${PKG.version.replace(/\./g, '\\.')}$`, 'm'));
  });

  it('ships only what runs: not the packages the bundle inlines, type declarations or build tools, and every chunk and dependency left loads from its own files', () => {
    const lib = join(dir, 'usr', 'lib', NAME);
    const bundled = [...(/const BUNDLED = \[([^\]]*)\]/.exec(readFileSync(join(ROOT, 'scripts', 'bundle.mjs'), 'utf8'))?.[1] ?? '').matchAll(/'([^']+)'/g)].map((m) => m[1]);
    expect(bundled).toContain('zod');
    const top = readdirSync(join(lib, 'node_modules'));
    expect(top.filter((p) => ['@types', 'prebuild-install', 'nan'].includes(p))).toEqual([]);
    // An inlined package keeps its package.json and license (its code is in the bundle, under
    // that license), and the copyright file says so.
    for (const name of bundled) expect(readdirSync(join(lib, 'node_modules', name)).sort(), name).toEqual(['LICENSE', 'package.json']);
    const copyright = read(`usr/share/doc/${NAME}/copyright`);
    const stanza = copyright.slice(copyright.indexOf(`Files: usr/lib/${NAME}/dist/pkg/*`)).split('\n\n')[0];
    for (const name of bundled) expect(stanza).toContain(`(${name}, `);
    expect(stanza).toMatch(/^License: MIT and BSD-3-Clause$/m);
    const deps = Object.keys((JSON.parse(read(`usr/lib/${NAME}/package.json`)) as { dependencies: Record<string, string> }).dependencies);
    // A child Node in the package's directory: each chunk of the agent (their static imports
    // resolve at load), each dependency not inlined, and SQLite's native module in use.
    const script = `
      import { readdirSync } from 'node:fs';
      const failed = [];
      for (const f of readdirSync('dist/pkg')) await import('./dist/pkg/' + f).catch((e) => failed.push(f + ': ' + e.message));
      for (const d of ${JSON.stringify(deps.filter((d) => !bundled.includes(d)))}) await import(d).catch((e) => failed.push(d + ': ' + e.message));
      const Database = (await import('better-sqlite3')).default;
      if (new Database(':memory:').prepare('SELECT 1 AS one').get().one !== 1) failed.push('better-sqlite3: no answer');
      console.log(JSON.stringify(failed));
    `;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: lib, encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout.trim().split('\n').at(-1)!)).toEqual([]);
  });
});
