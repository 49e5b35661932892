/**
 * `telematics-agent sandbox`: run the sandbox in the foreground with faults from the command line.
 */
import { readFileSync } from 'node:fs';
import { EXIT } from '../cli/exit.js';
import { CliError } from '../errors.js';
import type { MilestoneBody, TraceBody } from '../api/schemas.js';
import { loadNumberRule } from './rules.js';
import { Sandbox } from './server.js';

function num(value: unknown, what: string, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0 || n > max) throw new CliError(`${what}: expected a number from 0 to ${max}, got ${JSON.stringify(value)}`, EXIT.USAGE);
  return n;
}

export async function runSandboxCommand(opts: Record<string, string | string[] | boolean | undefined>): Promise<void> {
  let key = typeof opts.key === 'string' ? opts.key : undefined;
  if (typeof opts.keyFile === 'string') {
    try {
      key = readFileSync(opts.keyFile, 'utf8').trim();
    } catch (e) {
      throw new CliError(`--key-file: cannot read ${opts.keyFile} (${(e as NodeJS.ErrnoException).code})`, EXIT.USAGE);
    }
  }
  if (!key) throw new CliError('give the subscription key to accept with --key or --key-file', EXIT.USAGE);
  const strict = opts.strict === true;
  const loadNumberPattern = typeof opts.loadNumberPattern === 'string' ? opts.loadNumberPattern : undefined;
  if (loadNumberPattern !== undefined) {
    try {
      loadNumberRule(loadNumberPattern);
    } catch (e) {
      throw new CliError(`--load-number-pattern: expected a regular expression, got ${JSON.stringify(loadNumberPattern)} (${(e as Error).message})`, EXIT.USAGE);
    }
  }
  const sandbox = new Sandbox({
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
  if (strict) process.stdout.write('strict: dateTime must be UTC YYYY-MM-DDTHH:MM:SSZ, bodies must carry "source"\n');
  if (pattern !== undefined) process.stdout.write(`loadNumber must match ${pattern}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  await sandbox.stop();
}
