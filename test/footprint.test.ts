/**
 * Guards for what keeps the daemon small (see the README's Performance section): each of these
 * cost megabytes of RSS when it slipped in, and nothing else would fail if it came back.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, agentConfig, runCli, startDaemon, waitFor, writeFile, daemonFixture } from './helpers.js';

const fx = daemonFixture();

/**
 * Preloaded into the daemon: records every use of what maps ICU's time-zone and locale data
 * (Intl's formatters, and Date's local-time methods, which go through ICU's zone too), one
 * JSON line each with the calling frames.
 */
const TRAP = `
const { appendFileSync } = require('node:fs');
const file = process.env.ICU_TRAP_FILE;
const note = (what) => appendFileSync(file, JSON.stringify({ what, stack: new Error().stack.split('\\n').slice(2, 6).join('\\n') }) + '\\n');
for (const k of ['DateTimeFormat', 'NumberFormat', 'Collator', 'PluralRules', 'RelativeTimeFormat', 'ListFormat', 'DisplayNames', 'Segmenter']) {
  const Original = Intl[k];
  Intl[k] = function (...args) { note('Intl.' + k); return new Original(...args); };
}
const local = ['getHours', 'getMinutes', 'getDate', 'getDay', 'getMonth', 'getFullYear', 'getTimezoneOffset', 'toString', 'toDateString', 'toTimeString', 'toLocaleString', 'toLocaleDateString', 'toLocaleTimeString'];
for (const m of local) {
  const f = Date.prototype[m];
  Date.prototype[m] = function (...args) { note('Date.prototype.' + m); return f.apply(this, args); };
}
`;

/** A 1 Hz simulator (20x) with load L-1 active, pushing every 2 s, every reading a point. */
async function simulatorWithLoad(url: string): Promise<string> {
  const source = '[[sources]]\ntype = "simulator"\nresource_id = "TRUCK-1"\ntime_scale = 20\ninterval_s = 1\n';
  const cfg = agentConfig(fx.tmp.dir, url, source, { traces: '*/2 * * * * *', sampling: 0 });
  expect((await runCli(['load', 'start', 'L-1', '--resource', 'TRUCK-1', '--config', cfg])).code).toBe(0);
  return cfg;
}

describe("the daemon's footprint", () => {
  // The trace schedule runs on node-cron, which computes local time through Intl: ICU is
  // mapped for that (accepted: src/cron.ts). Everything else keeps off it, and event times come
  // from the system's zoneinfo, which is fresher than ICU's copy.
  it('touches Intl and local-time Date methods only in the schedule (node-cron) while collecting, pushing and delivering', async () => {
    const { url } = await fx.sandbox.start();
    const trap = writeFile(fx.tmp.dir, 'icu-trap.cjs', TRAP);
    const trapFile = join(fx.tmp.dir, 'icu-uses.txt');
    writeFile(fx.tmp.dir, 'icu-uses.txt', '');
    const cfg = await simulatorWithLoad(url);
    fx.daemon = startDaemon(['--config', cfg], { NODE_OPTIONS: `--require ${trap}`, ICU_TRAP_FILE: trapFile });

    // Readings, trace pushes on the cron schedule (local times at the positions) and a milestone.
    await waitFor(() => fx.sandbox.stats.tracePoints >= 5, 20_000, 'trace points');
    expect((await runCli(['milestone', '--load', 'L-1', '--code', 'X3', '--stop', '1', '--config', cfg])).code).toBe(0);
    await waitFor(() => fx.sandbox.milestones.length === 1, 10_000, 'the milestone');
    const r = await fx.daemon.stop('SIGTERM');
    const daemonOutput = fx.daemon.output();
    fx.daemon = undefined;
    expect(r.code).toBe(0);
    expect(fx.sandbox.traces[0].body.traces[0].time.timeZoneCode).toMatch(/^C[SD]T$/);
    const uses = readFileSync(trapFile, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { what: string; stack: string });
    expect(uses.filter((u) => !u.stack.includes('/node_modules/node-cron/'))).toEqual([]);
    expect(uses.map((u) => u.what)).toContain('Intl.DateTimeFormat');
    expect(daemonOutput).not.toContain('is tzdata installed?');
  });

  it('without zoneinfo files says so at start, and still gives the right times (through Intl)', async () => {
    const { url } = await fx.sandbox.start();
    const cfg = await simulatorWithLoad(url);
    fx.daemon = startDaemon(['--config', cfg], { TZDIR: join(fx.tmp.dir, 'no-zoneinfo-here') });
    await waitFor(() => fx.sandbox.stats.tracePoints >= 2, 20_000, 'trace points');
    const warning = fx.daemon
      .output()
      .split('\n')
      .find((l) => l.includes('is tzdata installed?'));
    expect(JSON.parse(warning!)).toMatchObject({ level: 40, zoneinfo: join(fx.tmp.dir, 'no-zoneinfo-here') });
    const point = fx.sandbox.traces[0].body.traces[0];
    expect(point.time.timeZoneCode).toMatch(/^C[SD]T$/);
    expect(point.time.timeZoneOffset).toMatch(/^UTC-[56]$/);
  });

  it("compiles undici's HTTP parser with Liftoff only: TurboFan's recompilation of it took some 35 MB", async () => {
    const { url } = await fx.sandbox.start();
    const cfg = await simulatorWithLoad(url);
    // V8 prints a line for every WebAssembly function it compiles, and with which compiler.
    fx.daemon = startDaemon(['--config', cfg], {}, ['--trace-wasm-compilation-times']);
    await waitFor(() => fx.sandbox.stats.tracePoints >= 5, 20_000, 'trace points');
    expect((await runCli(['milestone', '--load', 'L-1', '--code', 'X3', '--stop', '1', '--config', cfg])).code).toBe(0);
    await waitFor(() => fx.sandbox.milestones.length === 1, 10_000, 'the milestone');
    // Without the flag the tier-up comes within a second of the first requests.
    await new Promise((r) => setTimeout(r, 1500));
    expect((await fx.daemon.stop('SIGTERM')).code).toBe(0);
    const output = fx.daemon.output();
    fx.daemon = undefined;
    expect(output).toMatch(/^Compiled function .* using Liftoff/m);
    expect(output).not.toMatch(/using TurboFan/);
  });

  it('collects once after start-up through a throwaway context, and leaves no gc() behind', async () => {
    // In a process of its own: the collection sets and clears V8 flags.
    const script = `
      import { runInNewContext } from 'node:vm';
      import { collectAfterStart } from ${JSON.stringify(join(ROOT, 'dist', 'v8-tuning.js'))};
      collectAfterStart(0);
      setTimeout(() => process.stdout.write(JSON.stringify({ global: typeof globalThis.gc, context: runInNewContext('typeof gc') })), 50);
    `;
    const r = spawnSync(process.execPath, ['--trace-gc', '--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/Mark-Compact/);
    expect(r.stdout.split('\n').at(-1)).toBe(JSON.stringify({ global: 'undefined', context: 'undefined' }));
  });

  it('loads MQTT.js only for a link or an mqtt source: a daemon without them goes without its megabytes', async () => {
    const { url } = await fx.sandbox.start();
    // Preloaded: notes every CommonJS file of MQTT.js that is loaded (an ESM import of it goes through here too).
    const trap = writeFile(
      fx.tmp.dir,
      'mqtt-trap.cjs',
      "const M = require('node:module'); const load = M.prototype.load; M.prototype.load = function (f) { if (/node_modules[\\/]mqtt[\\/]/.test(f)) require('node:fs').appendFileSync(process.env.MQTT_TRAP_FILE, f + '\\n'); return load.apply(this, arguments); };",
    );
    const trapFile = writeFile(fx.tmp.dir, 'mqtt-loads.txt', '');
    const env = { NODE_OPTIONS: `--require ${trap}`, MQTT_TRAP_FILE: trapFile };
    const cfg = await simulatorWithLoad(url);
    fx.daemon = startDaemon(['--config', cfg], env);
    await waitFor(() => fx.sandbox.stats.tracePoints >= 3, 20_000, 'trace points');
    expect((await runCli(['status', '--config', cfg], { env })).code).toBe(0);
    expect((await fx.daemon.stop('SIGTERM')).code).toBe(0);
    fx.daemon = undefined;
    expect(readFileSync(trapFile, 'utf8')).toBe('');
    // The trap sees it when it is loaded: `fleet send` does (to a broker that is not there).
    const send = await runCli(['fleet', 'send', '--url', 'mqtt://127.0.0.1:1', '--device', 'truck-a', '--timeout', '2', 'status'], { env });
    expect(send.code).not.toBe(0);
    expect(readFileSync(trapFile, 'utf8')).toMatch(/node_modules\/mqtt\/build\/index\.js/);
  });

  it('the bundle keeps only the English messages of zod (its other locales cost megabytes)', () => {
    const dir = join(ROOT, 'dist', 'pkg');
    const code = readdirSync(dir)
      .filter((f) => f.endsWith('.js'))
      .map((f) => readFileSync(join(dir, f), 'utf8'))
      .join('\n');
    // esbuild marks where each module starts with its path.
    const locales = [...code.matchAll(/^\/\/ node_modules\/zod\/v4\/locales\/(\S+)$/gm)].map((m) => m[1]);
    expect(locales).toEqual(['en.js']);
    expect(code).toMatch(/^\/\/ node_modules\/zod\/v4\/core\/schemas\.js$/m);
  });
});
