/**
 * `load start|end|list`: which loads a resource carries (one or several at once: less than
 * truckload, consolidated routes); readings are sent only while it has one.
 */
import type { Command } from 'commander';
import { CliError } from '../../errors.js';
import { EXIT } from '../../exit.js';
import { resourceTypeOf, RESOURCE_TYPES } from '../../milestones/codes.js';
import { checkId, describeStart, startLoadChecked } from '../../milestones/assign.js';
import { cliWarning } from '../../milestones/warnings.js';
import { checkLoadNumber } from '../../milestones/record.js';
import { readStopsFile } from '../../milestones/stops.js';
import { commandNow } from '../now.js';
import { configOption, err, load, out, withReader, withStore } from '../common.js';

export function addLoadCommand(program: Command): void {
  const loadCmd = program.command('load').description('assign loads to resources, several at once if need be (readings are kept only while a load is active)');
  loadCmd
    .command('start')
    .description('start a load on a resource (tractor, trailer), beside any other load it carries; its window opens now: readings from now on')
    .argument('<loadNumber>', 'the load number the service knows; must match api.load_number_pattern (default ^[A-Za-z0-9-]{1,35}$)')
    .requiredOption('-r, --resource <id>', 'resourceId the readings are tagged with')
    .option('-t, --resource-type <type>', `resourceType sent with traces: ${RESOURCE_TYPES.join(', ')}`, 'Truck')
    .option('-s, --stops <file>', "JSON file with the load's stops (see config/stops.example.json)")
    .option('--from <time>', 'open its window at this earlier time (ISO 8601 with offset, within loads.keep_unassigned_s): it takes the readings kept without a load since then')
    .addOption(configOption())
    .action((loadNumber: string, opts: { resource: string; resourceType: string; stops?: string; from?: string; config?: string }) => {
      const resourceType = resourceTypeOf(opts.resourceType);
      if (!resourceType) throw new CliError(`--resource-type: expected one of ${RESOURCE_TYPES.join(', ')}, got ${JSON.stringify(opts.resourceType)}`, EXIT.DATA);
      checkId(opts.resource, '--resource');
      const stops = opts.stops ? readStopsFile(opts.stops) : [];
      const loaded = load(opts.config);
      // Before the buffer is opened (or created) for it: the service's pattern first (it says
      // more), then the length any pattern must keep to.
      checkLoadNumber(loadNumber, loaded.config);
      checkId(loadNumber, '<loadNumber>');
      // Now as the running agent knows it: on a device booted 12 h behind, the system clock
      // refused a --from five minutes ago as in the future.
      let clockNote: string | undefined;
      const { row, warnings } = withStore(loaded, (store) => {
        const now = commandNow(store);
        clockNote = now.note;
        return startLoadChecked(store, loaded.config, { loadNumber, resourceId: opts.resource, resourceType, stops, from: opts.from }, now.nowMs, '--from');
      });
      if (clockNote) err(`note: ${clockNote}`);
      out(describeStart(row));
      for (const w of warnings) err(`warning: ${cliWarning(w)}`);
    });
  loadCmd
    .command('end')
    .description('end a load, and no other on its resource; its readings up to now are still delivered')
    .argument('<loadNumber>')
    .addOption(configOption())
    .action((loadNumber: string, opts: { config?: string }) => {
      const loaded = load(opts.config);
      // Not the system clock while it is unsynchronised: the window closed 12 h early.
      const note = withStore(loaded, (store) => {
        const now = commandNow(store);
        store.endLoad(loadNumber, now.nowMs);
        return now.note;
      });
      if (note) err(`note: ${note}`);
      out(`load ${loadNumber} ended`);
    });
  loadCmd
    .command('list')
    .description('list active loads by resource, each with the readings it still has to send (--all: ended ones too)')
    .option('-a, --all', 'include ended loads')
    .option('--json', 'machine-readable output')
    .addOption(configOption())
    .action((opts: { all?: boolean; json?: boolean; config?: string }) => {
      const loaded = load(opts.config);
      const loads = withReader(loaded, (store) => {
        // By resource, each one's loads oldest first: what a truck carries reads together.
        const rows = store.listLoads(opts.all ?? false).sort((a, b) => (a.resourceId < b.resourceId ? -1 : a.resourceId > b.resourceId ? 1 : a.startedMs - b.startedMs));
        const backlogs = store.backlogs(rows.map((l) => l.loadNumber));
        return rows.map((l) => ({ ...l, backlog: backlogs.get(l.loadNumber) ?? 0 }));
      });
      if (opts.json) return out(JSON.stringify(loads, null, 2));
      if (loads.length === 0) return out(opts.all ? 'no loads' : 'no active loads');
      for (const l of loads) {
        const state = l.endedMs === null ? 'active' : `ended ${new Date(l.endedMs).toISOString()}`;
        out(`${l.loadNumber}\t${l.resourceId}\t${l.resourceType}\t${l.stops.length} stop(s)\tnext stop ${l.nextStop ?? '-'}\t${l.backlog} reading(s) to send\t${state}`);
      }
    });
}
