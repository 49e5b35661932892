/**
 * `run`: the daemon in the foreground, what the systemd unit starts.
 */
import type { Command } from 'commander';
import { Agent } from '../../agent.js';
import { ConfigError, loadConfig, preflight, type KeyLookup, type LoadedConfig } from '../../config/load.js';
import { upgradeDue } from '../../buffer/upgrade-due.js';
import { AgentError } from '../../errors.js';
import { EXIT } from '../../exit.js';
import { createLogger } from '../../log.js';
import { SystemdNotifier } from '../../notify.js';
import { applyDaemonV8Flags, collectAfterStart } from '../../v8-tuning.js';
import { configOption, load } from '../common.js';
import { claimEarlyHangup } from '../early-hangup.js';

export function addRunCommand(program: Command): void {
  program
    .command('run')
    .description('run the agent in the foreground (what the systemd unit starts); stops cleanly on SIGTERM')
    .addOption(configOption())
    .action(async (opts: { config?: string }) => {
      applyDaemonV8Flags();
      const loaded = load(opts.config);
      const key = preflight(loaded);
      const log = createLogger({ level: loaded.config.log.level });
      await runDaemon(loaded, key, log);
    });
}

/**
 * The start timeout asked for when the buffer's schema is upgraded at the start: its steps are
 * each one transaction that must not be cut off (a cut step starts over at the next start).
 */
const UPGRADE_START_S = 1800;

/** Said at every reload whose key is the systemd credential (see KeyLookup.credential). */
export const KEY_NEEDS_RESTART =
  'the key is the copy systemd made of the key file when the service started (LoadCredential=): a new key file takes effect with systemctl restart telematics-agent, not with a reload';

/**
 * Run until SIGTERM/SIGINT; stop gracefully within delivery.shutdown_timeout_s, which the
 * schema keeps below the unit's TimeoutStopSec: past it the agent exits by itself (status 1)
 * rather than be killed mid-write. SIGHUP reloads the config file and the key; an invalid
 * new config is refused and the running one kept.
 */
export async function runDaemon(loaded: LoadedConfig, key: KeyLookup, log: ReturnType<typeof createLogger>): Promise<void> {
  let stopRequested: ((signal: string, exitCode?: number) => void) | undefined;
  let pendingStop: { signal: string; exitCode?: number } | undefined;
  const agent = new Agent(loaded, key, log, {
    onFatal: (e) => {
      const code = e instanceof AgentError ? e.exitCode : EXIT.FAILURE;
      if (stopRequested) stopRequested('fatal', code);
      else pendingStop = { signal: 'fatal', exitCode: code };
    },
  });
  // Exiting early must not cost the readings waiting in memory: commit them, then exit
  // non-zero so systemd restarts the service (Restart=on-failure).
  const commitAndExit = (): never => {
    try {
      agent.ingest?.flush(true);
    } catch {
      // Nothing more can be saved.
    }
    process.exit(EXIT.FAILURE);
  };
  const onFatal = (err: unknown) => {
    log.fatal({ err: err instanceof Error ? { message: err.message, stack: err.stack } : String(err) }, 'unexpected error; committing queued readings and exiting');
    commitAndExit();
  };
  process.on('uncaughtException', onFatal);
  process.on('unhandledRejection', onFatal);
  // One listener per signal for the daemon's whole life. Removing a signal's last listener
  // gives it back its default action, death with nothing committed: a listener swapped for
  // another leaves a moment in which `systemctl stop` kills the agent outright. A signal during
  // start is kept and acted on once the agent is up; a second one while stopping exits at once.
  let onSignal = (signal: NodeJS.Signals) => {
    pendingStop ??= { signal };
  };
  const signalled = (signal: NodeJS.Signals) => onSignal(signal);
  process.on('SIGTERM', signalled);
  process.on('SIGINT', signalled);
  // SIGHUP's default action is death too: a reload asked for while the agent starts (a
  // `systemctl reload` or a HUP a second too early, even before this code had loaded) is kept
  // and done once it is up.
  let hupPending = false;
  let onHangup = () => {
    hupPending = true;
  };
  const hangup = () => onHangup();
  process.on('SIGHUP', hangup);
  if (claimEarlyHangup()) hupPending = true;
  // Type=notify: systemd counts the agent as started at READY=1, and restarts it when the
  // event loop stops beating the watchdog. Off systemd this does nothing.
  const notifier = new SystemdNotifier(log.child({ component: 'systemd' }));
  const running = () => `running: ${agent.sources.length} source(s)`;
  await notifier.start();
  const due = upgradeDue(loaded.config.buffer.path);
  if (due) {
    const status = `upgrading the buffer (schema ${due.from} to ${due.to}, ${Math.ceil(due.bytes / 1_048_576)} MB)`;
    log.info({ buffer: loaded.config.buffer.path, extendS: UPGRADE_START_S }, `${status}: systemd's start timeout extended`);
    await notifier.extendStart(UPGRADE_START_S, status);
  }
  await agent.start();
  void notifier.ready(running());
  collectAfterStart();
  const onHup = () => {
    void notifier.reloading('reloading the configuration');
    try {
      const next = loadConfig(loaded.file);
      const nextKey = preflight(next);
      for (const w of next.warnings) log.warn(w);
      agent
        .reload(next, nextKey)
        .then(({ applied, needsRestart }) => {
          log.info({ config: next.file, keyOrigin: nextKey.origin, applied, needsRestart }, 'configuration reloaded');
          // The operator who fixed a refused key and reloaded would otherwise wait in vain.
          if (nextKey.credential) log.info({ keyOrigin: nextKey.origin }, KEY_NEEDS_RESTART);
          if (needsRestart.length) log.warn({ needsRestart }, `changed settings that apply only after a restart (systemctl restart telematics-agent): ${needsRestart.join(', ')}`);
        })
        .catch((e) => log.error({ err: (e as Error).message }, 'reload failed'))
        .finally(() => void notifier.ready(running()));
    } catch (e) {
      const problems = e instanceof ConfigError ? e.located() : [(e as Error).message];
      log.error({ problems }, 'new configuration refused; still running with the previous one');
      void notifier.ready(running());
    }
  };
  onHangup = onHup;
  if (hupPending) onHup();
  const exitCode = await new Promise<number>((resolve) => {
    let stopping = false;
    const exitNow = (why: Record<string, unknown>, msg: string) => {
      log.error(why, `${msg}; exiting now (what is committed stays buffered)`);
      commitAndExit();
    };
    const stop = (signal: string, code = EXIT.OK as number) => {
      if (stopping) return;
      stopping = true;
      log.info({ signal }, 'stopping');
      void notifier.stopping('stopping: committing readings, finishing deliveries');
      const limitS = agent.config.delivery.shutdown_timeout_s;
      const deadline = setTimeout(() => exitNow({ shutdownTimeoutS: limitS }, 'could not stop within delivery.shutdown_timeout_s'), limitS * 1000);
      agent
        .stop()
        .catch((e) => log.error({ err: (e as Error).message }, 'error while stopping'))
        .finally(() => {
          clearTimeout(deadline);
          resolve(code);
        });
    };
    stopRequested = stop;
    onSignal = (signal) => (stopping ? exitNow({ signal }, `${signal} again while stopping`) : stop(signal));
    if (pendingStop) stop(pendingStop.signal, pendingStop.exitCode);
  });
  process.off('SIGHUP', hangup);
  await notifier.stop();
  if (exitCode !== EXIT.OK) process.exitCode = exitCode;
}
