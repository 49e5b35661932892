/**
 * What the rules of a milestone (record.ts, typed-time.ts, checks.ts) and of a load's start
 * (assign.ts, appointments.ts) say when they let it through: a kind and the facts it was judged
 * on, as their refusals carry (refusal.ts, TimeRefusal). Each surface words them: `cliWarning`
 * below in the command line's words (its options: --time, --state, --stop, --force); the fleet
 * link in the command's JSON fields (src/fleet/warnings.ts); the driver's page in a driver's
 * words and language (src/ui/warnings.ts).
 */

/** How a local time fell on a clock change: `second` (the other reading) when it occurs twice; none when the clocks skip it. */
interface ClockChange {
  text: string;
  zone: string;
  /** The instant it was read as, in the zone, with its offset. */
  readAs: string;
  second?: string;
}

export type MilestoneWarning =
  /** A local `time` typed on the night the clocks change (clockChangeWarning). */
  | ({ kind: 'clock-change' } & ClockChange)
  /** A stop's appointment time, the same (appointments.ts). */
  | ({ kind: 'appointment-clock-change'; stop: number; field: 'start' | 'end' } & ClockChange)
  /** A typed offset no zone of the typed state has then (offset-fit.ts). */
  | { kind: 'offset-not-in-state'; text: string; offset: string; state: string; theirs: string }
  /** A typed offset that is not the one of the place's zone then: `meant`, the same wall time at the place's offset. */
  | { kind: 'offset-not-of-place'; text: string; offset: string; zoneFrom: string; zone: string; placeOffset: string; sentAs: string; meant: string; wall: string }
  /** A city the gazetteer does not know, in a state of one zone. */
  | { kind: 'city-not-found'; city: string; state: string; zone: string }
  /** A city typed without its state. */
  | { kind: 'city-without-state'; city: string; zoneFrom: string; zone: string }
  /** A local time read in the zone of the last fix; the position of that time is in another. */
  | { kind: 'read-in-fix-zone'; text: string; zoneFrom: string; zone: string; resourceId: string; thenZone: string }
  /** No place at all. `why`: why no fix placed it; `stop` given (without coordinates) or not; `fillsIn`: the daemon places it later (a manual one). */
  | { kind: 'no-position'; why: string; stop?: number; zoneFrom: string; zone: string; fillsIn: boolean }
  /** Forced through (--force): codes not in their list, a time older than max_past_days. */
  | { kind: 'forced-code'; codeKind: 'event' | 'reason'; code: string; key: string }
  | { kind: 'forced-old'; at: string; behind: number; max: number }
  /** A load's resource no configured source tags (`tags`: those they do; `like`: one differing only in case). */
  | { kind: 'unfed-resource'; resourceId: string; tags: string[]; like?: string }
  /** A stop's appointment that ended long ago: the delay detector reports it late at once. */
  | { kind: 'stale-appointment'; stop: number; end: string; hoursAgo: number; delayCode: string };

/** The zone a placement's `zoneFrom` names, as the warnings say it. */
export const inZoneOf = (zoneFrom: string): string => (zoneFrom === 'this device' ? "this device's zone" : `the zone of ${zoneFrom}`);

/** `2026-11-01T01:30 occurs twice in America/Chicago: read as the first, ...`: the part every surface shares. */
export function clockChangeWords(c: ClockChange): string {
  return c.second === undefined
    ? `${c.text} does not exist in ${c.zone} (the clocks skip it): read as ${c.readAs}; give the offset if another time was meant`
    : `${c.text} occurs twice in ${c.zone}: read as the first, ${c.readAs}; give the offset (such as ${c.second}) if the second was meant`;
}

/** A typed offset that does not fit the place (`2026-11-23T10:00:00-08:00 has the offset ...`): the part every surface shares. */
export function offsetFitWords(w: Extract<MilestoneWarning, { kind: 'offset-not-in-state' | 'offset-not-of-place' }>): string {
  const has = `${w.text} has the offset ${w.offset}`;
  return w.kind === 'offset-not-in-state'
    ? `${has}, which no zone of ${w.state} has then (${w.theirs}): sent at the offset typed; check it if a time in ${w.state} was meant`
    : `${has}, but the zone of ${w.zoneFrom} (${w.zone}) is at ${w.placeOffset} then: sent as the same instant there, ${w.sentAs}; give ${w.placeOffset} (${w.meant}) if ${w.wall} there was meant`;
}

/** A load's resource no source feeds: the part every surface shares. */
export function unfedWords(w: { resourceId: string; tags: string[]; like?: string }): string {
  const fed = w.tags.length > 0 ? `the sources tag their readings ${w.tags.map((n) => JSON.stringify(n)).join(', ')}` : 'no source is configured';
  return `resourceId ${JSON.stringify(w.resourceId)}: ${fed}, so this load gets no positions${w.like ? ` (did you mean ${JSON.stringify(w.like)}? resource ids are case-sensitive)` : ''}`;
}

/** The warning in the command line's words (`milestone`, `load start`). */
export function cliWarning(w: MilestoneWarning): string {
  switch (w.kind) {
    case 'clock-change':
      return `--time ${clockChangeWords(w)}`;
    case 'appointment-clock-change':
      return `stop ${w.stop} appointment.${w.field}: ${clockChangeWords(w)}`;
    case 'offset-not-in-state':
    case 'offset-not-of-place':
      return `--time ${offsetFitWords(w)}`;
    case 'city-not-found':
      return `${w.city}, ${w.state} is not in the gazetteer: sent as typed, in the zone of ${w.state} (${w.zone})`;
    case 'city-without-state':
      return `${w.city} cannot be looked up in the gazetteer without --state: sent as typed, with the zone of ${w.zoneFrom} (${w.zone})`;
    case 'read-in-fix-zone':
      return `--time ${w.text} was read in the zone of ${w.zoneFrom} (${w.zone}); ${w.resourceId} was in ${w.thenZone} then, and the same instant is sent in that zone`;
    case 'no-position': {
      const stopWhy = w.stop === undefined ? 'no --stop' : `stop ${w.stop} has no coordinates`;
      const fills = w.fillsIn ? '; the running agent fills them in from its newest fix when it sends it, if it has one by then' : '';
      return `no position for this milestone (${w.why}; no --lat/--lon or --city/--state; ${stopWhy}): it is recorded in ${inZoneOf(w.zoneFrom)} (${w.zone}) without a city and state${fills}`;
    }
    case 'forced-code':
      return `${w.codeKind} code ${w.code} is not in ${w.key}; recorded anyway (--force): the service may refuse it`;
    case 'forced-old':
      return `--time ${w.at} is ${w.behind} days before this device's clock (sources_time.max_past_days = ${w.max}); recorded anyway (--force)`;
    case 'unfed-resource':
      return `${unfedWords(w)}; end it and start it on the right resource, or add a source for it`;
    case 'stale-appointment':
      return `stop ${w.stop}'s appointment ended ${w.hoursAgo} h ago (${w.end}): a delay (${w.delayCode}) will be reported for it until the truck arrives; check the stops file's dates`;
  }
}
