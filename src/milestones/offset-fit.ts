/**
 * A `--time` typed with an offset the place's zone does not have at that instant: -08:00 for
 * Chicago, which is at -06:00 that day. The instant is the offset's (an offset names an
 * instant, and may be meant: a dispatcher's own clock), so it is kept and sent in the place's
 * zone, but said, as a time on a clock change is (typed-time.ts clockChangeWarning): unsaid,
 * a driver who meant 10:00 in Chicago had the milestone go out two hours off.
 */
import { stateZones } from '../geo/state-zones.js';
import { fixedOffsetZone, formatTime, zoneOffsetMinutes } from '../geo/timezone.js';
import type { TypedTime } from './typed-time.js';
import type { MilestoneWarning } from './warnings.js';

/** `-06:00`. */
function offsetText(min: number): string {
  const abs = Math.abs(min);
  return `${min < 0 ? '-' : '+'}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
}

const shown = (ms: number, zone: string) => formatTime(new Date(ms), zone, 'local').dateTime.replace('.000', '');

/** The warning for a typed offset that is not the zone of the milestone's place then, or none. */
export function offsetFitWarnings(typed: TypedTime, placement: { source: string; zone: string; zoneFrom: string }, state?: string): MilestoneWarning[] {
  const w = offsetFitWarning(typed, placement, state);
  return w === undefined ? [] : [w];
}

/** `placement` as record.ts found it (`zoneFrom` 'the offset typed': no zone of `state` had the offset). */
function offsetFitWarning(typed: TypedTime, placement: { source: string; zone: string; zoneFrom: string }, state?: string): MilestoneWarning | undefined {
  // UTC (Z) is what programs write and what the messages ask for when no zone is known: an
  // instant, not a claim about the clocks of the place.
  if (typed.kind !== 'instant' || typed.offsetMin === undefined || typed.offsetMin === 0) return undefined;
  const typedText = shown(typed.ms, fixedOffsetZone(typed.offsetMin));
  const offset = offsetText(typed.offsetMin);
  if (placement.zoneFrom === 'the offset typed') {
    const zones = state ? stateZones(state) : [];
    if (zones.length === 0) return undefined;
    const theirs = zones.map((z) => `${z} ${offsetText(zoneOffsetMinutes(z, typed.ms))}`).join(', ');
    return { kind: 'offset-not-in-state', text: typedText, offset, state: state!, theirs };
  }
  if (placement.source === 'none') return undefined;
  const placeMin = zoneOffsetMinutes(placement.zone, typed.ms);
  if (placeMin === typed.offsetMin) return undefined;
  const wall = typedText.slice(11, 16);
  const meant = `${typedText.slice(0, 19)}${offsetText(placeMin)}`;
  return { kind: 'offset-not-of-place', text: typedText, offset, zoneFrom: placement.zoneFrom, zone: placement.zone, placeOffset: offsetText(placeMin), sentAs: shown(typed.ms, placement.zone), meant, wall };
}
