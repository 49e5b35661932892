/**
 * The daemon: sources feed the buffer, the schedule and the poll feed the sender.
 * Constructed from a loaded config; `start()` and `stop()` do the work, so a test can run
 * an agent in-process against a sandbox and stop it deterministically.
 */
import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { ApiClient } from './api/client.js';
import { enforceBounds } from './buffer/bounds.js';
import { Ingest } from './buffer/ingest.js';
import { Store } from './buffer/store.js';
import type { KeyLookup, LoadedConfig } from './config/load.js';
import { Cron, CronSchedule } from './cron.js';
import { Sender, type SenderStatus } from './delivery/sender.js';
import { ruleSourceOf, systemZone } from './geo/timezone.js';
import { zoneinfoDir } from './geo/tzif.js';
import { HealthServer } from './health.js';
import { addSecret } from './log.js';
import { MilestoneDetector } from './milestones/detector.js';
import { createSource, sourceName } from './sources/index.js';
import { systemClockUnset, timeProblem } from './sources/time-guard.js';
import type { Source, SourceHealth } from './sources/types.js';

export const DAEMON_STATE_KEY = 'daemon';

export interface DaemonState {
  pid: number;
  deviceId: string;
  configFile: string;
  startedMs: number;
  updatedMs: number;
  running: boolean;
  keyOrigin: string;
  sender: SenderStatus;
  ingest: Ingest['stats'];
  sources: Array<{ name: string; type: string; timeRejected?: number } & SourceHealth>;
  nextTracePushMs: number | null;
}

/** A fixed share of the splay window for this device, so a fleet spreads over it. */
export function splayMs(deviceId: string, splayS: number): number {
  if (splayS <= 0) return 0;
  const h = createHash('sha256').update(deviceId).digest().readUInt32BE(0);
  return h % Math.round(splayS * 1000);
}

export interface AgentOptions {
  /** Sources built by the caller (the demo's simulator, tests); used instead of the config's. */
  sources?: (ctx: { emit: Ingest['push']; log: Logger }) => Source[];
  /** How often the daemon state is written for `status`, ms. */
  stateIntervalMs?: number;
}

export class Agent {
  store!: Store;
  ingest!: Ingest;
  sender!: Sender;
  client!: ApiClient;
  sources: Source[] = [];
  private cron: CronSchedule | undefined;
  private boundsTimer: NodeJS.Timeout | undefined;
  private splayTimer: NodeJS.Timeout | undefined;
  private stateTimer: NodeJS.Timeout | undefined;
  private readonly startedMs = Date.now();
  private health: HealthServer | undefined;
  /** Port of the health endpoint when it is on. */
  healthPort: number | undefined;
  private lastSenderState = '';
  private timeCounts = new Map<Source, { timeRejected: number }>();
  private lastStateWriteMs = 0;
  private reloading: Promise<unknown> = Promise.resolve();

  constructor(
    private loaded: LoadedConfig,
    private key: KeyLookup,
    private readonly log: Logger,
    private readonly opts: AgentOptions = {},
  ) {}

  get config() {
    return this.loaded.config;
  }

  get startedAt(): number {
    return this.startedMs;
  }

  /** The push interval of the trace schedule (the gap between its next two runs). */
  pushIntervalMs(): number {
    const runs = this.cron?.nextRuns(2);
    return runs && runs.length === 2 ? runs[1] - runs[0] : 15 * 60_000;
  }

  async start(): Promise<void> {
    const { config, deviceId } = this.loaded;
    addSecret(this.key.key);
    this.store = Store.open(config.buffer.path, { synchronous: config.buffer.synchronous, cacheKb: config.buffer.cache_kb });
    this.ingest = new Ingest(
      this.store,
      {
        batchSize: config.buffer.batch_size,
        flushIntervalMs: config.buffer.flush_interval_ms,
        keepWithoutLoad: config.privacy.record_without_load,
      },
      this.log.child({ component: 'buffer' }),
    );
    // Positions become arrival, departure and delay milestones as soon as they are committed.
    const detector = new MilestoneDetector(this.store, () => this.loaded.config, this.log.child({ component: 'milestones' }), () => void this.sender.kick());
    this.ingest.onCommit((batch) => detector.process(batch));
    this.client = this.makeClient();
    this.sender = new Sender({ store: this.store, client: this.client, config, deviceId, log: this.log.child({ component: 'sender' }) });

    this.sources = await this.makeSources();
    this.ingest.start();
    await this.startSources();
    this.startSchedule();
    this.sender.start();
    this.checkBounds();
    this.boundsTimer = setInterval(() => this.checkBounds(), 60_000);
    this.writeState(true);
    // `status` reads this row. Written when delivery changed (so a push shows at once),
    // else every stateIntervalMs: few writes, because every write wears the flash.
    this.stateTimer = setInterval(() => {
      const sender = JSON.stringify(this.sender.status);
      if (sender !== this.lastSenderState || Date.now() - this.lastStateWriteMs >= (this.opts.stateIntervalMs ?? 15_000)) {
        this.lastSenderState = sender;
        this.writeState(true);
      }
    }, 1000);
    if (config.health.listen) {
      this.health = new HealthServer(this);
      try {
        this.healthPort = await this.health.start(config.health.listen);
      } catch (err) {
        this.log.error({ listen: config.health.listen, err: (err as Error).message }, 'health endpoint could not listen; running without it');
      }
    }
    const zone = systemZone();
    this.log.info(
      { deviceId, config: this.loaded.file, health: this.healthPort, buffer: config.buffer.path, keyOrigin: this.key.origin, sources: this.sources.map((s) => s.name), traces: config.schedule.traces, splayMs: splayMs(deviceId, config.schedule.splay_s), timeZone: zone },
      'agent started',
    );
    if (ruleSourceOf(zone) === 'intl') {
      this.log.warn(
        { timeZone: zone, zoneinfo: zoneinfoDir() },
        "no zoneinfo file for the machine's zone (is tzdata installed?): time zones come from Node's ICU data instead, which costs about 8 MB more memory",
      );
    }
  }

  private makeClient(): ApiClient {
    const { config } = this.loaded;
    return new ApiClient({
      baseUrl: config.api.base_url,
      milestonePath: config.api.milestone_path,
      tracePath: config.api.trace_path,
      scac: config.api.scac,
      subscriptionKey: this.key.key,
      timeoutMs: config.api.timeout_s * 1000,
      extraFields: config.api.extra_fields,
    });
  }

  private async makeSources(): Promise<Source[]> {
    const { config } = this.loaded;
    if (this.opts.sources) return this.opts.sources({ emit: (r, s) => this.ingest.push(r, s), log: this.log });
    const guard = { maxFutureS: config.sources_time.max_future_s, maxPastDays: config.sources_time.max_past_days };
    if (systemClockUnset(Date.now())) this.log.warn('system clock is before 2025 (no RTC or NTP yet): only readings with their own good time are kept');
    this.timeCounts = new Map();
    const made: Source[] = [];
    for (const [i, cfg] of config.sources.entries()) {
      // The source's own name (e.g. simulator:TRUCK-1) once it exists; the same in logs and status.
      let name = sourceName(cfg, i);
      const log = this.log.child({ component: 'source', source: name });
      let rejectedLogged = 0;
      const counts = { timeRejected: 0 };
      const source = await createSource(cfg, {
        log,
        emit: (r) => {
          // The simulator's clock runs ahead of real time on purpose (time_scale): not judged.
          const late = cfg.type === 'simulator' ? undefined : timeProblem(r.timeMs, Date.now(), guard);
          if (late) {
            counts.timeRejected += 1;
            this.ingest.stats.rejected += 1;
            this.reportReject(log, late, rejectedLogged++);
            return;
          }
          const problem = this.ingest.push(r, name);
          if (problem) this.reportReject(log, problem, rejectedLogged++);
        },
        reject: (reason) => {
          this.ingest.stats.rejected += 1;
          this.reportReject(log, reason, rejectedLogged++);
        },
      });
      name = source.name;
      log.setBindings({ source: name });
      this.timeCounts.set(source, counts);
      made.push(source);
    }
    return made;
  }

  private async startSources(): Promise<void> {
    for (const s of this.sources) {
      try {
        await s.start();
      } catch (err) {
        // One broken source must not keep the others (or delivery of what is buffered) down.
        this.log.error({ source: s.name, err: (err as Error).message }, 'source failed to start');
      }
    }
  }

  private async stopSources(): Promise<void> {
    for (const s of this.sources) {
      try {
        await s.stop();
      } catch (err) {
        this.log.warn({ source: s.name, err: (err as Error).message }, 'source did not stop cleanly');
      }
    }
  }

  private startSchedule(): void {
    const { config, deviceId } = this.loaded;
    const splay = splayMs(deviceId, config.schedule.splay_s);
    this.cron = new CronSchedule(Cron.parse(config.schedule.traces), () => {
      clearTimeout(this.splayTimer);
      this.splayTimer = setTimeout(() => this.sender.requestTracePush(), splay);
    });
    this.cron.start();
  }

  private stopSchedule(): void {
    this.cron?.stop();
    this.cron = undefined;
    clearTimeout(this.splayTimer);
  }

  private checkBounds(): void {
    const b = this.loaded.config.buffer;
    try {
      enforceBounds(this.store, { maxSizeBytes: b.max_size_mb * 1_048_576, maxAgeMs: b.max_age_days * 86_400_000 }, this.log.child({ component: 'buffer' }));
    } catch (err) {
      this.log.error({ err: (err as Error).message }, 'could not apply buffer limits');
    }
  }

  /**
   * Take a new config and key without losing anything buffered (SIGHUP): delivery uses the
   * new key and settings at once, sources and the schedule are restarted. The buffer path
   * cannot change while running.
   */
  async reload(loaded: LoadedConfig, key: KeyLookup): Promise<string[]> {
    // One at a time: two SIGHUPs in quick succession must not both stop and start sources
    // across each other's awaits (the first set would be left running).
    const run = this.reloading.then(() => this.reloadNow(loaded, key));
    this.reloading = run.catch(() => undefined);
    return run;
  }

  private async reloadNow(loaded: LoadedConfig, key: KeyLookup): Promise<string[]> {
    const notes: string[] = [];
    if (loaded.config.buffer.path !== this.loaded.config.buffer.path) {
      notes.push(`buffer.path changed to ${loaded.config.buffer.path}; keeping ${this.loaded.config.buffer.path} until restart`);
      loaded = { ...loaded, config: { ...loaded.config, buffer: { ...loaded.config.buffer, path: this.loaded.config.buffer.path } } };
    }
    this.loaded = loaded;
    this.key = key;
    addSecret(key.key);
    this.log.level = loaded.config.log.level;
    const old = this.client;
    this.client = this.makeClient();
    this.sender.updateConfig(loaded.config, this.client);
    this.stopSchedule();
    this.startSchedule();
    await this.stopSources();
    this.sources = await this.makeSources();
    await this.startSources();
    void old.close();
    this.writeState(true);
    return notes;
  }

  /** Rejected input is logged, but not once per line forever: the first few, then every 1000th. */
  private reportReject(log: Logger, reason: string, n: number): void {
    if (n < 10 || n % 1000 === 0) log.warn({ rejected: n + 1 }, `bad input skipped: ${reason}`);
  }

  /** Push traces now (tests, the demo), as if the schedule had fired. */
  pushTracesNow(): Promise<void> {
    this.ingest.flush();
    this.sender.requestTracePush();
    return this.sender.kick();
  }

  state(running: boolean): DaemonState {
    const next = this.cron?.nextRun;
    return {
      pid: process.pid,
      deviceId: this.loaded.deviceId,
      configFile: this.loaded.file,
      startedMs: this.startedMs,
      updatedMs: Date.now(),
      running,
      keyOrigin: this.key.origin,
      sender: this.sender.status,
      ingest: this.ingest.stats,
      sources: this.sources.map((s) => ({ name: s.name, type: s.type, ...s.health(), timeRejected: this.timeCounts.get(s)?.timeRejected ?? 0 })),
      nextTracePushMs: next !== undefined ? next + splayMs(this.loaded.deviceId, this.config.schedule.splay_s) : null,
    };
  }

  private writeState(running: boolean): void {
    try {
      this.lastStateWriteMs = Date.now();
      this.store.setState(DAEMON_STATE_KEY, this.state(running), this.lastStateWriteMs);
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'could not write daemon state');
    }
  }

  async stop(): Promise<void> {
    await this.health?.stop();
    this.stopSchedule();
    clearInterval(this.stateTimer);
    clearInterval(this.boundsTimer);
    await this.stopSources();
    this.ingest.stop();
    await this.sender.stop();
    this.writeState(false);
    this.store.close();
    await this.client.close();
    this.log.info('agent stopped');
  }
}
