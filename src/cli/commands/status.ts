/**
 * `status`: the report of ../status.ts, read from the buffer without the daemon; exit 3
 * when the daemon is not running.
 */
import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { Store } from '../../buffer/store.js';
import { configOption, load, out, withStore } from '../common.js';
import { EXIT } from '../exit.js';
import { buildStatus, formatStatus, type StatusReport } from '../status.js';

export function addStatusCommand(program: Command): void {
  program
    .command('status')
    .description('queue depths, last successful push, last error, active loads, sources; exit 3 when the daemon is not running')
    .addOption(configOption())
    .option('--json', 'machine-readable output')
    .action((opts: { config?: string; json?: boolean }) => {
      const loaded = load(opts.config);
      const buffer = loaded.config.buffer.path;
      const info = { deviceId: loaded.deviceId, configFile: loaded.file, buffer, lateReadingsS: loaded.config.loads.late_readings_s };
      let report: StatusReport;
      if (buffer !== ':memory:' && !existsSync(buffer)) {
        // status only reads: a buffer that is not there is not created (by root, in a directory
        // the service user could then not use, or at a path the daemon has not taken up yet).
        const empty = Store.open(':memory:');
        try {
          report = buildStatus(empty, info);
        } finally {
          empty.close();
        }
        report.daemon.note = `no buffer at ${buffer}: the daemon has never run with this config`;
      } else {
        report = withStore(loaded, (store) => buildStatus(store, info));
      }
      out(opts.json ? JSON.stringify(report, null, 2) : formatStatus(report));
      if (!report.daemon.running) process.exitCode = EXIT.NOT_RUNNING;
    });
}
