import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { afterEach, describe, expect, it } from 'vitest';
import { moduleSourceSchema, sourceSchema } from '../../src/config/schema.js';
import { createSource } from '../../src/sources/index.js';
import { ModuleSource } from '../../src/sources/module.js';
import { ROOT, tempDir, waitFor } from '../helpers.js';
import { FIXTURES, recorder, sleep } from './support.js';

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()!();
});

/** The fenced block of docs/sources.md that starts with `first`: the documentation is what is tested. */
function readmeBlock(lang: string, first: string): string {
  const readme = readFileSync(join(ROOT, 'docs', 'sources.md'), 'utf8');
  const start = readme.indexOf(`\`\`\`${lang}\n${first}`);
  expect(start, `docs/sources.md block ${first}`).toBeGreaterThan(-1);
  const body = readme.slice(start + lang.length + 4);
  return body.slice(0, body.indexOf('```'));
}

describe('module source', () => {
  it('runs the documented example (docs/sources.md) exactly as written', async () => {
    const t = tempDir();
    cleanup.push(t.cleanup);
    const modulePath = join(t.dir, 'my-source.js');
    writeFileSync(modulePath, readmeBlock('js', '// my-source.js'));
    writeFileSync(join(t.dir, 'package.json'), '{"type":"module"}');
    const tempFile = join(t.dir, 'temperature');
    // Replaced at once (rename), as a careful writer would: a poll never sees half a file.
    const put = (text: string) => {
      writeFileSync(`${tempFile}.new`, text);
      renameSync(`${tempFile}.new`, tempFile);
    };
    put('-18.5\n');
    // The documented [[sources]] table, with its paths pointed at the temp dir.
    const toml = readmeBlock('toml', '[[sources]]\ntype = "module"').replace('/opt/telematics/my-source.js', modulePath).replace('/run/reefer/temperature', tempFile);
    const cfg = sourceSchema.parse((parseToml(toml) as { sources: unknown[] }).sources[0]);
    expect(cfg).toMatchObject({ type: 'module', options: { resource_id: 'TRAILER-7', interval_s: 10 } });
    (cfg as { options: Record<string, unknown> }).options.interval_s = 0.05;

    const rec = recorder();
    const src = await createSource(cfg, rec.ctx);
    cleanup.push(() => src.stop());
    const t0 = Date.now();
    await src.start();
    expect(rec.readings[0]).toEqual({ resourceId: 'TRAILER-7', timeMs: expect.any(Number), temperatureC: -18.5 });
    expect(rec.readings[0].timeMs).toBeGreaterThanOrEqual(t0);
    expect(src.health()).toMatchObject({ healthy: true, readings: 1, detail: `reading ${tempFile}` });

    put('NaN\n');
    await waitFor(() => rec.rejects.length > 0, 3000, 'a reject');
    expect(rec.rejects[0]).toBe(`${tempFile}: not a number: "NaN"`);
    put('400\n'); // out of range: refused by the agent's check, not the module's
    await waitFor(() => rec.rejects.includes('temperature: out of range (400)'), 3000, 'range check');
    put('-17.9\n');
    await waitFor(() => rec.readings.at(-1)?.temperatureC === -17.9, 3000, 'a good reading again');

    await src.stop();
    const n = rec.readings.length;
    await sleep(150);
    expect(rec.readings.length).toBe(n); // stop() left no timer
    expect(src.health()).toMatchObject({ healthy: false, readings: n, rejected: rec.rejects.length });
  });

  it('validates what a module emits, keeps only reading fields, and counts it all itself', async () => {
    const rec = recorder();
    const src = new ModuleSource(moduleSourceSchema.parse({ type: 'module', path: 'test/fixtures/sources/counting-source.mjs', options: { resource_id: 'REEFER-3', every_ms: 10 } }), rec.ctx);
    expect(src.file).toBe(join(FIXTURES, 'sources', 'counting-source.mjs')); // relative to the working directory
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => rec.readings.length >= 3, 3000, 'readings');
    await src.stop();
    expect(rec.readings[0]).toEqual({ resourceId: 'REEFER-3', timeMs: Date.parse('2026-01-15T12:00:01Z'), temperatureC: -17.9 });
    expect(rec.readings.every((r) => !('secret' in r))).toBe(true);
    expect(rec.rejects.slice(0, 4)).toEqual(['latitude: out of range (200)', 'temperature: out of range (NaN)', 'emit: expected a reading object, got null', 'frame 5: bad CRC from the controller']);
    // The module claims 999999 readings; the agent reports what it counted.
    const h = src.health();
    expect(h).toMatchObject({ readings: rec.readings.length, rejected: 4 });
    expect(rec.logs.some((l) => l.msg === 'counting source started' && l.every === 10)).toBe(true);
  });

  it('names the module and the problem when it cannot be used', async () => {
    const make = (path: string) => new ModuleSource(moduleSourceSchema.parse({ type: 'module', path }), recorder().ctx);
    const missing = make('/nonexistent/plugin.js');
    await expect(missing.start()).rejects.toThrow(/^module source \/nonexistent\/plugin\.js: cannot load \/nonexistent\/plugin\.js: /);
    expect(missing.health()).toMatchObject({ healthy: false, detail: expect.stringContaining('cannot load') });
    await expect(make(join(FIXTURES, 'sources', 'no-start.mjs')).start()).rejects.toThrow(/must return an object with start\(\) and stop\(\)$/);
    const failing = new ModuleSource(moduleSourceSchema.parse({ type: 'module', path: join(FIXTURES, 'sources', 'fails-to-start.mjs'), options: { port: '/dev/ttyS1' } }), recorder().ctx);
    await expect(failing.start()).rejects.toThrow('no reefer controller on /dev/ttyS1');
    expect(failing.health()).toMatchObject({ healthy: false, detail: 'no reefer controller on /dev/ttyS1' });
  });
});
