/**
 * Which of a milestone's rules refused it, with what it was judged on: the cause of a
 * MilestoneError (record.ts), whose message is the CLI's and names --code, --reason, --force,
 * --city, --lat/--lon. A reader with no command line words the refusal from these facts
 * instead: the fleet link's answer names the command's JSON fields (src/fleet/refusal.ts), as
 * the driver's page words a refused time (TimeRefusal, src/ui/refusal.ts).
 */
export type RuleFacts =
  | { rule: 'no-load'; loadNumber: string }
  /** `otherKind`: the code is one of the other list's (an event code given as the reason, or the reverse). */
  | { rule: 'code'; kind: 'event' | 'reason'; code: string; key: string; otherKind: boolean; examples: string }
  /** A state of several zones (or none the gazetteer knows) and no city it knows: `spans` says which; `example` is the time with an offset. */
  | { rule: 'zone-of-state'; city?: string; state: string; spans: string; example: string };

export class RuleRefusal extends RangeError {
  constructor(
    message: string,
    readonly facts: RuleFacts,
  ) {
    super(message);
  }
}
