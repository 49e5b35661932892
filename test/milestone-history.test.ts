/**
 * A milestone typed after the event is placed where the truck was then, not where it is now
 * and not nowhere: from its readings while the buffer holds them, from the position history
 * once a push has delivered and purged them; only with no position within
 * milestones.max_fix_age_s of its time does it go without a city and state. The real CLI bin
 * against a real buffer file, and the real daemon (an exec source, the sandbox on port 0)
 * writing and pruning the history. The failure this guards against: a driver's X1 typed two
 * hours late went out without a place although the buffer knew where the truck had been.
 */
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { formatTime } from '../src/geo/timezone.js';
import type { Reading } from '../src/reading.js';
import { Sandbox } from '../src/sandbox/server.js';
import { agentConfig, type Daemon, runCli, startDaemon, TEST_KEY, TEST_SCAC, waitFor, writeFile, tempFixture } from './helpers.js';

/** Santiago de Querétaro (America/Mexico_City, UTC-6) and Hermosillo (America/Hermosillo, UTC-7). */
const QUERETARO = { lat: 20.5888, lon: -100.3899 };
const HERMOSILLO = { lat: 29.0729, lon: -110.9559 };
const UTC_DEVICE = { TZ: 'UTC' };
const HOUR = 3_600_000;

type Body = { eventCity?: string; eventState?: string; time: { dateTime: string; timeZoneCode: string; timeZoneOffset: string } };

const tmp = tempFixture();

const bodyOf = (id: number) => tmp.withBuffer((s) => s.listMilestones().find((m) => m.id === id)!.body as unknown as Body);
const idOf = (stdout: string) => Number(/^milestone (\d+) /.exec(stdout)![1]);
const isoZ = (ms: number) => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');

describe('a milestone typed after the event (CLI against a buffer file)', () => {
  let cfg: string;
  const now = Date.now();
  /** T1 in Querétaro three hours ago (a fix every 10 s for 5 minutes), in Hermosillo now. */
  beforeEach(() => {
    cfg = agentConfig(tmp.dir, 'http://127.0.0.1:9', '[milestones]\nmax_fix_age_s = 600\n');
    tmp.withBuffer((s) => {
      s.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: now - 4 * HOUR });
      const then: Reading[] = Array.from({ length: 30 }, (_, i) => ({ resourceId: 'T1', timeMs: now - 3 * HOUR + i * 10_000, ...QUERETARO }));
      s.insertReadings([...then, { resourceId: 'T1', timeMs: now - 30_000, ...HERMOSILLO }]);
    });
  });
  const milestone = (args: string[]) => runCli(['milestone', '--load', 'L1', ...args, '--config', cfg], { env: UTC_DEVICE });

  it('takes the place where the truck was at that time, from its readings still held', async () => {
    const eventMs = now - 3 * HOUR + 125_000; // 5 s from the fix at +120 s
    const r = await milestone(['--code', 'X1', '--time', isoZ(eventMs)]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe('');
    const body = bodyOf(idOf(r.stdout));
    expect(body).toMatchObject({ eventCity: 'Santiago de Querétaro', eventState: 'QE', time: formatTime(new Date(Math.floor(eventMs / 1000) * 1000), 'America/Mexico_City', 'local') });
    expect(r.stdout).toContain('(place: history)');
    expect(r.stdout).toMatch(/zone America\/Mexico_City \(of the position of T1 at \S+Z, [45] s from the milestone's time\)/);
  });

  it('a local --time is read once, in the zone of the last fix, and the same instant goes out in the zone of the place found', async () => {
    const eventMs = Math.floor((now - 3 * HOUR + 60_000) / 60_000) * 60_000 + 60_000;
    const typed = formatTime(new Date(eventMs), 'America/Hermosillo', 'local').dateTime.slice(0, 16);
    const r = await milestone(['--code', 'X1', '--time', typed]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(
      new RegExp(`^warning: --time ${typed} was read in the zone of the last fix of T1, \\d+ s old \\(America/Hermosillo\\); T1 was in America/Mexico_City then, and the same instant is sent in that zone\n$`),
    );
    const body = bodyOf(idOf(r.stdout));
    expect(body.eventCity).toBe('Santiago de Querétaro');
    expect(body.time).toEqual(formatTime(new Date(eventMs), 'America/Mexico_City', 'local'));
    expect(Date.parse(body.time.dateTime)).toBe(eventMs);
  });

  it('with no position within max_fix_age_s of its time: no city and state, in the zone of the last fix, and the warning says why', async () => {
    const r = await milestone(['--code', 'X1', '--time', formatTime(new Date(now - 90 * 60_000), 'America/Hermosillo', 'local').dateTime.slice(0, 16)]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(
      /^warning: no position for this milestone \(the last fix of T1 is 5[34]\d\d s from the milestone's time, and no position of T1 in its readings or history is that close to it \(milestones\.max_fix_age_s = 600\);.* it is recorded in the zone of the last fix of T1, \d+ s old \(America\/Hermosillo\) without a city and state/,
    );
    const body = bodyOf(idOf(r.stdout));
    expect(body.eventCity).toBeUndefined();
    expect(body.eventState).toBeUndefined();
    expect(body.time.timeZoneOffset).toBe('UTC-7');
  });
});

describe('the position history, end to end', () => {
  let sandbox: Sandbox;
  let daemon: Daemon | undefined;
  beforeEach(() => {
    sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
  });
  afterEach(async () => {
    await daemon?.stop('SIGTERM');
    daemon = undefined;
    await sandbox.stop();
  });

  it('the daemon writes it with the fixes and prunes it after keep_days; a milestone typed two hours late is placed from it once the readings are purged', async () => {
    const { url } = await sandbox.start();
    const now = Date.now();
    const then = Math.floor((now - 2 * HOUR) / 60_000) * 60_000 + 10_000; // three fixes in one minute
    // Three fixes in Querétaro stamped two hours ago (a gateway's backlog), then the truck in Hermosillo now.
    const script = writeFile(
      tmp.dir,
      'positions.mjs',
      `const lines = [
  ...[0, 1, 2].map((i) => ({ resourceId: 'T1', latitude: ${QUERETARO.lat}, longitude: ${QUERETARO.lon}, time: new Date(${then} + i * 1000).toISOString() })),
  ...[0, 1].map(() => ({ resourceId: 'T1', latitude: ${HERMOSILLO.lat}, longitude: ${HERMOSILLO.lon} })),
];
const parent = process.ppid;
let n = 0;
const timer = setInterval(() => {
  process.stdout.write(JSON.stringify(lines[n++]) + '\\n');
  if (n === lines.length) clearInterval(timer);
}, 100);
setInterval(() => { if (process.ppid !== parent) process.exit(0); }, 500);
`,
    );
    const source = `[[sources]]\ntype = "exec"\nname = "gps"\ncommand = [${JSON.stringify(process.execPath)}, ${JSON.stringify(script)}]\n`;
    const cfg = agentConfig(tmp.dir, url, `[milestones]\nmax_fix_age_s = 600\n[history]\ninterval_s = 60\nkeep_days = 7\n${source}`, { traces: '* * * * * *', sampling: 0 });
    tmp.withBuffer((s) => {
      s.startLoad({ loadNumber: 'L-QRO', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: now - 3 * HOUR });
      // A position of 20 days ago, older than keep_days.
      s.db.prepare('INSERT INTO positions (resource_id, t_s, lat_e5, lon_e5) VALUES (?, ?, ?, ?)').run('T1', Math.floor((now - 20 * 86_400_000) / 1000), 4_100_000, -8_750_000);
    });
    daemon = startDaemon(['--config', cfg], UTC_DEVICE);

    // Every reading delivered and purged: the buffer holds no reading to place it from.
    await waitFor(() => sandbox.stats.tracePoints >= 5, 20_000, 'the five positions at the sandbox');
    const query = <T>(sql: string) => {
      const db = new Database(tmp.buffer, { readonly: true, fileMustExist: true });
      try {
        return db.prepare(sql).all() as T[];
      } finally {
        db.close();
      }
    };
    await waitFor(() => (query<{ n: number }>('SELECT count(*) AS n FROM readings')[0].n === 0 ? true : undefined), 10_000, 'the delivered readings purged');
    // One position per minute of fixes (that of two hours ago, and now's), the one of 20 days ago pruned by the purge.
    const rows = await waitFor(
      () => {
        const all = query<{ t_s: number; lat_e5: number }>('SELECT t_s, lat_e5 FROM positions ORDER BY t_s');
        return all[0]?.lat_e5 === 4_100_000 ? undefined : all;
      },
      10_000,
      'the position of 20 days ago pruned',
    );
    expect(rows[0]).toEqual({ t_s: Math.floor(then / 1000), lat_e5: Math.round(QUERETARO.lat * 1e5) });
    expect(rows.filter((r) => r.lat_e5 === Math.round(QUERETARO.lat * 1e5))).toHaveLength(1);
    expect(rows.slice(1).every((r) => r.lat_e5 === Math.round(HERMOSILLO.lat * 1e5) && r.t_s >= Math.floor(now / 1000))).toBe(true);

    const r = await runCli(['milestone', '--load', 'L-QRO', '--code', 'X1', '--time', isoZ(then + 90_000), '--config', cfg], { env: UTC_DEVICE });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('at Santiago de Querétaro, QE (place: history)');
    await waitFor(() => sandbox.milestones.length === 1, 10_000, 'the milestone at the sandbox');
    const body = sandbox.milestones[0].body as Body;
    expect(body).toMatchObject({ eventCode: 'X1', eventCity: 'Santiago de Querétaro', eventState: 'QE', time: { timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' } });
    expect(Date.parse(body.time.dateTime)).toBe(Math.floor((then + 90_000) / 1000) * 1000);
  });
});
