/**
 * MQTT.js, loaded with `require`, never `import`: the agent is an ES module, and Node 20 loads
 * a CommonJS package imported from one through its ES module loader, which parses each of its
 * ~120 files for their exports and keeps what it compiled. Measured in a process with the
 * agent's other packages loaded: MQTT.js costs ~3 MB of anonymous memory by `require` and
 * 7-12 MB by `import()`. Called only where MQTT is used (an mqtt source, the fleet link,
 * `fleet send`): a daemon without either never loads it.
 */
import { createRequire } from 'node:module';
import type * as Mqtt from 'mqtt';

let mqtt: typeof Mqtt | undefined;

export function loadMqtt(): typeof Mqtt {
  mqtt ??= createRequire(import.meta.url)('mqtt') as typeof Mqtt;
  return mqtt;
}
