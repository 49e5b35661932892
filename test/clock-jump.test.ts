/**
 * A wall clock that jumps must not destroy data. Measured before the agent judged age
 * against more than the wall clock: with the clock 31 days ahead while offline, every
 * buffered reading (really a minute old) was dropped by buffer.max_age_days, for good.
 *
 * The real daemon runs under libfaketime with its wall clock read from a file we rewrite
 * (the monotonic clock stays real); its exec source runs without it, so its readings carry
 * the real time, as GPS time would. The service is down while the clock jumps, so readings
 * pile up in the buffer; then it comes back and every one must arrive.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { agentConfig, fakeClockEnv, findLibfaketime, runCli, startDaemon, waitFor, writeFile, daemonFixture } from './helpers.js';
import { HIGHEST_READING_ID } from '../src/buffer/ledger.js';

const LIBFAKETIME = findLibfaketime();

const fx = daemonFixture();

interface Status {
  queue: { readings: number };
  dropped: Record<string, number>;
  sources: Array<{ name: string; timeRejected?: number }>;
  clockJump: { ms: number } | null;
}

describe('a clock that jumps 31 days ahead', () => {
  it('drops no reading for its age, at the jump or after a restart, and accepts readings with the real time; all arrive', async (ctx) => {
    if (!LIBFAKETIME) {
      console.log('skipped: libfaketime not found under /usr/lib/*/faketime/ (apt-get install faketime)');
      ctx.skip();
    }
    const { url } = await fx.sandbox.start();
    fx.sandbox.setFaults({ failureRate: 1 });
    const stopFile = join(fx.tmp.dir, 'stop-readings');
    // A reading every 100 ms stamped with the real time, until told to stop.
    const script = writeFile(
      fx.tmp.dir,
      'readings.mjs',
      `import { existsSync } from 'node:fs';
let i = 0;
setInterval(() => {
  if (existsSync(${JSON.stringify(stopFile)})) return;
  i += 1;
  process.stdout.write(JSON.stringify({ resourceId: 'T1', time: new Date().toISOString(), latitude: 41.8, longitude: -87.6 + (i % 1000) * 1e-5 }) + '\\n');
}, 100);
`,
    );
    const cfg = agentConfig(
      fx.tmp.dir,
      url,
      `[[sources]]
type = "exec"
name = "gps"
command = [${JSON.stringify(process.execPath)}, ${JSON.stringify(script)}]
# The adapter reads the real clock: only the agent's is wrong.
env = { LD_PRELOAD = "" }
`,
      // Every 15 s, not every second: a step that lands in the last 2 ms before a run reaches
      // node-cron before the guard in src/cron.ts, and node-cron then walks each run skipped
      // (31 days of seconds: minutes of a stalled event loop; of quarter minutes: seconds).
      { traces: '*/15 * * * * *', sampling: 0 },
    );
    expect((await runCli(['load', 'start', 'L1', '-r', 'T1', '--config', cfg])).code).toBe(0);

    const clockFile = writeFile(fx.tmp.dir, 'faketime', '+0\n');
    const fakeClock = fakeClockEnv(LIBFAKETIME!, clockFile);
    const run = () => {
      const d = startDaemon(['--config', cfg], fakeClock);
      fx.daemon = d;
      return d;
    };
    const status = async (): Promise<Status> => {
      const r = await runCli(['status', '--json', '--config', cfg]);
      expect(r.stdout, r.stderr).not.toBe('');
      return JSON.parse(r.stdout) as Status;
    };
    const droppedForAge = (s: Status) => s.dropped.readings_dropped_age ?? 0;
    const timeRejected = (s: Status) => s.sources.find((x) => x.name === 'gps')?.timeRejected ?? 0;

    const d = run();
    await waitFor(async () => (await status()).queue.readings >= 30, 20_000, '30 readings buffered');

    // The clock jumps; a reload applies the limits at once.
    writeFileSync(clockFile, '+31d\n');
    const before = (await status()).queue.readings;
    d.child.kill('SIGHUP');
    await waitFor(() => d.output().includes('configuration reloaded'), 10_000, 'the reload');
    expect(d.output()).toMatch(/"msg":"system clock jumped \+31 d 0 h since the last check: no reading is dropped for its age now/);
    // Readings with the real time still come in, though the wall clock calls them 31 days old.
    const after = await waitFor(
      async () => {
        const s = await status();
        return s.queue.readings >= before + 20 ? s : undefined;
      },
      15_000,
      'readings after the jump',
    );
    expect(droppedForAge(after)).toBe(0);
    expect(timeRejected(after)).toBe(0);
    expect(after.clockJump?.ms).toBeGreaterThan(30 * 86_400_000);

    // A restart with the clock still 31 days ahead: the age limit at start drops nothing.
    expect(await d.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    const kept = (await status()).queue.readings;
    const again = run();
    await again.started('the restart');
    const restarted = await waitFor(
      async () => {
        const s = await status();
        return s.queue.readings >= kept + 20 ? s : undefined;
      },
      15_000,
      'readings after the restart',
    );
    expect(droppedForAge(restarted)).toBe(0);
    expect(timeRejected(restarted)).toBe(0);
    expect(again.output()).not.toContain('readings older than buffer.max_age_days dropped');

    // The service comes back: every reading ever committed arrives, none missing.
    writeFileSync(stopFile, '');
    fx.sandbox.setFaults({ failureRate: 0 });
    await waitFor(async () => (await status()).queue.readings === 0 && fx.sandbox.stats.tracePoints > 0, 30_000, 'the backlog delivered');
    expect(await again.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    const db = new Database(join(fx.tmp.dir, 'buffer.db'), { readonly: true });
    const seq = db.prepare(HIGHEST_READING_ID).pluck().get() as number;
    db.close();
    const ids = new Set(fx.sandbox.traces.flatMap((t) => t.body.traces.map((p) => Number(p.references![0].value.split('-').pop()))));
    expect(seq).toBeGreaterThanOrEqual(kept + 20);
    expect([...ids].sort((a, b) => a - b)).toEqual(Array.from({ length: seq }, (_, i) => i + 1));
    expect(droppedForAge(await status())).toBe(0);
  }, 120_000);
});
