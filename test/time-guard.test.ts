/**
 * Time and place, as an outside probe found them wrong, with the real daemon and CLI bin
 * against a real buffer file and the sandbox:
 * - a first GNSS fix with a wrong date (a week rollover the wrong way, 19.6 years ahead, or a
 *   single garbled RMC date) set GNSS time ahead while the clock was not synchronised: a
 *   milestone of "now" went out years in the future.
 */
import type { ChildProcess } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { agentConfig, daemonFixture, runCli, startDaemon, waitFor, writeFile } from './helpers.js';
import { nmeaFrom } from './nmea-lines.js';
import { stopProcess } from './sources/support.js';

const procs: Array<ChildProcess | undefined> = [];
const fx = daemonFixture({
  afterStop: async () => {
    while (procs.length) await stopProcess(procs.pop());
  },
});

const DAY = 86_400_000;
/** 1024 GPS weeks: a receiver resolving its week number the wrong way is this far off. */
const ROLLOVER = 1024 * 7 * DAY;

/** One epoch of `nmeaFrom` at `atMs` moved by `offMs` (whole days: only the RMC date is wrong). */
function garbled(atMs: number, offMs: number): string {
  return nmeaFrom(atMs + offMs, 1).text;
}

describe('the first GNSS fixes while the clock is not synchronised', () => {
  it('a fix 1024 weeks ahead and one 5 years ahead do not set GNSS time; two that agree do, and a milestone of now is now', async () => {
    const { url } = await fx.sandbox.start();
    // The receiver's first epochs are wrong (1024 weeks ahead, then 5 years), the rest carry the true time.
    const t0 = Math.floor(Date.now() / 1000) * 1000 - 8000;
    const good = nmeaFrom(t0, 8);
    const fixes = writeFile(fx.tmp.dir, 'fixes.nmea', garbled(t0 - 2000, ROLLOVER) + garbled(t0 - 1000, 1826 * DAY) + good.text);
    const cfg = agentConfig(fx.tmp.dir, url, `[clock]\nsynchronised = "no"\n[[sources]]\ntype = "nmea"\nresource_id = "T1"\ndevice = "${fixes}"\n`);
    expect((await runCli(['load', 'start', 'L1', '-r', 'T1', '--config', cfg])).code).toBe(0);
    fx.daemon = startDaemon(['--config', cfg]);
    await fx.daemon.started();
    const status = async () => JSON.parse((await runCli(['status', '--json', '--config', cfg])).stdout) as { clock: { state: string; offsetMs: number } };
    await waitFor(async () => (await status()).clock.state === 'gnss', 15_000, 'the agent on GNSS time');
    expect(Math.abs((await status()).clock.offsetMs)).toBeLessThan(60_000);

    // A driver's milestone of "now" is stamped now, not in 2046.
    const m = await runCli(['milestone', '--load', 'L1', '--code', 'X6', '--config', cfg]);
    expect(m.code, m.stderr).toBe(0);
    await waitFor(() => fx.sandbox.milestones.length === 1, 15_000, 'the milestone');
    expect(Math.abs(Date.parse(fx.sandbox.milestones[0]!.body.time.dateTime) - Date.now())).toBeLessThan(60_000);

    const out = fx.daemon.output();
    // Named, with the reason: the rollover refused, the garbled date kept but not taken as the time.
    expect(out).toMatch(
      /"source":"nmea:T1".*bad input skipped: time: 2046-\S+ is \d+ days after the newest time this agent knows .* no GNSS time is known yet: a garbled date or a GPS week rollover, not believed/,
    );
    expect(out).toMatch(/GNSS time not taken yet: nmea:T1's fix at 2031-\S+ and nmea:T1's fix at 20\d\d-\S+ \d+ s later disagree by -\d+ d \d+ h .*waits for two fixes that agree/);
  }, 60_000);
});
