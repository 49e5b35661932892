/**
 * The real daemon process under faults: kill -9 in the middle of a send, key rotation by
 * SIGHUP, SIGTERM while a request is in flight, and the dead-letter commands.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Store } from '../src/buffer/store.js';
import { TEST_KEY, agentConfig, runCli, startDaemon, waitFor, writeFile, type Daemon, daemonFixture } from './helpers.js';

const fx = daemonFixture();
// Recent: readings older than buffer.max_age_days would be dropped at start.
const T0 = Date.now() - 86_400_000;

function prefill(n: number): void {
  const store = Store.open(join(fx.tmp.dir, 'buffer.db'));
  store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 });
  store.insertReadings(Array.from({ length: n }, (_, i) => ({ resourceId: 'T1', timeMs: T0 + i * 1000, lat: 41.8, lon: -87.6 + i * 1e-5 })));
  store.close();
}
function daemon(cfg: string, env: NodeJS.ProcessEnv = {}): Daemon {
  const d = startDaemon(['--config', cfg], env);
  fx.daemon = d;
  return d;
}
const remaining = () => {
  const store = Store.open(join(fx.tmp.dir, 'buffer.db'));
  try {
    return store.counts();
  } finally {
    store.close();
  }
};

describe('daemon under faults', () => {
  it('kill -9 during a send, restart: everything delivered, duplicates bounded to one batch with the same key', async () => {
    const { url } = await fx.sandbox.start();
    prefill(3000);
    // The extra lines land in agentConfig's last table, [delivery].
    const cfg = agentConfig(fx.tmp.dir, url, 'max_traces_per_request = 200\ndrain_interval_ms = 0\n', { traces: '* * * * * *', sampling: 0 });
    fx.sandbox.setFaults({ latencyMs: 400 });
    const first = daemon(cfg);
    await waitFor(() => fx.sandbox.traces.length >= 3, 20_000, 'a few delivered requests');
    // A request is in flight now (each takes 400 ms): kill without warning.
    expect(await first.stop('SIGKILL')).toEqual({ code: null, signal: 'SIGKILL' });
    const receivedBefore = fx.sandbox.traces.length;
    fx.sandbox.setFaults({ latencyMs: 0 });
    daemon(cfg);
    await waitFor(() => remaining().readings === 0, 30_000, 'the rest delivered after the restart');
    const ids = fx.sandbox.traces.flatMap((t) => t.body.traces.map((p) => Number(p.references![0].value.split('-').pop())));
    expect(new Set(ids).size).toBe(3000);
    expect(ids.length - 3000).toBeLessThanOrEqual(200);
    expect(fx.sandbox.stats.duplicateTracePoints).toBe(ids.length - 3000);
    // A request re-sent after the crash is the same request: same key, so the service can tell.
    if (ids.length > 3000) expect(fx.sandbox.stats.duplicateRequests).toBeGreaterThanOrEqual(1);
    expect(receivedBefore).toBeGreaterThanOrEqual(3);
  }, 60_000);

  it('401 pauses without losing or dead-lettering anything; a fixed key and SIGHUP resume delivery', async () => {
    const { url } = await fx.sandbox.start();
    prefill(50);
    const cfg = agentConfig(fx.tmp.dir, url, '', { traces: '* * * * * *', sampling: 0 });
    writeFileSync(join(fx.tmp.dir, 'key'), 'revoked-key\n');
    const d = daemon(cfg);
    const paused = await waitFor(
      async () => {
        const r = await runCli(['status', '--json', '--config', cfg]);
        const s = JSON.parse(r.stdout);
        return s.delivery?.paused ? s : undefined;
      },
      15_000,
      'status showing the pause',
    );
    expect(paused.delivery.paused).toContain('HTTP 401');
    expect(paused.queue).toMatchObject({ readings: 50, deadLetters: 0 });
    const text = await runCli(['status', '--config', cfg]);
    expect(text.stdout).toMatch(/PAUSED:\s+service refuses our credentials or address \(HTTP 401\)/);

    // A bad new config is refused and the old one kept.
    const good = (await import('node:fs')).readFileSync(cfg, 'utf8');
    writeFileSync(cfg, `${good}\nnonsense = true\n`);
    d.child.kill('SIGHUP');
    await waitFor(() => d.output().includes('new configuration refused'), 5000, 'the refusal');
    expect(d.output()).toContain('nonsense: unknown key');
    writeFileSync(cfg, good);

    // The fixed key, and the log level raised to debug in the same reload.
    writeFileSync(join(fx.tmp.dir, 'key'), `${TEST_KEY}\n`);
    writeFileSync(cfg, `${good}\n[log]\nlevel = "debug"\n`);
    expect(d.output()).not.toContain('"level":20');
    d.child.kill('SIGHUP');
    await waitFor(() => remaining().readings === 0, 10_000, 'delivery after the reload');
    expect(fx.sandbox.stats.tracePoints).toBe(50);
    expect(d.output()).toContain('configuration reloaded');
    await waitFor(() => d.output().includes('"level":20'), 5000, 'debug lines after the reload');
    expect(d.output()).toMatch(/"level":20,.*"msg":"trace request delivered"/);
    expect(d.output()).not.toContain(TEST_KEY);
  }, 40_000);

  it('SIGTERM lets the in-flight request finish, commits, and exits 0', async () => {
    const { url } = await fx.sandbox.start();
    prefill(100);
    const cfg = agentConfig(fx.tmp.dir, url, '', { traces: '* * * * * *', sampling: 0 });
    fx.sandbox.setFaults({ latencyMs: 1500 });
    const d = daemon(cfg);
    await waitFor(() => fx.sandbox.stats.requests >= 1, 15_000, 'a request in flight');
    // Exit 0 by itself (stop() would SIGKILL after 15 s), with the request answered, not
    // abandoned at delivery.shutdown_timeout_s.
    expect(await d.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    expect(d.output()).not.toContain('in-flight request abandoned');
    // The request that was in flight was answered and acknowledged: its readings are gone, the rest kept.
    expect(fx.sandbox.traces.length).toBe(1);
    expect(remaining().readings).toBe(100 - fx.sandbox.stats.tracePoints);
  }, 30_000);

  it('dead-letter list and retry from the command line', async () => {
    const { url } = await fx.sandbox.start();
    prefill(10);
    const cfg = agentConfig(fx.tmp.dir, url, '', { traces: '* * * * * *', sampling: 0 });
    fx.sandbox.setFaults({ rejectTraceRefs: ['test-device-4'] });
    const d = daemon(cfg);
    await waitFor(() => remaining().readings === 0 && remaining().deadLetters === 1, 15_000, 'one parked point');
    const list = await runCli(['dead-letter', 'list', '--config', cfg]);
    expect(list.stdout).toMatch(/^1\t\S+\tload L1\ttrace point \(reading 4\)\tHTTP 400\t.*traces\[0\] \(test-device-4\): refused by the service/);
    expect((await runCli(['dead-letter', 'retry', '--config', cfg])).code).toBe(64);
    const both = await runCli(['dead-letter', 'retry', '--all', '--id', '1', '--config', cfg]);
    expect(both.code).toBe(64);
    expect(both.stderr).toContain("option '--id <n...>' cannot be used with option '--all'");
    expect(await runCli(['dead-letter', 'retry', '--id', '99', '--config', cfg])).toMatchObject({ code: 65, stderr: 'error: no dead letter has the id 99 (see "dead-letter list"); nothing put back\n' });
    expect(remaining().deadLetters).toBe(1);
    fx.sandbox.setFaults({ rejectTraceRefs: [] });
    const retry = await runCli(['dead-letter', 'retry', '--id', '1', '--config', cfg]);
    expect(retry.stdout, retry.stderr).toBe('1 dead letter(s) put back in the queue\n');
    await waitFor(() => fx.sandbox.stats.tracePoints === 10, 10_000, 'the retried point delivered');
    expect((await runCli(['dead-letter', 'list', '--config', cfg])).stdout).toBe('no dead letters\n');
    await d.stop('SIGTERM');
  }, 30_000);

  it('SIGTERM right after start stops it cleanly: the signals keep a listener from start to exit', async () => {
    const { url } = await fx.sandbox.start();
    const cfg = agentConfig(fx.tmp.dir, url);
    // Removing a signal's last listener gives the signal back its default action (death). This
    // preload sends the signal at once whenever that happens, so a moment without a listener,
    // however short, kills the daemon here instead of once in a while under load.
    const preload = writeFile(
      fx.tmp.dir,
      'listener-gap.cjs',
      `process.on('removeListener', (ev) => {
  if ((ev === 'SIGTERM' || ev === 'SIGINT') && process.listenerCount(ev) === 0) process.kill(process.pid, ev);
});
`,
    );
    const d = daemon(cfg, { NODE_OPTIONS: `--require ${preload}` });
    await waitFor(() => d.output().includes('"msg":"agent started"') || d.child.exitCode !== null || d.child.signalCode !== null, 15_000, 'the daemon to start');
    expect(await d.stop('SIGTERM'), d.output()).toEqual({ code: 0, signal: null });
    expect(d.output()).toContain('"signal":"SIGTERM","msg":"stopping"');
  }, 30_000);

  it('a second SIGTERM while stopping exits at once, status 1, saying why', async () => {
    const { url } = await fx.sandbox.start();
    // A source that ignores SIGTERM holds the stop for stop_timeout_s.
    const cfg = agentConfig(
      fx.tmp.dir,
      url,
      `[[sources]]
type = "exec"
name = "stubborn"
command = "echo not-json; trap '' TERM; while :; do sleep 1; done"
stop_timeout_s = 20
`,
    );
    const d = daemon(cfg);
    await d.started('the daemon to start');
    // The source's lines name it once: a log reader keeps one of two equal keys.
    const rejected = await waitFor(
      () =>
        d
          .output()
          .split('\n')
          .find((l) => l.includes('not-json') || l.includes('line 1')),
      10_000,
      'the bad line logged',
    );
    expect(rejected.match(/"source":/g), rejected).toHaveLength(1);
    expect(rejected).toContain('"source":"stubborn"');
    d.child.kill('SIGTERM');
    await waitFor(() => d.output().includes('"msg":"stopping"'), 10_000, 'the daemon to begin stopping');
    const t0 = Date.now();
    expect(await d.stop('SIGTERM'), d.output()).toEqual({ code: 1, signal: null });
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(d.output()).toContain('SIGTERM again while stopping; exiting now (what is committed stays buffered)');
  }, 30_000);
});
