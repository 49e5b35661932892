/**
 * `status`: the report of ../status.ts, read from the buffer without the daemon. Its exit
 * status is for monitoring scripts: 3 when the daemon is not running, 5 when delivery is
 * paused, 6 when a source is unhealthy, the first that applies; else 0.
 */
import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { EXIT } from '../../exit.js';
import { configOption, load, out, withReader } from '../common.js';
import { buildStatus, formatStatus, type StatusReport } from '../status.js';

export function addStatusCommand(program: Command): void {
  program
    .command('status')
    .description('queue depths, last successful push, last error, active loads, sources; exit 3 when the daemon is not running, 5 when delivery is paused, 6 when a source is unhealthy')
    .addOption(configOption())
    .option('--json', 'machine-readable output')
    .action((opts: { config?: string; json?: boolean }) => {
      const loaded = load(opts.config);
      const buffer = loaded.config.buffer.path;
      const info = {
        deviceId: loaded.deviceId,
        configFile: loaded.file,
        buffer,
        lateReadingsS: loaded.config.loads.late_readings_s,
        withoutLoad: { recorded: loaded.config.privacy.record_without_load, keepS: loaded.config.loads.keep_unassigned_s },
      };
      // status only reads (withReader): a buffer that is not there is not created (by root, in
      // a directory the service user could then not use, or at a path the daemon has not taken
      // up yet), and an older one is not migrated under the daemon still running on it.
      const missing = buffer !== ':memory:' && !existsSync(buffer);
      const report: StatusReport = withReader(loaded, (store) => buildStatus(store, info));
      if (missing) report.daemon.note = `no buffer at ${buffer}: the daemon has never run with this config`;
      out(opts.json ? JSON.stringify(report, null, 2) : formatStatus(report));
      process.exitCode = statusExit(report);
    });
}

/** The exit status of a report: the worst state first. */
export function statusExit(r: StatusReport): number {
  if (!r.daemon.running) return EXIT.NOT_RUNNING;
  if (r.delivery?.paused) return EXIT.PAUSED;
  if (r.sources.some((s) => !s.healthy)) return EXIT.SOURCE_UNHEALTHY;
  return EXIT.OK;
}
