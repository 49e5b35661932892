/**
 * A driver's page that cannot start (its port held by another program) is not left off until
 * the next reload: status and /healthz say so, and it is tried again until it runs.
 */
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { agentConfig, daemonFixture, runCli, startDaemon, waitFor } from './helpers.js';
import { freePort } from './sources/support.js';

const fx = daemonFixture();

describe("the driver's page when its port is taken", () => {
  it('is shown as not running in status and /healthz, and starts once the port is free', async () => {
    const { url } = await fx.sandbox.start();
    const pagePort = await freePort();
    const healthPort = await freePort();
    // Another program on the page's port.
    const squatter = createServer();
    await new Promise<void>((r) => squatter.listen(pagePort, '127.0.0.1', r));
    const cfg = agentConfig(fx.tmp.dir, url, `[ui]\nlisten = "127.0.0.1:${pagePort}"\n[health]\nlisten = "127.0.0.1:${healthPort}"\n`);
    fx.daemon = startDaemon(['--config', cfg]);
    try {
      await waitFor(() => fx.daemon!.output().includes('driver page could not start'), 15_000, 'the page failing to start');
      const healthz = await waitFor(async () => {
        const r = await fetch(`http://127.0.0.1:${healthPort}/healthz`).catch(() => undefined);
        return r && { status: r.status, text: await r.text() };
      });
      expect(healthz.status).toBe(503);
      expect(healthz.text).toContain(`driver page not running on 127.0.0.1:${pagePort}: `);
      expect(healthz.text).toContain('EADDRINUSE');
      const status = await waitFor(async () => {
        const out = (await runCli(['status', '--config', cfg])).stdout;
        return out.includes('driver page') ? out : undefined;
      });
      expect(status).toMatch(new RegExp(`^driver page: +NOT RUNNING on 127\\.0\\.0\\.1:${pagePort}: .*EADDRINUSE`, 'm'));
    } finally {
      await new Promise((r) => squatter.close(r));
    }
    // Tried again (5 s after the first failure): the page answers, and nothing says it is off.
    const page = await waitFor(async () => (await fetch(`http://127.0.0.1:${pagePort}/`).catch(() => undefined))?.status, 20_000, 'the page answering');
    expect(page).toBe(200);
    expect(fx.daemon.output()).toMatch(/"failedAttempts":\d/);
    const after = await waitFor(async () => {
      const out = (await runCli(['status', '--config', cfg])).stdout;
      return /^driver page: +127\.0\.0\.1:\d+ \(port \d+\)$/m.test(out) ? out : undefined;
    }, 15_000);
    expect(after).not.toContain('NOT RUNNING');
    expect(await (await fetch(`http://127.0.0.1:${healthPort}/healthz`)).text()).not.toContain('driver page');
  });
});
