/**
 * `buffer salvage`: what can still be read from a buffer that was set aside, copied into
 * the running one.
 */
import { resolve } from 'node:path';
import type { Command } from 'commander';
import { CliError } from '../../errors.js';
import { EXIT } from '../../exit.js';
import { configOption, load, out, withStore } from '../common.js';

export function addBufferCommand(program: Command): void {
  const buffer = program.command('buffer').description('the SQLite buffer itself');
  buffer
    .command('salvage')
    .description('copy every readable milestone and undelivered reading of a buffer that was set aside (e.g. buffer.db.corrupt-<time>) into the running buffer')
    .argument('<file>', 'the old buffer file (its -wal beside it is read too; their content is never changed, though SQLite may add its -shm index beside them)')
    .option('--force', 'copy it again although it was salvaged into this buffer before (its readings would be sent twice); a salvage that was cut off continues without it')
    .option('--json', 'print the report as JSON')
    .addOption(configOption())
    .action(async (file: string, opts: { force?: boolean; json?: boolean; config?: string }) => {
      const { salvage } = await import('../../buffer/salvage.js');
      const { historyOptions } = await import('../../config/time-place.js');
      const loaded = load(opts.config);
      if (resolve(file) === resolve(loaded.config.buffer.path)) throw new CliError(`${file} is the running buffer itself; give the file that was set aside`, EXIT.USAGE);
      const report = withStore(loaded, (store) => salvage(file, store, { force: opts.force, deviceId: loaded.deviceId, history: historyOptions(loaded.config.history) }));
      if (opts.json) return out(JSON.stringify(report, null, 2));
      const unreadable = Object.entries(report.unreadable).map(([t, n]) => (n === 'table' ? `table ${t}` : `${n} ${t} row(s)`));
      if (report.resumed) out(`continued the salvage of ${file} that was cut off before; the counts are of this run`);
      if (report.pageByPage) {
        const p = report.pageByPage;
        out(
          `SQLite could not read ${file}: it was read page by page (${p.pages} page(s); ${p.unreadablePages} held no rows that could be read${p.unreadableRows ? `, ${p.unreadableRows} row(s) could not be read` : ''})`,
        );
      }
      out(
        `salvaged from ${file}: ${report.loads} load(s), ${report.milestones} milestone(s) (${report.pendingMilestones} still to send), ${report.readings} reading(s) not yet delivered, ${report.deadLetters} dead letter(s), ${report.positions} position(s) of history; ${report.skippedDelivered} reading(s) skipped as delivered`,
      );
      if (report.skippedNoLoad) out(`${report.skippedNoLoad} reading(s) skipped: their load is here already and its window here does not hold them`);
      out(unreadable.length ? `unreadable, not copied: ${unreadable.join(', ')}` : 'every row was readable');
    });
}
