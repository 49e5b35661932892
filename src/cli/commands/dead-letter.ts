/**
 * `dead-letter list|retry`: what the service refused, with its answer, and putting it back
 * in the queue once the cause is fixed.
 */
import { type Command, Option } from 'commander';
import { CliError } from '../../errors.js';
import { EXIT } from '../../exit.js';
import { configOption, load, out, parseIntArg, withReader, withStore } from '../common.js';

export function addDeadLetterCommand(program: Command): void {
  const dead = program.command('dead-letter').description('records the service refused, parked with its answer so the rest could go');
  dead
    .command('list')
    .description('list parked milestones and trace points with the status and body the service answered')
    .option('--json', 'machine-readable output')
    .addOption(configOption())
    .action((opts: { json?: boolean; config?: string }) => {
      const loaded = load(opts.config);
      const rows = withReader(loaded, (store) => store.listDeadLetters());
      if (opts.json) return out(JSON.stringify(rows, null, 2));
      if (rows.length === 0) return out('no dead letters');
      for (const r of rows) {
        const what =
          r.kind === 'milestone'
            ? `milestone ${String((r.body as { eventCode?: string }).eventCode)}`
            : r.recordIds
              ? `trace request refused whole (${r.recordIds.length} points, readings ${r.recordIds[0]}-${r.recordIds[r.recordIds.length - 1]})`
              : `trace point (reading ${r.recordId})`;
        out(`${r.id}\t${new Date(r.createdMs).toISOString()}\tload ${r.loadNumber}\t${what}\tHTTP ${r.status ?? '-'}\t${(r.response ?? '').replace(/\s+/g, ' ').slice(0, 200)}`);
      }
    });
  dead
    .command('retry')
    .description('put dead letters back in the queue after fixing the cause; the running agent sends them within seconds')
    .addOption(new Option('--id <n...>', 'dead letter ids (from "dead-letter list")').conflicts('all'))
    .option('--all', 'every dead letter')
    .addOption(configOption())
    .action((opts: { id?: string[]; all?: boolean; config?: string }) => {
      if (!opts.all && !opts.id?.length) throw new CliError('give --id N (one or more) or --all', EXIT.USAGE);
      const ids = opts.all ? 'all' : opts.id!.map((v) => parseIntArg(v, '--id', 1));
      const loaded = load(opts.config);
      // All or nothing: exit 65 says nothing was written (README), so no id is put back when one is unknown.
      const n = withStore(loaded, (store) => store.retryDeadLetters(ids, { allKnown: true }));
      out(`${n} dead letter(s) put back in the queue`);
    });
}
