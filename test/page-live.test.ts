/**
 * The driver's page left open in the cab while the agent restarts: its live stream (SSE)
 * comes back to an agent that no longer knows its session. Debian's Chromium against a real
 * agent, stopped and started again on the same buffer file and port.
 */
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Agent } from '../src/agent.js';
import { type Config, configSchema } from '../src/config/schema.js';
import { createLogger } from '../src/log.js';
import { TEST_KEY, TEST_SCAC, tempDir, writeFile } from './helpers.js';
import { freePort } from './sources/support.js';

const PIN = '2468';
let tmp: ReturnType<typeof tempDir>;
let agents: Agent[] = [];

beforeEach(() => {
  tmp = tempDir('ta-page-live-');
});
afterEach(async () => {
  for (const a of agents) await a.stop();
  agents = [];
  tmp.cleanup();
});

async function startAgent(config: Config): Promise<Agent> {
  const agent = new Agent({ file: '(test)', config, deviceId: 'live-test', warnings: [] }, { key: TEST_KEY, origin: 'test' }, createLogger({ level: 'silent', destination: process.stdout }));
  agents.push(agent);
  await agent.start();
  return agent;
}

describe('the page open across an agent restart', { timeout: 60_000 }, () => {
  it('does not stay frozen on what it last showed: it goes back to the login page', async () => {
    const port = await freePort();
    const config = configSchema.parse({
      device_id: 'live-test',
      api: { base_url: 'http://127.0.0.1:9', scac: TEST_SCAC, subscription_key: TEST_KEY },
      buffer: { path: join(tmp.dir, 'buffer.db') },
      ui: { listen: `127.0.0.1:${port}`, pin_file: writeFile(tmp.dir, 'pin', `${PIN}\n`, 0o600) },
      sources: [{ type: 'module', name: 'idle', path: writeFile(tmp.dir, 'idle.mjs', 'export function createSource() { return { start() {}, stop() {} }; }\n') }],
    });
    const first = await startAgent(config);
    first.store.startLoad({ loadNumber: 'L-1001', resourceId: 'T1', resourceType: 'Truck', stops: [{ sequence: 1, type: 'delivery', city: 'Chicago', state: 'IL' }], nowMs: Date.now() });
    const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
    try {
      const page = await browser.newPage();
      await page.goto(`http://127.0.0.1:${port}/`);
      await page.getByLabel('PIN').fill(PIN);
      await page.getByRole('button', { name: 'Log in' }).click();
      await expect.poll(() => page.locator('h2').first().textContent()).toBe('Load L-1001');
      // The live stream is open: it has written the link line once.
      await expect.poll(() => page.locator('#link').textContent()).toMatch(/waiting/);
      await first.stop();
      agents = [];
      await startAgent(config);
      // The stream comes back to an agent that does not know the session (401): the page
      // must not go on showing the old link line and states as if they were live.
      await expect.poll(() => page.getByLabel('PIN').count(), { timeout: 20_000 }).toBe(1);
    } finally {
      await browser.close();
    }
  });
});
