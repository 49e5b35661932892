import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as mqttConnect } from 'mqtt';
import { afterEach, describe, expect, it } from 'vitest';
import { Sandbox } from '../../src/sandbox/server.js';
import { TEST_KEY, TEST_SCAC, agentConfig, runCli, startDaemon, waitFor, type Daemon } from '../helpers.js';
import { Broker, mqttSourceToml, NO_MOSQUITTO } from './mosquitto.js';
import { freePort } from './support.js';

describe.skipIf(NO_MOSQUITTO)('the daemon with an MQTT source (real mosquitto, real sandbox)', () => {
  let dir: string | undefined;
  let daemon: Daemon | undefined;
  let broker: Broker | undefined;
  const sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
  afterEach(async () => {
    await daemon?.stop('SIGKILL');
    await broker?.stop();
    await sandbox.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('sends what a gateway publishes as traces of the trailer’s load, and status shows the connection', async () => {
    dir = mkdtempSync(join(tmpdir(), 'ta-mqtt-daemon-'));
    broker = new Broker(join(dir, 'broker'), await freePort());
    await broker.start();
    const { url } = await sandbox.start();
    const healthPort = await freePort();
    const healthz = async () => {
      const r = await fetch(`http://127.0.0.1:${healthPort}/healthz`).catch(() => undefined);
      return r && { status: r.status, text: await r.text() };
    };
    const cfg = agentConfig(
      dir,
      url,
      `${mqttSourceToml(broker.url, 'fields = { temperature = "temp_c", time = "ts", latitude = "lat", longitude = "lon" }\n')}[health]
listen = "127.0.0.1:${healthPort}"
`,
      { traces: '*/2 * * * * *', sampling: 0 },
    );
    const valid = await runCli(['validate-config', '--config', cfg]);
    expect(valid.code, valid.stderr).toBe(0);
    expect((await runCli(['load', 'start', 'L-7', '--resource', 'TRAILER-7', '--resource-type', 'Trailer', '--config', cfg])).code).toBe(0);
    daemon = startDaemon(['--config', cfg]);

    const status = async () => JSON.parse((await runCli(['status', '--json', '--config', cfg])).stdout);
    await waitFor(async () => (await status()).sources?.[0]?.healthy === true, 15_000, 'status showing the MQTT source connected');
    const s = await status();
    expect(s.sources[0]).toMatchObject({ type: 'mqtt', healthy: true, detail: `connected to ${broker.url} as telematics-agent-test-device, subscribed to depot/+/reefer` });
    expect(await healthz()).toEqual({ status: 200, text: 'ok\n' });

    // A gateway: epoch seconds, its own field names, one topic per trailer; another trailer has no load.
    const gw = mqttConnect(broker.url, { clientId: 'gateway' });
    await new Promise<void>((r) => gw.once('connect', () => r()));
    // Stamped from the next whole second: a load holds readings from its start on (the gateway's
    // clock counts, not when the message arrives), and L-7 started a moment ago.
    const t0 = Math.ceil(Date.now() / 1000);
    for (let i = 0; i < 5; i++) await gw.publishAsync('depot/TRAILER-7/reefer', JSON.stringify({ ts: t0 + i, temp_c: -18 + i / 10, lat: 41.85 + i / 1000, lon: -87.65 }), { qos: 1 });
    await gw.publishAsync('depot/TRAILER-8/reefer', JSON.stringify({ ts: t0, temp_c: 3, lat: 41, lon: -87 }), { qos: 1 });
    await gw.endAsync();

    await waitFor(() => sandbox.stats.tracePoints >= 5, 20_000, 'five trace points');
    const points = sandbox.traces.flatMap((t) => t.body.traces.map((p) => ({ load: t.body.loadNumber, ...p })));
    expect(points).toHaveLength(5);
    expect(points.map((p) => [p.load, p.resourceId, p.resourceType, p.temperature?.value])).toEqual(Array.from({ length: 5 }, (_, i) => ['L-7', 'TRAILER-7', 'Trailer', -18 + i / 10]));

    // The broker goes away: the source says so, and the daemon keeps running.
    await broker.stop();
    await waitFor(async () => /^not connected to /.test((await status()).sources?.[0]?.detail ?? ''), 15_000, 'status showing the broker gone');
    expect(daemon.child.exitCode).toBeNull();
    const h = await healthz();
    expect(h?.status).toBe(503);
    expect(h?.text).toContain(`source mqtt:127.0.0.1:${broker.port} unhealthy: not connected to ${broker.url}: ECONNREFUSED`);
  });
});
