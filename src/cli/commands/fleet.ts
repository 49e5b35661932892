/**
 * `fleet send`: what a dispatch system does over the fleet link, from a shell (an operator
 * assigning a load by hand, a test of the broker's ACL): publish one command to a device and
 * wait for its answer. `fleet schemas`: the JSON Schemas of every message (docs/fleet.md).
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import type { IClientOptions } from 'mqtt';
import { brokerUrlProblems, plaintextProblem } from '../../config/fleet.js';
import { CliError } from '../../errors.js';
import { EXIT } from '../../exit.js';
import { COMMANDS, jsonSchemas, type Reply } from '../../fleet/messages.js';
import { connectMqtt } from '../../sources/mqtt-lib.js';
import { out, parseNumberArg } from '../common.js';

interface SendOptions {
  url: string;
  device?: string;
  prefix?: string;
  file?: string;
  json?: string;
  username?: string;
  passwordFile?: string;
  caFile?: string;
  certFile?: string;
  keyFile?: string;
  timeout: string;
  allowPlaintext?: boolean;
}

/** The config's URL rule in the command line's words. */
const URL_FIXES = { password: 'give it with --password-file, and the user name with --username', plaintext: 'add --allow-plaintext' };
/** A day: a device out of coverage answers when it is back; longer overflows the timer, which then fires at once. */
const MAX_TIMEOUT_S = 86_400;

const read = (path: string, what: string) => {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new CliError(`${what} ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, EXIT.DATA);
  }
};

export function addFleetCommand(program: Command): void {
  const fleet = program.command('fleet').description("dispatch's side of the fleet link, for operators (docs/fleet.md)");
  fleet
    .command('send')
    .description("publish one command to a device over the fleet broker and print its answer (exit status: the answer's status)")
    .argument('<command>', Object.keys(COMMANDS).join(', '))
    .requiredOption('--url <url>', 'the broker, e.g. mqtts://broker.example.com:8883')
    .option('--device <id>', "the device's id: topics under fleet/<id>")
    .option('--prefix <topic>', "the device's topic_prefix, if not fleet/<id>")
    .option('-f, --file <file>', 'the command as JSON (a commandId is added if it has none)')
    .option('--json <text>', 'the command as JSON text')
    .option('--username <name>', 'user name at the broker')
    .option('--password-file <file>', "file holding the broker's password (first line)")
    .option('--ca-file <file>', 'PEM CA certificates to trust, besides the public ones')
    .option('--cert-file <file>', 'TLS client certificate (PEM)')
    .option('--key-file <file>', 'its key (PEM)')
    .option('--timeout <s>', 'how long to wait for the answer (a device out of coverage answers when it is back)', '30')
    .option('--allow-plaintext', 'allow mqtt:// or ws:// to a host other than loopback')
    .action(async (name: string, opts: SendOptions) => {
      if (!Object.hasOwn(COMMANDS, name)) throw new CliError(`<command>: expected one of ${Object.keys(COMMANDS).join(', ')}, got ${JSON.stringify(name)}`, EXIT.USAGE);
      if (!opts.device && !opts.prefix) throw new CliError('give --device (or --prefix)', EXIT.USAGE);
      const prefix = opts.prefix ?? `fleet/${opts.device}`;
      // The daemon's rule for [fleet] url: a tcp:// or http:// URL went out, password and all.
      const urlProblem = brokerUrlProblems(opts.url, URL_FIXES)[0] ?? plaintextProblem(opts.url, opts.allowPlaintext ?? false, URL_FIXES);
      if (urlProblem) throw new CliError(`--url: ${urlProblem}`, EXIT.USAGE);
      const url = new URL(opts.url);
      const timeoutS = parseNumberArg(opts.timeout, '--timeout', `seconds from 1 to ${MAX_TIMEOUT_S}`, (s) => s >= 1 && s <= MAX_TIMEOUT_S);
      const text = opts.file ? read(opts.file, '--file') : (opts.json ?? '{}');
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(text);
      } catch (err) {
        throw new CliError(`${opts.file ?? '--json'}: not JSON (${(err as Error).message})`, EXIT.DATA);
      }
      body.commandId ??= randomUUID();
      const options: IClientOptions = { protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 15_000, clientId: `telematics-agent-send-${randomUUID().slice(0, 8)}` };
      if (opts.username) options.username = opts.username;
      if (opts.passwordFile) options.password = read(opts.passwordFile, '--password-file').split(/\r?\n/)[0];
      if (opts.caFile) options.ca = read(opts.caFile, '--ca-file');
      if (opts.certFile) options.cert = read(opts.certFile, '--cert-file');
      if (opts.keyFile) options.key = read(opts.keyFile, '--key-file');
      // Loaded here, not with the CLI: every other command (and `run`) goes without MQTT.js.
      const client = connectMqtt(opts.url, options);
      try {
        const reply = await new Promise<Reply>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`no answer from ${prefix} within ${timeoutS} s (the command stays queued at the broker for the device)`)), timeoutS * 1000);
          client.once('error', (err) => reject(new Error(`broker ${url.host}: ${err.message}`)));
          client.on('message', (_topic, payload) => {
            clearTimeout(timer);
            resolve(JSON.parse(payload.toString()) as Reply);
          });
          client.once('connect', async () => {
            try {
              await client.subscribeAsync(`${prefix}/reply/${body.commandId}`, { qos: 1 });
              const acks = new Map<number | undefined, number | undefined>();
              client.on('packetreceive', (p) => {
                if (p.cmd === 'puback') acks.set(p.messageId, p.reasonCode);
              });
              const sent = await client.publishAsync(`${prefix}/cmd/${name}`, JSON.stringify(body), { qos: 1 });
              // MQTT 5 reason 16: no subscriber, not even a session kept for a device away; the
              // broker dropped it, and waiting for the answer said it "stays queued".
              if (sent && acks.get(sent.messageId) === 16) {
                reject(new Error(`no device holds a session for ${prefix}/cmd/${name} at the broker, so the command was not kept (a wrong --device or --prefix, or a device that never connected)`));
              }
            } catch (err) {
              reject(new Error(`broker ${url.host}: ${(err as Error).message}`));
            }
          });
        });
        out(JSON.stringify(reply));
        process.exitCode = reply.status;
      } finally {
        client.end(true);
      }
    });
  fleet
    .command('schemas')
    .description('print the JSON Schemas of the commands, the answer and the status')
    .action(() => out(JSON.stringify(jsonSchemas(), null, 2)));
}
