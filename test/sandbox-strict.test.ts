/**
 * `sandbox --strict` against the real agent: the specification's form (the agent's default)
 * is refused and dead-lettered with a readable reason, the config the README gives for the
 * deployed service is accepted, and the command line refuses a pattern that cannot compile.
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Sandbox, type SandboxEvent } from '../src/sandbox/server.js';
import { BIN, TEST_KEY, TEST_SCAC, agentConfig, cleanEnv, runCli, startDaemon, waitFor, type Daemon, tempFixture } from './helpers.js';

const UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;

const tmp = tempFixture();
let sandbox: Sandbox | undefined;
let daemon: Daemon | undefined;
let events: SandboxEvent[];
beforeEach(() => {
  events = [];
});
afterEach(async () => {
  await daemon?.stop('SIGKILL');
  daemon = undefined;
  await sandbox?.stop();
  sandbox = undefined;
});

async function startSandbox(loadNumberPattern?: string): Promise<string> {
  sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC, strict: true, loadNumberPattern, onRequest: (e) => events.push(e) });
  return (await sandbox.start()).url;
}

/** agentConfig with a simulator source, traces every 2 s, and `api` lines added to its [api] table. */
function config(url: string, api = ''): string {
  const cfg = agentConfig(tmp.dir, url, '[[sources]]\ntype = "simulator"\nresource_id = "TRUCK-1"\ntime_scale = 20\ninterval_s = 1\n', {
    traces: '*/2 * * * * *',
    sampling: 5,
  });
  writeFileSync(cfg, readFileSync(cfg, 'utf8').replace('[api]\n', `[api]\n${api}`));
  return cfg;
}

const THE_README_CONFIG = 'date_time_format = "utc"\nextra_fields = { source = "carrier" }\n';

interface DeadLetter {
  kind: string;
  loadNumber: string;
  status: number;
  response: string;
}

async function deadLetters(cfg: string): Promise<DeadLetter[]> {
  const r = await runCli(['dead-letter', 'list', '--json', '--config', cfg]);
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as DeadLetter[];
}

async function cli(args: string[]): Promise<void> {
  const r = await runCli(args);
  // Warnings (a milestone recorded before the first fix) are fine; errors are not.
  expect(r.stderr.split('\n').filter((l) => l && !l.startsWith('warning: '))).toEqual([]);
  expect(r.code).toBe(0);
}

describe('sandbox --strict and the real agent', () => {
  it('refuses the default config’s bodies (local dateTime, no source) with 400 naming each field; the agent dead-letters them', async () => {
    const cfg = config(await startSandbox());
    await cli(['load', 'start', 'L-1', '--resource', 'TRUCK-1', '--config', cfg]);
    await cli(['milestone', '--load', 'L-1', '--code', 'X3', '--stop', '1', '--config', cfg]);
    daemon = startDaemon(['--config', cfg]);

    const dead = await waitFor(
      async () => {
        const rows = await deadLetters(cfg);
        return rows.some((r) => r.kind === 'milestone') && rows.some((r) => r.kind !== 'milestone') && rows;
      },
      20_000,
      'a dead-lettered milestone and trace point',
    );
    expect(sandbox!.stats.accepted).toBe(0);

    const milestone = events.find((e) => e.kind === 'milestone' && e.status === 400)!;
    expect(milestone.problem).toMatch(/^source: required \(expected a non-empty string such as "carrier"\); time\.dateTime: expected UTC with whole seconds \(YYYY-MM-DDTHH:MM:SSZ\), got "[^"]+"$/);
    // The simulator's points carry a temperature: its dateTime is named too.
    const single = events.find((e) => e.kind === 'trace' && e.status === 400 && !/traces\[1\]\./.test(e.problem ?? ''))!;
    expect(single.problem!.split('; ').map((p) => p.split(':')[0])).toEqual(['source', 'traces[0].time.dateTime', 'traces[0].temperature.dateTime']);

    // What an operator reads in `dead-letter list`: the status and the sandbox's reasons.
    const m = dead.find((r) => r.kind === 'milestone')!;
    expect(m).toMatchObject({ loadNumber: 'L-1', status: 400 });
    expect(m.response).toContain('source: required');
    expect(m.response).toContain('time.dateTime: expected UTC with whole seconds');
    const t = dead.find((r) => r.kind !== 'milestone')!;
    expect(t.status).toBe(400);
    expect(t.response).toContain('traces[0].time.dateTime: expected UTC with whole seconds');
  });

  it('accepts an agent configured with date_time_format = "utc" and extra_fields = { source = "carrier" }', async () => {
    const cfg = config(await startSandbox(), THE_README_CONFIG);
    await cli(['load', 'start', 'L-1', '--resource', 'TRUCK-1', '--config', cfg]);
    await cli(['milestone', '--load', 'L-1', '--code', 'X3', '--stop', '1', '--config', cfg]);
    daemon = startDaemon(['--config', cfg]);

    await waitFor(() => sandbox!.milestones.length === 1 && sandbox!.stats.tracePoints >= 3, 20_000, 'the milestone and trace points');
    expect(sandbox!.stats.invalid).toBe(0);
    expect(sandbox!.milestones[0].body).toMatchObject({ source: 'carrier', loadNumber: 'L-1', eventCode: 'X3' });
    expect(sandbox!.milestones[0].body.time.dateTime).toMatch(UTC);
    const points = sandbox!.traces.flatMap((r) => {
      expect(r.body.source).toBe('carrier');
      return r.body.traces;
    });
    for (const p of points) expect(p.time.dateTime).toMatch(UTC);
    expect(points.some((p) => p.temperature !== undefined)).toBe(true);
    for (const p of points) if (p.temperature) expect(p.temperature.dateTime).toMatch(UTC);
    expect(await deadLetters(cfg)).toEqual([]);
  });

  it('refuses a load number outside --load-number-pattern, and only that load', async () => {
    const cfg = config(await startSandbox('\\d{4}-\\d{6}'), THE_README_CONFIG);
    await cli(['load', 'start', '2026-000123', '--resource', 'TRUCK-1', '--config', cfg]);
    await cli(['load', 'start', 'L-1', '--resource', 'TRAILER-9', '--resource-type', 'Trailer', '--config', cfg]);
    await cli(['milestone', '--load', 'L-1', '--code', 'X3', '--stop', '1', '--config', cfg]);
    await cli(['milestone', '--load', '2026-000123', '--code', 'X3', '--stop', '1', '--config', cfg]);
    daemon = startDaemon(['--config', cfg]);

    const dead = await waitFor(
      async () => {
        const rows = await deadLetters(cfg);
        return rows.length > 0 && sandbox!.milestones.length === 1 && rows;
      },
      20_000,
      'one milestone delivered, one dead-lettered',
    );
    expect(sandbox!.milestones[0].body.loadNumber).toBe('2026-000123');
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ kind: 'milestone', loadNumber: 'L-1', status: 400 });
    expect(dead[0].response).toContain('loadNumber: expected a match for \\\\d{4}-\\\\d{6}, got \\"L-1\\"');
  });
});

describe('telematics-agent sandbox --strict', () => {
  it('refuses a load number pattern that is not a regular expression with exit 64, naming the option', async () => {
    const r = await runCli(['sandbox', '--key', TEST_KEY, '--scac', TEST_SCAC, '--port', '0', '--strict', '--load-number-pattern', '[']);
    expect(r.code).toBe(64);
    expect(r.stderr).toBe('error: --load-number-pattern: expected a regular expression, got "[" (Invalid regular expression: /[/: Unterminated character class)\n');
  });

  it('documents both options in --help', async () => {
    const r = await runCli(['sandbox', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('--strict');
    expect(r.stdout).toContain('--load-number-pattern <regex>');
  });

  it('serves strictly from the command line and says so at start', async () => {
    const child = spawn(process.execPath, [BIN, 'sandbox', '--key', TEST_KEY, '--scac', TEST_SCAC, '--port', '0', '--strict', '--quiet'], {
      env: cleanEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    try {
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      const url = await waitFor(() => /^loadNumber must match .*\n/m.test(out) && /listening on (\S+)/.exec(out)?.[1], 10_000, 'the sandbox to listen');
      expect(out).toContain('strict: dateTime must be UTC YYYY-MM-DDTHH:MM:SSZ, bodies must carry "source"\n');
      expect(out).toContain('loadNumber must match ^[A-Za-z0-9-]{1,35}$\n');
      const res = await fetch(`${url}/rcsc/events/v1/loads/milestone-requests`, {
        method: 'POST',
        headers: { 'Ocp-Apim-Subscription-Key': TEST_KEY, carrierSCAC: TEST_SCAC, Accept: 'application/json', 'Content-Type': 'application/json' },
        body: JSON.stringify({ eventCode: 'X3', reasonCode: 'NS', loadNumber: 'L 1', time: { dateTime: '2026-11-22T20:05:03Z', timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' } }),
      });
      expect(res.status).toBe(400);
      expect((await res.json()).problems).toEqual(['source: required (expected a non-empty string such as "carrier")', 'loadNumber: expected a match for ^[A-Za-z0-9-]{1,35}$, got "L 1"']);
    } finally {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      expect(await exited).toBe(0);
      clearTimeout(timer);
    }
  });
});
