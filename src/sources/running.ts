/**
 * The daemon's sources while it runs: built from the config (or handed in by the caller),
 * started and stopped together, one broken source never keeping the others down, and
 * rebuilt whole when a reload changes `sources`, `sources_time` or `odometer`.
 */
import type { Logger } from 'pino';
import type { Ingest } from '../admission/ingest.js';
import type { OdometerOptions } from '../admission/odometer.js';
import { systemClockUnset } from '../admission/time-guard.js';
import type { TrustedClock } from '../clock.js';
import { ClockHold } from '../admission/clock-hold.js';
import type { GnssClock, Stamp } from '../gnss-clock.js';
import type { Config, SourceConfig } from '../config/schema.js';
import type { DaemonState } from '../daemon-state.js';
import { IngestCommits } from './commits.js';
import { createSource, sourceName } from './index.js';
import type { Source, SourceContext } from './types.js';

/** Sources built by the caller (the demo's simulator, tests) instead of the config's. */
export type SourceFactory = (ctx: { intake(name: string): SourceContext; log: Logger }) => Source[];

export class RunningSources {
  list: Source[] = [];
  private timeCounts = new Map<Source, { timeRejected: number }>();
  /** One for the daemon's life: the sources of a reload see the same numbering of readings. */
  private readonly commits: IngestCommits;

  /** System-stamped readings waiting for a GNSS time (one per build: `clock.unsynced_hold_s` may change). */
  private hold: ClockHold | undefined;

  constructor(
    private readonly ingest: Ingest,
    private readonly clock: TrustedClock,
    private readonly log: Logger,
    private readonly factory?: SourceFactory,
    /** Time while the system clock is not synchronised; without one, readings are judged against the system clock alone. */
    private readonly gnss?: GnssClock,
  ) {
    this.commits = new IngestCommits(ingest);
  }

  /** Build the sources of `config` (replacing the list; stop the old ones first). */
  async build(config: Config): Promise<void> {
    this.timeCounts = new Map();
    if (this.factory) {
      this.list = this.factory({ intake: (name) => this.ingest.intake(name, this.log), log: this.log });
      return;
    }
    const gnss = this.gnss;
    if (gnss) {
      gnss.expectGnss = config.sources.some((s) => STAMPS[s.type] === 'gnss');
      this.hold = new ClockHold(gnss, config.clock.unsynced_hold_s * 1000, this.log.child({ component: 'clock' }));
    }
    const time = { clock: this.clock, maxFutureS: config.sources_time.max_future_s, maxPastDays: config.sources_time.max_past_days, gnss, hold: this.hold };
    if (systemClockUnset(Date.now())) this.log.warn('system clock is before 2025 (no RTC or NTP yet): only readings with their own good time are kept');
    const made: Source[] = [];
    for (const [i, cfg] of config.sources.entries()) {
      // Named once the source exists (pino's setBindings adds a key, it does not replace one).
      const log = this.log.child({ component: 'source' });
      // The simulator's clock runs ahead of real time on purpose (time_scale): not judged.
      const intake = this.ingest.intake(sourceName(cfg, i), log, cfg.type === 'simulator' ? undefined : { ...time, stamp: STAMPS[cfg.type] }, odometerOf(cfg, config));
      // The intake itself, with the commits for a source that acknowledges once they are done
      // (MQTT QoS 1): emit and reject are bound, counts is the intake's object.
      const source = await createSource(cfg, { emit: intake.emit, reject: intake.reject, log: intake.log, counts: intake.counts, commits: this.commits, find: intake.find });
      // The source's own name (e.g. simulator:TRUCK-1) once it exists; the same in logs, rows and status.
      intake.name = source.name;
      log.setBindings({ source: source.name });
      this.timeCounts.set(source, intake.counts);
      made.push(source);
    }
    this.list = made;
  }

  async start(): Promise<void> {
    for (const s of this.list) {
      try {
        await s.start();
      } catch (err) {
        // One broken source must not keep the others (or delivery of what is buffered) down.
        this.log.error({ source: s.name, err: (err as Error).message }, 'source failed to start');
      }
    }
  }

  async stop(): Promise<void> {
    for (const s of this.list) {
      try {
        await s.stop();
      } catch (err) {
        this.log.warn({ source: s.name, err: (err as Error).message }, 'source did not stop cleanly');
      }
    }
    // What the sources handed over goes on to be committed, held or not.
    this.hold?.stop();
  }

  /** How long system-stamped readings wait for a GNSS time, s (the hold's own setting). */
  holdS(): number | undefined {
    return this.hold && this.hold.holdMs / 1000;
  }

  /** Readings held for a GNSS time now, and those let go without one this run. */
  held(): { held: number; heldExpired: number } {
    return { held: this.hold?.count ?? 0, heldExpired: this.hold?.expired ?? 0 };
  }

  /** Each source's health for the daemon state, with the readings refused for their time. */
  states(): DaemonState['sources'] {
    return this.list.map((s) => ({ name: s.name, type: s.type, ...s.health(), timeRejected: this.timeCounts.get(s)?.timeRejected ?? 0 }));
  }
}

/**
 * Which clock stamps each type's readings when a reading does not say (see Reading.clock):
 * GNSS time from gpsd and NMEA; this computer's clock for 1-Wire and modules. An exec line
 * says for itself (with or without `time`); MQTT payloads carry the device's own.
 */
const STAMPS: Partial<Record<SourceConfig['type'], Stamp>> = { gpsd: 'gnss', nmea: 'gnss', onewire: 'system', module: 'system' };

/** The GNSS odometer of a source with `odometer = "gnss"` (the simulator and 1-Wire have no such key). */
export function odometerOf(cfg: SourceConfig, config: Config): OdometerOptions | undefined {
  if (!('odometer' in cfg) || cfg.odometer !== 'gnss') return undefined;
  return { startKm: cfg.odometer_start_km, minSpeedKmh: config.odometer.min_speed_kmh, maxSpeedKmh: config.odometer.max_speed_kmh };
}
