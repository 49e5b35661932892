/**
 * The `telematics-agent` command. Every subcommand has --help; exit statuses are in
 * cli/exit.ts and the README. Output meant for scripts is behind --json.
 */
import { resolve } from 'node:path';
import { Command, CommanderError, Option } from 'commander';
import { Agent } from './agent.js';
import { accessProblem } from './buffer/db.js';
import { Store } from './buffer/store.js';
import { EXIT } from './cli/exit.js';
import { buildStatus, formatStatus } from './cli/status.js';
import { ConfigError, keyFileWarning, loadConfig, resolveConfigPath, resolveSubscriptionKey, type LoadedConfig } from './config/load.js';
import { AgentError, CliError } from './errors.js';
import { formatTime } from './geo/timezone.js';
import { createLogger } from './log.js';
import { resourceTypeOf, RESOURCE_TYPES } from './milestones/codes.js';
import { checkLoadNumber, describeMilestone, MilestoneError, recordMilestone } from './milestones/record.js';
import { readStopsFile } from './milestones/stops.js';
import { SystemdNotifier } from './notify.js';
import { packageVersion } from './paths.js';

const VERSION = packageVersion();

const out = (s: string): void => {
  process.stdout.write(`${s}\n`);
};
const err = (s: string): void => {
  process.stderr.write(`${s}\n`);
};

const configOption = () =>
  new Option('-c, --config <file>', 'config file (default: $TELEMATICS_AGENT_CONFIG, else /etc/telematics-agent/agent.toml)');

function load(configPath: string | undefined): LoadedConfig {
  const loaded = loadConfig(resolveConfigPath(configPath));
  for (const w of loaded.warnings) err(`warning: ${w}`);
  return loaded;
}

function withStore<T>(loaded: LoadedConfig, fn: (store: Store) => T): T {
  const b = loaded.config.buffer;
  const store = Store.open(b.path, { synchronous: b.synchronous, cacheKb: b.cache_kb, reserveKb: b.reserve_kb });
  try {
    return fn(store);
  } finally {
    store.close();
  }
}

function parseCoordinate(value: string, what: string, max: number): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || Math.abs(n) > max) throw new CliError(`${what}: expected a number from -${max} to ${max}, got ${JSON.stringify(value)}`, EXIT.USAGE);
  return n;
}

function parseIntArg(value: string, what: string): number {
  if (!/^\d+$/.test(value)) throw new CliError(`${what}: expected a whole number, got ${JSON.stringify(value)}`, EXIT.USAGE);
  return Number(value);
}

export function buildProgram(): Command {
  const program = new Command('telematics-agent')
    .description('Collects GPS and temperature readings, buffers them in SQLite and delivers traces and milestones to the carrier-events interface.')
    .version(VERSION)
    // Before any subcommand is added, so they inherit it: errors come back as exceptions
    // and get our exit statuses instead of commander's process.exit(1).
    .exitOverride()
    // A command's options are its own, read only before its subcommand: `milestone` has
    // `--load` and a `list` subcommand with `--load` too, and without this the parent took
    // `milestone list --load L`'s option, leaving `list` to fail with "required option".
    .enablePositionalOptions()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) })
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText(
      'after',
      `
Exit status: 0 ok, 1 run-time failure, 3 daemon not running (status), 64 usage error,
65 bad input data or an unusable buffer (corrupt, newer version), 73 buffer cannot be
opened or created, 78 invalid configuration, no key, or another daemon on the buffer.`,
    );

  program
    .command('run')
    .description('run the agent in the foreground (what the systemd unit starts); stops cleanly on SIGTERM')
    .addOption(configOption())
    .action(async (opts: { config?: string }) => {
      daemon = true;
      const loaded = load(opts.config);
      const key = resolveSubscriptionKey(loaded);
      const log = createLogger({ level: loaded.config.log.level });
      await runDaemon(loaded, key, log);
    });

  program
    .command('validate-config')
    .description('check the config file (and that the subscription key can be read); print every problem, exit 78 if any')
    .addOption(configOption())
    .option('--json', 'print the effective configuration (defaults filled in, key omitted) as JSON')
    .action((opts: { config?: string; json?: boolean }) => {
      const loaded = load(opts.config);
      const key = resolveSubscriptionKey(loaded);
      const keyWarning = keyFileWarning(key);
      if (keyWarning) err(`warning: subscription key: ${keyWarning}`);
      // What the daemon will need at start, checked as the user this runs as.
      const buffer = loaded.config.buffer.path;
      const problem = buffer === ':memory:' ? undefined : accessProblem(buffer);
      if (problem) throw new ConfigError(loaded.file, [`buffer.path: ${buffer}: ${problem}; the daemon could not open its buffer`]);
      if (opts.json) {
        const { subscription_key: _omit, ...api } = loaded.config.api;
        out(JSON.stringify({ ...loaded.config, api, device_id: loaded.deviceId }, null, 2));
      } else {
        out(`${loaded.file}: ok (device ${loaded.deviceId}, ${loaded.config.sources.length} source(s), key from ${key.origin})`);
      }
    });

  program
    .command('status')
    .description('queue depths, last successful push, last error, active loads, sources; exit 3 when the daemon is not running')
    .addOption(configOption())
    .option('--json', 'machine-readable output')
    .action((opts: { config?: string; json?: boolean }) => {
      const loaded = load(opts.config);
      const report = withStore(loaded, (store) =>
        buildStatus(store, { deviceId: loaded.deviceId, configFile: loaded.file, buffer: loaded.config.buffer.path }),
      );
      out(opts.json ? JSON.stringify(report, null, 2) : formatStatus(report));
      if (!report.daemon.running) process.exitCode = EXIT.NOT_RUNNING;
    });

  const loadCmd = program.command('load').description('assign loads to resources (readings are kept only while a load is active)');
  loadCmd
    .command('start')
    .description('start a load on a resource (tractor, trailer)')
    .argument('<loadNumber>', 'the load number the service knows; must match api.load_number_pattern (default ^[A-Za-z0-9-]{1,35}$)')
    .requiredOption('-r, --resource <id>', 'resourceId the readings are tagged with')
    .option('-t, --resource-type <type>', `resourceType sent with traces: ${RESOURCE_TYPES.join(', ')}`, 'Truck')
    .option('-s, --stops <file>', 'JSON file with the load\'s stops (see config/stops.example.json)')
    .addOption(configOption())
    .action((loadNumber: string, opts: { resource: string; resourceType: string; stops?: string; config?: string }) => {
      const resourceType = resourceTypeOf(opts.resourceType);
      if (!resourceType) throw new CliError(`--resource-type: expected one of ${RESOURCE_TYPES.join(', ')}, got ${JSON.stringify(opts.resourceType)}`, EXIT.DATA);
      const stops = opts.stops ? readStopsFile(opts.stops) : [];
      const loaded = load(opts.config);
      checkLoadNumber(loadNumber, loaded.config);
      const row = withStore(loaded, (store) =>
        store.startLoad({ loadNumber, resourceId: opts.resource, resourceType, stops, nowMs: Date.now() }),
      );
      out(`load ${row.loadNumber} started on ${row.resourceId} (${row.resourceType}) with ${row.stops.length} stop(s)`);
    });
  loadCmd
    .command('end')
    .description('end a load; its buffered readings are still delivered')
    .argument('<loadNumber>')
    .addOption(configOption())
    .action((loadNumber: string, opts: { config?: string }) => {
      const loaded = load(opts.config);
      withStore(loaded, (store) => store.endLoad(loadNumber, Date.now()));
      out(`load ${loadNumber} ended`);
    });
  loadCmd
    .command('list')
    .description('list active loads (--all: ended ones too)')
    .option('-a, --all', 'include ended loads')
    .option('--json', 'machine-readable output')
    .addOption(configOption())
    .action((opts: { all?: boolean; json?: boolean; config?: string }) => {
      const loaded = load(opts.config);
      const loads = withStore(loaded, (store) => store.listLoads(opts.all ?? false));
      if (opts.json) return out(JSON.stringify(loads, null, 2));
      if (loads.length === 0) return out(opts.all ? 'no loads' : 'no active loads');
      for (const l of loads) {
        const state = l.endedMs === null ? 'active' : `ended ${new Date(l.endedMs).toISOString()}`;
        out(`${l.loadNumber}\t${l.resourceId}\t${l.resourceType}\t${l.stops.length} stop(s)\tnext stop ${l.nextStop ?? '-'}\t${state}`);
      }
    });

  const milestone = program
    .command('milestone')
    .description('record a milestone for a load (committed when this returns; the daemon sends it within seconds), or list them')
    .option('-l, --load <loadNumber>', 'load number (required)')
    .option('--code <code>', 'eventCode from codes.events, e.g. X3 arrived at pick-up, AF departed, X1 arrived at delivery, D1 unloaded, SD delayed, AA/AB appointment (required)')
    .option('--reason <code>', 'reasonCode from codes.reasons (default: codes.default_reason, NS)')
    .option('--stop <n>', 'stopsequenceNumber (1 = first stop)')
    .option('--time <iso>', 'when it happened (for AA/AB the appointment time); without an offset it is read in the zone of the place (default: now)')
    .option('--lat <degrees>', 'where it happened (with --lon); default: the stop, else the last fix')
    .option('--lon <degrees>', 'where it happened (with --lat)')
    .option('--city <name>', 'eventCity (default: from the position)')
    .option('--state <code>', 'eventState, two letters (default: from the position)')
    .option('--force', 'record it even with a code outside codes.events/codes.reasons, or a second time for the same load, code and stop')
    .option('--json', 'print the committed milestone as JSON')
    .addOption(configOption())
    .addHelpText(
      'after',
      `
The place is, first match wins: --lat/--lon or --city/--state; the stop's coordinates
(--stop); the resource's last fix if not older than milestones.max_fix_age_s. Without
any, it goes without a city and state, in this device's zone (a warning says so).`,
    )
    .action(
      (opts: { load?: string; code?: string; reason?: string; stop?: string; time?: string; lat?: string; lon?: string; city?: string; state?: string; force?: boolean; json?: boolean; config?: string }) => {
        if (!opts.load || !opts.code) throw new CliError(`required option${!opts.load && !opts.code ? 's' : ''} ${[!opts.load && '--load', !opts.code && '--code'].filter(Boolean).join(' and ')} not specified`, EXIT.USAGE);
        const stop = opts.stop === undefined ? undefined : parseIntArg(opts.stop, '--stop');
        if ((opts.lat === undefined) !== (opts.lon === undefined)) throw new CliError('--lat and --lon go together', EXIT.USAGE);
        const lat = opts.lat === undefined ? undefined : parseCoordinate(opts.lat, '--lat', 90);
        const lon = opts.lon === undefined ? undefined : parseCoordinate(opts.lon, '--lon', 180);
        if (opts.state !== undefined && !/^[A-Za-z]{2}$/.test(opts.state)) throw new CliError(`--state: expected a two-letter state or province code, got ${JSON.stringify(opts.state)}`, EXIT.DATA);
        const loaded = load(opts.config);
        const { row, warnings, timeMs, placement } = withStore(loaded, (store) =>
          recordMilestone(store, loaded.config, {
            loadNumber: opts.load!,
            code: opts.code!,
            reason: opts.reason,
            stop,
            timeText: opts.time,
            lat,
            lon,
            city: opts.city,
            state: opts.state?.toUpperCase(),
            force: opts.force ?? false,
          }),
        );
        for (const w of warnings) err(`warning: ${w}`);
        if (opts.json) return out(JSON.stringify(row, null, 2));
        const local = formatTime(new Date(timeMs), placement.zone, 'local');
        // Either may be missing (--city without --state): never print "Chicago, undefined".
        const named = [row.body.eventCity, row.body.eventState].filter(Boolean).map(String).join(', ');
        const where = named ? ` at ${named}` : '';
        out(
          `milestone ${row.id} (${row.code} for load ${row.loadNumber}${row.stop === null ? '' : `, stop ${row.stop}`}) committed: ${local.dateTime.replace('T', ' ').replace(/\.\d+/, '')} ${local.timeZoneCode} (${local.timeZoneOffset}) = ${new Date(timeMs).toISOString().replace(/\.000Z$/, 'Z')}${where} (place: ${placement.source}); the running agent sends it within seconds`,
        );
      },
    );
  milestone
    .command('list')
    .description("a load's milestones: state, attempts, the service's last answer and correlation id")
    .requiredOption('-l, --load <loadNumber>', 'load number')
    .option('--json', 'machine-readable output')
    .addOption(configOption())
    .action((opts: { load: string; json?: boolean; config?: string }) => {
      // `milestone --config F list ...` gives the option to the parent command.
      const loaded = load(opts.config ?? (milestone.opts() as { config?: string }).config);
      const rows = withStore(loaded, (store) => {
        if (!store.getLoad(opts.load)) throw new MilestoneError(`load ${opts.load}: no such load`);
        return store.listMilestones(opts.load);
      });
      const state = (m: (typeof rows)[number]) => (m.sentMs !== null ? 'sent' : m.parkedMs !== null ? 'dead-letter' : 'pending');
      if (opts.json) {
        return out(
          JSON.stringify(
            rows.map((m) => ({
              id: m.id,
              code: m.code,
              stop: m.stop,
              origin: m.origin,
              state: state(m),
              time: m.body.time,
              eventCity: m.body.eventCity ?? null,
              eventState: m.body.eventState ?? null,
              createdMs: m.createdMs,
              sentMs: m.sentMs,
              attempts: m.attempts,
              lastStatus: m.lastStatus,
              lastAnswer: m.lastError,
              correlationId: m.correlationId,
              ref: m.ref,
            })),
            null,
            2,
          ),
        );
      }
      if (rows.length === 0) return out(`no milestones for load ${opts.load}`);
      for (const m of rows) {
        const time = String((m.body.time as { dateTime?: string }).dateTime);
        const answer = m.lastStatus === null ? (m.lastError ? m.lastError : '-') : `HTTP ${m.lastStatus}${m.lastError ? ` ${m.lastError.replace(/\s+/g, ' ').slice(0, 80)}` : ''}`;
        out(
          `${m.id}\t${m.code}\tstop ${m.stop ?? '-'}\t${time}\t${m.origin ?? 'earlier version'}\t${state(m)}\t${m.attempts} attempt(s)\t${answer}\tcorrelation ${m.correlationId ?? '-'}`,
        );
      }
    });

  const buffer = program.command('buffer').description('the SQLite buffer itself');
  buffer
    .command('salvage')
    .description('copy every readable milestone and undelivered reading of a buffer that was set aside (e.g. buffer.db.corrupt-<time>) into the running buffer')
    .argument('<file>', 'the old buffer file (its -wal beside it is read too; their content is never changed, though SQLite may add its -shm index beside them)')
    .option('--force', 'copy it again although it was salvaged into this buffer before (its readings would be sent twice)')
    .option('--json', 'print the report as JSON')
    .addOption(configOption())
    .action(async (file: string, opts: { force?: boolean; json?: boolean; config?: string }) => {
      const { salvage } = await import('./buffer/salvage.js');
      const loaded = load(opts.config);
      if (resolve(file) === resolve(loaded.config.buffer.path)) throw new CliError(`${file} is the running buffer itself; give the file that was set aside`, EXIT.USAGE);
      const report = withStore(loaded, (store) => salvage(file, store, { force: opts.force }));
      if (opts.json) return out(JSON.stringify(report, null, 2));
      const unreadable = Object.entries(report.unreadable).map(([t, n]) => (n === 'table' ? `table ${t}` : `${n} ${t} row(s)`));
      out(
        `salvaged from ${file}: ${report.loads} load(s), ${report.milestones} milestone(s) (${report.pendingMilestones} still to send), ${report.readings} reading(s) not yet delivered, ${report.deadLetters} dead letter(s); ${report.skippedDelivered} reading(s) skipped as delivered`,
      );
      if (report.loadsEnded.length) out(`copied as ended (their resource has an active load here): ${report.loadsEnded.join(', ')}`);
      out(unreadable.length ? `unreadable, not copied: ${unreadable.join(', ')}` : 'every row was readable');
    });

  const dead = program.command('dead-letter').description('records the service refused, parked with its answer so the rest could go');
  dead
    .command('list')
    .description('list parked milestones and trace points with the status and body the service answered')
    .option('--json', 'machine-readable output')
    .addOption(configOption())
    .action((opts: { json?: boolean; config?: string }) => {
      const loaded = load(opts.config);
      const rows = withStore(loaded, (store) => store.listDeadLetters());
      if (opts.json) return out(JSON.stringify(rows, null, 2));
      if (rows.length === 0) return out('no dead letters');
      for (const r of rows) {
        const what = r.kind === 'milestone' ? `milestone ${String((r.body as { eventCode?: string }).eventCode)}` : `trace point (reading ${r.recordId})`;
        out(`${r.id}\t${new Date(r.createdMs).toISOString()}\tload ${r.loadNumber}\t${what}\tHTTP ${r.status ?? '-'}\t${(r.response ?? '').replace(/\s+/g, ' ').slice(0, 200)}`);
      }
    });
  dead
    .command('retry')
    .description('put dead letters back in the queue after fixing the cause; the running agent sends them within seconds')
    .option('--id <n...>', 'dead letter ids (from "dead-letter list")')
    .option('--all', 'every dead letter')
    .addOption(configOption())
    .action((opts: { id?: string[]; all?: boolean; config?: string }) => {
      if (!opts.all && !opts.id?.length) throw new CliError('give --id N (one or more) or --all', EXIT.USAGE);
      const ids = opts.all ? 'all' : opts.id!.map((v) => parseIntArg(v, '--id'));
      const loaded = load(opts.config);
      const n = withStore(loaded, (store) => store.retryDeadLetters(ids));
      if (ids !== 'all' && n < ids.length) throw new CliError(`only ${n} of ${ids.length} id(s) were dead letters; those were put back`, EXIT.DATA);
      out(`${n} dead letter(s) put back in the queue`);
    });

  program
    .command('sandbox')
    .description('serve a local stand-in for the service (interface E) that checks key and SCAC, validates bodies and injects faults')
    .option('-p, --port <port>', 'TCP port (0 = any free port)', '8787')
    .option('--host <address>', 'address to listen on', '127.0.0.1')
    .option('--key <key>', 'subscription key to accept (visible in ps; prefer --key-file)')
    .option('--key-file <file>', 'file holding the subscription key to accept')
    .requiredOption('--scac <code>', 'carrierSCAC to accept')
    .option('--record <file>', 'append every accepted body to this file as a JSON line')
    .option('--latency-ms <ms>', 'delay every answer', '0')
    .option('--failure-rate <0..1>', 'share of requests answered 503', '0')
    .option('--drop-rate <0..1>', 'share of connections dropped without an answer', '0')
    .option('--throttle-every <n>', 'answer every nth request 429', '0')
    .option('--retry-after <value>', 'Retry-After sent with 429 (seconds or HTTP date)', '1')
    .option('--reject-load <loadNumber...>', 'answer 400 to bodies for these loads')
    .option('--max-traces <n>', 'answer 413 to trace requests with more traces than this', '0')
    .option('--strict', 'also refuse (400) what the deployed service is reported to: dateTime not UTC YYYY-MM-DDTHH:MM:SSZ, no top-level "source", a loadNumber outside --load-number-pattern (default ^[A-Za-z0-9-]{1,35}$)')
    .option('--load-number-pattern <regex>', 'refuse (400) a loadNumber this regular expression does not match as a whole (also without --strict)')
    .option('-q, --quiet', 'do not print a line per request')
    .action(async (opts: Record<string, string | string[] | boolean | undefined>) => {
      const { runSandboxCommand } = await import('./sandbox/command.js');
      await runSandboxCommand(opts);
    });

  program
    .command('demo')
    .description('start the sandbox and the agent in one process with the simulator at high speed; show traces and milestones arriving')
    .option('--time-scale <n>', 'simulated seconds per real second', '400')
    .option('--keep', 'keep the demo\'s buffer directory instead of deleting it')
    .action(async (opts: { timeScale: string; keep?: boolean }) => {
      const { runDemo } = await import('./demo.js');
      const ok = await runDemo({ timeScale: Number(opts.timeScale), keep: opts.keep ?? false });
      process.exitCode = ok ? EXIT.OK : EXIT.FAILURE;
    });

  return program;
}

/**
 * Run until SIGTERM/SIGINT; stop gracefully within delivery.shutdown_timeout_s, which the
 * schema keeps below the unit's TimeoutStopSec: past it the agent exits by itself (status 1)
 * rather than be killed mid-write. SIGHUP reloads the config file and the key; an invalid
 * new config is refused and the running one kept.
 */
export async function runDaemon(loaded: LoadedConfig, key: ReturnType<typeof resolveSubscriptionKey>, log: ReturnType<typeof createLogger>): Promise<void> {
  let stopRequested: ((signal: string, exitCode?: number) => void) | undefined;
  let pendingStop: { signal: string; exitCode?: number } | undefined;
  const agent = new Agent(loaded, key, log, {
    onFatal: (e) => {
      const code = e instanceof AgentError ? e.exitCode : EXIT.FAILURE;
      if (stopRequested) stopRequested('fatal', code);
      else pendingStop = { signal: 'fatal', exitCode: code };
    },
  });
  // A bug must not cost the readings waiting in memory: commit them, then exit non-zero so
  // systemd restarts the service (Restart=on-failure).
  const onFatal = (err: unknown) => {
    log.fatal({ err: err instanceof Error ? { message: err.message, stack: err.stack } : String(err) }, 'unexpected error; committing queued readings and exiting');
    try {
      agent.ingest?.flush(true);
    } catch {
      // Nothing more can be saved.
    }
    process.exit(EXIT.FAILURE);
  };
  process.on('uncaughtException', onFatal);
  process.on('unhandledRejection', onFatal);
  // Type=notify: systemd counts the agent as started at READY=1, and restarts it when the
  // event loop stops beating the watchdog. Off systemd this does nothing.
  const notifier = new SystemdNotifier(log.child({ component: 'systemd' }));
  const running = () => `running: ${agent.sources.length} source(s)`;
  await notifier.start();
  // A signal during start is kept and acted on once the agent is up.
  const early = (signal: NodeJS.Signals) => () => {
    pendingStop ??= { signal };
  };
  const earlyTerm = early('SIGTERM');
  const earlyInt = early('SIGINT');
  process.once('SIGTERM', earlyTerm);
  process.once('SIGINT', earlyInt);
  try {
    await agent.start();
  } finally {
    process.off('SIGTERM', earlyTerm);
    process.off('SIGINT', earlyInt);
  }
  void notifier.ready(running());
  const onHup = () => {
    void notifier.reloading('reloading the configuration');
    try {
      const next = loadConfig(loaded.file);
      const nextKey = resolveSubscriptionKey(next);
      for (const w of next.warnings) log.warn(w);
      agent
        .reload(next, nextKey)
        .then(({ applied, needsRestart }) => {
          log.info({ config: next.file, keyOrigin: nextKey.origin, applied, needsRestart }, 'configuration reloaded');
          if (needsRestart.length) log.warn({ needsRestart }, `changed settings that apply only after a restart (systemctl restart telematics-agent): ${needsRestart.join(', ')}`);
        })
        .catch((e) => log.error({ err: (e as Error).message }, 'reload failed'))
        .finally(() => void notifier.ready(running()));
    } catch (e) {
      const problems = e instanceof ConfigError ? e.problems : [(e as Error).message];
      log.error({ problems }, 'new configuration refused; still running with the previous one');
      void notifier.ready(running());
    }
  };
  process.on('SIGHUP', onHup);
  const exitCode = await new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string, code = EXIT.OK as number) => {
      if (stopping) return;
      stopping = true;
      log.info({ signal }, 'stopping');
      void notifier.stopping('stopping: committing readings, finishing deliveries');
      const limitS = agent.config.delivery.shutdown_timeout_s;
      const deadline = setTimeout(() => {
        log.error({ shutdownTimeoutS: limitS }, 'could not stop within delivery.shutdown_timeout_s; exiting now (what is committed stays buffered)');
        try {
          agent.ingest.flush(true);
        } catch {
          // Exiting anyway.
        }
        process.exit(EXIT.FAILURE);
      }, limitS * 1000);
      agent
        .stop()
        .catch((e) => log.error({ err: (e as Error).message }, 'error while stopping'))
        .finally(() => {
          clearTimeout(deadline);
          resolve(code);
        });
    };
    stopRequested = stop;
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
    if (pendingStop) stop(pendingStop.signal, pendingStop.exitCode);
  });
  process.off('SIGHUP', onHup);
  await notifier.stop();
  if (exitCode !== EXIT.OK) process.exitCode = exitCode;
}

/** Set by `run`: the daemon keeps collecting when nobody reads its output any more. */
let daemon = false;

export async function main(argv = process.argv): Promise<void> {
  // A reader that goes away (`telematics-agent load list | head -1`) is no failure of ours: a
  // command stops quietly, as one killed by SIGPIPE would, instead of dying with a stack trace.
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code !== 'EPIPE') throw e;
    if (!daemon) process.exit(EXIT.OK);
  });
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (e) {
    process.exitCode = exitCodeFor(e);
  }
}

/** Print what ended the command and give its exit status: each AgentError carries its own. */
function exitCodeFor(e: unknown): number {
  if (e instanceof CommanderError) {
    // Commander has printed its message. --help and --version come through here too, with exit code 0.
    return e.exitCode === 0 ? EXIT.OK : EXIT.USAGE;
  }
  if (e instanceof AgentError) {
    err(e.report());
    return e.exitCode;
  }
  err(`error: ${(e as Error)?.message ?? String(e)}`);
  return EXIT.FAILURE;
}
