/**
 * Recording a milestone: check it, place it, build the body as the service will receive it,
 * validate it with the shared schema, and commit it. The daemon picks it up within
 * `poll_interval_ms`. Used by the CLI (`milestone`), the demo and automatic detection alike.
 *
 * What the service receives must be right the first time: a wrong city or zone on a
 * milestone is worse than a late one, because nobody notices it. So, before anything is
 * written:
 * - the load number of one typed by hand must match `api.load_number_pattern`, the event
 *   code be in `codes.events` and the reason in `codes.reasons` (`--force` sends others);
 * - one milestone per load, code and stop (`codes.repeatable` excepted): a manual X3 for a
 *   stop the detector already reported is refused, naming the first one;
 * - the place is, first match wins: a position given on the command line; a city and state
 *   typed (the gazetteer's position for the city, else the state's zone if the state has only
 *   one: src/geo/state-zones.ts; a state of several zones is refused unless the time carries
 *   its offset); the detector's own fix; the stop (its coordinates, else its city, else its
 *   state's one zone); the resource's last fix if taken within `milestones.max_fix_age_s` of
 *   the milestone's time (of now for an appointment); for a milestone typed after the event,
 *   its position nearest that time within the same limit, from the readings still held or
 *   the position history (src/buffer/position-at.ts). Only when none exists does it go
 *   without a city and state (and the daemon fills the place in from its newest fix when it
 *   sends it, if it has one by then), in the zone of the last fix whatever its age, else of
 *   the offset typed (`UTC-5`), else, for a milestone of now, the device's, with a warning;
 * - a `--time` without an offset is read once, in the zone of that place, else of the last
 *   fix whatever its age; with neither it is refused (never read in the device's zone);
 *   a time more than `sources_time.max_future_s` ahead is refused (appointments excepted), and
 *   so is one too old to be a load's (`checkTimeAge` in typed-time.ts).
 */
import { randomUUID } from 'node:crypto';
import pino, { type Logger } from 'pino';
import { milestoneBodySchema } from '../api/schemas.js';
import { withRoom } from '../buffer/bounds.js';
import { positionAt } from '../buffer/position-at.js';
import { DuplicateEventError, type LoadRow, type MilestoneOrigin, type MilestoneRow, type NewMilestone, type Store } from '../buffer/store.js';
import type { Config } from '../config/schema.js';
import { fixAgeS, fixAgeText } from '../fix-age.js';
import { placeAt, placeNamed } from '../geo/places.js';
import { stateZones } from '../geo/state-zones.js';
import { fixedOffsetZone, formatTime, systemZone, zoneAt } from '../geo/timezone.js';
import { check, problemLine } from '../validation.js';
import { checkCode, checkLoadNumber, MilestoneError } from './checks.js';
import { offsetFitWarnings } from './offset-fit.js';
import { RuleRefusal } from './refusal.js';
import { checkTimeAge, clockChangeWarning, instantIn, TimeRefusal, type TypedTime, typedTime, withOffsetOf, zoneWithOffset } from './typed-time.js';
import type { MilestoneWarning } from './warnings.js';

export interface MilestoneInput {
  loadNumber: string;
  code: string;
  reason?: string;
  stop?: number;
  /** When it happened, as an instant; default now. */
  timeMs?: number;
  /** When it happened, as typed (`--time`): without an offset it is read in the zone of the place. */
  timeText?: string;
  city?: string;
  state?: string;
  /** Where it happened: given on the command line, or the detector's fix. */
  lat?: number;
  lon?: number;
  references?: { name: string; value: string }[];
  /** Record it even if the code is unknown or the event was recorded already. */
  force?: boolean;
  origin?: MilestoneOrigin;
  /** Its idempotency reference (the driver page's form's, so a second tap finds the first); default a new one. */
  ref?: string;
}

export { checkLoadNumber, MilestoneError } from './checks.js';

const quietLog = pino({ level: 'silent' });

/** How the place of a milestone was found. */
export type PlaceSource = 'command line' | 'detector fix' | 'stop' | 'last fix' | 'history' | 'none';

export interface Placement {
  source: PlaceSource;
  lat?: number;
  lon?: number;
  city?: string;
  state?: string;
  zone: string;
  /** Where the zone came from, after "the zone of": `stop 1`, `the last fix of T1, 7200 s old`, `the position of T1 at 2026-11-25T22:52:20Z, 40 s from the milestone's time`, `KS`, `the offset typed`, `this device`. */
  zoneFrom: string;
  /** Age of the last fix used (or found too old), seconds; for `history`, the position's distance from the milestone's time. */
  fixAgeS?: number;
}

export interface PreparedMilestone {
  item: NewMilestone;
  load: LoadRow;
  timeMs: number;
  placement: Placement;
  warnings: MilestoneWarning[];
}

export interface RecordedMilestone {
  row: MilestoneRow;
  timeMs: number;
  placement: Placement;
  /** Worded by each surface (src/milestones/warnings.ts, src/fleet/warnings.ts). */
  warnings: MilestoneWarning[];
}

/** Where the milestone happened and in which zone (see the rule at the top), and its instant, read once in that zone. */
function place(store: Store, config: Config, load: LoadRow, input: MilestoneInput, typed: TypedTime, nowMs: number, warnings: MilestoneWarning[]): { placement: Placement; timeMs: number } {
  const origin = input.origin ?? 'manual';
  const onGlobe = (lat: number | undefined, lon: number | undefined): lat is number => typeof lat === 'number' && typeof lon === 'number';
  const at = (source: PlaceSource, lat: number, lon: number, zoneFrom: string, named?: { city?: string; state?: string }, fixAgeS?: number): Placement => {
    const found = placeAt(lat, lon);
    const city = named?.city ?? (named?.state ? undefined : found?.city);
    const state = named?.state ?? (named?.city ? undefined : found?.state);
    return { source, lat, lon, city, state, zone: zoneAt(lat, lon), zoneFrom, fixAgeS };
  };
  const read = (zone: string) => {
    const ms = instantOf(typed, zone, nowMs);
    const change = clockChangeWarning(typed, zone);
    if (change) warnings.push(change);
    return ms;
  };
  const timed = (placement: Placement) => ({ placement, timeMs: read(placement.zone) });
  const typedName = [input.city, input.state].filter(Boolean).join(', ');
  // 1. Given on the command line (or the detector's own fix).
  if (onGlobe(input.lat, input.lon)) {
    const detected = origin === 'detected';
    const named = input.city || input.state ? { city: input.city, state: input.state } : undefined;
    return timed(at(detected ? 'detector fix' : 'command line', input.lat, input.lon!, detected ? "the detector's fix" : '--lat/--lon', named));
  }
  // 2. A city and state typed: the city's own zone, else the state's if it has only one.
  if (input.state) {
    const p = input.city ? placeNamed(input.city, input.state) : undefined;
    if (p) return timed({ source: 'command line', lat: p.lat, lon: p.lon, city: input.city, state: input.state, zone: zoneAt(p.lat, p.lon), zoneFrom: typedName });
    const unknown = input.city ? `${typedName} is not in the gazetteer` : `no --city`;
    const zones = stateZones(input.state);
    const typedPlace = (zone: string, zoneFrom: string): Placement => ({ source: 'command line', city: input.city, state: input.state, zone, zoneFrom });
    if (zones.length === 1) {
      if (input.city) warnings.push({ kind: 'city-not-found', city: input.city, state: input.state, zone: zones[0] });
      return timed(typedPlace(zones[0], input.state));
    }
    // Several zones (or a code no state uses): only a typed offset tells which.
    if (typed.kind === 'instant' && typed.offsetMin !== undefined) {
      const zone = zoneWithOffset(zones, typed.offsetMin, typed.ms);
      return { placement: zone ? typedPlace(zone, `${input.state} at the offset typed`) : typedPlace(fixedOffsetZone(typed.offsetMin), 'the offset typed'), timeMs: typed.ms };
    }
    const spans = zones.length ? `${input.state} spans more than one time zone (${zones.join(', ')})` : `${input.state} is no US state, Canadian province or Mexican state the gazetteer knows`;
    const example = typed.kind === 'local' ? withOffsetOf(typed.text, zones[0] ?? 'UTC') : '2026-11-23T10:00:00-06:00';
    const message = `${unknown}, and ${spans}: the milestone's zone cannot be told. Give --time with its UTC offset (such as ${example}), a --city the gazetteer knows, or --lat/--lon`;
    throw new MilestoneError(message, { cause: new RuleRefusal(message, { rule: 'zone-of-state', city: input.city, state: input.state, spans, example }) });
  }
  const rest = locate();
  if (!input.city) return rest;
  // A city without its state cannot be looked up: sent as typed, in the zone found below. Say
  // so, rather than claim that Chicago is not in the gazetteer.
  warnings.push({ kind: 'city-without-state', city: input.city, zoneFrom: rest.placement.zoneFrom, zone: rest.placement.zone });
  const source = rest.placement.source === 'none' ? 'command line' : rest.placement.source;
  return { ...rest, placement: { ...rest.placement, source, city: input.city, state: undefined } };

  /**
   * The stop, else the resource's last fix: the zone of the fix whatever its age (a place's
   * zone is far more stable than its position) reads the time, and its place is used if
   * taken close enough to that time; else none.
   */
  function locate(): { placement: Placement; timeMs: number } {
    // 3. The stop's coordinates (or, without them, its city found in the gazetteer, or its state's one zone).
    const stop = input.stop === undefined ? undefined : load.stops.find((s) => s.sequence === input.stop);
    const ofStop = `stop ${input.stop}`;
    if (stop && onGlobe(stop.latitude, stop.longitude)) {
      return timed(at('stop', stop.latitude, stop.longitude!, ofStop, stop.city || stop.state ? { city: stop.city, state: stop.state } : undefined));
    }
    const p = stop?.city && stop.state ? placeNamed(stop.city, stop.state) : undefined;
    if (stop && p) return timed({ source: 'stop', lat: p.lat, lon: p.lon, city: stop.city, state: stop.state, zone: zoneAt(p.lat, p.lon), zoneFrom: ofStop });
    const stopZones = stop?.state ? stateZones(stop.state) : [];
    if (stop && stopZones.length === 1) return timed({ source: 'stop', city: stop.city, state: stop.state, zone: stopZones[0], zoneFrom: ofStop });
    // 4. The resource's last fix.
    const fix = store.lastFix(load.resourceId);
    if (!fix) return none();
    const zone = zoneAt(fix.lat, fix.lon);
    const zoneFrom = `the last fix of ${load.resourceId}, ${fixAgeText(nowMs, fix.timeMs)}`;
    const timeMs = read(zone);
    // A milestone typed hours after the event did not happen where the truck is now. An
    // appointment's time is the appointment's, not the truck's: its fix is judged against now.
    const appointment = config.codes.appointments.includes(input.code.trim().toUpperCase());
    const gapS = Math.round(Math.abs((appointment ? nowMs : timeMs) - fix.timeMs) / 1000);
    if (gapS <= config.milestones.max_fix_age_s) return { placement: at('last fix', fix.lat, fix.lon, zoneFrom, undefined, gapS), timeMs };
    // Typed after the event: where the truck was then, from the readings the buffer holds or
    // the position history. The time stays as read above, in the zone of the last fix: read
    // again in the zone of the place found, it could name another instant, and so another
    // place. The body writes that one instant in the zone of the place, as for any place.
    const then = appointment || typed.kind === 'now' ? undefined : positionAt(store, load.resourceId, timeMs, config.milestones.max_fix_age_s * 1000);
    if (then) {
      const offS = Math.round(Math.abs(timeMs - then.timeMs) / 1000);
      const when = new Date(then.timeMs).toISOString().replace(/\.\d+Z$/, 'Z');
      const placed = at('history', then.lat, then.lon, `the position of ${load.resourceId} at ${when}, ${offS} s from the milestone's time`, undefined, offS);
      if (typed.kind === 'local' && placed.zone !== zone) warnings.push({ kind: 'read-in-fix-zone', text: typed.text, zoneFrom, zone, resourceId: load.resourceId, thenZone: placed.zone });
      return { placement: placed, timeMs };
    }
    const timedText = typed.kind === 'now' ? fixAgeText(nowMs, fix.timeMs) : `${gapS} s from the milestone's time`;
    const noneThen = appointment || typed.kind === 'now' ? '' : `, and no position of ${load.resourceId} in its readings or history is that close to it`;
    const why = `the last fix of ${load.resourceId} is ${timedText}${noneThen} (milestones.max_fix_age_s = ${config.milestones.max_fix_age_s})`;
    // An offset typed that the fix's zone does not have at that instant: the offset's.
    if (typed.kind === 'instant' && typed.offsetMin !== undefined && !zoneWithOffset([zone], typed.offsetMin, timeMs)) {
      return none(why, fixedOffsetZone(typed.offsetMin), 'the offset typed', timeMs, fix);
    }
    return none(why, zone, zoneFrom, timeMs, fix);
  }

  function none(why?: string, zone?: string, zoneFrom?: string, timeMs?: number, fix?: { timeMs: number }): { placement: Placement; timeMs: number } {
    if (zone === undefined) {
      why = `no fix of ${load.resourceId} is in the buffer yet`;
      if (typed.kind === 'local') {
        const device = systemZone();
        const example = withOffsetOf(typed.text, device);
        const message = `--time ${typed.text} has no UTC offset, and nothing tells the zone it was typed in (${input.stop === undefined ? 'no --stop' : `stop ${input.stop} has no place`}; ${why}; no --lat/--lon or --city/--state): give the offset, such as ${example} if it is this device's zone (${device}), or the time in UTC with Z. A time without one is never read in this device's zone`;
        throw new MilestoneError(message, { cause: new TimeRefusal(message, { problem: 'no-zone', text: typed.text, stop: input.stop, noFix: why, example, device }) });
      }
      timeMs = typed.kind === 'instant' ? typed.ms : nowMs;
      // A typed offset is the zone's best witness; with none, this device's zone.
      [zone, zoneFrom] = typed.kind === 'instant' && typed.offsetMin !== undefined ? [fixedOffsetZone(typed.offsetMin), 'the offset typed'] : [systemZone(), 'this device'];
    }
    if (!input.city) warnings.push({ kind: 'no-position', why: why!, stop: input.stop, zoneFrom: zoneFrom!, zone, fillsIn: origin === 'manual' });
    return { placement: { source: 'none', zone, zoneFrom: zoneFrom!, fixAgeS: fix ? fixAgeS(nowMs, fix.timeMs) : undefined }, timeMs: timeMs! };
  }
}

function instantOf(typed: TypedTime, zone: string, nowMs: number): number {
  try {
    return instantIn(typed, zone, nowMs);
  } catch (err) {
    throw new MilestoneError((err as Error).message, { cause: err });
  }
}

/** Check, place and build a milestone without writing anything (throws MilestoneError). */
export function prepareMilestone(store: Store, config: Config, input: MilestoneInput, nowMs = Date.now()): PreparedMilestone {
  const warnings: MilestoneWarning[] = [];
  const origin = input.origin ?? 'manual';
  const force = input.force ?? false;
  // Where the number is typed. The detector reports for loads the buffer holds already: one
  // started before the pattern was checked (or tightened) made every batch fail, and the
  // stop's arrival, departure and state were never recorded.
  if (origin === 'manual') checkLoadNumber(input.loadNumber, config);
  const load = store.getLoad(input.loadNumber);
  if (!load) {
    const message = `load ${input.loadNumber}: no such load (start it with "load start ${input.loadNumber} --resource ID")`;
    throw new MilestoneError(message, { cause: new RuleRefusal(message, { rule: 'no-load', loadNumber: input.loadNumber }) });
  }
  const code = checkCode('event', input.code, config, force, warnings);
  const reason = checkCode('reason', input.reason ?? config.codes.default_reason, config, force, warnings);
  const stop = input.stop === undefined ? undefined : load.stops.find((s) => s.sequence === input.stop);
  if (input.stop !== undefined && load.stops.length > 0 && !stop) {
    throw new MilestoneError(`stop ${input.stop}: load ${load.loadNumber} has stops ${load.stops.map((s) => s.sequence).join(', ')}`);
  }
  let typed: TypedTime;
  try {
    typed = typedTime(input);
  } catch (err) {
    throw new MilestoneError((err as Error).message, { cause: err });
  }
  const { placement, timeMs } = place(store, config, load, input, typed, nowMs, warnings);
  warnings.push(...offsetFitWarnings(typed, placement, input.state));
  // What is typed by hand (a program's instant too); the detector's times are its fixes'.
  if (origin === 'manual' && typed.kind !== 'now') {
    const limits = {
      maxPastDays: config.sources_time.max_past_days,
      maxFutureS: config.sources_time.max_future_s,
      appointment: config.codes.appointments.includes(code),
      appointmentCodes: config.codes.appointments,
      force,
    };
    try {
      checkTimeAge(timeMs, nowMs, limits, warnings);
    } catch (err) {
      throw new MilestoneError((err as Error).message, { cause: err });
    }
  }
  const ref = input.ref ?? randomUUID();
  const body: Record<string, unknown> = { eventCode: code, reasonCode: reason, loadNumber: load.loadNumber };
  if (placement.city) body.eventCity = placement.city;
  if (placement.state) body.eventState = placement.state;
  body.time = formatTime(new Date(timeMs), placement.zone, config.api.date_time_format);
  if (input.stop !== undefined) body.stopsequenceNumber = input.stop;
  body.references = [...(input.references ?? []), { name: 'milestoneId', value: ref }];
  const parsed = check(milestoneBodySchema, body);
  if (!parsed.success) throw new MilestoneError(parsed.problems.map(problemLine).join('; '));
  return {
    item: {
      loadNumber: load.loadNumber,
      ref,
      body: parsed.data as Record<string, unknown>,
      origin,
      needsPlace: placement.source === 'none' && origin === 'manual',
      unique: !force && !config.codes.repeatable.includes(code),
    },
    load,
    timeMs,
    placement,
    warnings,
  };
}

/** When a departure code names a stop, the next stop becomes the one traces carry. */
export function nextStopAfter(load: LoadRow, code: string, stop: number | undefined, config: Config): { loadNumber: string; next: number | null } | undefined {
  if (stop === undefined || !config.codes.departure.includes(code)) return undefined;
  const next = load.stops.map((s) => s.sequence).find((s) => s > stop);
  return { loadNumber: load.loadNumber, next: next ?? null };
}

/** How a recorded milestone is named in messages: `milestone 4 (detected from positions, 2026-11-23T16:05:00Z, sent)`. */
export function describeMilestone(m: MilestoneRow): string {
  const how = m.origin === 'detected' ? 'detected from positions' : m.origin === 'manual' ? 'recorded by hand' : 'recorded by an earlier version';
  const at = String((m.body.time as { dateTime?: string } | undefined)?.dateTime ?? new Date(m.createdMs).toISOString());
  const state = m.sentMs !== null ? `sent ${new Date(m.sentMs).toISOString()}` : m.parkedMs !== null ? 'dead-lettered' : 'waiting to be sent';
  return `milestone ${m.id} (${how}, at ${at}, ${state})`;
}

export function recordMilestone(store: Store, config: Config, input: MilestoneInput, nowMs = Date.now(), log: Logger = quietLog): RecordedMilestone {
  const prepared = prepareMilestone(store, config, input, nowMs);
  const code = String(prepared.item.body.eventCode);
  try {
    const { rows } = withRoom(store, log, () => store.commitMilestones([prepared.item], nowMs, { nextStop: nextStopAfter(prepared.load, code, input.stop, config) }));
    return { row: rows[0], timeMs: prepared.timeMs, placement: prepared.placement, warnings: prepared.warnings };
  } catch (err) {
    if (!(err instanceof DuplicateEventError)) throw err;
    throw new MilestoneError(
      `load ${prepared.load.loadNumber} already has ${code}${input.stop === undefined ? '' : ` for stop ${input.stop}`}: ${describeMilestone(err.existing)}. One milestone per load, code and stop; to record another anyway, add --force`,
      { cause: err },
    );
  }
}

/**
 * The body of a milestone recorded without a position, placed at `fix` (the daemon's newest)
 * if the fix is within `milestones.max_fix_age_s` of the milestone's time (of when it was
 * recorded, for an appointment); else undefined. The instant does not change, only the zone
 * it is written in.
 */
export function completePlace(m: MilestoneRow, fix: { timeMs: number; lat: number; lon: number }, config: Config): Record<string, unknown> | undefined {
  const timeMs = Date.parse(String((m.body.time as { dateTime?: string } | undefined)?.dateTime));
  if (Number.isNaN(timeMs)) return undefined;
  const refMs = config.codes.appointments.includes(m.code) ? m.createdMs : timeMs;
  if (Math.abs(refMs - fix.timeMs) > config.milestones.max_fix_age_s * 1000) return undefined;
  const found = placeAt(fix.lat, fix.lon);
  const body: Record<string, unknown> = { ...m.body };
  delete body.eventCity;
  delete body.eventState;
  if (found) {
    body.eventCity = found.city;
    body.eventState = found.state;
  }
  body.time = formatTime(new Date(timeMs), zoneAt(fix.lat, fix.lon), config.api.date_time_format);
  // The keys in the order a fresh body has them.
  const { eventCode, reasonCode, loadNumber, eventCity, eventState, time, ...rest } = body;
  const ordered = { eventCode, reasonCode, loadNumber, ...(eventCity ? { eventCity, eventState } : {}), time, ...rest };
  return milestoneBodySchema.safeParse(ordered).success ? ordered : undefined;
}
