/**
 * The checks of a milestone's load number and codes against the config, before anything else
 * is looked at (record.ts): the service would refuse a number or code outside them.
 */
import type { Config } from '../config/schema.js';
import { DataError } from '../errors.js';
import { RuleRefusal } from './refusal.js';
import type { MilestoneWarning } from './warnings.js';

/** Bad input for a milestone (unknown load or code, bad time): exit 65, nothing written. */
export class MilestoneError extends DataError {
  readonly code: string = 'EMILESTONE';
}

/** The load number is one the service accepts (`api.load_number_pattern`), or a MilestoneError naming the rule. */
export function checkLoadNumber(loadNumber: string, config: Config): void {
  const pattern = config.api.load_number_pattern;
  const anchored = new RegExp(`^(?:${pattern})$`);
  if (!anchored.test(loadNumber)) {
    throw new MilestoneError(
      `load number ${JSON.stringify(loadNumber)} does not match api.load_number_pattern ${pattern}, so the service would refuse it; check the number, or change api.load_number_pattern if the service accepts it`,
    );
  }
}

export function checkCode(kind: 'event' | 'reason', raw: string, config: Config, force: boolean, warnings: MilestoneWarning[]): string {
  const code = raw.trim().toUpperCase();
  if (!/^[A-Z0-9]{1,10}$/.test(code)) throw new MilestoneError(`${kind} code ${JSON.stringify(raw)}: expected 1-10 letters and digits, such as ${kind === 'event' ? 'X3' : 'NS'}`);
  const list = kind === 'event' ? config.codes.events : config.codes.reasons;
  if (list.includes(code)) return code;
  const key = kind === 'event' ? 'codes.events' : 'codes.reasons';
  const other =
    kind === 'event'
      ? config.codes.reasons.includes(code)
        ? ` (${code} is a reason code: give it with --reason)`
        : ''
      : config.codes.events.includes(code)
        ? ` (${code} is an event code: give it with --code)`
        : '';
  if (force) {
    warnings.push({ kind: 'forced-code', codeKind: kind, code, key });
    return code;
  }
  const examples =
    kind === 'event'
      ? 'X12 214 shipment status codes such as X3 arrived at pick-up, AF departed pick-up, X1 arrived at delivery, D1 unloaded, SD delayed, AA/AB appointment'
      : 'X12 214 status reason codes such as NS normal, AI mechanical breakdown, AO weather, BE road conditions, AH driver related';
  const message = `${kind} code ${code} is not in ${key}${other}; the list holds ${examples}. If the service accepts it, add it to ${key} in the config; to send it once anyway, add --force`;
  throw new MilestoneError(message, { cause: new RuleRefusal(message, { rule: 'code', kind, code, key, otherKind: other !== '', examples }) });
}
