/**
 * Bodies of interface E ("Carrier events"), written once and used by both sides:
 * the agent validates what it is about to send (a body the service would refuse is
 * a bug here, not a network problem), and the sandbox validates what it receives.
 *
 * The specification names the fields and their types but not which are required.
 * We require what a receiver cannot do without (the load, the code, the time) and
 * treat the rest as optional; unknown top-level fields pass, because deployments
 * add their own (`api.extra_fields`). Problems are put into words by src/validation.ts.
 */
import * as z from 'zod';

/** ISO 8601 with fractional seconds and a UTC offset, or the UTC `...Z` form some deployments want. */
const ISO_WITH_OFFSET = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

export const dateTimeSchema = z
  .string()
  // Not the form: the date check below would only repeat the refusal.
  .regex(ISO_WITH_OFFSET, { error: 'expected an ISO 8601 timestamp with a UTC offset', abort: true })
  .refine((s) => !Number.isNaN(Date.parse(s)), 'expected a date that exists');

/**
 * `UTC-5`, `UTC+1`, `UTC-3:30`, `UTC+0`: always a sign, no zero padding, minutes only when not
 * zero. A bare `UTC` (a zone name, not `UTC<sign><hours>`) and `UTC-0` are not what we send.
 */
export const timeZoneOffsetSchema = z.string().regex(/^UTC(\+0|[+-]([1-9]|1[0-4])(:(30|45))?)$/, 'expected UTC<sign><hours>[:minutes], e.g. UTC-5 or UTC-3:30');

export const timeSchema = z.object({
  dateTime: dateTimeSchema,
  timeZoneCode: z.string().min(1).max(10),
  timeZoneOffset: timeZoneOffsetSchema,
});

export const referenceSchema = z.object({
  name: z.string().min(1),
  value: z.string(),
});

const code = z
  .string()
  .min(1)
  .max(10)
  .regex(/^[A-Za-z0-9]+$/, 'expected a short alphanumeric code');
const stopSequence = z.number().int().min(1);

export const milestoneBodySchema = z.looseObject({
  eventCode: code,
  reasonCode: code,
  loadNumber: z.string().min(1).max(64),
  eventCity: z.string().min(1).optional(),
  eventState: z
    .string()
    .regex(/^[A-Z]{2}$/, 'expected a two-letter state or province code')
    .optional(),
  time: timeSchema,
  stopsequenceNumber: stopSequence.optional(),
  references: z.array(referenceSchema).optional(),
});

export const traceSchema = z.object({
  time: timeSchema,
  stopsequenceNumber: stopSequence.optional(),
  resourceId: z.string().min(1),
  resourceType: z.string().min(1),
  odometer: z.number().finite().nonnegative().optional(),
  temperature: z
    .object({
      unitOfMeasure: z.string().min(1),
      value: z.number().finite(),
      dateTime: dateTimeSchema,
    })
    .optional(),
  coordinate: z.object({
    latitude: z.number().min(-90).max(90),
    longitude: z.number().min(-180).max(180),
  }),
  references: z.array(referenceSchema).optional(),
});

export const traceBodySchema = z.looseObject({
  loadNumber: z.string().min(1).max(64),
  eventCity: z.string().min(1).optional(),
  eventState: z
    .string()
    .regex(/^[A-Z]{2}$/, 'expected a two-letter state or province code')
    .optional(),
  traces: z.array(traceSchema).min(1),
});

export type TimeObject = z.infer<typeof timeSchema>;
export type Reference = z.infer<typeof referenceSchema>;
export type MilestoneBody = z.infer<typeof milestoneBodySchema>;
export type Trace = z.infer<typeof traceSchema>;
export type TraceBody = z.infer<typeof traceBodySchema>;
