/**
 * What MQTT.js keeps in memory once the agent's client has connected (src/sources/mqtt-lib.ts).
 * mqtt-packet's number cache is one setting for the whole process, so nothing else here makes
 * an MQTT client: the test's messages are published by a child process.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { mqttSourceSchema } from '../../src/config/schema.js';
import { MqttSource } from '../../src/sources/mqtt.js';
import { ROOT, waitFor } from '../helpers.js';
import { Broker, NO_MOSQUITTO } from './mosquitto.js';
import { freePort, recorder, stopProcess } from './support.js';

/** mqtt-packet as MQTT.js itself resolves it. */
const numbers = createRequire(createRequire(join(ROOT, 'package.json')).resolve('mqtt'))('mqtt-packet/numbers.js') as { cache: Record<number, Buffer> };

describe.skipIf(NO_MOSQUITTO)("the agent's MQTT client", () => {
  let dir: string | undefined;
  let broker: Broker | undefined;
  let source: MqttSource | undefined;
  afterEach(async () => {
    await source?.stop();
    await broker?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("never fills mqtt-packet's cache of 65,536 number buffers (some 6.6 MB kept for ever)", async () => {
    dir = mkdtempSync(join(tmpdir(), 'ta-mqtt-footprint-'));
    broker = new Broker(join(dir, 'broker'), await freePort());
    await broker.start();
    const rec = recorder();
    source = new MqttSource(mqttSourceSchema.parse({ type: 'mqtt', url: broker.url, topics: ['fleet/+/telemetry'], resource_from_topic: 2, client_id: 'footprint' }), rec.ctx);
    await source.start();
    await waitFor(() => source!.health().healthy, 10_000, 'connected');
    const publisher = spawn(
      process.execPath,
      ['-e', `require('mqtt').connect(process.argv[1]).on('connect', function () { this.publish('fleet/T1/telemetry', '{"temperature": 4}', { qos: 1 }, () => this.end()); })`, broker.url],
      { cwd: ROOT, stdio: 'ignore' },
    );
    try {
      await waitFor(() => rec.readings.length === 1, 10_000, 'the reading');
    } finally {
      await stopProcess(publisher);
    }
    expect(rec.readings[0]).toMatchObject({ resourceId: 'T1', temperatureC: 4 });
    // Connected, subscribed and a message taken: packets written both ways, the cache still empty.
    expect(Object.keys(numbers.cache)).toHaveLength(0);
  });
});
