import { describe, expect, it } from 'vitest';
import { TEST_KEY, TEST_SCAC, agentConfig, runCli, startDaemon, waitFor, daemonFixture } from './helpers.js';

const fx = daemonFixture();

describe('the daemon end to end (real process, real sandbox, real SQLite file)', () => {
  it('sends simulator traces on the schedule, CLI milestones within seconds, and stops cleanly on SIGTERM', async () => {
    const { url } = await fx.sandbox.start();
    const cfg = agentConfig(
      fx.tmp.dir,
      url,
      `[[sources]]
type = "simulator"
resource_id = "TRUCK-1"
time_scale = 20
interval_s = 1
`,
      { traces: '*/2 * * * * *', sampling: 5 },
    );

    expect((await runCli(['validate-config', '--config', cfg])).code).toBe(0);
    expect((await runCli(['load', 'start', 'L-1', '--resource', 'TRUCK-1', '--config', cfg])).code).toBe(0);
    fx.daemon = startDaemon(['--config', cfg]);

    await waitFor(() => fx.sandbox.stats.tracePoints >= 3, 20_000, 'trace points from the simulator');
    const t = fx.sandbox.traces[0];
    expect(t.body.loadNumber).toBe('L-1');
    expect(t.body.traces[0]).toMatchObject({ resourceId: 'TRUCK-1', resourceType: 'Truck' });
    expect(t.body.traces[0].temperature?.unitOfMeasure).toBe('C');
    expect(t.headers.carrierscac).toBe(TEST_SCAC);

    const m = await runCli(['milestone', '--load', 'L-1', '--code', 'X3', '--stop', '1', '--config', cfg]);
    expect(m.code).toBe(0);
    // The brief's "within seconds" is the behaviour, so a bound stays, with room for a busy
    // machine: the daemon looks for new milestones every 100 ms here (poll_interval_ms).
    await waitFor(() => fx.sandbox.milestones.length === 1, 10_000, 'the milestone at the sandbox');
    expect(fx.sandbox.milestones[0].body).toMatchObject({ eventCode: 'X3', loadNumber: 'L-1', eventState: 'IL' });

    // The daemon writes its state for `status` within a second of a delivery.
    const s = await waitFor(
      async () => {
        const r = await runCli(['status', '--json', '--config', cfg]);
        const j = JSON.parse(r.stdout);
        return r.code === 0 && j.delivery?.sent.milestones === 1 && j;
      },
      10_000,
      'status showing the delivered milestone',
    );
    expect(s.daemon.running).toBe(true);
    expect(s.delivery.lastSuccessMs).toBeGreaterThan(0);
    expect(s.sources).toMatchObject([{ name: 'simulator:TRUCK-1', type: 'simulator', healthy: true }]);

    const exit = await fx.daemon.stop('SIGTERM');
    expect(exit).toEqual({ code: 0, signal: null });
    expect(fx.daemon.output()).toContain('agent stopped');
    expect(fx.daemon.output()).not.toContain(TEST_KEY);
    const after = await runCli(['status', '--config', cfg]);
    expect(after.code).toBe(3);
    expect(after.stdout).toMatch(/daemon:\s+stopped cleanly/);
  });

  it('refuses to run on a bad config with exit 78 and buffers nothing', async () => {
    const cfg = agentConfig(fx.tmp.dir, 'http://127.0.0.1:9', '[[sources]]\ntype = "simulator"\n');
    const d = startDaemon(['--config', cfg]);
    const r = await d.stop('SIGCONT');
    expect(r.code).toBe(78);
    expect(d.output()).toContain('sources[0].resource_id: required (expected string)');
  });
});
