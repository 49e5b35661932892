/**
 * Starting and ending a load as an engineer (`load start|end`) or dispatch (the fleet link's
 * `load-start`, `load-end`) asks for it: one set of checks for both, so a load refused on the
 * command line is refused over MQTT in the same words.
 */
import type { LoadRow, Store } from '../buffer/store.js';
import type { Config } from '../config/schema.js';
import { CliError } from '../errors.js';
import { EXIT } from '../exit.js';
import { RESOURCE_TYPES, resourceTypeOf } from './codes.js';
import { checkLoadNumber } from './record.js';
import type { Stop } from './stops.js';

export interface LoadStart {
  loadNumber: string;
  resourceId: string;
  /** `Truck` when not given. */
  resourceType?: string;
  stops?: Stop[];
}

/** Check and commit a new load; `warnings` are what the operator should hear about it. */
export function startLoadChecked(store: Store, config: Config, input: LoadStart, nowMs = Date.now()): { row: LoadRow; warnings: string[] } {
  const resourceType = resourceTypeOf(input.resourceType ?? 'Truck');
  if (!resourceType) throw new CliError(`resourceType: expected one of ${RESOURCE_TYPES.join(', ')}, got ${JSON.stringify(input.resourceType)}`, EXIT.DATA);
  checkLoadNumber(input.loadNumber, config);
  const row = store.startLoad({ loadNumber: input.loadNumber, resourceId: input.resourceId, resourceType, stops: input.stops ?? [], nowMs });
  return { row, warnings: staleAppointments(row, config, nowMs) };
}

/**
 * A stops file copied from an old load (or the example) has appointments long gone: the
 * delay detector would report every stop late. Said now, not found at the service.
 */
function staleAppointments(row: LoadRow, config: Config, nowMs: number): string[] {
  const delays = config.milestones.detect && config.milestones.delay.enabled;
  const out: string[] = [];
  for (const s of row.stops) {
    const end = s.appointment?.end;
    const endMs = end ? Date.parse(end) : Number.NaN;
    if (delays && endMs < nowMs - 3_600_000) {
      out.push(
        `stop ${s.sequence}'s appointment ended ${Math.round((nowMs - endMs) / 3_600_000)} h ago (${end}): a delay (${config.milestones.delay.code}) will be reported for it until the truck arrives; check the stops file's dates`,
      );
    }
  }
  return out;
}

/** What `load start` prints. */
export function describeStart(row: LoadRow): string {
  return `load ${row.loadNumber} started on ${row.resourceId} (${row.resourceType}) with ${row.stops.length} stop(s)`;
}
