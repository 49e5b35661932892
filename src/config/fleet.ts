/**
 * The `[fleet]` table: the link to the carrier's own MQTT broker, through which dispatch
 * assigns loads and the operations desk reads every agent's health (src/fleet/, docs/fleet.md).
 * Off when the table is absent.
 */
import { accessSync, constants } from 'node:fs';
import * as z from 'zod';
import { MQTT_PROTOCOLS } from './sources.js';

/** A host a plain connection to stays on this machine. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/** What a broker URL's problems tell the operator to do: in the config's words, or `fleet send`'s. */
export interface BrokerUrlFixes {
  password: string;
  plaintext: string;
}

const CONFIG_FIXES: BrokerUrlFixes = { password: 'put it in password_file, and the user name in username', plaintext: 'set fleet.allow_plaintext = true' };

/**
 * The problems of a broker URL by itself: not a URL, not MQTT, a password in it. One rule for
 * [fleet] url and `fleet send --url`: dispatch's side is held to what the agent's is.
 */
export function brokerUrlProblems(u: string, fixes: BrokerUrlFixes = CONFIG_FIXES): string[] {
  let url: URL;
  try {
    url = new URL(u);
  } catch {
    return ['expected a URL such as mqtts://broker.example.com:8883'];
  }
  if (!MQTT_PROTOCOLS.includes(url.protocol)) return [`expected mqtt://, mqtts://, ws:// or wss://, not ${url.protocol}//`];
  return url.password ? [`a password in the URL: ${fixes.password}`] : [];
}

/** A plain connection to another host, unless allowed: the password and every load would cross the network in clear. */
export function plaintextProblem(u: string, allowPlaintext: boolean, fixes: BrokerUrlFixes = CONFIG_FIXES): string | undefined {
  let url: URL;
  try {
    url = new URL(u);
  } catch {
    return undefined;
  }
  if ((url.protocol === 'mqtt:' || url.protocol === 'ws:') && !isLoopback(url.hostname) && !allowPlaintext) {
    return `a plain ${url.protocol}// connection to ${url.hostname} would carry the password and every load in clear: use mqtts:// or wss://, or ${fixes.plaintext}`;
  }
  return undefined;
}

export const fleetSchema = z
  .strictObject({
    /** The broker: mqtts://host:8883 (TLS), wss://; mqtt:// and ws:// only to loopback unless allow_plaintext. */
    url: z.string().superRefine((u, ctx) => {
      for (const message of brokerUrlProblems(u)) ctx.addIssue({ code: 'custom', message });
    }),
    /** The session's name at the broker; default telematics-agent-<device_id>. Keep it stable: the broker holds commands under it. */
    client_id: z.string().min(1).max(128).optional(),
    username: z.string().min(1).optional(),
    /** A file holding the password (its first line); never the password itself in the config. */
    password_file: z.string().min(1).optional(),
    /** PEM CA certificates trusted for mqtts:// and wss://, besides the public ones. */
    ca_file: z.string().min(1).optional(),
    /** A TLS client certificate and its key (PEM files), as AWS IoT Core and most brokers use. */
    cert_file: z.string().min(1).optional(),
    key_file: z.string().min(1).optional(),
    /** Every topic of this device lies under it; default fleet/<device_id>. */
    topic_prefix: z
      .string()
      .regex(/^[^+#\0]+$/, 'expected a topic without + or # wildcards')
      .refine((p) => !p.endsWith('/') && !p.startsWith('/'), 'expected no leading or trailing /')
      .optional(),
    /** The retained status is published again this often, besides at every change of state. */
    status_interval_s: z.number().min(5).max(86_400).default(300),
    /** MQTT keepalive: the broker publishes the Last Will some 1.5 x this after the agent vanishes. */
    keepalive_s: z.number().int().min(5).max(3600).default(60),
    /** Take commands from dispatch (cmd/<name>); false: status only. */
    commands: z.boolean().default(true),
    /** A command larger than this is answered with an error and not read. */
    max_command_bytes: z.number().int().min(1024).max(1_048_576).default(65_536),
    /** A plain mqtt:// or ws:// URL to a host other than loopback: refused unless true (passwords and loads would cross the network in clear). */
    allow_plaintext: z.boolean().default(false),
    /** 5: replies also go to a command's response topic with its correlation data; 4 (MQTT 3.1.1) for brokers without 5. */
    protocol_version: z.union([z.literal(4), z.literal(5)]).default(5),
  })
  .superRefine((f, ctx) => {
    const plaintext = plaintextProblem(f.url, f.allow_plaintext);
    if (plaintext) ctx.addIssue({ code: 'custom', path: ['url'], message: plaintext });
    if (f.password_file !== undefined && f.username === undefined) ctx.addIssue({ code: 'custom', path: ['username'], message: 'expected a user name with password_file' });
    if ((f.cert_file === undefined) !== (f.key_file === undefined)) ctx.addIssue({ code: 'custom', path: [f.cert_file ? 'key_file' : 'cert_file'], message: 'cert_file and key_file go together' });
  });

export type FleetConfig = z.infer<typeof fleetSchema>;

/** The files of the link: relative to the config file's directory, as every path of the config. */
export const FLEET_FILES = ['password_file', 'ca_file', 'cert_file', 'key_file'] as const;

/**
 * The link's files, checked before a start or a reload as the sources' are: one that cannot
 * be read is a mistake in the config (exit 78), not a link retrying for ever. The link still
 * reads them at each connection (a rotated password is taken without a reload).
 */
export function fleetFileProblems(fleet: FleetConfig | undefined): string[] {
  const problems: string[] = [];
  for (const k of FLEET_FILES) {
    const path = fleet?.[k];
    if (path === undefined) continue;
    try {
      accessSync(path, constants.R_OK);
    } catch (err) {
      problems.push(`fleet.${k}: ${path}: cannot read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
  }
  return problems;
}
