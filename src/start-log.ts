/**
 * The daemon's `agent started` line: what it runs with, in one place an operator reads first
 * (journalctl -u telematics-agent), and the warnings about its zone that belong beside it.
 */
import type { Logger } from 'pino';
import { proxyInUse } from './api/transport.js';
import type { Config } from './config/schema.js';
import { splayMs } from './delivery/schedule.js';
import { deviceZone, STALE_ZONEINFO } from './geo/device-zone.js';
import { ruleSourceOf } from './geo/timezone.js';
import { zoneinfoDir } from './geo/tzif.js';

export interface StartFacts {
  version: string;
  deviceId: string;
  configFile: string;
  config: Config;
  healthPort: number | undefined;
  keyOrigin: string;
  sources: string[];
  clock: unknown;
  /** The trace schedule's own problem with the zone, if any. */
  scheduleZoneProblem?: string;
}

export function logStarted(log: Logger, f: StartFacts): void {
  const { zone, from: timeZoneFrom } = deviceZone();
  const { config } = f;
  log.info(
    {
      version: f.version,
      deviceId: f.deviceId,
      config: f.configFile,
      health: f.healthPort,
      buffer: config.buffer.path,
      keyOrigin: f.keyOrigin,
      proxy: proxyInUse(new URL(config.api.base_url), config.api.proxy),
      sources: f.sources,
      traces: config.schedule.traces,
      splayMs: splayMs(f.deviceId, config.schedule.splay_s),
      timeZone: zone,
      timeZoneFrom,
      clock: f.clock,
    },
    'agent started',
  );
  // The system's tzdata is the fresher one: Alberta on UTC-6 all year (Nov 2026) is not in Node 20's ICU.
  if (ruleSourceOf(zone) === 'intl') log.warn({ timeZone: zone, zoneinfo: zoneinfoDir() }, STALE_ZONEINFO);
  if (f.scheduleZoneProblem) log.warn({ timeZone: zone }, f.scheduleZoneProblem);
}
