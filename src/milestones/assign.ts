/**
 * Starting and ending a load as an engineer (`load start|end`) or dispatch (the fleet link's
 * `load-start`, `load-end`) asks for it: one set of checks for both, so a load refused on the
 * command line is refused over MQTT in the same words.
 */
import type { LoadRow, Store } from '../buffer/store.js';
import { unfedResource } from '../config/resources.js';
import type { Config } from '../config/schema.js';
import { CliError } from '../errors.js';
import { EXIT } from '../exit.js';
import { readDateTime } from '../geo/localtime.js';
import { appointmentMs, resolveAppointments } from './appointments.js';
import { offsetMistake } from './offset-form.js';
import { RESOURCE_TYPES, resourceTypeOf } from './codes.js';
import { checkLoadNumber } from './record.js';
import type { Stop } from './stops.js';
import type { MilestoneWarning } from './warnings.js';

export interface LoadStart {
  loadNumber: string;
  resourceId: string;
  /** `Truck` when not given. */
  resourceType?: string;
  stops?: Stop[];
  /** ISO 8601: the window opens then, and the load takes the readings kept unassigned since (`loads.keep_unassigned_s`). */
  from?: string;
}

/**
 * A resourceId or loadNumber as the service's schemas take it (1 to 64 characters): an empty
 * resource made a load no source could feed.
 */
export function checkId(value: string, name: string): void {
  if (value.length < 1 || value.length > 64) throw new CliError(`${name}: expected 1 to 64 characters, got ${value ? `${value.length} characters` : '""'}`, EXIT.DATA);
}

/** Check and commit a new load; `warnings` are what the operator should hear about it. `fromName`: how the caller calls `from` (the CLI: `--from`). */
export function startLoadChecked(store: Store, config: Config, input: LoadStart, nowMs = Date.now(), fromName = 'from'): { row: LoadRow; warnings: MilestoneWarning[] } {
  const resourceType = resourceTypeOf(input.resourceType ?? 'Truck');
  if (!resourceType) throw new CliError(`resourceType: expected one of ${RESOURCE_TYPES.join(', ')}, got ${JSON.stringify(input.resourceType)}`, EXIT.DATA);
  checkId(input.loadNumber, 'loadNumber');
  checkId(input.resourceId, 'resourceId');
  checkLoadNumber(input.loadNumber, config);
  const fromMs = input.from === undefined ? undefined : fromTime(input.from, config, nowMs, fromName);
  // Appointments read once, here, for the CLI and dispatch alike: instants from now on.
  const { stops, warnings } = resolveAppointments(input.stops ?? []);
  const row = store.startLoad({ loadNumber: input.loadNumber, resourceId: input.resourceId, resourceType, stops, nowMs, fromMs });
  const unfed = unfedResource(config, row.resourceId);
  return { row, warnings: [...(unfed ? [{ kind: 'unfed-resource', ...unfed } as const] : []), ...warnings, ...staleAppointments(row, config, nowMs)] };
}

/**
 * A load's `from`: a time with its offset (or Z), no later than now and no earlier than what
 * `loads.keep_unassigned_s` keeps: older readings of no load are gone, and a window opened
 * before them would promise what the load cannot have.
 */
function fromTime(text: string, config: Config, nowMs: number, name: string): number {
  // The reader of every typed time (milestone --time, appointments): Date.parse took RFC 2822
  // and prose, and made 2026-02-30 into 2026-03-02.
  const mistake = offsetMistake(text.trim());
  if (mistake) throw new CliError(`${name}: ${mistake}`, EXIT.DATA);
  const read = readDateTime(text.trim());
  const ms = read?.kind === 'instant' ? read.ms : Number.NaN;
  if (Number.isNaN(ms)) throw new CliError(`${name}: expected an ISO 8601 time with its offset (2026-03-01T08:00:00Z), got ${JSON.stringify(text)}`, EXIT.DATA);
  if (ms > nowMs) throw new CliError(`${name}: ${text} is in the future; a load takes readings from the past only`, EXIT.DATA);
  const keepS = config.loads.keep_unassigned_s;
  if (ms < nowMs - keepS * 1000) {
    throw new CliError(`${name}: ${text} is ${Math.round((nowMs - ms) / 1000)} s ago, before what loads.keep_unassigned_s (${keepS} s) keeps of readings without a load`, EXIT.DATA);
  }
  return ms;
}

/**
 * A stops file copied from an old load (or the example) has appointments long gone: the
 * delay detector would report every stop late. Said now, not found at the service.
 */
function staleAppointments(row: LoadRow, config: Config, nowMs: number): MilestoneWarning[] {
  const delays = config.milestones.detect && config.milestones.delay.enabled;
  const out: MilestoneWarning[] = [];
  for (const s of row.stops) {
    const end = s.appointment?.end;
    const endMs = appointmentMs(s, 'end');
    if (delays && end !== undefined && endMs < nowMs - 3_600_000) {
      out.push({ kind: 'stale-appointment', stop: s.sequence, end, hoursAgo: Math.round((nowMs - endMs) / 3_600_000), delayCode: config.milestones.delay.code });
    }
  }
  return out;
}

/** What `load start` prints. */
export function describeStart(row: LoadRow): string {
  const from = row.windowFromMs < row.startedMs ? `, its readings from ${new Date(row.windowFromMs).toISOString()}` : '';
  return `load ${row.loadNumber} started on ${row.resourceId} (${row.resourceType}) with ${row.stops.length} stop(s)${from}`;
}
