/**
 * Time and place, as an outside probe found them wrong, with the real daemon and CLI bin
 * against a real buffer file and the sandbox:
 * - a first GNSS fix with a wrong date (a week rollover the wrong way, 19.6 years ahead, or a
 *   single garbled RMC date) set GNSS time ahead while the clock was not synchronised: a
 *   milestone of "now" went out years in the future; a garbled fix kept as a reading stayed the
 *   last fix for good when the clock turned synchronised before two fixes agreed;
 * - after the system clock stepped back, the newest fix is dated after "now": a milestone
 *   said its zone was "of the last fix of T1, -3570 s old", and `status --json` gave a
 *   negative `ageS`;
 * - a malformed offset (`+5:30`, `+0530x`) got the message about every form a time may take,
 *   not what was wrong with this one;
 * - an offset that is not the zone of the typed place then (-08:00 typed for Chicago, which
 *   is at -06:00 that day) went out silently, at an instant two hours off what was meant.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { Store } from '../src/buffer/store.js';
import { agentConfig, cliFixture, daemonFixture, fakeClockEnv, findLibfaketime, runCli, startDaemon, waitFor, writeFile } from './helpers.js';
import { nmeaFrom } from './nmea-lines.js';

const LIBFAKETIME = findLibfaketime();
const CHICAGO = { lat: 41.8781, lon: -87.6298 };

const fx = daemonFixture();

const DAY = 86_400_000;
/** 1024 GPS weeks: a receiver resolving its week number the wrong way is this far off. */
const ROLLOVER = 1024 * 7 * DAY;

/** One epoch of `nmeaFrom` at `atMs` moved by `offMs` (whole days: only the RMC date is wrong). */
function garbled(atMs: number, offMs: number): string {
  return nmeaFrom(atMs + offMs, 1).text;
}

/**
 * A daemon's set-up for a garbled first fix: the first epoch's RMC a year ahead (less than 512
 * weeks: kept as a reading), a GGA-only epoch carrying its date, then `good` true epochs from
 * t0 (a few seconds ahead, so load L1's window takes them); the clock not synchronised, and
 * the earlier run's fix of T1 an hour before t0 (kept without a load, and good). The buffer's
 * reading times, in id order, by `times()`.
 */
async function garbledRun(good: number, opts: Parameters<typeof agentConfig>[3]) {
  const { url } = await fx.sandbox.start();
  const t0 = Math.ceil(Date.now() / 1000) * 1000 + 3000;
  const gga = nmeaFrom(t0 - 1000, 1).text.split('\r\n')[0];
  const fixes = writeFile(fx.tmp.dir, 'fixes.nmea', `${garbled(t0 - 2000, 365 * DAY)}${gga}\r\n${nmeaFrom(t0, good).text}`);
  const cfg = agentConfig(fx.tmp.dir, url, `[clock]\nsynchronised = "no"\n[[sources]]\ntype = "nmea"\nresource_id = "T1"\ndevice = "${fixes}"\n`, opts);
  expect((await runCli(['load', 'start', 'L1', '-r', 'T1', '--config', cfg])).code).toBe(0);
  const before = Store.open(join(fx.tmp.dir, 'buffer.db'));
  before.insertReadings([{ resourceId: 'T1', timeMs: t0 - 3_600_000, lat: 41.7, lon: -87.7 }], true, ['nmea:T1']);
  before.close();
  const times = () => {
    const db = new Database(join(fx.tmp.dir, 'buffer.db'), { readonly: true });
    try {
      return (db.prepare('SELECT time_ms AS t FROM readings ORDER BY id').all() as Array<{ t: number }>).map((r) => r.t);
    } finally {
      db.close();
    }
  };
  return { t0, cfg, times };
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

describe('a garbled first fix kept as a reading is set aside once GNSS time is taken', () => {
  it('an RMC a year ahead and the GGA-only epoch carrying its date: not the last fix, not in the traces; the earlier run untouched', async () => {
    const { t0, cfg, times } = await garbledRun(8, { traces: '*/2 * * * * *', sampling: 1 });
    fx.daemon = startDaemon(['--config', cfg]);
    await fx.daemon.started();
    const status = async () => JSON.parse((await runCli(['status', '--json', '--config', cfg])).stdout) as { clock: { state: string }; lastFixes: Array<{ timeMs: number; aheadS?: number }> };
    await waitFor(async () => (await status()).clock.state === 'gnss', 15_000, 'the agent on GNSS time');
    const points = () => fx.sandbox.traces.flatMap((t) => t.body.traces.map((p) => Date.parse(p.time.dateTime)));
    await waitFor(() => points().includes(t0 + 7000), 20_000, 'the last good fix in the traces');
    await waitFor(async () => (await status()).lastFixes[0]?.timeMs === t0 + 7000, 15_000, 'the last good fix as the last fix');

    // No point of the garbled date went out; the good ones did.
    expect(points().filter((ms) => ms > Date.now() + 60_000)).toEqual([]);
    expect(points()).toContain(t0);
    const s = await status();
    expect(s.lastFixes).toHaveLength(1);
    expect(s.lastFixes[0]!.aheadS).toBeUndefined();
    // Said once, with the source, the reading's time and GNSS time; counted with the drops.
    const out = fx.daemon.output();
    expect(out.match(/reading\(s\) of this run set aside/g)).toHaveLength(1);
    expect(out).toMatch(/"setAside":2,.*time: nmea:T1's reading of T1 at \d{4}-\S+ is 365 days after GNSS time 20\d\d-\S+ \(run up \d+ s\): a garbled date, set aside/);
    expect((await runCli(['status', '--config', cfg])).stdout).toMatch(/dropped:\s+2 readings \(garbled date\)/);
    expect(times()[0]).toBe(t0 - 3_600_000);
    expect(times().filter((ms) => ms > Date.now() + 60_000)).toEqual([]);
  }, 60_000);
});

describe('a garbled first fix is set aside once the clock turns synchronised, before two fixes agree', () => {
  it('an RMC a year ahead and the GGA-only epoch carrying its date go when a reload says the clock is synchronised; the good fix and the earlier run stay', async () => {
    // One good epoch only: it disagrees with the garbled RMC, so no GNSS time is taken.
    const { t0, cfg, times } = await garbledRun(1, { sampling: 1 });
    fx.daemon = startDaemon(['--config', cfg]);
    await fx.daemon.started();
    const status = async () => JSON.parse((await runCli(['status', '--json', '--config', cfg])).stdout) as { clock: { state: string }; lastFixes: Array<{ timeMs: number }> };
    await waitFor(() => times().includes(t0), 15_000, 'the good fix in the buffer');
    expect((await status()).clock.state).toBe('unsynchronised');
    expect(times().filter((ms) => ms > Date.now() + 60_000)).toHaveLength(2);

    // A time daemon has set the clock: the answer turns synchronised (here by the config and a reload).
    writeFile(fx.tmp.dir, 'agent.toml', readFileSync(cfg, 'utf8').replace('synchronised = "no"', 'synchronised = "yes"'));
    fx.daemon.child.kill('SIGHUP');
    await waitFor(() => /reading\(s\) of this run set aside/.test(fx.daemon!.output()), 15_000, 'the set-aside');
    const out = fx.daemon.output();
    expect(out.match(/reading\(s\) of this run set aside/g)).toHaveLength(1);
    expect(out).toMatch(/"setAside":2,"clockTime":.*time: nmea:T1's reading of T1 at \d{4}-\S+ is 365 days after the synchronised clock 20\d\d-\S+ \(run up \d+ s\): a garbled date, set aside/);
    expect(times()).toEqual([t0 - 3_600_000, t0]);
    const s = await status();
    expect(s.clock.state).toBe('synchronised');
    expect(s.lastFixes.map((f) => f.timeMs)).toEqual([t0]);
    expect((await runCli(['status', '--config', cfg])).stdout).toMatch(/dropped:\s+2 readings \(garbled date\)/);
  }, 60_000);
});

describe('a fix dated after now, the system clock stepped back an hour', () => {
  const cli = cliFixture();
  it('a milestone says the fix is ahead of the clock, never a negative age; status gives age 0 and says so', async (ctx) => {
    if (!LIBFAKETIME) {
      console.log('skipped: libfaketime not found under /usr/lib/*/faketime/ (apt-get install faketime)');
      ctx.skip();
    }
    expect((await runCli(['load', 'start', 'L1', '-r', 'T1', '--config', cli.cfg])).code).toBe(0);
    const fixMs = Math.floor(Date.now() / 1000) * 1000 - 30_000;
    cli.withBuffer((s) => s.insertReadings([{ resourceId: 'T1', timeMs: fixMs, lat: CHICAGO.lat, lon: CHICAGO.lon, source: 'gpsd' }], true));
    // NTP stepped the clock back an hour after that fix (it had been running ahead).
    const stepped = { TZ: 'UTC', ...fakeClockEnv(LIBFAKETIME!, writeFile(cli.dir, 'faketime', '-1h\n')) };

    const m = await runCli(['milestone', '--load', 'L1', '--code', 'X6', '--config', cli.cfg], { env: stepped });
    expect(m.code, m.stderr).toBe(0);
    const said = m.stdout + m.stderr;
    expect(said).not.toMatch(/-\d+ s old/);
    expect(said).not.toMatch(/is 35\d\d s old/);
    expect(said).toMatch(/the last fix of T1, dated 35\d\d s after this device's clock \(it stepped back, or runs behind\)/);

    const json = JSON.parse((await runCli(['status', '--json', '--config', cli.cfg], { env: stepped })).stdout) as { lastFixes: Array<{ ageS: number; aheadS?: number }> };
    expect(json.lastFixes[0]!.ageS).toBe(0);
    expect(json.lastFixes[0]!.aheadS).toBeGreaterThan(3500);
    expect(json.lastFixes[0]!.aheadS).toBeLessThan(3600);
    const text = (await runCli(['status', '--config', cli.cfg], { env: stepped })).stdout;
    expect(text).toMatch(/^last fix: +T1 41\.87810, -87\.62980 at \S+ \S+Z \(dated 35\d\d s after this device's clock \(it stepped back, or runs behind\)\)$/m);
  });
});

describe('a malformed UTC offset in milestone --time says what is wrong with it', () => {
  const cli = cliFixture('[sources_time]\nmax_past_days = 3650\n');
  const milestone = (time: string) => runCli(['milestone', '--load', 'L1', '--code', 'X6', '--city', 'Chicago', '--state', 'IL', '--time', time, '--config', cli.cfg], { env: { TZ: 'UTC' } });
  it.each([
    ['2026-11-23T10:00:00+5:30', 'the UTC offset "+5:30" in "2026-11-23T10:00:00+5:30" needs two digits for its hours: 2026-11-23T10:00:00+05:30'],
    ['2026-11-23T10:00:00-6', 'the UTC offset "-6" in "2026-11-23T10:00:00-6" needs two digits for its hours: 2026-11-23T10:00:00-06:00'],
    ['2026-11-23T10:00:00-0:30', 'the UTC offset "-0:30" in "2026-11-23T10:00:00-0:30" needs two digits for its hours: 2026-11-23T10:00:00-00:30'],
    ['2026-11-23T10:00:00+0530x', 'the UTC offset "+0530x" in "2026-11-23T10:00:00+0530x" has "x" after it: 2026-11-23T10:00:00+05:30'],
    ['2026-11-23T10:00:00+05:3', 'the UTC offset "+05:3" in "2026-11-23T10:00:00+05:3" needs two digits for its minutes, such as +05:30'],
    ['2026-11-23T10:00:00+25:00', 'the UTC offset "+25:00" in "2026-11-23T10:00:00+25:00" has hours beyond 23 (offsets in use run from -12:00 to +14:00)'],
    ['2026-11-23T10:00:00 UTC-6', 'the UTC offset "UTC-6" in "2026-11-23T10:00:00 UTC-6" is written after UTC: give it alone, 2026-11-23T10:00:00-06:00'],
    ['2026-11-23T10:00:00 CST', 'the UTC offset "CST" in "2026-11-23T10:00:00 CST" is a zone\'s name, not an offset: give the offset (such as 2026-11-23T10:00:00-06:00) or the time in UTC with Z'],
  ])('%s: refused (65), naming the fault', async (time, why) => {
    expect((await runCli(['load', 'start', 'L1', '-r', 'T1', '--config', cli.cfg])).code).toBe(0);
    const r = await milestone(time);
    expect(r.code).toBe(65);
    expect(r.stderr).toContain(`--time: ${why}`);
    expect(cli.withBuffer((s) => s.listMilestones())).toEqual([]);
  });

  it('load start --from, read by the same reader, says the same', async () => {
    const r = await runCli(['load', 'start', 'L1', '-r', 'T1', '--from', '2026-11-23T10:00:00+5:30', '--config', cli.cfg]);
    expect(r.code).toBe(65);
    expect(r.stderr).toContain('--from: the UTC offset "+5:30" in "2026-11-23T10:00:00+5:30" needs two digits for its hours: 2026-11-23T10:00:00+05:30');
  });
});

describe('an offset typed that is not the zone of the typed place then: warned, not refused', () => {
  const cli = cliFixture('[sources_time]\nmax_past_days = 3650\n');
  const milestone = (place: string[], time: string) => runCli(['milestone', '--load', 'L1', '--code', 'X6', ...place, '--time', time, '--force', '--config', cli.cfg], { env: { TZ: 'UTC' } });
  const bodyTime = (stdout: string) => {
    const id = Number(/^milestone (\d+) /.exec(stdout)![1]);
    return (cli.withBuffer((s) => s.listMilestones().find((m) => m.id === id)!.body) as { time: { dateTime: string } }).time.dateTime;
  };

  it('-08:00 for Chicago, IL (-06:00 that day): the same instant in Chicago, with a warning naming both offsets', async () => {
    expect((await runCli(['load', 'start', 'L1', '-r', 'T1', '--config', cli.cfg])).code).toBe(0);
    const r = await milestone(['--city', 'Chicago', '--state', 'IL'], '2026-11-23T10:00:00-08:00');
    expect(r.code, r.stderr).toBe(0);
    expect(bodyTime(r.stdout)).toBe('2026-11-23T12:00:00.000-06:00');
    expect(r.stderr).toContain(
      'warning: --time 2026-11-23T10:00:00-08:00 has the offset -08:00, but the zone of Chicago, IL (America/Chicago) is at -06:00 then: sent as the same instant there, 2026-11-23T12:00:00-06:00; give -06:00 (2026-11-23T10:00:00-06:00) if 10:00 there was meant',
    );
  });

  it('-08:00 for KS, whose zones are -06:00 and -07:00 that day: sent at the offset typed, with a warning', async () => {
    expect((await runCli(['load', 'start', 'L1', '-r', 'T1', '--config', cli.cfg])).code).toBe(0);
    const r = await milestone(['--city', 'Smallville', '--state', 'KS'], '2026-11-23T10:00:00-08:00');
    expect(r.code, r.stderr).toBe(0);
    expect(bodyTime(r.stdout)).toBe('2026-11-23T10:00:00.000-08:00');
    expect(r.stderr).toContain('warning: --time 2026-11-23T10:00:00-08:00 has the offset -08:00, which no zone of KS has then (America/Chicago -06:00, America/Denver -07:00): sent at the offset typed');
  });

  it('the offset of the place, Z, or no offset: no such warning', async () => {
    expect((await runCli(['load', 'start', 'L1', '-r', 'T1', '--config', cli.cfg])).code).toBe(0);
    for (const time of ['2026-11-23T10:00:00-06:00', '2026-11-23T10:00:00', '2026-11-23T16:00:00-0600', '2026-11-23T22:00:00Z']) {
      const r = await milestone(['--city', 'Chicago', '--state', 'IL'], time);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).not.toContain('has the offset');
    }
  });
});
