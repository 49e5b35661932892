/**
 * Typed times at their edges, as a driver and an engineer meet them with the real CLI bin
 * against a real buffer file:
 * - a `milestone --time` without an offset on the night the clocks change: read as a stop's
 *   appointment is (the first of a repeated hour, a skipped time moved forward), but where
 *   the appointment said so, the milestone said nothing: 01:30 on fall-back night went out as
 *   CDT, an hour early if the driver meant the second 01:30, without a word;
 */
import { describe, expect, it } from 'vitest';
import { cliFixture, runCli } from './helpers.js';

const UTC_DEVICE = { TZ: 'UTC' };
const CHICAGO = { lat: 41.8781, lon: -87.6298 };

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
