/**
 * Recording a milestone: build the body as the service will receive it, validate it with
 * the shared schema, and commit it. The daemon picks it up within `poll_interval_ms`.
 * Used by the CLI (`milestone`), the demo, and automatic detection alike.
 */
import { randomUUID } from 'node:crypto';
import { milestoneBodySchema, formatIssues, type MilestoneBody } from '../api/schemas.js';
import pino, { type Logger } from 'pino';
import { withRoom } from '../buffer/bounds.js';
import type { MilestoneRow, Store } from '../buffer/store.js';
import type { Config } from '../config/schema.js';
import { eventTime } from '../geo/timezone.js';
import { placeAt } from '../geo/places.js';

export interface MilestoneInput {
  loadNumber: string;
  code: string;
  reason?: string;
  stop?: number;
  /** When it happened; default now. */
  timeMs?: number;
  city?: string;
  state?: string;
  /** Where it happened, when known better than the resource's last fix. */
  lat?: number;
  lon?: number;
  references?: { name: string; value: string }[];
}

const quietLog = pino({ level: 'silent' });

export class MilestoneError extends Error {
  readonly code = 'EMILESTONE';
}

export interface RecordedMilestone {
  row: MilestoneRow;
  warnings: string[];
}

export function recordMilestone(store: Store, config: Config, input: MilestoneInput, nowMs = Date.now(), log: Logger = quietLog): RecordedMilestone {
  const warnings: string[] = [];
  const load = store.getLoad(input.loadNumber);
  if (!load) throw new MilestoneError(`load ${input.loadNumber}: no such load (start it with "load start ${input.loadNumber} --resource ID")`);
  const code = input.code.trim();
  if (!config.codes.known.includes(code)) {
    warnings.push(`code ${code} is not in codes.known; sending it anyway (the service may refuse it)`);
  }
  const stop = input.stop === undefined ? undefined : load.stops.find((s) => s.sequence === input.stop);
  if (input.stop !== undefined && load.stops.length > 0 && !stop) {
    throw new MilestoneError(
      `stop ${input.stop}: load ${load.loadNumber} has stops ${load.stops.map((s) => s.sequence).join(', ')}`,
    );
  }
  let lat = input.lat;
  let lon = input.lon;
  if (lat === undefined || lon === undefined) {
    const last = store.latestPosition(load.resourceId);
    if (last && last.lat !== null && last.lon !== null) {
      lat = last.lat;
      lon = last.lon;
    } else if (stop?.latitude !== undefined && stop.longitude !== undefined) {
      lat = stop.latitude;
      lon = stop.longitude;
    }
  }
  const timeMs = input.timeMs ?? nowMs;
  const place = input.city || input.state ? undefined : stop?.city ? { city: stop.city, state: stop.state } : lat !== undefined && lon !== undefined ? placeAt(lat, lon) : undefined;
  const ref = randomUUID();
  const body: Record<string, unknown> = {
    eventCode: code,
    reasonCode: (input.reason ?? config.codes.default_reason).trim(),
    loadNumber: load.loadNumber,
  };
  const city = input.city ?? place?.city;
  const state = input.state ?? place?.state;
  if (city) body.eventCity = city;
  if (state) body.eventState = state;
  body.time = eventTime(new Date(timeMs), lat, lon, config.api.date_time_format);
  if (input.stop !== undefined) body.stopsequenceNumber = input.stop;
  body.references = [...(input.references ?? []), { name: 'milestoneId', value: ref }];

  const parsed = milestoneBodySchema.safeParse(body);
  if (!parsed.success) throw new MilestoneError(formatIssues(parsed.error).join('; '));
  // A milestone is committed with synchronous = FULL, whatever the buffer's level: with NORMAL
  // a power cut can roll back the last commits, and a milestone is an event someone will ask
  // about. Readings keep the cheaper level (there are many of them and they are sampled anyway).
  const previous = store.db.pragma('synchronous', { simple: true }) as number;
  store.db.pragma('synchronous = FULL');
  try {
    const row = withRoom(store, log, () =>
      store.db
        .transaction(() => {
          const r = store.insertMilestone(load.loadNumber, parsed.data as MilestoneBody, nowMs, ref);
          if (input.stop !== undefined && config.codes.departure.includes(code)) {
            const next = load.stops.map((s) => s.sequence).find((s) => s > input.stop!);
            store.setNextStop(load.loadNumber, next ?? null);
          }
          return r;
        })
        .immediate(),
    );
    return { row, warnings };
  } finally {
    store.db.pragma(`synchronous = ${previous}`);
  }
}
