/**
 * What travels on the fleet link, as zod schemas: the commands dispatch sends on
 * `<prefix>/cmd/<name>`, the answer on `<prefix>/reply/<commandId>`, the retained
 * `<prefix>/status`. Field names are the service's own (loadNumber, eventCode, ...). The
 * JSON Schemas in docs/fleet.md are generated from these (`telematics-agent fleet schemas`).
 */
import * as z from 'zod';
import { stopsSchema } from '../milestones/stops.js';

/** A topic level of its own (reply/<commandId>): no `/`, `+`, `#`, and short. */
export const commandIdSchema = z.string().regex(/^[A-Za-z0-9._:-]{1,128}$/, 'expected 1-128 letters, digits, ".", "_", ":" or "-" (it names the reply topic)');

export const loadStartSchema = z.strictObject({
  commandId: commandIdSchema,
  loadNumber: z.string().min(1),
  resourceId: z.string().min(1).max(64),
  /** Truck (default), Trailer or Driver. */
  resourceType: z.string().optional(),
  /** As a stops file holds them (config/stops.example.json): geofences and appointments included. */
  stops: stopsSchema.optional(),
  /** As `load start --from`: ISO 8601 with offset, within loads.keep_unassigned_s; the load takes the readings kept without a load since then. */
  from: z.string().min(1).optional(),
});

export const loadEndSchema = z.strictObject({ commandId: commandIdSchema, loadNumber: z.string().min(1) });

export const milestoneSchema = z.strictObject({
  commandId: commandIdSchema,
  loadNumber: z.string().min(1),
  eventCode: z.string().min(1),
  reasonCode: z.string().min(1).optional(),
  stopsequenceNumber: z.number().int().min(1).optional(),
  /** As `milestone --time` reads it: without an offset, in the zone of the place. */
  time: z.string().min(1).optional(),
  eventCity: z.string().min(1).optional(),
  eventState: z
    .string()
    .regex(/^[A-Za-z]{2}$/, 'expected a two-letter state or province code')
    .optional(),
});

export const statusCommandSchema = z.strictObject({ commandId: commandIdSchema });

/** The commands, by the last level of their topic; nothing else runs. */
export const COMMANDS = {
  'load-start': loadStartSchema,
  'load-end': loadEndSchema,
  milestone: milestoneSchema,
  status: statusCommandSchema,
} as const;
export type CommandName = keyof typeof COMMANDS;

export const replySchema = z.strictObject({
  /** null when the message held no usable commandId (it is then answered on reply/invalid). */
  commandId: commandIdSchema.nullable(),
  ok: z.boolean(),
  /** The exit status the CLI would give (docs/operations.md): 0, 64 not a command, 65 refused, 1 not applied (send it again). */
  status: z.number().int(),
  message: z.string(),
});
export type Reply = z.infer<typeof replySchema>;

const time = z.string().describe('ISO 8601, UTC');
export const statusSchema = z.strictObject({
  online: z.boolean(),
  deviceId: z.string(),
  version: z.string(),
  /** Absent in the Last Will (written at connect: the broker's time of receipt is the loss's). */
  time: time.optional(),
  /** Why it went offline: "stopped" (a clean stop) or "connection lost" (the Last Will). */
  reason: z.string().optional(),
  state: z.enum(['OK', 'DEGRADED', 'PAUSED']).optional(),
  /** What makes it DEGRADED or PAUSED, as /healthz says it. */
  problems: z.array(z.string()).optional(),
  startedAt: time.optional(),
  loads: z.array(z.strictObject({ loadNumber: z.string(), resourceId: z.string(), resourceType: z.string(), backlog: z.number().int() })).optional(),
  oldestUndeliveredAgeS: z.number().nullable().optional(),
  pendingMilestones: z.number().int().optional(),
  deadLetters: z.number().int().optional(),
  lastPush: z
    .strictObject({
      at: time.nullable(),
      lastSuccessAt: time.nullable(),
      /** The service's answer to the last request (a push or a milestone): "HTTP 202", "no answer (ETIMEDOUT)". */
      answer: z.string().nullable(),
      answerAt: time.nullable(),
      /** The last failure, if none succeeded since. */
      error: z.string().nullable(),
      errorClass: z.string().nullable(),
    })
    .optional(),
  lastFixes: z
    .array(z.strictObject({ resourceId: z.string(), latitude: z.number(), longitude: z.number(), time, ageS: z.number(), eventCity: z.string().optional(), eventState: z.string().optional() }))
    .optional(),
  clock: z.strictObject({ state: z.string(), from: z.string(), offsetMs: z.number().nullable(), held: z.number().int(), heldExpired: z.number().int() }).optional(),
  sources: z.array(z.strictObject({ name: z.string(), type: z.string(), healthy: z.boolean(), detail: z.string().optional(), lastReadingAt: time.nullable() })).optional(),
  diskFreeBytes: z.number().nullable().optional(),
});
export type FleetStatus = z.infer<typeof statusSchema>;

/** The JSON Schemas of every message, for docs/fleet.md (a test keeps the two equal). */
export function jsonSchemas(): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(COMMANDS)) out[`cmd/${name}`] = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' });
  out['reply/<commandId>'] = z.toJSONSchema(replySchema, { unrepresentable: 'any' });
  out.status = z.toJSONSchema(statusSchema, { unrepresentable: 'any' });
  return out;
}
