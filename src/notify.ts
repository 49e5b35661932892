/**
 * systemd's notification protocol (sd_notify(3)) for the Type=notify unit: READY=1 once the
 * buffer is open and the sources have started, RELOADING=1 and READY=1 around a SIGHUP
 * reload, STOPPING=1, and WATCHDOG=1 from a timer at half of WatchdogSec. The heartbeat runs
 * on the event loop, so an agent whose loop is blocked or spinning (a tight loop at 100% CPU,
 * a wedged synchronous call) stops sending it, and systemd kills and restarts the agent
 * instead of leaving a truck without telemetry until someone looks.
 *
 * Off systemd (no NOTIFY_SOCKET) every method does nothing and nothing native is loaded.
 *
 * How a datagram gets out: Node's dgram cannot address a Unix datagram socket. There are two
 * ways, and the in-process one is used:
 * - unix-dgram (a small native package, one sendmsg() from the agent's own process). A
 *   message from the main PID is always attributed to the unit, so the unit keeps
 *   NotifyAccess=main: only the agent itself can feed its watchdog, never an exec source's
 *   command.
 * - the systemd-notify binary, a child process per message. systemd may drop a message whose
 *   sender has already exited ("Cannot find unit for notify message", see sd_notify(3));
 *   systemd 252's systemd-notify waits on a barrier for PID 1, but gives up after a timeout
 *   when PID 1 is busy, as at boot on a slow device. A dropped heartbeat means a healthy agent
 *   killed. It also needs NotifyAccess=all, and costs a fork and exec every heartbeat.
 * unix-dgram cannot address an abstract socket ('@name'): it copies the path with strncpy
 * and always passes the full sockaddr_un length. For such an address only, systemd-notify
 * is used. systemd hands its services a path (/run/systemd/notify); abstract names come from
 * other supervisors and test harnesses.
 */
import { spawn } from 'node:child_process';
import { getSystemErrorName } from 'node:util';
import type { Logger } from 'pino';

/** Sends one notification datagram; rejects with a readable reason. */
interface Transport {
  send(message: string): Promise<void>;
  /** Waits for messages still on their way. */
  close(): Promise<void>;
}

/** The part of unix-dgram used here (the package ships no types). */
interface UnixDgramSocket {
  send(buf: Buffer, offset: number, length: number, path: string, callback: (err?: Error & { code?: unknown }) => void): void;
  close(): void;
}
interface UnixDgram {
  createSocket(type: 'unix_dgram'): UnixDgramSocket;
}

/**
 * A variable, not a literal: the bundler leaves the import alone and Node resolves the native
 * addon from node_modules at run time, only on a machine that has a notify socket.
 */
const UNIX_DGRAM: string = 'unix-dgram';

/** sockaddr_un's sun_path is 108 bytes with the terminating NUL; unix-dgram would cut a longer path silently. */
const MAX_SOCKET_PATH = 107;

class UnixDgramTransport implements Transport {
  private constructor(
    private readonly dgram: UnixDgram,
    private readonly path: string,
  ) {}

  static async load(path: string): Promise<UnixDgramTransport> {
    if (Buffer.byteLength(path) > MAX_SOCKET_PATH) throw new Error(`NOTIFY_SOCKET is longer than ${MAX_SOCKET_PATH} bytes: ${path}`);
    const mod = (await import(UNIX_DGRAM)) as { default?: UnixDgram } & Partial<UnixDgram>;
    const dgram = mod.default ?? (mod as UnixDgram);
    if (typeof dgram.createSocket !== 'function') throw new Error(`${UNIX_DGRAM} has no createSocket()`);
    return new UnixDgramTransport(dgram, path);
  }

  /**
   * A socket per message, as sd_notify() does: an open unix-dgram socket is a libuv handle
   * that would keep the process alive after the agent stopped.
   */
  send(message: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const buf = Buffer.from(message);
      let socket: UnixDgramSocket;
      try {
        socket = this.dgram.createSocket('unix_dgram');
      } catch (err) {
        reject(err as Error);
        return;
      }
      socket.send(buf, 0, buf.length, this.path, (err) => {
        try {
          socket.close();
        } catch {
          // The datagram went out (or not) either way.
        }
        if (!err) resolve();
        // unix-dgram reports a negative errno as `code`, and 1 for a full receive queue.
        else if (err.code === 1) reject(new Error(`${this.path}: EAGAIN (the receiver's queue is full)`));
        else if (typeof err.code === 'number' && err.code < 0) reject(new Error(`${this.path}: ${getSystemErrorName(err.code)}`));
        else reject(err);
      });
    });
  }

  async close(): Promise<void> {}
}

/** systemd-notify, one process at a time so that RELOADING=1 cannot overtake the READY=1 before it. */
class SystemdNotifyTransport implements Transport {
  private queue: Promise<void> = Promise.resolve();

  constructor(private readonly address: string) {}

  send(message: string): Promise<void> {
    const run = this.queue.then(() => this.run(message.split('\n')));
    this.queue = run.catch(() => undefined);
    return run;
  }

  close(): Promise<void> {
    return this.queue;
  }

  private run(args: string[]): Promise<void> {
    return new Promise((resolve, reject) => {
      const child = spawn('systemd-notify', args, {
        stdio: ['ignore', 'ignore', 'pipe'],
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', NOTIFY_SOCKET: this.address },
      });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => {
        if (stderr.length < 1000) stderr += d.toString();
      });
      child.on('error', (err) => reject(new Error(`systemd-notify: ${err.message}`)));
      child.on('close', (code, signal) => {
        if (code === 0) resolve();
        else reject(new Error(`systemd-notify exited with ${code ?? signal}${stderr ? `: ${stderr.trim()}` : ''}`));
      });
    });
  }
}

/** The environment systemd gives a Type=notify service (sd_notify(3), sd_watchdog_enabled(3)). */
export interface NotifyEnv {
  NOTIFY_SOCKET?: string;
  WATCHDOG_USEC?: string;
  WATCHDOG_PID?: string;
}

export class SystemdNotifier {
  /** Where notifications go; undefined off systemd. */
  readonly socket: string | undefined;
  /** The heartbeat's period (half of WatchdogSec); undefined when there is no watchdog for this process. */
  readonly heartbeatMs: number | undefined;
  private transport: Transport | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private failed = false;

  constructor(
    private readonly log: Logger,
    env: NotifyEnv = process.env,
    pid: number = process.pid,
  ) {
    this.socket = env.NOTIFY_SOCKET || undefined;
    const usec = /^\d+$/.test(env.WATCHDOG_USEC ?? '') ? Number(env.WATCHDOG_USEC) : 0;
    // WATCHDOG_PID names the process systemd watches; a process that merely inherited the
    // variable must not beat in its place.
    const forUs = env.WATCHDOG_PID === undefined || env.WATCHDOG_PID === '' || Number(env.WATCHDOG_PID) === pid;
    this.heartbeatMs = this.socket && usec > 0 && forUs ? Math.max(1, Math.floor(usec / 2000)) : undefined;
  }

  /** Loads the transport and starts the heartbeat. Never throws: a failure is logged. */
  async start(): Promise<void> {
    if (!this.socket || this.transport) return;
    try {
      this.transport = this.socket.startsWith('@') ? new SystemdNotifyTransport(this.socket) : await UnixDgramTransport.load(this.socket);
    } catch (err) {
      // Under Type=notify systemd now waits for READY=1 in vain and stops the unit after
      // TimeoutStartSec: say why, loudly, once.
      this.log.error({ socket: this.socket, err: (err as Error).message }, `cannot send systemd notifications (is the ${UNIX_DGRAM} package installed and built?); systemd will not see the agent as started`);
      return;
    }
    if (this.heartbeatMs !== undefined) {
      this.heartbeat = setInterval(() => void this.send(['WATCHDOG=1']), this.heartbeatMs);
      // Never what keeps the process alive after the agent stopped.
      this.heartbeat.unref();
    }
    this.log.debug({ socket: this.socket, heartbeatMs: this.heartbeatMs }, 'systemd notifications on');
  }

  /** Stops the heartbeat and waits for messages still on their way. */
  async stop(): Promise<void> {
    clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    const t = this.transport;
    this.transport = undefined;
    await t?.close();
  }

  /** Started (or done reloading): systemd marks the unit active. */
  ready(status?: string): Promise<void> {
    return this.send(['READY=1', ...statusLine(status)]);
  }

  /**
   * Starting takes longer than the unit's TimeoutStartSec allows (a buffer upgrade): systemd
   * extends it by `seconds` from now (EXTEND_TIMEOUT_USEC, systemd 236+; older ones ignore it).
   */
  extendStart(seconds: number, status: string): Promise<void> {
    return this.send([`EXTEND_TIMEOUT_USEC=${seconds * 1_000_000}`, ...statusLine(status)]);
  }

  /** A reload began; ready() ends it. MONOTONIC_USEC is what Type=notify-reload (systemd 253+) asks for. */
  reloading(status?: string): Promise<void> {
    return this.send(['RELOADING=1', `MONOTONIC_USEC=${process.hrtime.bigint() / 1000n}`, ...statusLine(status)]);
  }

  /** The agent is shutting down: systemd shows the unit as deactivating. */
  stopping(status?: string): Promise<void> {
    return this.send(['STOPPING=1', ...statusLine(status)]);
  }

  /** The free-text line `systemctl status` shows as "Status:". */
  status(text: string): Promise<void> {
    return this.send(statusLine(text));
  }

  /** Never rejects: the agent's work matters more than systemd hearing about it. */
  private async send(lines: string[]): Promise<void> {
    const t = this.transport;
    if (!t || lines.length === 0) return;
    try {
      await t.send(lines.join('\n'));
    } catch (err) {
      if (this.failed) return;
      this.failed = true;
      this.log.warn({ socket: this.socket, err: (err as Error).message }, 'could not send a systemd notification (further failures are not logged)');
    }
  }
}

/** STATUS= is one line. */
function statusLine(text: string | undefined): string[] {
  return text === undefined ? [] : [`STATUS=${text.replace(/[\r\n]+/g, ' ')}`];
}
