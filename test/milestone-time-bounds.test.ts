/**
 * How old a typed milestone time may be, and what the daemon says of a milestone it sends
 * without a place: the real CLI bin, the fleet link's command handler and the driver page's
 * action against a real buffer file, and the real daemon with the real sandbox. The failures
 * these guard against: `--time 1970-01-01T00:00Z`, a year typo (2016 for 2026), 1900 and an
 * appointment in 9999 were all recorded and delivered; a milestone typed with `-05:00` and no
 * fix went out in UTC-5 while the log said "in the device's zone".
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { type Config, configSchema } from '../src/config/schema.js';
import { Commands } from '../src/fleet/commands.js';
import { formatTime } from '../src/geo/timezone.js';
import { createLogger } from '../src/log.js';
import { perform } from '../src/ui/actions.js';
import { agentConfig, daemonFixture, runCli, startDaemon, waitFor, cliFixture } from './helpers.js';

const CHICAGO = { lat: 41.8781, lon: -87.6298 };
const UTC_DEVICE = { TZ: 'UTC' };
const DAY_MS = 86_400_000;
/** `2026-10-12T09:41:00Z`: an instant as typed. */
const typed = (ms: number) => new Date(Math.floor(ms / 60_000) * 60_000).toISOString().replace('.000Z', 'Z');

describe('a typed milestone time older than a load can be', () => {
  const fx = cliFixture();
  let config: Config;
  beforeEach(() => {
    config = configSchema.parse({ api: { scac: 'ABCD' }, sources: [{ type: 'simulator', resource_id: 'T1' }] });
    fx.withBuffer((s) => {
      s.startLoad({
        loadNumber: 'L-1001',
        resourceId: 'T1',
        resourceType: 'Truck',
        stops: [{ sequence: 1, type: 'delivery', latitude: CHICAGO.lat, longitude: CHICAGO.lon }],
        nowMs: Date.now() - DAY_MS,
      });
      s.insertReadings([{ resourceId: 'T1', timeMs: Date.now() - 60_000, lat: CHICAGO.lat, lon: CHICAGO.lon }]);
    });
  });

  const milestone = (args: string[]) => runCli(['milestone', '--load', 'L-1001', ...args, '--config', fx.cfg], { env: UTC_DEVICE });
  const recorded = () => fx.withBuffer((s) => s.listMilestones('L-1001'));

  it.each([
    ['the epoch', ['--code', 'X6', '--stop', '1', '--force', '--time', '1970-01-01T00:00Z'], '1970-01-01T00:00:00Z'],
    ['a year typo', ['--code', 'X6', '--stop', '1', '--force', '--time', '2016-11-26T08:00Z'], '2016-11-26T08:00:00Z'],
    ['1900, without an offset (read in the zone of the stop)', ['--code', 'X6', '--stop', '1', '--force', '--time', '1900-01-01T00:00'], '1900-01-01T0'],
    ['an appointment in the year 9999', ['--code', 'AB', '--stop', '1', '--time', '9999-12-31T23:59Z'], '9999-12-31T23:59:00Z'],
  ])('%s: refused (65) naming --time, even with --force; nothing recorded', async (_what, args, instant) => {
    const r = await milestone(args);
    expect(r.code, r.stderr).toBe(65);
    expect(r.stderr).toContain(`error: --time ${instant}`);
    expect(r.stderr).toMatch(/2025-01-01|a year ahead/);
    expect(recorded()).toEqual([]);
  });

  it('older than sources_time.max_past_days (30): refused (65) naming --time and the setting; --force records it, with a warning', async () => {
    const at = typed(Date.now() - 45 * DAY_MS);
    const refused = await milestone(['--code', 'X6', '--stop', '1', '--time', at]);
    expect(refused.code).toBe(65);
    expect(refused.stderr).toContain(`error: --time ${at} is 45 days before this device's clock, more than sources_time.max_past_days (30)`);
    expect(refused.stderr).toContain('--force');
    expect(recorded()).toEqual([]);
    const forced = await milestone(['--code', 'X6', '--stop', '1', '--force', '--time', at]);
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stderr).toContain(`warning: --time ${at} is 45 days before this device's clock (sources_time.max_past_days = 30); recorded anyway (--force)`);
    expect(recorded().map((m) => Date.parse(String((m.body.time as { dateTime: string }).dateTime)))).toEqual([Date.parse(at)]);
  });

  it('within max_past_days: recorded, without a word about its age', async () => {
    const r = await milestone(['--code', 'X6', '--stop', '1', '--time', typed(Date.now() - 10 * DAY_MS)]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe('');
  });

  it("the fleet link's milestone and the driver's page: the same rule (they cannot force)", () => {
    const reply = fx.withBuffer(
      (store) =>
        new Commands(
          store,
          () => config,
          () => 65_536,
        ).handle('milestone', Buffer.from(JSON.stringify({ commandId: 'm1', loadNumber: 'L-1001', eventCode: 'X6', time: '2016-11-26T08:00Z' }))).reply,
    );
    expect(reply).toMatchObject({ ok: false, status: 65, message: expect.stringContaining('2016-11-26T08:00:00Z is before 2025-01-01') });
    const old = typed(Date.now() - 45 * DAY_MS);
    const page = fx.withBuffer((store) =>
      perform(
        { store, config, sender: { status: undefined as never, kick: async () => {} }, ingest: { fixes: { get: () => undefined } }, clockKeeper: { gnss: { commandNow: () => Date.now() } } },
        { load: 'L-1001', stop: '1', action: 'arrive', time: formatTime(new Date(Date.parse(old)), 'America/Chicago', 'local').dateTime.slice(0, 16) },
        createLogger({ level: 'silent', destination: process.stdout }),
      ),
    );
    // In the driver's words: the page has no --force to offer, and no settings to name.
    expect(page).toMatchObject({ ok: false, message: 'That time is 45 days ago: the page takes times up to 30 days back. Check the date; an older correction goes through dispatch.' });
    expect(recorded()).toEqual([]);
  });
});

describe('the daemon sends a milestone without a place in the zone it was recorded in, and says so', () => {
  // SIGTERM, not SIGKILL: the daemon stops its sources on the way out.
  const fx = daemonFixture({ stop: 'SIGTERM' });

  it('typed with -05:00, no fix anywhere: the log names UTC-5, not the device zone', async () => {
    const { url } = await fx.sandbox.start();
    const cfg = agentConfig(fx.tmp.dir, url);
    fx.daemon = startDaemon(['--config', cfg], UTC_DEVICE);
    expect((await runCli(['load', 'start', 'L-1001', '--resource', 'T9', '--config', cfg])).code).toBe(0);
    const at = formatTime(new Date(Math.floor((Date.now() - 600_000) / 1000) * 1000), 'Etc/GMT+5', 'local')
      .dateTime.replace(/\.000/, '')
      .replace(/:(\d\d)$/, '$1');
    const m = await runCli(['milestone', '--load', 'L-1001', '--code', 'X6', '--time', at, '--config', cfg], { env: UTC_DEVICE });
    expect(m.code, m.stderr).toBe(0);
    await waitFor(() => fx.sandbox.milestones.length === 1, 10_000, 'the milestone at the sandbox');
    expect((fx.sandbox.milestones[0].body as { time: unknown }).time).toMatchObject({ timeZoneCode: 'UTC-5', timeZoneOffset: 'UTC-5' });
    const line = await waitFor(
      () =>
        fx
          .daemon!.output()
          .split('\n')
          .find((l) => l.includes('goes out without a city and state')),
      5000,
      'the daemon logging why',
    );
    expect(line).not.toContain("device's zone");
    expect(line).toContain('in the zone it was recorded in (UTC-5)');
  });
});
