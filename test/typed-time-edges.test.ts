/**
 * Typed times at their edges, as a driver and an engineer meet them with the real CLI bin
 * against a real buffer file:
 * - a `milestone --time` without an offset on the night the clocks change: read as a stop's
 *   appointment is (the first of a repeated hour, a skipped time moved forward), but where
 *   the appointment said so, the milestone said nothing: 01:30 on fall-back night went out as
 *   CDT, an hour early if the driver meant the second 01:30, without a word;
 * - `load start --from` read its time with Date.parse, not the reader every other typed time
 *   goes through: RFC 2822 and prose were taken, 2026-02-30 became 2026-03-02, and `-06`
 *   (which `--time` takes) was refused;
 * - `load start --from` and `load end` on a device booted 12 h behind, with the running agent
 *   on GNSS time: judged and stamped by the system clock, a `--from` five minutes ago was
 *   refused as "in the future" and `load end` closed the window 12 h early.
 */
import { describe, expect, it } from 'vitest';
import { DAEMON_STATE_KEY } from '../src/daemon-state.js';
import { cliFixture, fakeClockEnv, findLibfaketime, runCli, writeFile } from './helpers.js';

const UTC_DEVICE = { TZ: 'UTC' };
const CHICAGO = { lat: 41.8781, lon: -87.6298 };
const H = 3_600_000;
const LIBFAKETIME = findLibfaketime();

// Fixed dates of 2026 and 2027, typed long after once time passes: the age bound is raised for them.
const fx = cliFixture('[sources_time]\nmax_past_days = 3650\n');

const milestone = (args: string[]) => runCli(['milestone', '--load', 'L1', ...args, '--config', fx.cfg], { env: UTC_DEVICE });
const loadStart = (args: string[], env: NodeJS.ProcessEnv = UTC_DEVICE) => runCli(['load', 'start', 'L1', '-r', 'T1', ...args, '--config', fx.cfg], { env });
const bodyTime = (stdout: string) => {
  const id = Number(/^milestone (\d+) /.exec(stdout)![1]);
  return (fx.withBuffer((s) => s.listMilestones().find((m) => m.id === id)!.body) as { time: { dateTime: string } }).time.dateTime;
};

describe('milestone --time on the night the clocks change', () => {
  it('a time that occurs twice: the first, with a warning giving the offset of the second', async () => {
    expect((await loadStart([])).code).toBe(0);
    const r = await milestone(['--code', 'X1', '--city', 'Chicago', '--state', 'IL', '--time', '2026-11-01T01:30']);
    expect(r.code, r.stderr).toBe(0);
    expect(bodyTime(r.stdout)).toBe('2026-11-01T01:30:00.000-05:00');
    expect(r.stderr).toContain(
      'warning: --time 2026-11-01T01:30 occurs twice in America/Chicago: read as the first, 2026-11-01T01:30:00-05:00; give the offset (such as 2026-11-01T01:30:00-06:00) if the second was meant',
    );
  });

  it('a time the clocks skip: moved forward, with a warning', async () => {
    expect((await loadStart([])).code).toBe(0);
    const r = await milestone(['--code', 'X1', '--lat', String(CHICAGO.lat), '--lon', String(CHICAGO.lon), '--time', '2026-03-08T02:30']);
    expect(r.code, r.stderr).toBe(0);
    expect(bodyTime(r.stdout)).toBe('2026-03-08T03:30:00.000-05:00');
    expect(r.stderr).toContain('warning: --time 2026-03-08T02:30 does not exist in America/Chicago (the clocks skip it): read as 2026-03-08T03:30:00-05:00; give the offset if another time was meant');
  });

  it('an ordinary time, or one with its offset on that night: no warning', async () => {
    expect((await loadStart([])).code).toBe(0);
    for (const time of ['2026-11-01T03:30', '2026-11-01T01:30-06:00']) {
      const r = await milestone(['--code', 'X1', '--city', 'Chicago', '--state', 'IL', '--time', time, '--force']);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).not.toContain('warning: --time');
    }
  });
});

describe('load start --from reads a time as every other typed time is read', () => {
  // Ten minutes ago, within loads.keep_unassigned_s: what Date.parse took, but in forms no other typed time may take.
  const recent = new Date(Date.now() - 10 * 60_000);
  const months = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  const hm = recent.toISOString().slice(11, 16);
  it.each([
    [recent.toUTCString().replace('GMT', '+0000')],
    [`${months[recent.getUTCMonth()]} ${recent.getUTCDate()} ${recent.getUTCFullYear()} ${hm} +0000`],
    ['2026-02-30T08:00:00Z'],
    [recent.toISOString().slice(0, 19)],
  ])('%j: refused (65), no load', async (text) => {
    const r = await loadStart(['--from', text]);
    expect(r.code).toBe(65);
    expect(r.stderr).toContain(`--from: expected an ISO 8601 time with its offset (2026-03-01T08:00:00Z), got ${JSON.stringify(text)}`);
    expect(fx.withBuffer((s) => s.getLoad('L1'))).toBeUndefined();
  });

  it('an offset of hours alone (-06), as --time takes it: the window opens at that instant', async () => {
    const fromMs = Math.floor((Date.now() - 10 * 60_000) / 1000) * 1000;
    const local = new Date(fromMs - 6 * H).toISOString().slice(0, 19);
    const r = await loadStart(['--from', `${local}-06`]);
    expect(r.code, r.stderr).toBe(0);
    expect(fx.withBuffer((s) => s.getLoad('L1')!.windowFromMs)).toBe(fromMs);
  });
});

describe('load start --from and load end on a device booted 12 h behind, the agent on GNSS time', () => {
  it('a --from five minutes ago is taken, and start and end are stamped on GNSS time, not 12 h early', async (ctx) => {
    if (!LIBFAKETIME) {
      console.log('skipped: libfaketime not found under /usr/lib/*/faketime/ (apt-get install faketime)');
      ctx.skip();
    }
    // What a daemon on GNSS time leaves in its state row (this process stands in for it: alive).
    const systemNow = Date.now() - 12 * H;
    fx.withBuffer((s) =>
      s.setState(
        DAEMON_STATE_KEY,
        {
          pid: process.pid,
          deviceId: 'dev',
          configFile: fx.cfg,
          startedMs: systemNow - 60_000,
          updatedMs: systemNow,
          running: true,
          keyOrigin: 'test',
          sender: {},
          ingest: {},
          sources: [],
          nextTracePushMs: null,
          clock: { state: 'gnss', from: 'clock.synchronised = "no"', offsetMs: 12 * H, held: 0, heldExpired: 0 },
        },
        systemNow,
      ),
    );
    const behind = fakeClockEnv(LIBFAKETIME!, writeFile(fx.dir, 'faketime', '-12h\n'));
    const fromMs = Math.floor((Date.now() - 5 * 60_000) / 1000) * 1000;
    const start = await loadStart(['--from', new Date(fromMs).toISOString()], { ...UTC_DEVICE, ...behind });
    expect(start.code, start.stderr).toBe(0);
    const started = fx.withBuffer((s) => s.getLoad('L1')!);
    expect(started.windowFromMs).toBe(fromMs);
    expect(Math.abs(started.startedMs - Date.now())).toBeLessThan(30_000);

    const end = await runCli(['load', 'end', 'L1', '--config', fx.cfg], { env: { ...UTC_DEVICE, ...behind } });
    expect(end.code, end.stderr).toBe(0);
    const ended = fx.withBuffer((s) => s.getLoad('L1')!);
    expect(Math.abs(ended.endedMs! - Date.now())).toBeLessThan(30_000);
    expect(Math.abs(ended.windowUntilMs! - Date.now())).toBeLessThan(30_000);
  });
});
