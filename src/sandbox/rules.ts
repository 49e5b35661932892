/**
 * What the deployed service is reported to enforce beyond the specification. The shared
 * schemas keep the specification's form, which the agent sends by default; these rules are
 * the sandbox's `--strict`, so a carrier learns on a laptop that a config needs
 * `date_time_format = "utc"` and a `source`, not from the dead-letter table of a truck.
 * Their problems read like the schemas' (src/validation.ts).
 */
import { describeValue, formatPath, type Problem } from '../validation.js';

/** UTC with whole seconds: the only `dateTime` form one deployment was seen accepting. */
export const UTC_DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;

/** The agent's default load number rule: ASCII letters, digits and `-`, 1-35 characters. */
export const DEFAULT_LOAD_NUMBER_PATTERN = '^[A-Za-z0-9-]{1,35}$';

export interface LoadNumberRule {
  /** As given, for messages. */
  pattern: string;
  /** Matches the whole load number. */
  re: RegExp;
}

export interface Rules {
  /** UTC `dateTime` everywhere and a top-level `source`. */
  strict: boolean;
  loadNumber?: LoadNumberRule;
}

/**
 * A load number pattern matched against the whole string. Throws SyntaxError for an invalid
 * one; it is compiled on its own first, because wrapped in `^(?:...)$` a stray `)` such as
 * `a)(b` would compile into a different pattern instead of failing.
 */
export function loadNumberRule(pattern: string): LoadNumberRule {
  if (pattern === '') throw new SyntaxError('an empty pattern matches no load number');
  new RegExp(pattern);
  return { pattern, re: new RegExp(`^(?:${pattern})$`) };
}

/** The rules for sandbox options: `strict` brings the default load number rule unless a pattern is given. */
export function sandboxRules(strict: boolean, loadNumberPattern: string | undefined): Rules {
  const pattern = loadNumberPattern ?? (strict ? DEFAULT_LOAD_NUMBER_PATTERN : undefined);
  return { strict, loadNumber: pattern === undefined ? undefined : loadNumberRule(pattern) };
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Problems with a parsed JSON body, top-level fields first (an agent keeps only the start of
 * a refusal with its dead letter). Fields of the wrong type are left to the schemas.
 */
export function ruleProblems(kind: 'milestone' | 'trace', data: unknown, rules: Rules): Problem[] {
  const problems: Problem[] = [];
  const body = isRecord(data) ? data : {};
  if (rules.strict) {
    const source = body.source;
    if (source === undefined) problems.push({ path: 'source', message: 'required (expected a non-empty string such as "carrier")' });
    else if (typeof source !== 'string' || source === '') problems.push({ path: 'source', message: `expected a non-empty string, got ${describeValue(source)}` });
  }
  const rule = rules.loadNumber;
  if (rule && typeof body.loadNumber === 'string' && !rule.re.test(body.loadNumber)) {
    problems.push({ path: 'loadNumber', message: `expected a match for ${rule.pattern}, got ${describeValue(body.loadNumber)}` });
  }
  if (!rules.strict) return problems;
  const dateTime = (path: PropertyKey[], value: unknown) => {
    if (typeof value === 'string' && !UTC_DATE_TIME.test(value)) {
      problems.push({ path: formatPath(path), message: `expected UTC with whole seconds (YYYY-MM-DDTHH:MM:SSZ), got ${describeValue(value)}` });
    }
  };
  if (kind === 'milestone') {
    if (isRecord(body.time)) dateTime(['time', 'dateTime'], body.time.dateTime);
  } else if (Array.isArray(body.traces)) {
    body.traces.forEach((t: unknown, i) => {
      if (!isRecord(t)) return;
      if (isRecord(t.time)) dateTime(['traces', i, 'time', 'dateTime'], t.time.dateTime);
      if (isRecord(t.temperature)) dateTime(['traces', i, 'temperature', 'dateTime'], t.temperature.dateTime);
    });
  }
  return problems;
}
