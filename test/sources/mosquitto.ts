/**
 * A real Mosquitto broker for the MQTT source's tests: started on a free port with a config
 * written for the test (anonymous, or a password file; plain or TLS; with persistence, so a
 * restart keeps the sessions), stopped by PID.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { join } from 'node:path';
import { findMosquitto } from '../../bench/common.js';
import { waitFor } from '../helpers.js';
import { stopProcess } from './support.js';

export const MOSQUITTO = findMosquitto();
/** Why the broker tests cannot run here, or undefined when they can. */
/** An `[[sources]]` table: an mqtt source on `url`, resources from `depot/<resource>/reefer`, reconnecting within a second; `extra`: more of its keys, a line each. */
export function mqttSourceToml(url: string, extra = ''): string {
  return `[[sources]]\ntype = "mqtt"\nurl = "${url}"\ntopics = ["depot/+/reefer"]\nresource_from_topic = 2\nreconnect_initial_s = 0.2\nreconnect_max_s = 1\n${extra}`;
}

export const NO_MOSQUITTO = MOSQUITTO ? undefined : 'mosquitto is not installed (apt-get install mosquitto)';

export interface BrokerOptions {
  /** user -> password: a password file, no anonymous access. */
  users?: Record<string, string>;
  /**
   * A TLS listener with this certificate and key (PEM text); with `clientCa` (a PEM file) a
   * client must present a certificate it signed, whose CN is then the client's user name.
   */
  tls?: { cert: string; key: string; clientCa?: string };
  /** The text of an acl_file (mosquitto's own syntax). */
  acl?: string;
}

export class Broker {
  private proc: ChildProcess | undefined;

  constructor(
    readonly dir: string,
    readonly port: number,
    private readonly opts: BrokerOptions = {},
  ) {
    mkdirSync(join(dir, 'data'), { recursive: true });
  }

  get url(): string {
    return `${this.opts.tls ? 'mqtts' : 'mqtt'}://127.0.0.1:${this.port}`;
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  async start(): Promise<void> {
    const lines = [`listener ${this.port} 127.0.0.1`, 'persistence true', `persistence_location ${join(this.dir, 'data')}/`, 'autosave_interval 1', 'log_dest stderr', 'log_type error', 'log_type warning'];
    // Started as root, mosquitto becomes the user `mosquitto`, who cannot read the test's files.
    if (process.getuid?.() === 0) lines.push('user root');
    if (this.opts.users) {
      const file = join(this.dir, 'passwords');
      writeFileSync(file, '');
      for (const [user, password] of Object.entries(this.opts.users)) execFileSync('mosquitto_passwd', ['-b', file, user, password], { stdio: 'ignore' });
      lines.push('allow_anonymous false', `password_file ${file}`);
    } else {
      lines.push('allow_anonymous true');
    }
    if (this.opts.tls) {
      writeFileSync(join(this.dir, 'server.pem'), this.opts.tls.cert);
      writeFileSync(join(this.dir, 'server.key'), this.opts.tls.key);
      lines.push(`certfile ${join(this.dir, 'server.pem')}`, `keyfile ${join(this.dir, 'server.key')}`);
      if (this.opts.tls.clientCa) lines.push(`cafile ${this.opts.tls.clientCa}`, 'require_certificate true', 'use_identity_as_username true');
    }
    if (this.opts.acl) {
      writeFileSync(join(this.dir, 'acl'), this.opts.acl);
      lines.push(`acl_file ${join(this.dir, 'acl')}`);
    }
    const conf = join(this.dir, 'mosquitto.conf');
    writeFileSync(conf, `${lines.join('\n')}\n`);
    if (!MOSQUITTO) throw new Error(NO_MOSQUITTO);
    const proc = spawn(MOSQUITTO, ['-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    proc.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    this.proc = proc;
    await waitFor(
      async () => {
        if (proc.exitCode !== null) throw new Error(`mosquitto exited (${proc.exitCode}): ${stderr}`);
        return listening(this.port);
      },
      10_000,
      `mosquitto listening on ${this.port}`,
    );
  }

  /** SIGTERM (mosquitto saves its sessions and their queued messages), then wait for the exit. */
  async stop(): Promise<void> {
    await stopProcess(this.proc);
    this.proc = undefined;
  }
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = tcpConnect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
