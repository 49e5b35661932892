/**
 * A load's stops, as given to `load start --stops FILE` (JSON, camelCase like the API).
 * See config/stops.example.json.
 */
import { readFileSync } from 'node:fs';
import * as z from 'zod';
import { DataError } from '../errors.js';
import { readDateTime } from '../geo/localtime.js';
import { check, problemLine } from '../validation.js';

/**
 * ISO 8601 and nothing else (Date.parse took "1" for 2001 and "12/31/2026"). Without an offset
 * it is the stop's wall clock: `load start` reads it in the zone of the stop's position
 * (src/milestones/appointments.ts).
 */
const isoTime = z
  .string()
  .refine(
    (s) => readDateTime(s) !== undefined,
    "expected an ISO 8601 date and time such as 2026-11-23T08:00:00-06:00 or 2026-11-23T14:00:00Z (without an offset, the stop's local time: read in the zone of its latitude/longitude)",
  );

export const stopSchema = z.strictObject({
  sequence: z.number().int().min(1),
  type: z.enum(['pickup', 'delivery', 'other']),
  name: z.string().optional(),
  latitude: z.number().min(-90).max(90).optional(),
  longitude: z.number().min(-180).max(180).optional(),
  /** Arrival radius in metres. */
  radiusM: z.number().positive().max(50_000).optional(),
  appointment: z
    .strictObject({
      start: isoTime.optional(),
      end: isoTime.optional(),
    })
    .optional(),
  city: z.string().min(1).optional(),
  state: z
    .string()
    .regex(/^[A-Z]{2}$/, 'expected a two-letter state or province code')
    .optional(),
});

export const stopsSchema = z
  .array(stopSchema)
  .superRefine((stops, ctx) => {
    const seen = new Set<number>();
    stops.forEach((s, i) => {
      if (seen.has(s.sequence)) ctx.addIssue({ code: 'custom', path: [i, 'sequence'], message: `duplicate sequence ${s.sequence}` });
      seen.add(s.sequence);
      if ((s.latitude === undefined) !== (s.longitude === undefined)) {
        ctx.addIssue({ code: 'custom', path: [i], message: 'latitude and longitude must come together' });
      }
    });
  })
  .transform((stops) => [...stops].sort((a, b) => a.sequence - b.sequence));

export type Stop = z.infer<typeof stopSchema>;

/** The stops file cannot be read or is invalid: exit 65, no load started. */
export class StopsFileError extends DataError {
  readonly code = 'ESTOPS';
}

export function readStopsFile(file: string): Stop[] {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new StopsFileError(`${file}: ${(err as Error).message}`);
  }
  const parsed = check(stopsSchema, raw);
  if (!parsed.success) throw new StopsFileError(parsed.problems.map((p) => `${file}: ${problemLine(p)}`).join('\n'));
  return parsed.data;
}
