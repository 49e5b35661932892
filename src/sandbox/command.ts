/**
 * `telematics-agent sandbox`: run the sandbox in the foreground with faults from the command line.
 */
import { readFileSync } from 'node:fs';
import { CliError } from '../errors.js';
import type { MilestoneBody, TraceBody } from '../api/schemas.js';
import { EXIT } from '../exit.js';
import { loadNumberRule } from './rules.js';
import { Sandbox } from './server.js';

function num(value: unknown, what: string, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0 || n > max) throw new CliError(`${what}: expected a number from 0 to ${max}, got ${JSON.stringify(value)}`, EXIT.USAGE);
  return n;
}

/** The contents of a file an option names; a usage error naming the option when it cannot be read. */
function readOption(file: string, option: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (e) {
    throw new CliError(`${option}: cannot read ${file} (${(e as NodeJS.ErrnoException).code})`, EXIT.USAGE);
  }
}

export async function runSandboxCommand(opts: Record<string, string | string[] | boolean | undefined>): Promise<void> {
  let key = typeof opts.key === 'string' ? opts.key : undefined;
  if (typeof opts.keyFile === 'string') key = readOption(opts.keyFile, '--key-file').trim();
  if (!key) throw new CliError('give the subscription key to accept with --key or --key-file', EXIT.USAGE);
  // The agent sends api.scac only in capitals: a sandbox waiting for "abcd" would refuse it for ever.
  if (!/^[A-Z]{2,4}$/.test(String(opts.scac))) throw new CliError(`--scac: expected a 2-4 letter SCAC code in capitals, as api.scac takes it, got ${JSON.stringify(opts.scac)}`, EXIT.USAGE);
  const strict = opts.strict === true;
  const loadNumberPattern = typeof opts.loadNumberPattern === 'string' ? opts.loadNumberPattern : undefined;
  if (loadNumberPattern !== undefined) {
    try {
      loadNumberRule(loadNumberPattern);
    } catch (e) {
      throw new CliError(`--load-number-pattern: expected a regular expression, got ${JSON.stringify(loadNumberPattern)} (${(e as Error).message})`, EXIT.USAGE);
    }
  }
  if ((typeof opts.tlsCert === 'string') !== (typeof opts.tlsKey === 'string')) throw new CliError('--tls-cert and --tls-key go together', EXIT.USAGE);
  const tls = typeof opts.tlsCert === 'string' ? { cert: readOption(opts.tlsCert, '--tls-cert'), key: readOption(String(opts.tlsKey), '--tls-key') } : undefined;
  const sandbox = new Sandbox({
    tls,
    gzip: opts.gzip !== false,
    key,
    scac: String(opts.scac),
    strict,
    loadNumberPattern,
    port: num(opts.port, '--port', 65535),
    host: String(opts.host),
    recordFile: typeof opts.record === 'string' ? opts.record : undefined,
    faults: {
      latencyMs: num(opts.latencyMs, '--latency-ms'),
      failureRate: num(opts.failureRate, '--failure-rate', 1),
      dropRate: num(opts.dropRate, '--drop-rate', 1),
      throttleEvery: num(opts.throttleEvery, '--throttle-every'),
      retryAfter: String(opts.retryAfter),
      rejectLoads: Array.isArray(opts.rejectLoad) ? opts.rejectLoad : [],
      maxTracesPerRequest: num(opts.maxTraces, '--max-traces'),
    },
    onRequest: opts.quiet
      ? undefined
      : (e) => {
          const what = e.kind === 'trace' && e.body ? `${(e.body as TraceBody).traces.length} trace(s)` : e.kind === 'milestone' && e.body ? (e.body as MilestoneBody).eventCode : '';
          const load = e.body ? ` load ${e.body.loadNumber}` : '';
          process.stdout.write(`${new Date().toISOString()} ${e.kind} ${e.status || 'dropped'}${load} ${what}${e.duplicate ? ' (duplicate)' : ''}${e.problem ? ` ${e.problem}` : ''}\n`);
        },
  });
  const { url } = await sandbox.start();
  process.stdout.write(`sandbox listening on ${url} (SCAC ${String(opts.scac)}); control: ${url}/_sandbox/stats, /_sandbox/received, PUT /_sandbox/faults\n`);
  const pattern = sandbox.rules.loadNumber?.pattern;
  if (opts.gzip === false) process.stdout.write('refusing gzip-encoded bodies (415)\n');
  if (strict) process.stdout.write('strict: dateTime must be UTC YYYY-MM-DDTHH:MM:SSZ, bodies must carry "source"\n');
  if (pattern !== undefined) process.stdout.write(`loadNumber must match ${pattern}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  await sandbox.stop();
}
