/**
 * A refused command in dispatch's words. The rules' messages are the CLI's (`add --force`,
 * `give --time with its UTC offset`, `no --stop`); dispatch sends JSON fields, and the fleet
 * commands have no force nor position (src/fleet/messages.ts). So the answer is worded here,
 * from the rule that refused and the facts it judged (RuleRefusal, TimeRefusal,
 * DuplicateEventError), as the driver's page words its own (src/ui/refusal.ts); the CLI's
 * messages stay as they are.
 */
import { DuplicateEventError } from '../buffer/store.js';
import { MilestoneError, describeMilestone } from '../milestones/record.js';
import { type RuleFacts, RuleRefusal } from '../milestones/refusal.js';
import { type TimeFacts, TimeRefusal } from '../milestones/typed-time.js';

/** The answer's message for `err`; undefined: its own message names no option (say that one). */
export function dispatchWords(err: unknown): string | undefined {
  if (!(err instanceof MilestoneError)) return undefined;
  const cause = err.cause;
  if (cause instanceof RuleRefusal) return ruleWords(cause.facts);
  if (cause instanceof TimeRefusal) return timeWords(cause.facts);
  if (cause instanceof DuplicateEventError) {
    const m = cause.existing;
    return `load ${m.loadNumber} already has ${m.code}${m.stop === null ? '' : ` for stop ${m.stop}`}: ${describeMilestone(m)}. One milestone per load, code and stop: this one was not recorded`;
  }
  return undefined;
}

const FIELD = { event: 'eventCode', reason: 'reasonCode' } as const;

function ruleWords(f: RuleFacts): string {
  switch (f.rule) {
    case 'no-load':
      return `load ${f.loadNumber}: no such load on this device (start it with a load-start command)`;
    case 'code': {
      const other = f.kind === 'event' ? 'reason' : 'event';
      const hint = f.otherKind ? ` (${f.code} is a${other === 'event' ? 'n' : ''} ${other} code: give it as ${FIELD[other]})` : '';
      return `${FIELD[f.kind]} ${f.code} is not in ${f.key}${hint}; the list holds ${f.examples}. If the service accepts it, add it to ${f.key} in the device's config`;
    }
    case 'zone-of-state': {
      const unknown = f.city ? `eventCity ${f.city}, eventState ${f.state} is not in the gazetteer` : 'no eventCity';
      return `${unknown}, and ${f.spans}: the milestone's zone cannot be told. Give time with its UTC offset (such as ${f.example}), or an eventCity the gazetteer knows`;
    }
  }
}

function timeWords(f: TimeFacts): string {
  switch (f.problem) {
    case 'form':
      return f.why !== undefined
        ? `time: ${f.why}`
        : `time: expected an ISO 8601 time such as 2026-11-23T10:00:00 (read in the zone of the milestone's place), 2026-11-23T10:00:00-06:00 or 2026-11-23T16:00:00Z, got ${JSON.stringify(f.text)}`;
    case 'no-zone':
      return `time ${f.text} has no UTC offset, and nothing tells the zone it was meant in (${f.stop === undefined ? 'no stopsequenceNumber' : `stop ${f.stop} has no place`}; ${f.noFix}; no eventCity and eventState): give the offset, such as ${f.example} if it is this device's zone (${f.device}), or the time in UTC with Z. A time without one is never read in this device's zone`;
    case 'before-floor':
      return `time ${f.at} is before 2025-01-01, older than any load this agent carried: check the year`;
    case 'too-far-ahead':
      return `time ${f.at} is more than a year ahead of this device's clock: no appointment is that far off; check the year`;
    case 'too-old':
      // The CLI's --force has no field here: a correction that old is an operator's, on the device.
      return `time ${f.at} is ${f.behind} days before this device's clock, more than sources_time.max_past_days (${f.max}): check the date; the fleet link records no milestone older than that`;
    case 'ahead':
      return `time ${f.at} is ${f.aheadS} s ahead of this device's clock (sources_time.max_future_s = ${f.maxFutureS}): a milestone records what happened. Only appointment codes (codes.appointments: ${f.appointmentCodes.join(', ')}) may lie in the future`;
  }
}
