import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { execSourceSchema } from '../../src/config/schema.js';
import { ExecSource, parseExecLine } from '../../src/sources/exec.js';
import { tempDir, waitFor } from '../helpers.js';
import { activeResources, alive, FIXTURES, recorder } from './support.js';

const cfg = (extra: Record<string, unknown>) => execSourceSchema.parse({ type: 'exec', restart_initial_s: 0.05, restart_max_s: 0.4, ...extra });
const node = (script: string) => [process.execPath, '-e', script];

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()!();
});

describe('exec line contract', () => {
  it('maps the camelCase line to a reading, converting Fahrenheit and stamping lines without time', () => {
    expect(parseExecLine('{"resourceId":"T1","time":"2026-01-15T14:05:03.120-06:00","latitude":41.5,"longitude":-87.5,"speed":3,"heading":90,"odometer":12.5}', 0)).toEqual({
      ok: true,
      reading: { resourceId: 'T1', timeMs: Date.parse('2026-01-15T20:05:03.120Z'), lat: 41.5, lon: -87.5, speed: 3, heading: 90, odometer: 12.5, temperatureC: undefined },
    });
    expect(parseExecLine('{"resourceId":"T1","temperature":32,"temperatureUnit":"F"}', 1234)).toMatchObject({ ok: true, reading: { timeMs: 1234, temperatureC: 0 } });
    expect(parseExecLine('{"resourceId":"T1","temperature":-18}', 1)).toMatchObject({ ok: true, reading: { temperatureC: -18 } });
    expect(parseExecLine('{"resourceId":"T1","temperature":5,"temperatureUnit":"K"}', 1)).toMatchObject({ ok: false, reason: expect.stringMatching(/^temperatureUnit: /) });
  });
});

describe('exec source', () => {
  it('reads good lines, skips every kind of bad line by number, logs stderr, and stops its command', async () => {
    const rec = recorder();
    const src = new ExecSource(cfg({ command: [process.execPath, join(FIXTURES, 'exec', 'reefer.mjs')] }), rec.ctx);
    cleanup.push(() => src.stop());
    const t0 = Date.now();
    await src.start();
    await waitFor(() => rec.readings.length === 3, 10_000, 'three good readings');
    const pid = src.pid!;
    expect(rec.readings[0]).toEqual({ resourceId: 'TRAILER-7', timeMs: Date.parse('2026-01-15T20:05:03.120Z'), lat: 41.8781, lon: -87.6298, speed: 12.5, heading: 270 });
    expect(rec.readings[1]).toMatchObject({ resourceId: 'TRAILER-7', temperatureC: -18 }); // -0.4 F
    expect(rec.readings[1].timeMs).toBeGreaterThanOrEqual(t0); // receive time
    expect(rec.readings[2]).toEqual({ resourceId: 'TRAILER-7', timeMs: Date.parse('2026-01-15T20:05:04Z'), temperatureC: -18.2, odometer: 120345.6 });
    expect(rec.rejects).toEqual([
      'line 3: not JSON: "\\u0000\ufffd\ufffd\\u001b"', // control bytes escaped, invalid UTF-8 replaced
      'line 4: latitude: expected number, got "NaN"',
      'line 5: latitude: expected a number <= 90, got 200',
      expect.stringMatching(/^line 6: not JSON: /),
      'line 7: 10485796 bytes, longer than max_line_bytes (65536); skipped',
      'line 8: lat: unknown key; lon: unknown key',
      'line 9: time: expected an ISO 8601 time with Z or an offset, e.g. 2026-01-15T14:05:03Z, got "2026-01-15 14:05:03"',
      'line 10: position: latitude and longitude must come together',
      'line 11: (top level): expected object, got an array',
    ]);
    await waitFor(() => rec.logs.some((l) => l.stderr === 'controller: CAN timeout, retrying'), 5000, 'stderr in the log');
    expect(rec.logs.find((l) => l.stderr === `adapter pid ${pid} starting`)).toMatchObject({ level: 40, msg: 'command stderr' });
    expect(src.health()).toMatchObject({ healthy: true, readings: 3, rejected: 9, detail: `running, pid ${pid}; 8 bad lines, 1 too long` });

    await src.stop();
    expect(alive(pid)).toBe(false);
    expect(src.health()).toMatchObject({ healthy: false, detail: expect.stringMatching(/^stopped/) });
  });

  it('restarts a command that exits, with growing capped backoff, and says so only a few times', async () => {
    const rec = recorder();
    const src = new ExecSource(cfg({ command: node('process.stderr.write("no controller\\n"); process.exit(3)') }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => src.health().counters.starts >= 6, 10_000, 'six starts');
    await src.stop();
    const ended = rec.logs.filter((l) => l.msg === 'command ended; restarting');
    // Growing, then capped. That each restart waits that long, to the millisecond, is
    // reconnector.test.ts's to show with fake timers: measured here it would be a wall clock.
    expect(ended.slice(0, 5).map((l) => l.restartInMs)).toEqual([50, 100, 200, 400, 400]);
    expect(ended[0]).toMatchObject({ level: 40, reason: 'exited with code 3', restartInMs: 50 });
    expect(ended.filter((l) => l.level === 40)).toHaveLength(3);
    expect(ended.slice(3).every((l) => l.level === 20)).toBe(true);
    expect(rec.logs.filter((l) => l.stderr === 'no controller').length).toBeGreaterThanOrEqual(5);
    expect(src.health().counters.exits).toBeGreaterThanOrEqual(5);
  });

  it('calls a command that keeps failing unhealthy, also in the moments it runs between failures', async () => {
    const rec = recorder();
    // Each run delivers a reading (so its backoff starts over) and then fails: a crash loop at full speed.
    const line = JSON.stringify({ resourceId: 'T1', temperature: 4 });
    const src = new ExecSource(cfg({ command: node(`console.log('${line}'); setTimeout(() => process.exit(3), 150)`), restart_initial_s: 0.05 }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => src.health().counters.exits >= 3, 10_000, 'three failures');
    // Sampled while it restarts and runs again: never healthy, and the detail says why.
    const samples: Array<{ healthy: boolean; detail?: string }> = [];
    for (let i = 0; i < 40; i++) {
      samples.push(src.health());
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(samples.some((h) => h.detail?.startsWith('running'))).toBe(true);
    expect(samples.filter((h) => h.healthy)).toEqual([]);
    expect(samples.at(-1)!.detail).toMatch(/failing: \d+ failures in the last 60 s \(last: exited with code 3\)/);
    expect(rec.readings.length).toBeGreaterThanOrEqual(3);
  });

  it('a command that cannot start is retried, not fatal', async () => {
    const rec = recorder();
    const src = new ExecSource(cfg({ command: ['/nonexistent/reefer-reader', '--port', '/dev/ttyS0'] }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => src.health().counters.starts >= 3, 5000, 'three attempts');
    expect(src.health()).toMatchObject({ healthy: false, detail: expect.stringContaining('not running: could not start: ENOENT') });
    expect(rec.logs.filter((l) => l.level >= 50)).toEqual([]);
  });

  it('kills the whole process group on stop: a shell pipeline, a background helper, a child ignoring SIGTERM', async () => {
    const t = tempDir();
    cleanup.push(t.cleanup);
    const pidFile = join(t.dir, 'helper.pid');
    const termFile = join(t.dir, 'stubborn.term');
    // Notes the SIGTERM it ignores, so the test sees the order of the signals, not a clock.
    const stubborn = `process.on("SIGTERM", () => require("fs").writeFileSync(process.env.TERM_FILE, "ignored")); console.log(JSON.stringify({ resourceId: "T1", temperature: 4 })); setInterval(() => {}, 1000)`;
    const rec = recorder();
    const src = new ExecSource(
      cfg({
        command: `${process.execPath} -e 'setInterval(() => {}, 1000)' & echo $! > "$PID_FILE"; ${process.execPath} -e '${stubborn}' | cat`,
        env: { PID_FILE: pidFile, TERM_FILE: termFile },
        // Room for the stubborn child to note the SIGTERM on a loaded machine before SIGKILL.
        stop_timeout_s: 1,
      }),
      rec.ctx,
    );
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => rec.readings.length === 1, 5000, 'a reading through the pipeline');
    const shell = src.pid!;
    const helper = Number(readFileSync(pidFile, 'utf8'));
    expect(alive(helper)).toBe(true);
    await src.stop();
    // SIGTERM first (the stubborn child saw it and stayed), then SIGKILL (it is gone).
    expect(readFileSync(termFile, 'utf8')).toBe('ignored');
    await waitFor(() => !alive(helper) && !alive(shell), 2000, 'every process of the group gone');
  });

  it('restarts when the main process exits even if a helper holds stdout, and kills the helper', async () => {
    const t = tempDir();
    cleanup.push(t.cleanup);
    const pidFile = join(t.dir, 'helper.pid');
    const rec = recorder();
    const src = new ExecSource(cfg({ command: `${process.execPath} -e 'setInterval(() => {}, 1000)' & echo $! > "$PID_FILE"; exit 0`, env: { PID_FILE: pidFile }, stop_timeout_s: 1 }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => src.health().counters.starts >= 2, 5000, 'a restart');
    await src.stop();
    await waitFor(() => !alive(Number(readFileSync(pidFile, 'utf8'))), 2000, 'the helper gone');
  });

  it("gives the command the config's env but never the subscription key nor the agent's heap limits", async () => {
    process.env.TELEMATICS_AGENT_SUBSCRIPTION_KEY = 'secret-key-0123456789';
    process.env.NODE_OPTIONS = '--max-old-space-size=96';
    cleanup.push(() => void delete process.env.TELEMATICS_AGENT_SUBSCRIPTION_KEY);
    cleanup.push(() => void delete process.env.NODE_OPTIONS);
    const rec = recorder();
    const script =
      'console.log(JSON.stringify({ resourceId: (process.env.TELEMATICS_AGENT_SUBSCRIPTION_KEY ?? "no-key") + "@" + process.env.REEFER_PORT + "@" + (process.env.NODE_OPTIONS ?? "no-options"), temperature: 1 })); setInterval(() => {}, 1000)';
    const src = new ExecSource(cfg({ command: node(script), env: { REEFER_PORT: '/dev/ttyS1' } }), rec.ctx);
    cleanup.push(() => src.stop());
    await src.start();
    await waitFor(() => rec.readings.length === 1, 5000, 'a reading');
    expect(rec.readings[0].resourceId).toBe('no-key@/dev/ttyS1@no-options');
  });

  it('marks a command that prints nothing unhealthy after the no-data timeout, and leaves nothing behind on stop', async () => {
    const before = activeResources();
    const rec = recorder();
    const src = new ExecSource(cfg({ command: node('setInterval(() => {}, 1000)'), no_data_timeout_s: 0.2 }), rec.ctx);
    await src.start();
    await waitFor(() => !src.health().healthy, 3000, 'silence noticed');
    expect(src.health().detail).toMatch(/^pid \d+: no output for 0\.2 s/);
    const pid = src.pid!;
    await src.stop();
    expect(alive(pid)).toBe(false);
    // Handles are released as their close events run, not by a deadline.
    await waitFor(
      () => {
        const after = activeResources();
        return (after.ProcessWrap ?? 0) <= (before.ProcessWrap ?? 0) && (after.Timeout ?? 0) <= (before.Timeout ?? 0) && (after.PipeWrap ?? 0) <= (before.PipeWrap ?? 0);
      },
      5000,
      'no process, pipe or timer left',
    );
  });
});
