/**
 * What an operator meets on a device: commands run from their own login beside the service's
 * buffer, `status` as monitoring scripts read it, and buffer files that are private to the
 * user that runs the agent.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Sandbox } from '../src/sandbox/server.js';
import { agentConfig, BIN, type CliResult, cleanEnv, NOBODY, nobodyCannot, runCli, startDaemon, TEST_SCAC, waitFor, writeFile, type Daemon, tempFixture } from './helpers.js';

const tmp = tempFixture();
let children: ChildProcess[] = [];
let daemons: Daemon[] = [];
afterEach(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  children = [];
  for (const d of daemons) await d.stop('SIGKILL');
  daemons = [];
});

/** A config every user can read, its buffer in `state/` (made by the test, as it says). */
function sharedConfig(): { cfg: string; state: string; buffer: string } {
  chmodSync(tmp.dir, 0o755);
  const state = join(tmp.dir, 'state');
  const buffer = join(state, 'buffer.db');
  const cfg = writeFile(tmp.dir, 'agent.toml', `device_id = "t"\n[api]\nbase_url = "http://127.0.0.1:9"\nscac = "ABCD"\n[buffer]\npath = "${buffer}"\n[[sources]]\ntype = "gpsd"\nresource_id = "T1"\n`, 0o644);
  return { cfg, state, buffer };
}

describe('commands run by a user who may not use the buffer', () => {
  it('status by a user who cannot read the buffer says so, and as whom to run it, exit 73', async (ctx) => {
    const why = nobodyCannot();
    if (why) return ctx.skip(why);
    const { cfg, state, buffer } = sharedConfig();
    // The service's directory: its user's alone (0700 here, 0750 with its group on a device).
    mkdirSync(state, { mode: 0o700 });
    expect((await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', cfg])).code).toBe(0);
    expect(existsSync(buffer)).toBe(true);

    const r = await runCli(['status', '--config', cfg], { uid: NOBODY });
    expect(r.code).toBe(73);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(
      `error: ${buffer}: cannot read the buffer: user nobody (uid ${NOBODY}) cannot look into ${state} (EACCES). The buffer belongs to the user the service runs as; run the command as that user: sudo -u telematics-agent telematics-agent status --config ${cfg}\n`,
    );
    // A directory it may look into, a file it may not read: the same.
    chmodSync(state, 0o755);
    const file = await runCli(['status', '--json', '--config', cfg], { uid: NOBODY });
    expect(file.code).toBe(73);
    expect(file.stderr).toContain(`cannot read the buffer: user nobody (uid ${NOBODY}) cannot read ${buffer} (EACCES)`);
    expect(file.stderr).toContain(`sudo -u telematics-agent telematics-agent status --json --config ${cfg}`);
  }, 30_000);

  it('milestone by a user who can read the buffer but not write it: exit 73, and as whom to run it', async (ctx) => {
    const why = nobodyCannot();
    if (why) return ctx.skip(why);
    const { cfg, state, buffer } = sharedConfig();
    mkdirSync(state, { mode: 0o750 });
    expect((await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', cfg])).code).toBe(0);
    // The operator is in the service's group: reads, does not write.
    chownSync(state, 0, NOBODY);
    chownSync(buffer, 0, NOBODY);
    expect((await runCli(['status', '--config', cfg], { uid: NOBODY })).code).toBe(3);

    const r = await runCli(['milestone', '--load', 'L1', '--code', 'X3', '--lat', '41.88', '--lon', '-87.63', '--config', cfg], { uid: NOBODY });
    expect(r.code).toBe(73);
    expect(r.stderr).not.toContain('readonly database');
    expect(r.stderr).toContain(`${buffer}: cannot write the buffer: user nobody (uid ${NOBODY}) cannot write to ${state} (EACCES)`);
    expect(r.stderr).toContain(`run the command as that user: sudo -u telematics-agent telematics-agent milestone --load L1 --code X3 --lat 41.88 --lon -87.63 --config ${cfg}\n`);

    // With the daemon running on it: its -wal and -shm readable by the group too. SQLite opens
    // the files read-only and refused only the write ("attempt to write a readonly database", exit 1).
    const d = startDaemon(['--config', cfg], { TELEMATICS_AGENT_SUBSCRIPTION_KEY: 'k' });
    daemons.push(d);
    await d.started('the daemon');
    await waitFor(() => existsSync(`${buffer}-wal`) && existsSync(`${buffer}-shm`), 10_000, 'the -wal and -shm');
    for (const f of [`${buffer}-wal`, `${buffer}-shm`]) chownSync(f, 0, NOBODY);
    chmodSync(state, 0o770);
    const beside = await runCli(['milestone', '--load', 'L1', '--code', 'X3', '--lat', '41.88', '--lon', '-87.63', '--config', cfg], { uid: NOBODY });
    expect(beside.stderr).not.toContain('readonly database');
    expect(beside.stderr).toContain(`${buffer}: cannot write the buffer: user nobody (uid ${NOBODY}) cannot read and write ${buffer} (EACCES)`);
    expect(beside.stderr).toContain('run the command as that user: sudo -u telematics-agent telematics-agent milestone');
    expect(beside.code).toBe(73);
    // Nothing was recorded.
    const list = await runCli(['milestone', 'list', '--load', 'L1', '--json', '--config', cfg]);
    expect(JSON.parse(list.stdout)).toEqual([]);
  }, 30_000);
});

describe('buffer files', () => {
  it('are 0640 whoever runs the agent, under a umask of 022: the buffer, its -wal and -shm, the lock', async () => {
    const sandbox = new Sandbox({ key: 'k', scac: TEST_SCAC });
    const { url } = await sandbox.start();
    try {
      const cfg = agentConfig(tmp.dir, url);
      const child = spawn('sh', ['-c', `umask 022 && exec "${process.execPath}" "${BIN}" run --config "${cfg}"`], { env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
      children.push(child);
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      await waitFor(() => out.includes('"msg":"agent started"') || child.exitCode !== null, 15_000, 'the daemon');
      const buffer = join(tmp.dir, 'buffer.db');
      const files = [buffer, `${buffer}-wal`, `${buffer}-shm`, `${buffer}.lock`];
      await waitFor(() => files.every((f) => existsSync(f)), 10_000, 'the buffer files');
      expect(Object.fromEntries(files.map((f) => [f, (statSync(f).mode & 0o777).toString(8)]))).toEqual(Object.fromEntries(files.map((f) => [f, '640'])));
    } finally {
      await sandbox.stop();
    }
  }, 30_000);
});

describe('status exit statuses, for monitoring scripts', () => {
  async function statusOf(cfg: string, until: (s: { daemon: { running: boolean }; delivery: { paused?: string } | null }) => boolean): Promise<CliResult> {
    return waitFor(async () => {
      const r = await runCli(['status', '--json', '--config', cfg]);
      return until(JSON.parse(r.stdout)) ? r : undefined;
    });
  }

  it('5 while delivery is paused (the service refuses the key)', async () => {
    const sandbox = new Sandbox({ key: 'not-the-agents-key', scac: TEST_SCAC });
    const { url } = await sandbox.start();
    try {
      const cfg = agentConfig(tmp.dir, url);
      const d = startDaemon(['--config', cfg]);
      daemons.push(d);
      await d.started('the daemon');
      expect((await statusOf(cfg, (s) => s.daemon.running)).code).toBe(0);
      await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', cfg]);
      await runCli(['milestone', '--load', 'L1', '--code', 'X3', '--lat', '41.88', '--lon', '-87.63', '--config', cfg]);
      const r = await statusOf(cfg, (s) => s.daemon.running && !!s.delivery?.paused);
      expect(r.code).toBe(5);
      expect((await runCli(['status', '--config', cfg])).code).toBe(5);
    } finally {
      await sandbox.stop();
    }
  }, 40_000);

  it('6 while a source is unhealthy', async () => {
    const sandbox = new Sandbox({ key: 'k', scac: TEST_SCAC });
    const { url } = await sandbox.start();
    try {
      const path = writeFile(tmp.dir, 'sick.mjs', 'export function createSource() { return { start() {}, stop() {}, health: () => ({ healthy: false, readings: 0, rejected: 0, detail: "device gone" }) }; }\n');
      const cfg = agentConfig(tmp.dir, url, `[[sources]]\ntype = "module"\nname = "sick"\npath = "${path}"\n`);
      const d = startDaemon(['--config', cfg]);
      daemons.push(d);
      await d.started('the daemon');
      const r = await statusOf(cfg, (s) => s.daemon.running);
      expect(r.code).toBe(6);
      expect(JSON.parse(r.stdout).sources).toMatchObject([{ name: 'sick', healthy: false }]);
    } finally {
      await sandbox.stop();
    }
  }, 40_000);
});
