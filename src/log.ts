/**
 * One pino root for the process; components take a child (`{ component: 'sender' }`).
 * JSON lines to stdout for journald; pretty only when a person is watching a terminal.
 * Anything that could hold the subscription key is redacted by path, and the key itself
 * is scrubbed from free text as a last line of defence.
 */
import pino, { type Logger } from 'pino';

export type { Logger };

const REDACT = [
  'key',
  'subscriptionKey',
  'subscription_key',
  'api.subscription_key',
  'config.api.subscription_key',
  'headers["ocp-apim-subscription-key"]',
  'headers["Ocp-Apim-Subscription-Key"]',
  'req.headers["ocp-apim-subscription-key"]',
  '*.headers["ocp-apim-subscription-key"]',
  '*.headers["Ocp-Apim-Subscription-Key"]',
];

const secrets = new Set<string>();

/** Register a secret so that it is replaced in every log line, whatever field it hides in. */
export function addSecret(value: string | undefined): void {
  if (value && value.length >= 4) secrets.add(value);
}

export function scrub(text: string): string {
  let out = text;
  for (const s of secrets) out = out.split(s).join('[REDACTED]');
  return out;
}

export interface LoggerOptions {
  level?: string;
  pretty?: boolean;
  destination?: NodeJS.WritableStream;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const level = opts.level ?? process.env.TELEMATICS_AGENT_LOG_LEVEL ?? 'info';
  const pretty = opts.pretty ?? (process.stdout.isTTY === true && !opts.destination);
  const options: pino.LoggerOptions = {
    level,
    base: { pid: process.pid },
    redact: { paths: REDACT, censor: '[REDACTED]' },
    hooks: {
      // The last line of defence: a key that slipped into a message or an error text.
      streamWrite: (line: string) => (secrets.size ? scrub(line) : line),
    },
  };
  if (pretty) {
    return pino({ ...options, transport: { target: 'pino-pretty', options: { colorize: true, translateTime: 'SYS:HH:MM:ss.l' } } });
  }
  return pino(options, (opts.destination as pino.DestinationStream | undefined) ?? pino.destination({ dest: 1, sync: true }));
}
