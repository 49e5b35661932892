/**
 * systemd notifications and the watchdog, against a real Unix datagram socket bound by a small
 * Python listener (what systemd's NOTIFY_SOCKET is) and the real daemon. The listener reports
 * each datagram with the sender's PID from SCM_CREDENTIALS, the same way systemd decides
 * whether NotifyAccess=main accepts it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { beforeAll, describe, expect, it } from 'vitest';
import { SCHEMA_VERSION } from '../src/buffer/db.js';
import { ROOT, TEST_SCAC, agentConfig, startDaemon, waitFor, writeFile, daemonFixture } from './helpers.js';

/** Binds ADDRESS (a path, or '@name' for the abstract namespace) and prints each datagram as a JSON line. */
const LISTENER = `
import array, json, socket, struct, sys, time
address = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind('\\0' + address[1:] if address.startswith('@') else address)
print(json.dumps({'bound': address}), flush=True)
ucred = struct.calcsize('3i')
while True:
    data, ancillary, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(ucred) + socket.CMSG_SPACE(16 * 4))
    pid = None
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid = struct.unpack('3i', payload[:ucred])[0]
        elif level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            # systemd-notify's BARRIER=1 passes a pipe and waits until it is closed.
            fds = array.array('i')
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            for fd in fds:
                socket.close(fd)
    print(json.dumps({'timeMs': time.time() * 1000, 'pid': pid, 'message': data.decode('utf-8', 'replace')}), flush=True)
`;

/**
 * A module source: its start() returns only once the gate file exists (when one is given),
 * and once the trigger file exists it blocks the event loop for good, as a bug would.
 */
const SOURCE = `
import { existsSync, writeFileSync } from 'node:fs';
export function createSource(ctx, options) {
  let timer;
  return {
    async start() {
      if (options.gate) {
        writeFileSync(options.starting, '');
        for (let i = 0; i < 600 && !existsSync(options.gate); i++) await new Promise((r) => setTimeout(r, 50));
      }
      timer = setInterval(() => {
        if (options.trigger && existsSync(options.trigger)) {
          writeFileSync(options.spinning, '');
          for (;;) {}
        }
      }, 50);
    },
    stop() {
      clearInterval(timer);
    },
  };
}
`;

interface Datagram {
  timeMs: number;
  pid: number | null;
  lines: string[];
}

interface Listener {
  child: ChildProcess;
  datagrams: Datagram[];
  /** Datagrams carrying this line (e.g. READY=1), from index `from` on. */
  with: (line: string, from?: number) => Datagram[];
}

let listener: Listener | undefined;
const fx = daemonFixture({
  prefix: 'ta-notify-',
  afterStop: async () => {
    if (!listener) return;
    const { child } = listener;
    listener = undefined;
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      process.kill(child.pid!, 'SIGKILL');
      await exited;
    }
  },
});

async function listen(address: string): Promise<Listener> {
  const script = writeFile(fx.tmp.dir, 'listener.py', LISTENER);
  const child = spawn('python3', [script, address], { stdio: ['ignore', 'pipe', 'pipe'] });
  const datagrams: Datagram[] = [];
  let bound = false;
  let stderr = '';
  let rest = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdout.on('data', (d: Buffer) => {
    const parts = (rest + d.toString()).split('\n');
    rest = parts.pop()!;
    for (const part of parts) {
      const j = JSON.parse(part) as { bound?: string; timeMs: number; pid: number | null; message: string };
      if (j.bound) bound = true;
      else datagrams.push({ timeMs: j.timeMs, pid: j.pid, lines: j.message.split('\n') });
    }
  });
  const l: Listener = { child, datagrams, with: (line, from = 0) => datagrams.slice(from).filter((d) => d.lines.includes(line)) };
  listener = l; // afterEach kills it whatever happens next
  await waitFor(() => bound || child.exitCode !== null, 10_000, 'the listener to bind');
  if (!bound) throw new Error(`the listener did not start: ${stderr}`);
  return l;
}

/** A config against the sandbox with one module source; `options` go to the source. */
async function moduleConfig(options: Record<string, string> = {}): Promise<string> {
  const { url } = await fx.sandbox.start();
  const path = writeFile(fx.tmp.dir, 'source.mjs', SOURCE);
  const opts = Object.entries(options)
    .map(([k, v]) => `${k} = ${JSON.stringify(v)}\n`)
    .join('');
  return agentConfig(fx.tmp.dir, url, `[[sources]]\ntype = "module"\nname = "probe"\npath = ${JSON.stringify(path)}\n[sources.options]\n${opts}`);
}

/** The daemon's JSON log line with this message. */
function logLine(output: string, msg: string): { time: number; [k: string]: unknown } | undefined {
  for (const line of output.split('\n')) {
    if (!line.startsWith('{')) continue;
    const j = JSON.parse(line) as { time: number; msg?: string };
    if (j.msg === msg) return j;
  }
  return undefined;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** WATCHDOG_USEC=1000000: a heartbeat every 500 ms. */
const WATCHDOG_ENV = { WATCHDOG_USEC: '1000000' };

describe('systemd notifications (Type=notify) and the watchdog', () => {
  beforeAll(() => {
    // Say so plainly, instead of every test timing out waiting for READY=1.
    try {
      createRequire(join(ROOT, 'package.json')).resolve('unix-dgram');
    } catch {
      throw new Error('unix-dgram is not installed (a dependency in package.json, native): run npm install');
    }
  });

  it('READY=1 only once the buffer is open and the sources have started, from the main PID; WATCHDOG=1 every half period', async () => {
    const gate = join(fx.tmp.dir, 'gate');
    const starting = join(fx.tmp.dir, 'starting');
    const cfg = await moduleConfig({ gate, starting });
    const socket = join(fx.tmp.dir, 'notify.sock');
    const l = await listen(socket);
    fx.daemon = startDaemon(['--config', cfg], { NOTIFY_SOCKET: socket, ...WATCHDOG_ENV });
    const pid = fx.daemon.child.pid;

    // The source's start() is waiting for the gate: the heartbeat already runs, READY waits.
    await waitFor(() => existsSync(starting), 15_000, 'the module source to begin starting');
    await waitFor(() => l.with('WATCHDOG=1').length >= 2, 5000, 'heartbeats while the sources start');
    // Two more heartbeats: the daemon's own clock, instead of a sleep, for "READY=1 still waits".
    const early = l.with('WATCHDOG=1').length;
    await waitFor(() => l.with('WATCHDOG=1').length >= early + 2, 5000, 'two more heartbeats while the sources start');
    expect(l.with('READY=1')).toEqual([]);
    expect(fx.daemon.output()).not.toContain('agent started');

    writeFileSync(gate, '');
    const [ready] = await waitFor(() => l.with('READY=1').length > 0 && l.with('READY=1'), 10_000, 'READY=1');
    const started = await waitFor(() => logLine(fx.daemon!.output(), 'agent started'), 5000, "the 'agent started' log line");
    expect(ready.timeMs).toBeGreaterThanOrEqual(started.time);
    expect(ready.lines).toEqual(['READY=1', 'STATUS=running: 1 source(s)']);
    // Sent by the agent's own process, so the unit's NotifyAccess=main accepts it.
    expect(ready.pid).toBe(pid);

    const beats = l.with('WATCHDOG=1').length;
    await waitFor(() => l.with('WATCHDOG=1').length >= beats + 3, 5000, 'three more heartbeats');
    // The period is the behaviour (half of WatchdogSec, 500 ms here). The median gap, not each
    // one: a datagram held up by a busy machine moves a gap or two, not the median; the bounds
    // still tell 500 ms from the whole period (1000) or a quarter of it (250).
    const times = l.with('WATCHDOG=1').map((d) => d.timeMs);
    const gaps = times
      .slice(1)
      .map((t, i) => t - times[i])
      .sort((a, b) => a - b);
    expect(gaps.length).toBeGreaterThanOrEqual(4);
    expect(gaps[Math.floor(gaps.length / 2)]).toBeGreaterThan(350);
    expect(gaps[Math.floor(gaps.length / 2)]).toBeLessThan(750);
    expect(l.with('WATCHDOG=1').every((d) => d.pid === pid && d.lines.length === 1)).toBe(true);
    expect(fx.daemon.output()).not.toMatch(/systemd notification/);
    // A new buffer is made in milliseconds: no more start time asked for.
    expect(l.datagrams.filter((d) => d.lines.some((x) => x.startsWith('EXTEND_TIMEOUT_USEC=')))).toEqual([]);
  });

  it('a buffer of an older schema: more start time asked for before it is upgraded, then READY=1', async () => {
    const cfg = await moduleConfig();
    const old = new Database(join(fx.tmp.dir, 'buffer.db'));
    old.exec(readFileSync(join(ROOT, 'test', 'fixtures', 'buffer-schema-10.sql'), 'utf8'));
    old.close();
    const socket = join(fx.tmp.dir, 'notify.sock');
    const l = await listen(socket);
    fx.daemon = startDaemon(['--config', cfg], { NOTIFY_SOCKET: socket, ...WATCHDOG_ENV });
    await waitFor(() => l.with('READY=1').length > 0, 15_000, 'READY=1');
    const extend = l.datagrams.findIndex((d) => d.lines.some((x) => x.startsWith('EXTEND_TIMEOUT_USEC=')));
    expect(extend).toBeGreaterThanOrEqual(0);
    expect(extend).toBeLessThan(l.datagrams.findIndex((d) => d.lines.includes('READY=1')));
    // Half an hour from now, whatever TimeoutStartSec says, and why in `systemctl status`.
    expect(l.datagrams[extend].lines).toEqual(['EXTEND_TIMEOUT_USEC=1800000000', `STATUS=upgrading the buffer (schema 10 to ${SCHEMA_VERSION}, 1 MB)`]);
    expect(l.datagrams[extend].pid).toBe(fx.daemon.child.pid);
    expect(await fx.daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });

  it('SIGHUP: RELOADING=1 then READY=1, also when the new config is refused; SIGTERM: STOPPING=1 and a clean exit', async () => {
    const cfg = await moduleConfig();
    const socket = join(fx.tmp.dir, 'notify.sock');
    const l = await listen(socket);
    fx.daemon = startDaemon(['--config', cfg], { NOTIFY_SOCKET: socket, ...WATCHDOG_ENV });
    await waitFor(() => l.with('READY=1').length === 1, 15_000, 'READY=1');

    // Everything but the heartbeat, from index `from` on.
    const events = (from: number) => l.datagrams.slice(from).filter((d) => !d.lines.includes('WATCHDOG=1'));

    let from = l.datagrams.length;
    fx.daemon.child.kill('SIGHUP');
    await waitFor(() => l.with('READY=1', from).length === 1, 10_000, 'READY=1 after the reload');
    let seen = events(from);
    expect(seen.map((d) => d.lines[0])).toEqual(['RELOADING=1', 'READY=1']);
    expect(seen[0].lines).toContain('STATUS=reloading the configuration');
    expect(seen[0].lines.some((x) => /^MONOTONIC_USEC=\d+$/.test(x))).toBe(true);
    expect(fx.daemon.output()).toContain('configuration reloaded');

    // A broken config is refused and the old one kept: the unit must not stay "reloading".
    const good = readFileSync(cfg, 'utf8');
    writeFileSync(cfg, good.replace(`scac = "${TEST_SCAC}"`, 'scac = "abcd"'));
    from = l.datagrams.length;
    fx.daemon.child.kill('SIGHUP');
    await waitFor(() => l.with('READY=1', from).length === 1, 10_000, 'READY=1 after the refused reload');
    seen = events(from);
    expect(seen.map((d) => d.lines[0])).toEqual(['RELOADING=1', 'READY=1']);
    expect(fx.daemon.output()).toContain('new configuration refused');

    from = l.datagrams.length;
    const exit = await fx.daemon.stop('SIGTERM');
    expect(exit).toEqual({ code: 0, signal: null });
    expect(fx.daemon.output()).toContain('agent stopped');
    await waitFor(() => l.with('STOPPING=1', from).length === 1, 5000, 'STOPPING=1');
    expect(events(from).map((d) => d.lines[0])).toEqual(['STOPPING=1']);
  });

  it('a blocked event loop stops the heartbeat, so systemd would kill and restart the agent', async () => {
    const trigger = join(fx.tmp.dir, 'trigger');
    const spinning = join(fx.tmp.dir, 'spinning');
    const cfg = await moduleConfig({ trigger, spinning });
    const socket = join(fx.tmp.dir, 'notify.sock');
    const l = await listen(socket);
    fx.daemon = startDaemon(['--config', cfg], { NOTIFY_SOCKET: socket, ...WATCHDOG_ENV });
    await waitFor(() => l.with('READY=1').length === 1, 15_000, 'READY=1');
    const beforeTrigger = l.with('WATCHDOG=1').length;
    await waitFor(() => l.with('WATCHDOG=1').length >= beforeTrigger + 2, 5000, 'heartbeats before the trigger');

    writeFileSync(trigger, '');
    await waitFor(() => existsSync(spinning), 5000, 'the source to start spinning');
    // Here the time is the behaviour: no heartbeat for five periods while the loop is blocked.
    // A heartbeat sent just before it blocked may still be on its way through the listener:
    // one whole period for it to arrive. A busy machine cannot make a blocked loop beat.
    await sleep(500);
    const atBlock = l.with('WATCHDOG=1').length;
    await sleep(2500);
    expect(l.with('WATCHDOG=1').length).toBe(atBlock);
    // Still alive, just hung: exactly the case only the watchdog catches.
    expect(fx.daemon.child.exitCode).toBeNull();
    expect(fx.daemon.child.signalCode).toBeNull();

    const exit = await fx.daemon.stop('SIGKILL');
    expect(exit.signal).toBe('SIGKILL');
  });

  it('no heartbeat when WATCHDOG_PID names another process; READY=1 still goes out', async () => {
    const cfg = await moduleConfig();
    const socket = join(fx.tmp.dir, 'notify.sock');
    const l = await listen(socket);
    appendFileSync(cfg, '[log]\nlevel = "debug"\n');
    fx.daemon = startDaemon(['--config', cfg], { NOTIFY_SOCKET: socket, ...WATCHDOG_ENV, WATCHDOG_PID: '1' });
    await waitFor(() => l.with('READY=1').length === 1, 15_000, 'READY=1');
    // The notifier says how it was set up: no heartbeat period, so no timer at all.
    const on = logLine(fx.daemon.output(), 'systemd notifications on');
    expect(on).toMatchObject({ socket });
    expect(on).not.toHaveProperty('heartbeatMs');
    const from = l.datagrams.length;
    expect(await fx.daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    await waitFor(() => l.with('STOPPING=1', from).length === 1, 5000, 'STOPPING=1');
    expect(l.with('WATCHDOG=1')).toEqual([]);
  });

  it('an abstract socket (@name) is reached through systemd-notify', async () => {
    const cfg = await moduleConfig();
    const address = `@ta-notify-test-${process.pid}-${Date.now()}`;
    const l = await listen(address);
    fx.daemon = startDaemon(['--config', cfg], { NOTIFY_SOCKET: address, ...WATCHDOG_ENV });
    const [ready] = await waitFor(() => l.with('READY=1').length > 0 && l.with('READY=1'), 15_000, 'READY=1');
    expect(ready.lines).toEqual(['READY=1', 'STATUS=running: 1 source(s)']);
    // systemd-notify follows each message with a barrier; the in-process path never does.
    // The barrier is a datagram of its own, after READY=1: on a busy machine it comes a
    // moment later (it once had not arrived when READY=1 was seen).
    await waitFor(() => l.with('BARRIER=1').length > 0, 5000, 'BARRIER=1');
    await waitFor(() => l.with('WATCHDOG=1').length >= 2, 5000, 'heartbeats');
    const from = l.datagrams.length;
    expect(await fx.daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    await waitFor(() => l.with('STOPPING=1', from).length === 1, 5000, 'STOPPING=1');
    expect(fx.daemon.output()).not.toMatch(/systemd notification/);
  });

  it('a notify socket nobody listens on: one warning, and the agent runs and stops as usual', async () => {
    const cfg = await moduleConfig();
    fx.daemon = startDaemon(['--config', cfg], { NOTIFY_SOCKET: join(fx.tmp.dir, 'nobody.sock'), WATCHDOG_USEC: '200000' });
    await waitFor(() => logLine(fx.daemon!.output(), 'agent started'), 15_000, 'the agent to start');
    // Time is the behaviour here: some ten failed heartbeats (one every 100 ms) give one
    // warning. A busy machine fails fewer of them, which weakens the test but cannot fail it.
    await sleep(1000);
    const warnings = fx.daemon
      .output()
      .split('\n')
      .filter((x) => x.includes('could not send a systemd notification'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('nobody.sock: ENOENT');
    expect(await fx.daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });

  it('without NOTIFY_SOCKET: runs and stops as before, and never loads the native module', async () => {
    const cfg = await moduleConfig();
    fx.daemon = startDaemon(['--config', cfg], WATCHDOG_ENV);
    await waitFor(() => logLine(fx.daemon!.output(), 'agent started'), 15_000, 'the agent to start');
    const maps = readFileSync(`/proc/${fx.daemon.child.pid}/maps`, 'utf8');
    expect(maps).toContain('better_sqlite3.node'); // the check sees native modules at all
    expect(maps).not.toContain('unix_dgram.node');
    expect(await fx.daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    expect(fx.daemon.output()).toContain('agent stopped');
    expect(fx.daemon.output()).not.toContain('"component":"systemd"');
  });
});
