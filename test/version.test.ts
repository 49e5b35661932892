/**
 * The agent's version, everywhere it runs: `--version`, the `agent started` log line,
 * `status` (text and JSON), `/metrics`, and the User-Agent of every request to the service.
 * One home: package.json, built into the bundle (src/version.ts).
 */
import { cpSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentConfig, ROOT, runCli, startDaemon, waitFor, daemonFixture } from './helpers.js';

const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

const fx = daemonFixture();

describe('the version', () => {
  it('is built into the bundle: --version names the code that runs, not whatever package.json sits beside it', async () => {
    // A copy of the package whose package.json says another version (a hand-edited or stale one).
    const pkg = join(fx.tmp.dir, 'pkg');
    mkdirSync(join(pkg, 'dist'), { recursive: true });
    cpSync(join(ROOT, 'bin'), join(pkg, 'bin'), { recursive: true });
    cpSync(join(ROOT, 'dist', 'pkg'), join(pkg, 'dist', 'pkg'), { recursive: true });
    symlinkSync(join(ROOT, 'node_modules'), join(pkg, 'node_modules'));
    writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: 'telematics-agent', version: '9.9.9-not-this', type: 'module' }));
    const { spawnSync } = await import('node:child_process');
    const r = spawnSync(process.execPath, [join(pkg, 'bin', 'telematics-agent.js'), '--version'], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe(VERSION);
  });

  it('shows in the agent started line, status, status --json, /metrics and the User-Agent of every request', async () => {
    const { url } = await fx.sandbox.start();
    const cfg = agentConfig(fx.tmp.dir, url, '[health]\nlisten = "127.0.0.1:0"\n');
    fx.daemon = startDaemon(['--config', cfg]);
    const line = await fx.daemon.started<{ version: string; health: number }>('agent started');
    expect(line.version).toBe(VERSION);

    const cli = (...args: string[]) => runCli([...args, '--config', cfg]);
    expect((await cli('load', 'start', 'L1', '--resource', 'T1')).code).toBe(0);
    expect((await cli('milestone', '--load', 'L1', '--code', 'X3', '--lat', '41.88', '--lon', '-87.63')).code).toBe(0);
    await waitFor(() => fx.sandbox.milestones.length === 1, 15_000, 'the milestone delivered');
    expect(fx.sandbox.milestones[0].headers['user-agent']).toBe(`telematics-agent/${VERSION}`);

    // The daemon's state carries its version: status tells it from the CLI's own after an upgrade.
    const json = await waitFor(async () => {
      const r = await cli('status', '--json');
      const s = JSON.parse(r.stdout) as { version: string; daemon: { running: boolean; version: string | null } };
      return s.daemon.running ? s : undefined;
    });
    expect(json.version).toBe(VERSION);
    expect(json.daemon.version).toBe(VERSION);
    expect((await cli('status')).stdout).toMatch(new RegExp(`^version: +${VERSION.replace(/\./g, '\\.')}$`, 'm'));

    const metrics = await (await fetch(`http://127.0.0.1:${line.health}/metrics`)).text();
    expect(metrics).toContain(`\ntelematics_agent_build_info{version="${VERSION}"} 1\n`);
  });
});
