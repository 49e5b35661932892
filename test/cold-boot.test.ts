/**
 * A cold boot without a battery-backed clock: the system clock starts 12 h behind, and a real
 * gpsd reports fixes with the right UTC time. Measured before the agent knew about its clock:
 * every fix was refused as "43200 s in the future" until network time came.
 *
 * The real daemon runs under libfaketime 12 h behind (the test, gpsd and the sandbox keep the
 * real clock); a pseudo-terminal plays NMEA stamped with the current time, once a second, to
 * a real gpsd; an exec adapter prints temperatures without a time, which only the (wrong)
 * system clock can stamp. `clock.synchronised = "no"` says what such a device's kernel says
 * (libfaketime moves the time, not the kernel's synchronised flag).
 */
import { describe, expect, it } from 'vitest';
import { agentConfig, fakeClockEnv, findLibfaketime, runCli, startDaemon, waitFor, writeFile, daemonFixture } from './helpers.js';
import { freePort, requireGpsd, startGpsd, startPty, stopProcess } from './sources/support.js';
import type { ChildProcess } from 'node:child_process';
import { nmeaFrom } from './nmea-lines.js';

const LIBFAKETIME = findLibfaketime();
const BEHIND_MS = 12 * 3_600_000;
const EPOCHS = 12;

interface StatusJson {
  clock: { state: string; offsetMs: number; from: string };
  sources: Array<{ name: string; detail?: string; readings: number; timeRejected: number }>;
}

const procs: Array<ChildProcess | undefined> = [];
const fx = daemonFixture({
  afterStop: async () => {
    while (procs.length) await stopProcess(procs.pop());
  },
});

describe('a cold boot with the system clock 12 h behind', () => {
  it('delivers every gpsd fix with its GNSS time, re-stamps system-stamped temperatures, and shows the clock as gnss', async (ctx) => {
    if (!LIBFAKETIME) {
      console.log('skipped: libfaketime not found under /usr/lib/*/faketime/ (apt-get install faketime)');
      ctx.skip();
    }
    requireGpsd();
    const { url } = await fx.sandbox.start();
    const port = await freePort();
    const script = writeFile(fx.tmp.dir, 'reefer.sh', '#!/bin/sh\nwhile :; do echo \'{"resourceId":"T1","temperature":-18.5}\'; sleep 1; done\n', 0o755);
    const cfg = agentConfig(
      fx.tmp.dir,
      url,
      `[health]
listen = "127.0.0.1:0"
[clock]
synchronised = "no"
unsynced_hold_s = 600
[[sources]]
type = "gpsd"
resource_id = "T1"
port = ${port}
reconnect_initial_s = 0.2
reconnect_max_s = 0.5
[[sources]]
type = "exec"
name = "reefer"
command = ["${script}"]
`,
      { traces: '*/5 * * * * *', sampling: 0 },
    );
    const clockFile = writeFile(fx.tmp.dir, 'faketime', '-12h\n');
    const fakeClock = fakeClockEnv(LIBFAKETIME!, clockFile);
    expect((await runCli(['load', 'start', 'L1', '-r', 'T1', '--config', cfg], { env: fakeClock })).code).toBe(0);

    fx.daemon = startDaemon(['--config', cfg], fakeClock);
    await fx.daemon!.started('the start');
    // Temperatures come at once, stamped 12 h early: they wait for a GNSS time.
    await waitFor(() => fx.daemon!.output().includes('wait for GNSS time'), 10_000, 'the clock said unsynchronised');

    // The receiver: one epoch a second (two lines), stamped from now on, through a real gpsd.
    const { text, times } = nmeaFrom(Math.ceil(Date.now() / 1000) * 1000 + 1000);
    const pty = await startPty(writeFile(fx.tmp.dir, 'drive.nmea', text), 0.5);
    procs.push(pty.proc);
    const gpsd = startGpsd(pty.path, port);
    procs.push(gpsd.proc);
    const status = async () => JSON.parse((await runCli(['status', '--json', '--config', cfg], { env: fakeClock })).stdout) as StatusJson;
    await waitFor(async () => (await status()).sources.find((x) => x.name === 'gpsd:T1')?.detail?.startsWith('connected'), 20_000, 'the agent connected to gpsd');
    // GNSS time runs this far from real time (the log was stamped before gpsd was connected).
    const lagMs = times[0]! - Date.now();
    pty.go();

    const points = () => fx.sandbox.traces.flatMap((t) => t.body.traces);
    const fixTimes = () => new Set(points().map((p) => Date.parse(p.time.dateTime)));
    await waitFor(() => fixTimes().has(times.at(-1)!), 40_000, `the last fix delivered`).catch((err) => {
      throw new Error(
        `${(err as Error).message}\ndelivered: ${[...fixTimes()].map((t) => new Date(t).toISOString()).join(' ')}\ndaemon:\n${fx.daemon!.output().slice(-3000)}\ngpsd:\n${gpsd.output().slice(-1000)}`,
      );
    });
    // Every fix gpsd reported, at its GNSS time, none refused for being "in the future". (gpsd
    // may take the first epoch or two to recognise NMEA: what it reported is what counts.)
    // (The state row's counts may be a minute old: the log says what was refused.)
    expect((await status()).sources.find((x) => x.name === 'gpsd:T1')!.timeRejected).toBe(0);
    const delivered = points();
    const deliveredFixes = times.filter((t) => fixTimes().has(t));
    expect(deliveredFixes.length).toBeGreaterThanOrEqual(EPOCHS - 3);
    expect(deliveredFixes).toEqual(times.slice(EPOCHS - deliveredFixes.length));
    expect(fx.daemon.output()).not.toMatch(/in the future/);
    // Every temperature is at a true time (within the fixes' run, give or take the hold and a
    // second of latency), not 12 h early.
    const temps = delivered.filter((p) => p.temperature);
    expect(temps.length).toBeGreaterThan(0);
    for (const p of temps) {
      const at = Date.parse(p.temperature!.dateTime);
      expect(Math.abs(at - Date.now())).toBeLessThan(120_000);
    }

    // status, on the device's own (wrong) clock, says which clock the agent uses.
    const clock = (await status()).clock;
    expect(clock.state).toBe('gnss');
    expect(Math.abs(clock.offsetMs - (BEHIND_MS + lagMs))).toBeLessThan(3000);
    expect(clock.from).toBe('clock.synchronised = "no"');
    const text2 = await runCli(['status', '--config', cfg], { env: fakeClock });
    expect(text2.stdout).toMatch(/system clock:\s+not synchronised \(clock\.synchronised = "no"\); GNSS time is \+1[12] h \d+ min from it and is used/);
    // The last fix, on GNSS time, is seconds old, not "in 11 h 59 min" from the system clock.
    expect(text2.stdout).toMatch(/^last fix: +T1 .* \((\d+ s|[1-4] min \d+ s) ago\)$/m);
    // And /metrics, for monitoring.
    const healthPort = Number(/"health":(\d+)/.exec(fx.daemon.output())![1]);
    const metrics = await (await fetch(`http://127.0.0.1:${healthPort}/metrics`)).text();
    expect(metrics).toMatch(/^telematics_clock_state\{state="gnss"\} 1$/m);
    expect(metrics).toMatch(/^telematics_clock_state\{state="synchronised"\} 0$/m);
    const offsetS = Number(/^telematics_clock_gnss_offset_seconds (\S+)$/m.exec(metrics)![1]);
    expect(Math.abs(offsetS * 1000 - (BEHIND_MS + lagMs))).toBeLessThan(3000);
    expect(metrics).toMatch(/^telematics_clock_held_readings 0$/m);

    // A driver's milestone of "now", typed on the device: at GNSS time, placed at the last fix
    // (which is seconds old, not 12 h in the future), not half a day early.
    const m = await runCli(['milestone', '--load', 'L1', '--code', 'X6', '--config', cfg], { env: fakeClock });
    expect(m.code, m.stderr).toBe(0);
    expect(m.stderr).toMatch(/note: the system clock is not synchronised \(clock\.synchronised = "no"\): now is the running agent's GNSS time, \+1[12] h \d+ min from the system clock/);
    await waitFor(() => fx.sandbox.milestones.length === 1, 15_000, 'the milestone');
    const body = fx.sandbox.milestones[0]!.body;
    expect(Math.abs(Date.parse(body.time.dateTime) - Date.now())).toBeLessThan(30_000);
    expect(body.eventState).toBe('IL');
  }, 90_000);
});
