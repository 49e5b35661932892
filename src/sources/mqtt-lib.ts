/**
 * MQTT.js for the agent: loaded on first use, with `require`, and its clients made with the
 * options that keep it small. Used by the mqtt source, the fleet link and `fleet send`; a
 * daemon with neither never loads it (test/footprint.test.ts).
 *
 * `require`, never `import`: the agent is an ES module, and Node 20 loads a CommonJS package
 * imported from one through its ES module loader, which keeps more of each of MQTT.js's ~120
 * files. Measured in a process with the agent's other packages loaded: ~3 MB of anonymous
 * memory by `require`, 7-12 MB by `import()`.
 *
 * `writeCache: false`: otherwise mqtt-packet fills a cache of 65,536 two-byte Buffers (every
 * packet id and length it could write) on the first packet, some 6.6 MB of heap for ever, to
 * save allocating two bytes per packet; the agent writes a few packets a second at most
 * (test/sources/mqtt-footprint.test.ts).
 */
import { createRequire } from 'node:module';
import type * as Mqtt from 'mqtt';

let mqtt: typeof Mqtt | undefined;

export function loadMqtt(): typeof Mqtt {
  mqtt ??= createRequire(import.meta.url)('mqtt') as typeof Mqtt;
  return mqtt;
}

/** A client of `url` (mqtt://, mqtts://, ws://, wss://) with these options and the agent's own. */
export function connectMqtt(url: string, options: Mqtt.IClientOptions): Mqtt.MqttClient {
  return loadMqtt().connect(url, { ...options, writeCache: false });
}
