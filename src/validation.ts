/**
 * The one way input is checked against a zod schema and its problems put into words: the
 * config file, API bodies (the agent's own and the sandbox's answers), stops files and exec
 * lines all read alike, so an operator who learned one message can read them all.
 *
 * A problem is `path: problem`, the path as `sources[1].resource_id` (array indexes in
 * brackets, `(top level)` for the input itself), and the problem `expected X, got Y` where
 * the issue allows: `required (expected X)` for what is missing, `unknown key` for a key the
 * schema does not know. The messages schemas give themselves are written that way too
 * ("expected a cron expression such as ..."), and get `, got Y` after them.
 */
import type * as z from 'zod';

/** What the input was written in: TOML calls an object a table. */
export type InputFormat = 'toml' | 'json';

export interface Problem {
  path: string;
  message: string;
}

export type Checked<T> = { success: true; data: T } | { success: false; problems: Problem[] };

export function problemLine(p: Problem): string {
  return `${p.path}: ${p.message}`;
}

export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) {
    if (typeof p === 'number') out += `[${p}]`;
    else out += out ? `.${String(p)}` : String(p);
  }
  return out || '(top level)';
}

/**
 * Keys whose value is a secret wherever they stand (api.subscription_key, a password): a
 * problem with one names only its type. Problems are printed, and logged on a reload, where
 * the key must never appear (src/log.ts scrubs only the secrets the agent already holds).
 */
export const SECRET_KEYS: ReadonlySet<string> = new Set(['subscription_key', 'password']);

/** A URL's password (scheme://user:password@host) masked, wherever a problem shows one. */
const maskUrlPassword = (s: string) => s.replace(/^([a-z][\w+.-]*:\/\/[^/?#@:]*:)[^/?#@]*@/i, '$1***@');

/** A value as a problem names it: strings quoted and cut at 40 characters, containers by kind. */
export function describeValue(value: unknown, format: InputFormat = 'json'): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'string') {
    const shown = maskUrlPassword(value);
    return JSON.stringify(shown.length > 40 ? `${shown.slice(0, 40)}...` : shown);
  }
  if (Array.isArray(value)) return 'an array';
  if (value === null) return 'null';
  if (typeof value === 'object') return format === 'toml' ? 'a table' : 'an object';
  return String(value);
}

/** What a secret's value is, never the value: `a string`, `a number`, `a table`. */
function describeType(value: unknown, format: InputFormat): string {
  if (value === undefined || value === null || Array.isArray(value) || typeof value === 'object') return describeValue(value, format);
  return typeof value === 'string' ? 'a string' : `a ${typeof value}`;
}

/**
 * Parse `input` with `schema`; on failure, every problem at once. The input is reported
 * into the issues (zod leaves it out by default), which is what tells a missing value from
 * a wrong one and gives the `got` part.
 */
export function check<S extends z.ZodType>(schema: S, input: unknown, format: InputFormat = 'json'): Checked<z.output<S>> {
  const result = schema.safeParse(input, { reportInput: true });
  if (result.success) return { success: true, data: result.data };
  return { success: false, problems: result.error.issues.flatMap((issue) => issueProblems(issue, format)) };
}

function issueProblems(issue: z.core.$ZodIssue, format: InputFormat): Problem[] {
  const path = formatPath(issue.path);
  const key = issue.path[issue.path.length - 1];
  const secret = typeof key === 'string' && SECRET_KEYS.has(key);
  const got = (value: unknown) => (secret ? describeType(value, format) : describeValue(value, format));
  const at = (message: string): Problem[] => [{ path, message }];
  switch (issue.code) {
    case 'unrecognized_keys':
      return issue.keys.map((key) => ({ path: formatPath([...issue.path, key]), message: 'unknown key' }));
    case 'invalid_type':
      if (issue.input === undefined) {
        return at(issue.expected === 'object' && format === 'toml' ? `required table [${path}] is missing` : `required (expected ${issue.expected})`);
      }
      return at(`expected ${issue.expected}, got ${got(issue.input)}`);
    case 'too_small':
    case 'too_big': {
      const op = issue.code === 'too_small' ? (issue.inclusive ? '>=' : '>') : issue.inclusive ? '<=' : '<';
      const bound = issue.code === 'too_small' ? issue.minimum : issue.maximum;
      const numeric = issue.origin === 'number' || issue.origin === 'int' || issue.origin === 'bigint';
      const what = numeric ? `a number ${op} ${String(bound)}` : `${issue.origin} length ${op} ${String(bound)}`;
      const value = Array.isArray(issue.input) ? `length ${issue.input.length}` : got(issue.input);
      return at(`expected ${what}, got ${value}`);
    }
    case 'invalid_value': {
      const values = issue.values.map((v) => JSON.stringify(v));
      return at(`expected ${values.length === 1 ? values[0] : `one of ${values.join(', ')}`}, got ${got(issue.input)}`);
    }
    case 'not_multiple_of':
      return at(`expected a multiple of ${String(issue.divisor)}, got ${got(issue.input)}`);
    case 'invalid_union':
      if (issue.discriminator) {
        // zod puts the path at the union or, in newer versions, at its discriminator.
        const atKey = issue.path[issue.path.length - 1] === issue.discriminator ? issue.path : [...issue.path, issue.discriminator];
        const value = (issue.input as Record<string, unknown> | undefined)?.[issue.discriminator];
        const known = ('options' in issue ? issue.options : undefined) ?? [];
        const options = `one of ${known.map((v) => JSON.stringify(v)).join(', ')}`;
        return [{ path: formatPath(atKey), message: value === undefined ? `required (expected ${options})` : `expected ${options}, got ${got(value)}` }];
      }
      break;
  }
  // The schema's own message (refinements, formats, unions): "got" only for a plain value,
  // where it names what was refused; a table or array is at the path already.
  const input = (issue as { input?: unknown }).input;
  return at(`${issue.message}${input !== undefined && (typeof input !== 'object' || input === null) ? `, got ${got(input)}` : ''}`);
}
