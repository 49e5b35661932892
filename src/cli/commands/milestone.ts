/**
 * `milestone`: record one by hand (checked, placed and committed before the command returns;
 * the daemon sends it), and `milestone list`: a load's milestones and what became of them.
 */
import type { Command } from 'commander';
import { CliError } from '../../errors.js';
import { EXIT } from '../../exit.js';
import { formatTime } from '../../geo/timezone.js';
import { MilestoneError, recordMilestone } from '../../milestones/record.js';
import { cliWarning } from '../../milestones/warnings.js';
import { commandNow } from '../now.js';
import { configOption, err, load, out, parseCoordinate, parseIntArg, withReader, withStore } from '../common.js';

export function addMilestoneCommand(program: Command): void {
  const milestone = program
    .command('milestone')
    .description('record a milestone for a load (committed when this returns; the daemon sends it within seconds), or list them')
    .option('-l, --load <loadNumber>', 'load number (required)')
    .option('--code <code>', 'eventCode from codes.events, e.g. X3 arrived at pick-up, AF departed, X1 arrived at delivery, D1 unloaded, SD delayed, AA/AB appointment (required)')
    .option('--reason <code>', 'reasonCode from codes.reasons (default: codes.default_reason, NS)')
    .option('--stop <n>', 'stopsequenceNumber (1 = first stop)')
    .option('--time <iso>', 'when it happened (for AA/AB the appointment time); without an offset it is read in the zone of the place, else of the last fix (default: now)')
    .option('--lat <degrees>', 'where it happened (with --lon); default: the stop, else the last fix')
    .option('--lon <degrees>', 'where it happened (with --lat)')
    .option('--city <name>', 'eventCity (default: from the position)')
    .option('--state <code>', 'eventState, two letters (default: from the position)')
    .option('--force', 'record it even with a code outside codes.events/codes.reasons, a second time for the same load, code and stop, or a --time more than sources_time.max_past_days old')
    .option('--json', 'print the committed milestone as JSON')
    .addOption(configOption())
    .addHelpText(
      'after',
      `
The place is, first match wins: --lat/--lon or --city/--state (a city the gazetteer does
not know takes its state's zone; a state with several zones then needs --time with its
offset); the stop (--stop); the resource's last fix if taken within milestones.max_fix_age_s
of --time. Without any, it goes without a city and state (a warning says so).
A --time without an offset is read in the zone of that place, else of the resource's last
fix whatever its age; with neither it is refused (exit 65): give the offset, such as
2026-11-25T22:53-06:00. It is never read in this device's zone. On the night the clocks
change, a time that occurs twice is the first, one they skip is moved forward (a warning
says which, and the offset that means the other). What was recorded is printed
in UTC and in the zone used, with where that zone came from. A --time before 2025-01-01, or
an appointment more than a year ahead, is refused even with --force; one more than
sources_time.max_past_days (30) old is refused unless --force.`,
    )
    .action(
      (opts: { load?: string; code?: string; reason?: string; stop?: string; time?: string; lat?: string; lon?: string; city?: string; state?: string; force?: boolean; json?: boolean; config?: string }) => {
        if (!opts.load || !opts.code)
          throw new CliError(`required option${!opts.load && !opts.code ? 's' : ''} ${[!opts.load && '--load', !opts.code && '--code'].filter(Boolean).join(' and ')} not specified`, EXIT.USAGE);
        const stop = opts.stop === undefined ? undefined : parseIntArg(opts.stop, '--stop', 1);
        if ((opts.lat === undefined) !== (opts.lon === undefined)) throw new CliError('--lat and --lon go together', EXIT.USAGE);
        const lat = opts.lat === undefined ? undefined : parseCoordinate(opts.lat, '--lat', 90);
        const lon = opts.lon === undefined ? undefined : parseCoordinate(opts.lon, '--lon', 180);
        if (opts.state !== undefined && !/^[A-Za-z]{2}$/.test(opts.state)) throw new CliError(`--state: expected a two-letter state or province code, got ${JSON.stringify(opts.state)}`, EXIT.DATA);
        const loaded = load(opts.config);
        let clockNote: string | undefined;
        const { row, warnings, timeMs, placement } = withStore(loaded, (store) => {
          const now = commandNow(store);
          clockNote = now.note;
          return recordMilestone(
            store,
            loaded.config,
            {
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
            },
            now.nowMs,
          );
        });
        if (clockNote) err(`note: ${clockNote}`);
        for (const w of warnings) err(`warning: ${cliWarning(w)}`);
        if (opts.json) return out(JSON.stringify(row, null, 2));
        const local = formatTime(new Date(timeMs), placement.zone, 'local');
        // Either may be missing (--city without --state): never print "Chicago, undefined".
        const named = [row.body.eventCity, row.body.eventState].filter(Boolean).map(String).join(', ');
        const where = named ? ` at ${named}` : '';
        out(
          `milestone ${row.id} (${row.code} for load ${row.loadNumber}${row.stop === null ? '' : `, stop ${row.stop}`}) committed: ${local.dateTime.replace('T', ' ').replace(/\.\d+/, '')} ${local.timeZoneCode} (${local.timeZoneOffset}) = ${new Date(timeMs).toISOString().replace(/\.000Z$/, 'Z')}${where} (place: ${placement.source}); zone ${placement.zone} (of ${placement.zoneFrom}); the running agent sends it within seconds`,
        );
      },
    );
  milestone
    .command('list')
    .description("a load's milestones: state, attempts, the service's last answer and correlation id")
    .requiredOption('-l, --load <loadNumber>', 'load number (required)')
    .option('--json', 'machine-readable output')
    .addOption(configOption())
    .action((opts: { load: string; json?: boolean; config?: string }) => {
      // `milestone --config F list ...` gives the option to the parent command.
      const loaded = load(opts.config ?? (milestone.opts() as { config?: string }).config);
      const rows = withReader(loaded, (store) => {
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
        out(`${m.id}\t${m.code}\tstop ${m.stop ?? '-'}\t${time}\t${m.origin ?? 'earlier version'}\t${state(m)}\t${m.attempts} attempt(s)\t${answer}\tcorrelation ${m.correlationId ?? '-'}`);
      }
    });
}
