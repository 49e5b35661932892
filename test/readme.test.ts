/**
 * What the README tells an operator or a contributor to do works as it says: the walkthrough's
 * commands name its config, what it says about codes is what the CLI does, and the test
 * set-up names what the suite needs.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentConfig, ROOT, runCli, tempFixture } from './helpers.js';

const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const section = (title: string) => {
  const s = README.split(/^## /m).find((x) => x.startsWith(title));
  if (!s) throw new Error(`README.md has no "## ${title}"`);
  return s;
};

const tmp = tempFixture();

describe('README', () => {
  it('"Try it on your machine": every command that reads the config names it (--config), in the blocks and in the text', () => {
    const text = section('Try it on your machine');
    // Commands in ```sh blocks and in `inline code`, with or without `npx telematics-agent`.
    const spans = [...text.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]);
    const lines = [...text.matchAll(/```sh\n([\s\S]*?)```/g)].flatMap((m) => m[1].split('\n'));
    const commands = [...spans, ...lines]
      .map((c) => c.replace(/^npx telematics-agent /, '').trim()) // A bare name (`status` shows ...) mentions a command given above; with arguments, one to type.
      .filter((c) => /^(run|status|load|milestone|dead-letter|validate-config|buffer) /.test(c));
    expect(commands.length).toBeGreaterThan(4);
    expect(commands.filter((c) => !c.includes('--config'))).toEqual([]);
  });

  it('says what the CLI does with a lower-case code: x3 is read as X3, not refused', async () => {
    expect(README).not.toMatch(/not x3/);
    expect(README).toMatch(/`x3` is read as X3/);
    const cfg = agentConfig(tmp.dir, 'http://127.0.0.1:9');
    expect((await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', cfg])).code).toBe(0);
    const r = await runCli(['milestone', '--load', 'L1', '--code', 'x3', '--lat', '41.88', '--lon', '-87.63', '--json', '--config', cfg]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ code: 'X3' });
  });

  it('"Install on Debian": the config edit names every field validate-config finds still to set in the shipped agent.toml, and the check is run as the operator would (the key read where the unit loads it)', async () => {
    const steps = section('Install on Debian');
    const edit = steps.split('\n').find((l) => l.startsWith('sudoedit /etc/telematics-agent/agent.toml'));
    expect(edit).toBeDefined();
    const r = await runCli(['validate-config', '--config', join(ROOT, 'config', 'agent.toml')]);
    expect(r.code).toBe(78);
    // `agent.toml:21: api.base_url: still "CHANGE-ME"...`, `agent.toml:43: sources: expected...`
    const fields = [...r.stderr.matchAll(/agent\.toml:\d+: ([a-z_.]+):/g)].map((m) => m[1]);
    expect(fields).toEqual(expect.arrayContaining(['api.base_url', 'api.scac', 'sources']));
    for (const field of fields) expect(edit, field).toContain(field === 'sources' ? '[[sources]]' : field);
    expect(steps).toContain('sudo telematics-agent validate-config');
  });

  it('the test set-up says where LazyFS comes from and what the suite needs: root, debootstrap, systemd-container, the download, the time', () => {
    const setUp = section('Two commands');
    expect(setUp).toContain('https://github.com/dsrhaslab/lazyfs');
    expect(setUp).toContain('../shared/tools/lazyfs');
    for (const needed of ['root', 'debootstrap', 'systemd-container', '450 MB', '25 minutes']) expect(setUp, needed).toContain(needed);
    // What the README says the script needs is what it uses.
    const script = readFileSync(join(ROOT, 'scripts', 'lazyfs.sh'), 'utf8');
    expect(script).toContain('../shared/tools/lazyfs');
    expect(script).toContain('https://github.com/dsrhaslab/lazyfs');
  });
});
