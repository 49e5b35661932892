import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentConfig, BIN, cleanEnv, cliFixture, NO_SERVICE, ROOT, runCli, writeFile } from './helpers.js';

const fx = cliFixture();

const COMMANDS = [['run'], ['validate-config'], ['status'], ['load'], ['load', 'start'], ['load', 'end'], ['load', 'list'], ['milestone'], ['milestone', 'list'], ['sandbox'], ['demo']];

describe('command line contract', () => {
  it.each(COMMANDS)('%s %s has --help', async (...cmd) => {
    const r = await runCli([...cmd.filter(Boolean), '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage: telematics-agent/);
  });

  it('prints the package version with --version (found from the bundle in dist/pkg/)', async () => {
    const r = await runCli(['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe((JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version);
  });

  it('stops quietly, exit 0, when the reader of its output goes away (| head)', async () => {
    const child = spawn(process.execPath, [BIN, '--help'], { env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    // The read end closes before the command writes: its write fails with EPIPE.
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
  });

  it('rejects an unknown subcommand with exit 64 and says so', async () => {
    const r = await runCli(['fly']);
    expect(r.code).toBe(64);
    expect(r.stderr).toContain("error: unknown command 'fly'");
  });

  it('rejects a missing required option with exit 64', async () => {
    const r = await runCli(['load', 'start', 'L1', '--config', fx.cfg]);
    expect(r.code).toBe(64);
    expect(r.stderr).toContain("required option '-r, --resource <id>' not specified");
  });
});

describe('loads and milestones from the command line', () => {
  it('starts, lists and ends loads', async () => {
    const stops = writeFile(
      fx.dir,
      'stops.json',
      JSON.stringify([
        { sequence: 1, type: 'pickup', latitude: 41.8, longitude: -87.6 },
        { sequence: 2, type: 'delivery' },
      ]),
    );
    const start = await runCli(['load', 'start', 'L-100', '--resource', 'TRAILER-7', '--resource-type', 'Trailer', '--stops', stops, '--config', fx.cfg]);
    expect(start.stderr).toBe('');
    expect(start.stdout).toBe('load L-100 started on TRAILER-7 (Trailer) with 2 stop(s)\n');
    const list = await runCli(['load', 'list', '--json', '--config', fx.cfg]);
    expect(JSON.parse(list.stdout)).toMatchObject([{ loadNumber: 'L-100', resourceId: 'TRAILER-7', resourceType: 'Trailer', nextStop: 1, endedMs: null }]);
    // A second load on the same trailer (less than truckload): both active, each on its own.
    const again = await runCli(['load', 'start', 'L-101', '--resource', 'TRAILER-7', '--config', fx.cfg]);
    expect(again.stderr).toBe('');
    expect(again.stdout).toBe('load L-101 started on TRAILER-7 (Truck) with 0 stop(s)\n');
    expect((await runCli(['load', 'end', 'L-100', '--config', fx.cfg])).stdout).toBe('load L-100 ended\n');
    const left = JSON.parse((await runCli(['load', 'list', '--json', '--config', fx.cfg])).stdout) as Array<{ loadNumber: string }>;
    expect(left.map((l) => l.loadNumber)).toEqual(['L-101']);
    expect((await runCli(['load', 'end', 'L-101', '--config', fx.cfg])).stdout).toBe('load L-101 ended\n');
    expect((await runCli(['load', 'list', '--config', fx.cfg])).stdout).toBe('no active loads\n');
  });

  it('warns at load start about a stop whose appointment ended long ago (a stops file copied from an old load)', async () => {
    const soon = new Date(Date.now() + 3_600_000).toISOString();
    const stops = writeFile(
      fx.dir,
      'stops.json',
      JSON.stringify([
        { sequence: 1, type: 'pickup', latitude: 41.8, longitude: -87.6, appointment: { end: '2026-01-15T17:00:00-05:00' } },
        { sequence: 2, type: 'delivery', latitude: 39.77, longitude: -86.16, appointment: { end: soon } },
      ]),
    );
    const r = await runCli(['load', 'start', 'L1', '--resource', 'T1', '--stops', stops, '--config', fx.cfg]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/^warning: stop 1's appointment ended \d+ h ago \(2026-01-15T17:00:00-05:00\): a delay \(SD\) will be reported for it until the truck arrives; check the stops file's dates\n$/);
  });

  it('names the bad field of a stops file and exits 65', async () => {
    const stops = writeFile(
      fx.dir,
      'stops.json',
      JSON.stringify([
        { sequence: 0, type: 'pickup' },
        { sequence: 2, type: 'lunch' },
      ]),
    );
    const r = await runCli(['load', 'start', 'L1', '--resource', 'T1', '--stops', stops, '--config', fx.cfg]);
    expect(r.code).toBe(65);
    expect(r.stderr).toBe(`error: ${stops}: [0].sequence: expected a number >= 1, got 0\n${stops}: [1].type: expected one of "pickup", "delivery", "other", got "lunch"\n`);
  });

  it('commits a milestone before returning, and refuses one without a load without touching the buffer', async () => {
    // No fix yet: the time zone comes from the stop's position (Joliet, IL).
    const stops = writeFile(fx.dir, 'stops.json', JSON.stringify([{ sequence: 1, type: 'pickup', latitude: 41.52, longitude: -88.08 }]));
    await runCli(['load', 'start', 'L1', '--resource', 'T1', '--stops', stops, '--config', fx.cfg]);
    // A fixed summer date (CDT), older than sources_time.max_past_days by now: --force sends it.
    const ok = await runCli(['milestone', '--load', 'L1', '--code', 'X3', '--stop', '1', '--time', '2026-07-01T09:30:00-05:00', '--city', 'Joliet', '--state', 'il', '--force', '--config', fx.cfg]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toBe(
      'milestone 1 (X3 for load L1, stop 1) committed: 2026-07-01 09:30:00-05:00 CDT (UTC-5) = 2026-07-01T14:30:00Z at Joliet, IL (place: command line); zone America/Chicago (of Joliet, IL); the running agent sends it within seconds\n',
    );
    const unknownCode = await runCli(['milestone', '--load', 'L1', '--code', 'ZZ9', '--config', fx.cfg]);
    expect(unknownCode.code).toBe(65);
    expect(unknownCode.stderr).toMatch(/^error: event code ZZ9 is not in codes.events; .* add it to codes.events in the config; to send it once anyway, add --force\n$/);
    const forced = await runCli(['milestone', '--load', 'L1', '--code', 'ZZ9', '--force', '--config', fx.cfg]);
    expect(forced.code).toBe(0);
    expect(forced.stderr).toContain('warning: event code ZZ9 is not in codes.events; recorded anyway (--force): the service may refuse it\n');

    const noLoad = await runCli(['milestone', '--load', 'NOPE', '--code', 'X3', '--config', fx.cfg]);
    expect(noLoad.code).toBe(65);
    expect(noLoad.stderr).toBe('error: load NOPE: no such load (start it with "load start NOPE --resource ID")\n');
    const badTime = await runCli(['milestone', '--load', 'L1', '--code', 'AF', '--time', 'yesterday', '--config', fx.cfg]);
    expect(badTime.code).toBe(65);
    expect(badTime.stderr).toContain('--time: ');

    const rows = fx.withBuffer((s) => s.listMilestones());
    expect(rows.map((m) => m.body.eventCode)).toEqual(['X3', 'ZZ9']);
    expect(rows[0].body).toMatchObject({
      eventCode: 'X3',
      reasonCode: 'NS',
      loadNumber: 'L1',
      eventCity: 'Joliet',
      eventState: 'IL',
      stopsequenceNumber: 1,
      time: { dateTime: '2026-07-01T09:30:00.000-05:00', timeZoneCode: 'CDT', timeZoneOffset: 'UTC-5' },
    });
  });

  it('milestone list --load L reaches the list subcommand, whose --load is not taken by milestone itself', async () => {
    await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', fx.cfg]);
    const none = await runCli(['milestone', 'list', '--load', 'L1', '--config', fx.cfg]);
    expect(none).toMatchObject({ code: 0, stdout: 'no milestones for load L1\n', stderr: '' });
    await runCli(['milestone', '--load', 'L1', '--code', 'X6', '--lat', '41.8781', '--lon', '-87.6298', '--config', fx.cfg]);
    const one = await runCli(['milestone', 'list', '--load', 'L1', '--json', '--config', fx.cfg]);
    expect(one.code).toBe(0);
    expect(JSON.parse(one.stdout)).toMatchObject([{ id: 1, code: 'X6', origin: 'manual', state: 'pending', attempts: 0, correlationId: null, eventCity: 'Chicago' }]);
    // --config given to the parent still applies.
    expect((await runCli(['milestone', '--config', fx.cfg, 'list', '--load', 'L1'])).stdout).toMatch(/^1\tX6\tstop -\t\S+\tmanual\tpending\t0 attempt\(s\)\t-\tcorrelation -\n$/);
    const unknown = await runCli(['milestone', 'list', '--load', 'NOPE', '--config', fx.cfg]);
    expect(unknown).toMatchObject({ code: 65, stderr: 'error: load NOPE: no such load\n' });
    const missing = await runCli(['milestone', 'list', '--config', fx.cfg]);
    expect(missing.code).toBe(64);
    expect(missing.stderr).toContain("required option '-l, --load <loadNumber>' not specified");
  });

  it('status says the daemon is not running (exit 3) and shows queue and loads', async () => {
    // Before anything made a buffer, status only reads: it creates none.
    const before = await runCli(['status', '--json', '--config', fx.cfg]);
    expect(before.code).toBe(3);
    expect(JSON.parse(before.stdout).daemon).toMatchObject({ running: false, note: `no buffer at ${fx.buffer}: the daemon has never run with this config` });
    expect(existsSync(fx.buffer)).toBe(false);
    await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', fx.cfg]);
    const r = await runCli(['status', '--json', '--config', fx.cfg]);
    expect(r.code).toBe(3);
    const s = JSON.parse(r.stdout);
    expect(s.daemon).toMatchObject({ running: false, note: 'the daemon has never run with this buffer' });
    expect(s.activeLoads).toMatchObject([{ loadNumber: 'L1', resourceId: 'T1', backlog: 0 }]);
    expect(s.queue).toMatchObject({ readings: 0, pendingMilestones: 0 });
    const text = await runCli(['status', '--config', fx.cfg]);
    expect(text.stdout).toContain('active loads: T1: L1 (Truck, 0 readings to send)');
  });

  it('status with no load says what becomes of the readings: kept for good, kept a while, or not at all', async () => {
    const noLoads = async (extra: string) => {
      fx.cfg = agentConfig(fx.dir, NO_SERVICE, extra);
      return (await runCli(['status', '--config', fx.cfg])).stdout.split('\n').find((l) => l.startsWith('active loads:'));
    };
    // privacy.record_without_load keeps them all: "not kept" was said of a truck recording everything.
    expect(await noLoads('[privacy]\nrecord_without_load = true\n')).toBe('active loads: none (readings without a load are kept: privacy.record_without_load)');
    expect(await noLoads('')).toBe('active loads: none (readings without a load are kept 1 h 0 min for a load started --from, then dropped: loads.keep_unassigned_s)');
    expect(await noLoads('[loads]\nkeep_unassigned_s = 0\n')).toBe('active loads: none (readings are not kept without a load)');
  });

  it('several loads on one truck: each started beside the others, listed per resource with its backlog, ended alone', async () => {
    const cli = (...args: string[]) => runCli([...args, '--config', fx.cfg]);
    const feed = (n: number) => {
      const t = Date.now();
      fx.withBuffer((s) => s.insertReadings(Array.from({ length: n }, (_, i) => ({ resourceId: 'TRUCK-1', timeMs: t + i, lat: 41.8, lon: -87.6 }))));
    };
    expect((await cli('load', 'start', 'L-A', '--resource', 'TRUCK-1')).stdout).toBe('load L-A started on TRUCK-1 (Truck) with 0 stop(s)\n');
    feed(3);
    const b = await cli('load', 'start', 'L-B', '--resource', 'TRUCK-1');
    expect(b).toMatchObject({ code: 0, stderr: '', stdout: 'load L-B started on TRUCK-1 (Truck) with 0 stop(s)\n' });
    expect((await cli('load', 'start', 'L-C', '--resource', 'TRAILER-7', '--resource-type', 'Trailer')).code).toBe(0);
    feed(2);

    // Every active load, by resource, with what it still has to send: A has all five, B the two since it started.
    const list = await cli('load', 'list');
    expect(
      list.stdout.split('\n').map((l) =>
        l
          .split('\t')
          .slice(0, 2)
          .concat(l.split('\t')[5] ?? []),
      ),
    ).toEqual([['L-C', 'TRAILER-7', '0 reading(s) to send'], ['L-A', 'TRUCK-1', '5 reading(s) to send'], ['L-B', 'TRUCK-1', '2 reading(s) to send'], ['']]);
    const json = JSON.parse((await cli('load', 'list', '--json')).stdout) as Array<{ loadNumber: string; backlog: number; endedMs: number | null }>;
    expect(json.map((l) => [l.loadNumber, l.backlog])).toEqual([
      ['L-C', 0],
      ['L-A', 5],
      ['L-B', 2],
    ]);
    const status = await cli('status');
    expect(status.stdout).toMatch(/\nactive loads: TRAILER-7: L-C \(Trailer, 0 readings to send\)\n {14}TRUCK-1: L-A \(Truck, 5 readings to send\), L-B \(Truck, 2 readings to send\)\n/);
    expect(status.stdout).toMatch(/\nqueue: {8}5 readings/);
    const statusJson = JSON.parse((await cli('status', '--json')).stdout) as { activeLoads: Array<{ loadNumber: string; resourceId: string; backlog: number }> };
    expect(statusJson.activeLoads.map((l) => [l.resourceId, l.loadNumber, l.backlog])).toEqual([
      ['TRAILER-7', 'L-C', 0],
      ['TRUCK-1', 'L-A', 5],
      ['TRUCK-1', 'L-B', 2],
    ]);

    // Ending A leaves B (and what it has to send) as it was; A's readings still wait for A.
    expect((await cli('load', 'end', 'L-A')).stdout).toBe('load L-A ended\n');
    feed(1);
    const after = JSON.parse((await cli('load', 'list', '--all', '--json')).stdout) as Array<{ loadNumber: string; backlog: number; endedMs: number | null }>;
    expect(after.map((l) => [l.loadNumber, l.backlog, l.endedMs === null])).toEqual([
      ['L-C', 0, true],
      ['L-A', 5, false],
      ['L-B', 3, true],
    ]);
    expect((await cli('status')).stdout).toMatch(/\n {14}TRUCK-1: L-B \(Truck, 3 readings to send\)\n/);
  });
});
