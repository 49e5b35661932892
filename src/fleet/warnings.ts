/**
 * The warnings of a command that succeeded, in dispatch's words: the command's JSON fields
 * (`time`, `eventCity`, `eventState`, `stopsequenceNumber`, `resourceId`, `stops`), never the
 * CLI's options (`--time`, `--state`, `--stop`), from the facts the rules give
 * (src/milestones/warnings.ts), as a refusal is worded in refusal.ts.
 */
import { clockChangeWords, cliWarning, inZoneOf, type MilestoneWarning, offsetFitWords, unfedWords } from '../milestones/warnings.js';

/** One warning of a `load-start` or `milestone` answer. */
export function dispatchWarning(w: MilestoneWarning): string {
  switch (w.kind) {
    case 'clock-change':
      return `time ${clockChangeWords(w)}`;
    case 'appointment-clock-change':
      // The stops' own field names, as dispatch sent them.
      return `stop ${w.stop} appointment.${w.field}: ${clockChangeWords(w)}`;
    case 'offset-not-in-state':
    case 'offset-not-of-place':
      return `time ${offsetFitWords(w)}`;
    case 'city-not-found':
      return `eventCity ${w.city}, eventState ${w.state} is not in the gazetteer: sent as typed, in the zone of ${w.state} (${w.zone})`;
    case 'city-without-state':
      return `eventCity ${w.city} cannot be looked up in the gazetteer without eventState: sent as typed, with the zone of ${w.zoneFrom} (${w.zone})`;
    case 'read-in-fix-zone':
      return `time ${w.text} was read in the zone of ${w.zoneFrom} (${w.zone}); ${w.resourceId} was in ${w.thenZone} then, and the same instant is sent in that zone`;
    case 'no-position': {
      const stopWhy = w.stop === undefined ? 'no stopsequenceNumber' : `stop ${w.stop} has no coordinates`;
      const fills = w.fillsIn ? '; the agent fills them in from its newest fix when it sends it, if it has one by then' : '';
      return `no position for this milestone (${w.why}; no eventCity and eventState; ${stopWhy}): it is recorded in ${inZoneOf(w.zoneFrom)} (${w.zone}) without eventCity and eventState${fills}`;
    }
    case 'unfed-resource':
      return `${unfedWords(w)}; end it with a load-end command and start it again with the right resourceId, or add a source for it in the device's config`;
    case 'stale-appointment':
      return `stop ${w.stop} appointment.end ${w.end} was ${w.hoursAgo} h ago: a delay (${w.delayCode}) will be reported for this stop until the truck arrives; check the dates of the stops' appointments`;
    case 'forced-code':
    case 'forced-old':
      // Cannot arise: the commands have no force (messages.ts); what the CLI records only with
      // --force is refused over the link (refusal.ts). Said as the CLI says it, should it ever.
      return cliWarning(w);
  }
}

/** `; warning: ...` for each, after what was done. */
export const withWarnings = (done: string, warnings: readonly MilestoneWarning[]): string => [done, ...warnings.map((w) => `warning: ${dispatchWarning(w)}`)].join('; ');
