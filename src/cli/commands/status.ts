/**
 * `status`: the report of ../status.ts, read from the buffer without the daemon; exit 3
 * when the daemon is not running.
 */
import type { Command } from 'commander';
import { configOption, load, out, withStore } from '../common.js';
import { EXIT } from '../exit.js';
import { buildStatus, formatStatus } from '../status.js';

export function addStatusCommand(program: Command): void {
  program
    .command('status')
    .description('queue depths, last successful push, last error, active loads, sources; exit 3 when the daemon is not running')
    .addOption(configOption())
    .option('--json', 'machine-readable output')
    .action((opts: { config?: string; json?: boolean }) => {
      const loaded = load(opts.config);
      const report = withStore(loaded, (store) => buildStatus(store, { deviceId: loaded.deviceId, configFile: loaded.file, buffer: loaded.config.buffer.path }));
      out(opts.json ? JSON.stringify(report, null, 2) : formatStatus(report));
      if (!report.daemon.running) process.exitCode = EXIT.NOT_RUNNING;
    });
}
