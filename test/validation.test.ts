import * as z from 'zod';
import { describe, expect, it } from 'vitest';
import { check, formatPath, problemLine } from '../src/validation.js';

const lines = (schema: z.ZodType, input: unknown, format?: 'toml' | 'json') => {
  const r = check(schema, input, format);
  if (r.success) throw new Error('expected the input to be refused');
  return r.problems.map(problemLine);
};

describe('validation messages', () => {
  it('write paths as a.b[3].c, and the input itself as (top level)', () => {
    expect(formatPath(['traces', 3, 'coordinate', 'latitude'])).toBe('traces[3].coordinate.latitude');
    expect(formatPath([0, 'sequence'])).toBe('[0].sequence');
    expect(formatPath([])).toBe('(top level)');
  });

  it('say expected X, got Y; required for what is missing; a table in TOML, an object in JSON', () => {
    const schema = z.strictObject({
      kind: z.discriminatedUnion('type', [z.object({ type: z.literal('a') }), z.object({ type: z.literal('b') })]),
      items: z.array(z.number()).min(2),
      unit: z.literal('C'),
      step: z.number().multipleOf(5),
      inner: z.object({ name: z.string() }),
    });
    expect(lines(schema, { kind: {}, items: [1], unit: 'F', step: 7, inner: { name: {} }, extra: 1 })).toEqual([
      'kind.type: required (expected one of "a", "b")',
      'items: expected array length >= 2, got length 1',
      'unit: expected "C", got "F"',
      'step: expected a multiple of 5, got 7',
      'inner.name: expected string, got an object',
      'extra: unknown key',
    ]);
    expect(lines(schema, { kind: { type: 'c' }, items: [1, 2], unit: 'C', step: 5 }, 'toml')).toEqual(['kind.type: expected one of "a", "b", got "c"', 'inner: required table [inner] is missing']);
    expect(lines(schema, [], 'json')).toEqual(['(top level): expected object, got an array']);
  });

  it("keep a schema's own message and add what was refused when it is a plain value", () => {
    const schema = z.object({ at: z.string().regex(/^\d+$/, 'expected digits'), pair: z.object({ a: z.number() }).refine(() => false, 'expected a pair that fits') });
    expect(lines(schema, { at: 'x'.repeat(50), pair: { a: 1 } })).toEqual([`at: expected digits, got "${'x'.repeat(40)}..."`, 'pair: expected a pair that fits']);
  });
});
