/**
 * The daemon: sources feed the buffer, the schedule and the poll feed the sender.
 * Constructed from a loaded config; `start()` and `stop()` do the work, so a test can run
 * an agent in-process against a sandbox and stop it deterministically.
 */
import type { Logger } from 'pino';
import { watchGarbledFixes } from './admission/garbled-fixes.js';
import { ingestOptionsOf } from './admission/ingest-options.js';
import { Ingest } from './admission/ingest.js';
import type { ApiClient } from './api/client.js';
import { clientOf } from './api/client-of.js';
import { addUrlSecrets } from './api/transport.js';
import { enforceBounds } from './buffer/bounds.js';
import { ReserveKeeper } from './buffer/disk.js';
import { BufferLock } from './buffer/lock.js';
import { corruptWhileRunning, openBuffer } from './buffer/recover.js';
import type { Store } from './buffer/store.js';
import { ClockSteps, TrustedClock } from './clock.js';
import { watchClockSteps } from './clock-watch.js';
import { keyFileWarning, type KeyLookup, type LoadedConfig } from './config/load.js';
import { ClockKeeper } from './clock-keeper.js';
import { planReload, type ReloadResult } from './config/reload.js';
import type { Config } from './config/schema.js';
import { splayMs, TraceSchedule } from './delivery/schedule.js';
import { Sender } from './delivery/sender.js';
import { type BufferError, isCorruption } from './errors.js';
import { FleetLink } from './fleet/link.js';
import { HealthEndpoint } from './health.js';
import { addSecret } from './log.js';
import { MilestoneDetector } from './milestones/detector.js';
import { RunningSources, type SourceFactory } from './sources/running.js';
import type { Source } from './sources/types.js';
import { DAEMON_STATE_KEY, type DaemonState, STATE_INTERVAL_MS } from './daemon-state.js';
import { StateRow } from './state-row.js';
import { logStarted } from './start-log.js';
import { VERSION } from './version.js';
import { DriverPage } from './ui/page.js';

export { DAEMON_STATE_KEY, type DaemonState, splayMs };
export { changedSettings, type ReloadResult } from './config/reload.js';
export { moveAside } from './buffer/recover.js';

export interface AgentOptions {
  /** Sources built by the caller (the demo's simulator, tests); used instead of the config's. */
  sources?: SourceFactory;
  /** How often the daemon state is written for `status`, ms. */
  stateIntervalMs?: number;
  /** Told when the agent cannot go on (a buffer found corrupt while running): the caller exits. */
  onFatal?: (err: BufferError | Error) => void;
}

export class Agent {
  store!: Store;
  ingest!: Ingest;
  sender!: Sender;
  client!: ApiClient;
  private running!: RunningSources;
  readonly clock: TrustedClock;
  /** The one detector of wall clock steps: looked at every second here, and by the cron guard. */
  private readonly steps = new ClockSteps();
  /** Whether the system clock is synchronised, and GNSS time while it is not. */
  readonly clockKeeper: ClockKeeper;
  private lock: BufferLock | undefined;
  private boundsTimer: NodeJS.Timeout | undefined;
  private stateTimer: NodeJS.Timeout | undefined;
  private readonly startedMs = Date.now();
  /** The health endpoint (`health.listen`), moved by a reload. */
  private readonly health = new HealthEndpoint(this);
  private fleet: FleetLink | undefined;
  private stateRow!: StateRow;
  private reloading: Promise<unknown> = Promise.resolve();
  private clockJump: { ms: number; atMs: number } | undefined;
  private reserve!: ReserveKeeper;
  private fatal = false;
  private corruptFound: string | undefined;
  private page: DriverPage | undefined;

  constructor(
    private loaded: LoadedConfig,
    private key: KeyLookup,
    private readonly log: Logger,
    private readonly opts: AgentOptions = {},
  ) {
    this.clock = new TrustedClock();
    this.clockKeeper = new ClockKeeper(log.child({ component: 'clock' }), () => this.loaded.config.clock.synchronised);
  }

  get config(): Config {
    return this.loaded.config;
  }

  /** The sources running now. */
  get sources(): Source[] {
    return this.running?.list ?? [];
  }

  /** Port of the health endpoint when it is on. */
  get healthPort(): number | undefined {
    return this.health.port;
  }

  get startedAt(): number {
    return this.startedMs;
  }

  /** The push interval of the trace schedule (the gap between its next two runs). */
  pushIntervalMs(): number {
    return this.sender.schedule.intervalMs();
  }

  async start(): Promise<void> {
    const { config, deviceId } = this.loaded;
    this.takeSecrets(this.key, config);
    // Before anything is opened: an api.ca_file that cannot be used stops the start here.
    this.client = clientOf(this.loaded, this.key, this.log);
    // The lock before the buffer: a second daemon must not even open (or move aside) it.
    if (config.buffer.path !== ':memory:') this.lock = BufferLock.acquire(config.buffer.path);
    try {
      this.store = openBuffer(config.buffer, this.log);
    } catch (err) {
      this.lock?.release();
      throw err;
    }
    this.reserve = new ReserveKeeper(this.store.disk, this.log);
    this.store.onReserveReleased = () => this.reserve.released();
    this.reserve.start();
    this.clock.noteCommitted(this.store.newestReadingTime() ?? Number.NaN);
    this.ingest = new Ingest(this.store, ingestOptionsOf(config), this.log.child({ component: 'buffer' }));
    this.ingest.onError = (err) => this.checkFatal(err);
    watchGarbledFixes(this.clockKeeper.gnss, this.store, this.ingest, this.log.child({ component: 'clock' }));
    // Positions become arrival, departure and delay milestones as they come (onAdmitted below).
    const detector = new MilestoneDetector(
      this.store,
      () => this.loaded.config,
      this.log.child({ component: 'milestones' }),
      () => void this.sender.kick(),
      (write) => this.ingest.writeWithNextCommit('stop-states', write),
    );
    this.ingest.onCommit((batch) => {
      let newest = Number.NEGATIVE_INFINITY;
      for (const r of batch) if (r.timeMs > newest) newest = r.timeMs;
      this.clock.noteCommitted(newest);
      detector.committed();
    });
    // As readings are accepted, not as committed: a commit interval that spares the flash (buffer.flush_interval_ms) does not hold back an arrival.
    this.ingest.onAdmitted((batch) => detector.process(batch));
    this.sender = new Sender({
      store: this.store,
      client: this.client,
      config,
      deviceId,
      log: this.log.child({ component: 'sender' }),
      fixOf: (resourceId) => this.ingest.fixes.get(resourceId),
      onError: (err) => this.checkFatal(err),
      // Purging is how a full disk gets room back: readings waiting in memory go in next.
      onPurged: () => this.ingest.roomMade(),
      roomWanted: () => this.ingest.stats.trouble?.kind === 'disk-full',
      schedule: TraceSchedule.fromConfig(config.schedule, deviceId, this.steps),
    });

    // Nothing admitted waits to be committed yet: loads ended while no daemon ran are closed
    // now, not with the first commit (a truck that stays silent may not make one for long).
    try {
      this.store.closeEndedLoads(Date.now());
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'could not close the loads ended meanwhile; the next commit of readings does');
      this.checkFatal(err);
    }
    await this.clockKeeper.start();
    this.running = new RunningSources(this.ingest, this.clock, this.log, this.opts.sources, this.clockKeeper.gnss);
    await this.running.build(config);
    this.ingest.start();
    await this.running.start();
    this.sender.start();
    this.checkBounds();
    this.boundsTimer = setInterval(() => this.checkBounds(), 60_000);
    // `status` reads this row (state-row.ts says when it is written).
    this.stateRow = new StateRow({
      store: this.store,
      ingest: this.ingest,
      sender: this.sender,
      log: this.log,
      state: (running) => this.state(running),
      health: () => this.sources.map((s) => (s.health().healthy ? '1' : '0')).join('') + (this.pageView()?.error ? 'p' : '') + (this.fleet?.view()?.connected === false ? 'f' : ''),
      intervalMs: this.opts.stateIntervalMs ?? STATE_INTERVAL_MS,
    });
    this.stateRow.start();
    watchClockSteps(this.steps, {
      gnss: this.clockKeeper.gnss,
      log: this.log,
      sender: () => this.sender,
      ingest: () => this.ingest,
      writeState: () => this.stateRow.write(true),
      onError: (err) => this.checkFatal(err),
    });
    this.stateTimer = setInterval(() => {
      this.steps.look();
      this.store.keepIdentityInWal();
      this.reserve.check();
      this.stateRow.tick();
    }, 1000);
    await this.health.listen(config.health.listen, this.log);
    (this.fleet = new FleetLink(this, deviceId, this.log.child({ component: 'fleet' }))).start(config);
    await (this.page = new DriverPage(this, this.log.child({ component: 'ui' }))).apply(config.ui);
    logStarted(this.log, {
      version: VERSION,
      deviceId,
      configFile: this.loaded.file,
      config,
      healthPort: this.healthPort,
      keyOrigin: this.key.origin,
      sources: this.sources.map((s) => s.name),
      clock: this.clockKeeper.gnss.view(),
      scheduleZoneProblem: this.sender.schedule.zoneProblem,
    });
  }

  /** A failure delivery or ingest cannot get past (a corrupt buffer): stop, with the exit status it maps to. */
  private checkFatal(err: unknown): void {
    if (this.fatal || !isCorruption(err)) return;
    this.fatal = true;
    // Kept in the state written at stop, so the next start checks the file (see lastStop).
    this.corruptFound = (err as Error).message;
    const { error: e, fatal } = corruptWhileRunning(this.loaded.config.buffer, (err as Error).message);
    this.log.fatal({ err: e.message }, 'buffer corrupt; stopping');
    this.opts.onFatal?.(fatal);
  }

  /** The key and any password in a URL are scrubbed from logs from now on; a key file open to others is warned about. */
  private takeSecrets(key: KeyLookup, config: Config): void {
    addSecret(key.key);
    addUrlSecrets(config.api);
    const warning = keyFileWarning(key);
    if (warning) this.log.warn(`subscription key: ${warning}`);
  }

  private checkBounds(): void {
    const b = this.loaded.config.buffer;
    try {
      const keepUnassignedMs = this.loaded.config.privacy.record_without_load ? undefined : this.loaded.config.loads.keep_unassigned_s * 1000;
      const bounds = { maxSizeBytes: b.max_size_mb * 1_048_576, maxAgeMs: b.max_age_days * 86_400_000, keepUnassignedMs, historyKeepDays: this.loaded.config.history.keep_days };
      const r = enforceBounds(this.store, bounds, this.log.child({ component: 'buffer' }), this.clock);
      this.ingest.stats.discardedNoLoad += r.unassigned;
      if (r.jumpMs !== undefined) this.clockJump = { ms: r.jumpMs, atMs: Date.now() };
    } catch (err) {
      this.log.error({ err: (err as Error).message }, 'could not apply buffer limits');
      this.checkFatal(err);
    }
  }

  /**
   * Take a new config and key without losing anything buffered (SIGHUP). Every setting is
   * applied at once except those the schema marks as needing a restart (see
   * `restartSettings`), which keep their running value and are named in the result.
   */
  async reload(loaded: LoadedConfig, key: KeyLookup): Promise<ReloadResult> {
    // One at a time: two SIGHUPs in quick succession must not both stop and start sources across each other's awaits (the first set would be left running).
    const run = this.reloading.then(() => this.reloadNow(loaded, key));
    this.reloading = run.catch(() => undefined);
    return run;
  }

  private async reloadNow(next: LoadedConfig, key: KeyLookup): Promise<ReloadResult> {
    const old = this.loaded.config;
    const { changed, applied, needsRestart, config } = planReload(old, this.loaded.deviceId, next.config, next.deviceId);
    const loaded = { ...next, config, deviceId: this.loaded.deviceId };
    // First, so that an api.ca_file that cannot be used refuses the reload with nothing changed.
    const client = clientOf(loaded, key, this.log);
    this.loaded = loaded;
    this.key = key;
    this.takeSecrets(key, config);
    this.log.level = config.log.level;
    const b = config.buffer;
    this.store.tune({
      synchronous: b.synchronous !== old.buffer.synchronous ? b.synchronous : undefined,
      cacheKb: b.cache_kb !== old.buffer.cache_kb ? b.cache_kb : undefined,
    });
    this.ingest.configure(ingestOptionsOf(config));
    const oldClient = this.client;
    this.client = client;
    this.sender.updateConfig(config, this.client);
    this.sender.schedule.reconfigure(config.schedule, this.loaded.deviceId);
    if (config.clock.synchronised !== old.clock.synchronised) await this.clockKeeper.ask();
    if (changed.some((p) => p === 'sources' || p.startsWith('sources_time.') || p.startsWith('odometer.') || p === 'clock.unsynced_hold_s')) {
      await this.running.stop();
      await this.running.build(config);
      await this.running.start();
    }
    await this.health.listen(config.health.listen, this.log);
    await this.fleet?.configure(config);
    await this.page?.apply(config.ui);
    void oldClient.close();
    // The limits apply at once (a lowered buffer.max_age_days or max_size_mb must not wait up
    // to a minute for the timer), and a clock step since the last check is seen and logged now.
    this.checkBounds();
    this.stateRow.write(true);
    return { applied, needsRestart };
  }

  /**
   * The settings each part is running with right now, read from the parts themselves (not
   * from the config they were given): what a reload test compares with the new file.
   */
  effectiveSettings(): Record<string, unknown> {
    const connection = this.store.connectionSettings();
    return {
      'buffer.path': connection.path,
      'buffer.synchronous': connection.synchronous,
      'buffer.cache_kb': connection.cacheKb,
      'buffer.batch_size': this.ingest.options.batchSize,
      'buffer.flush_interval_ms': this.ingest.options.flushIntervalMs,
      'buffer.max_pending': this.ingest.options.maxPending,
      'privacy.record_without_load': this.ingest.options.keepWithoutLoad,
      'loads.late_readings_s': (this.ingest.options.lateReadingsMs ?? 0) / 1000,
      'loads.keep_unassigned_s': (this.ingest.options.keepUnassignedMs ?? 0) / 1000,
      'delivery.poll_interval_ms': this.sender.pollIntervalMs,
      'health.listen': this.health.address,
      'health.port': this.health.port,
      'api.base_url': this.client.baseUrl,
      'api.timeout_s': this.client.transport.timeoutMs / 1000,
      'api.connect_timeout_s': this.client.transport.connectTimeoutMs / 1000,
      'api.proxy': this.client.transport.proxy,
      'api.private_ca': this.client.transport.privateCa,
      'api.compress': this.client.transport.compress,
      'api.tls_hello': this.client.transport.tlsHello,
      'log.level': this.log.level,
      'schedule.traces': this.sender.schedule.expression,
      'clock.synchronised': this.clockKeeper.gnss.view().from,
      'clock.unsynced_hold_s': this.running.holdS(),
      sources: this.sources.map((s) => s.name),
      device_id: this.loaded.deviceId,
      ...this.fleet?.effective(),
      ...this.page?.settings(),
    };
  }

  /** Push traces now (tests, the demo), as if the schedule had fired. */
  pushTracesNow(): Promise<void> {
    this.ingest.flush();
    this.sender.requestTracePush();
    return this.sender.kick();
  }

  /** The system clock's state and the readings held for a GNSS time (status, /healthz, /metrics). */
  clockState(): NonNullable<DaemonState['clock']> {
    return { ...this.clockKeeper.gnss.view(), ...(this.running?.held() ?? { held: 0, heldExpired: 0 }) };
  }

  state(running: boolean): DaemonState {
    const disk = this.store.disk;
    const free = disk?.freeBytes();
    return {
      pid: process.pid,
      version: VERSION,
      deviceId: this.loaded.deviceId,
      configFile: this.loaded.file,
      startedMs: this.startedMs,
      updatedMs: Date.now(),
      running,
      keyOrigin: this.key.origin,
      sender: this.sender.status,
      ingest: this.ingest.stats,
      sources: this.running.states(),
      nextTracePushMs: this.sender.schedule.nextPushMs(),
      disk: disk ? { freeBytes: free === undefined || !Number.isFinite(free) ? null : free, reserve: disk.hasReserve(), reserveBytes: disk.plan.reserveBytes } : undefined,
      clockJump: this.clockJump,
      clock: this.clockState(),
      corrupt: this.corruptFound,
      page: this.pageView(),
      fleet: this.fleet?.view(),
    };
  }

  /** The driver's page when it is configured: where, or why it is not running (status, /healthz). */
  pageView(): DaemonState['page'] {
    return this.page?.view();
  }

  /**
   * Stop everything, in order: what the sources still hand over is committed, the request
   * under way may finish (bounded by delivery.shutdown_timeout_s), the state is written.
   */
  async stop(): Promise<void> {
    await this.fleet?.stop();
    await Promise.all([this.health.stop(), this.page?.stop()]);
    // No new push from here on; the one under way may finish (sender.stop below).
    this.sender.schedule.stop();
    clearInterval(this.stateTimer);
    clearInterval(this.boundsTimer);
    await this.running.stop();
    this.clockKeeper.stop();
    this.ingest.stop();
    await this.sender.stop();
    this.stateRow.write(false);
    this.store.close();
    this.lock?.release();
    await this.client.close();
    this.log.info('agent stopped');
  }
}
