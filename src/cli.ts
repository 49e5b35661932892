/**
 * The `telematics-agent` command. Every subcommand has --help; exit statuses are in
 * cli/exit.ts and the README. Output meant for scripts is behind --json.
 */
import { Command, CommanderError, Option } from 'commander';
import { Agent } from './agent.js';
import { Store } from './buffer/store.js';
import { CliError, EXIT } from './cli/exit.js';
import { buildStatus, formatStatus } from './cli/status.js';
import { ConfigError, loadConfig, resolveConfigPath, resolveSubscriptionKey, type LoadedConfig } from './config/load.js';
import { createLogger } from './log.js';
import { MilestoneError, recordMilestone } from './milestones/record.js';
import { readStopsFile, StopsFileError } from './milestones/stops.js';
import { SystemdNotifier } from './notify.js';
import { packageVersion } from './paths.js';
import { LoadError } from './buffer/store.js';

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
  const store = Store.open(loaded.config.buffer.path, { synchronous: loaded.config.buffer.synchronous, cacheKb: loaded.config.buffer.cache_kb });
  try {
    return fn(store);
  } finally {
    store.close();
  }
}

function parseTime(value: string, what: string): number {
  const ms = Date.parse(value);
  if (Number.isNaN(ms)) throw new CliError(`${what}: expected an ISO 8601 time such as 2026-11-22T14:05:00-06:00, got ${JSON.stringify(value)}`, EXIT.DATA);
  return ms;
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
    .configureOutput({ writeErr: (s) => process.stderr.write(s) })
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText(
      'after',
      `
Exit status: 0 ok, 1 run-time failure, 3 daemon not running (status), 64 usage error,
65 bad input data, 78 invalid configuration.`,
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
    .argument('<loadNumber>', 'the load number the service knows')
    .requiredOption('-r, --resource <id>', 'resourceId the readings are tagged with')
    .option('-t, --resource-type <type>', 'resourceType sent with traces (Truck, Trailer, Driver)', 'Truck')
    .option('-s, --stops <file>', 'JSON file with the load\'s stops (see config/stops.example.json)')
    .addOption(configOption())
    .action((loadNumber: string, opts: { resource: string; resourceType: string; stops?: string; config?: string }) => {
      const stops = opts.stops ? readStopsFile(opts.stops) : [];
      const loaded = load(opts.config);
      const row = withStore(loaded, (store) =>
        store.startLoad({ loadNumber, resourceId: opts.resource, resourceType: opts.resourceType, stops, nowMs: Date.now() }),
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

  program
    .command('milestone')
    .description('record a milestone for a load; it is committed when this returns and the daemon sends it within seconds')
    .requiredOption('-l, --load <loadNumber>', 'load number')
    .requiredOption('--code <code>', 'eventCode, e.g. X3 arrived at pick-up, AF departed, X1 arrived at delivery, D1 unloaded, SD delayed, AA/AB appointment')
    .option('--reason <code>', 'reasonCode (default: codes.default_reason, NS)')
    .option('--stop <n>', 'stopsequenceNumber (1 = first stop)')
    .option('--time <iso>', 'when it happened or, for appointments, the appointment time (default: now)')
    .option('--city <name>', 'eventCity (default: from the stop, else from the last position)')
    .option('--state <code>', 'eventState, two letters (default: as for --city)')
    .option('--json', 'print the committed milestone as JSON')
    .addOption(configOption())
    .action((opts: { load: string; code: string; reason?: string; stop?: string; time?: string; city?: string; state?: string; json?: boolean; config?: string }) => {
      const timeMs = opts.time === undefined ? undefined : parseTime(opts.time, '--time');
      const stop = opts.stop === undefined ? undefined : parseIntArg(opts.stop, '--stop');
      const loaded = load(opts.config);
      const { row, warnings } = withStore(loaded, (store) =>
        recordMilestone(store, loaded.config, {
          loadNumber: opts.load,
          code: opts.code,
          reason: opts.reason,
          stop,
          timeMs,
          city: opts.city,
          state: opts.state?.toUpperCase(),
        }),
      );
      for (const w of warnings) err(`warning: ${w}`);
      if (opts.json) out(JSON.stringify(row, null, 2));
      else out(`milestone ${row.id} (${String(row.body.eventCode)} for load ${row.loadNumber}) committed; the running agent sends it within seconds`);
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
 * Run until SIGTERM/SIGINT; stop gracefully within the unit's TimeoutStopSec.
 * SIGHUP reloads the config file and the key; an invalid new config is refused and the
 * running one kept.
 */
export async function runDaemon(loaded: LoadedConfig, key: ReturnType<typeof resolveSubscriptionKey>, log: ReturnType<typeof createLogger>): Promise<void> {
  const agent = new Agent(loaded, key, log);
  // A bug must not cost the readings waiting in memory: commit them, then exit non-zero so
  // systemd restarts the service (Restart=on-failure).
  const onFatal = (err: unknown) => {
    log.fatal({ err: err instanceof Error ? { message: err.message, stack: err.stack } : String(err) }, 'unexpected error; committing queued readings and exiting');
    try {
      agent.ingest?.flush();
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
  await agent.start();
  void notifier.ready(running());
  const onHup = () => {
    void notifier.reloading('reloading the configuration');
    try {
      const next = loadConfig(loaded.file);
      const nextKey = resolveSubscriptionKey(next);
      for (const w of next.warnings) log.warn(w);
      agent
        .reload(next, nextKey)
        .then((notes) => {
          for (const n of notes) log.warn(n);
          log.info({ config: next.file, keyOrigin: nextKey.origin }, 'configuration reloaded');
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
  await new Promise<void>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      log.info({ signal }, 'stopping');
      void notifier.stopping('stopping: committing readings, finishing deliveries');
      agent
        .stop()
        .catch((e) => log.error({ err: (e as Error).message }, 'error while stopping'))
        .finally(resolve);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  process.off('SIGHUP', onHup);
  await notifier.stop();
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

function exitCodeFor(e: unknown): number {
  if (e instanceof CommanderError) {
    // --help and --version come through here too, with exit code 0.
    return e.exitCode === 0 ? EXIT.OK : EXIT.USAGE;
  }
  if (e instanceof ConfigError) {
    err(e.message);
    return EXIT.CONFIG;
  }
  if (e instanceof CliError) {
    err(`error: ${e.message}`);
    return e.exitCode;
  }
  if (e instanceof LoadError || e instanceof MilestoneError || e instanceof StopsFileError) {
    err(`error: ${e.message}`);
    return EXIT.DATA;
  }
  err(`error: ${(e as Error)?.message ?? String(e)}`);
  return EXIT.FAILURE;
}
