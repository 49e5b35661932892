/**
 * A wall clock stepped back while delivery waits out a backoff must not stretch the wait.
 * Measured before deadlines ran on the monotonic clock: with the service down and a backlog
 * waiting, a 1 h step back gave no request for as long as the run lasted (the next attempt was
 * an hour away on the new clock), and `status` showed the next attempt "1 min 28 s ago".
 *
 * The real daemon runs under libfaketime with its wall clock read from a file the test
 * rewrites (the monotonic clock stays real); the sandbox answers its first request 429 with
 * Retry-After: 5, the clock steps back 1 h during the wait, and the milestone must arrive
 * about 5 s after the 429, not an hour later.
 */
import { writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { agentConfig, fakeClockEnv, findLibfaketime, runCli, startDaemon, waitFor, writeFile, daemonFixture } from './helpers.js';

const LIBFAKETIME = findLibfaketime();
const RETRY_AFTER_S = 5;
/** A retry's own delay on top of Retry-After: the sender's poll, a loaded machine. */
const MARGIN_MS = 2500;

const fx = daemonFixture();

describe('a wall clock stepped back during a 429 backoff', () => {
  it('delays the milestone by no more than the Retry-After, shows the next attempt ahead, and logs the step', async (ctx) => {
    if (!LIBFAKETIME) {
      console.log('skipped: libfaketime not found under /usr/lib/*/faketime/ (apt-get install faketime)');
      ctx.skip();
    }
    const { url } = await fx.sandbox.start();
    fx.sandbox.setFaults({ throttleNext: 1, retryAfter: String(RETRY_AFTER_S) });
    const cfg = agentConfig(fx.tmp.dir, url);
    const clockFile = writeFile(fx.tmp.dir, 'faketime', '+0\n');
    const fakeClock = fakeClockEnv(LIBFAKETIME!, clockFile);
    expect((await runCli(['load', 'start', 'L1', '-r', 'T1', '--config', cfg])).code).toBe(0);
    fx.daemon = startDaemon(['--config', cfg], fakeClock);
    await fx.daemon!.started('the start');

    const m = await runCli(['milestone', '--load', 'L1', '--code', 'X6', '--lat', '41.9', '--lon', '-87.7', '--config', cfg]);
    expect(m.code, m.stderr).toBe(0);
    // The backoff is set when the daemon has the answer and logs the failure.
    await waitFor(() => fx.sandbox.stats.faults.throttled === 1 && fx.daemon!.output().includes('"msg":"delivery failed'), 15_000, 'the 429');
    const throttledAt = Date.now();

    // An hour back, a moment into the 5 s wait.
    writeFileSync(clockFile, '-1h\n');
    // The daemon looks at the clock every second, and writes its state row when it saw a step.
    await new Promise((r) => setTimeout(r, 1200));

    // `status`, on the same (stepped) clock, shows the next attempt ahead, within the Retry-After.
    const st = await runCli(['status', '--json', '--config', cfg], { env: fakeClock });
    const shown = (JSON.parse(st.stdout) as { delivery: { nextAttemptMs: number | null } | null }).delivery?.nextAttemptMs ?? null;
    if (fx.sandbox.milestones.length === 0) {
      expect(shown).not.toBeNull();
      const ahead = shown! - (Date.now() - 3_600_000);
      expect(ahead).toBeGreaterThan(-1000);
      expect(ahead).toBeLessThanOrEqual(RETRY_AFTER_S * 1000);
    }

    await waitFor(() => fx.sandbox.milestones.length === 1, RETRY_AFTER_S * 1000 + MARGIN_MS + 2000, 'the milestone');
    const delayMs = Date.now() - throttledAt;
    expect(delayMs).toBeGreaterThanOrEqual(RETRY_AFTER_S * 1000 - 300);
    expect(delayMs).toBeLessThanOrEqual(RETRY_AFTER_S * 1000 + MARGIN_MS);
    expect(fx.daemon!.output()).toMatch(/"level":40,.*"msg":"system clock stepped -1 h 0 min/);
  });
});
