/**
 * `sandbox`: the stand-in for the service in the foreground. Its code is loaded only when
 * the command runs (src/sandbox/command.ts), so the daemon does not carry the server.
 */
import type { Command } from 'commander';

export function addSandboxCommand(program: Command): void {
  program
    .command('sandbox')
    .description('serve a local stand-in for the service (interface E) that checks key and SCAC, validates bodies and injects faults')
    .option('-p, --port <port>', 'TCP port (0 = any free port)', '8787')
    .option('--host <address>', 'address to listen on', '127.0.0.1')
    .option('--key <key>', 'subscription key to accept (visible in ps; prefer --key-file)')
    .option('--key-file <file>', 'file holding the subscription key to accept')
    .requiredOption('--scac <code>', 'carrierSCAC to accept')
    .option('--record <file>', 'append every accepted body to this file as a JSON line')
    .option('--latency-ms <ms>', 'delay every answer', '0')
    .option('--failure-rate <0..1>', 'share of requests answered 503', '0')
    .option('--drop-rate <0..1>', 'share of connections dropped without an answer', '0')
    .option('--throttle-every <n>', 'answer every nth request 429', '0')
    .option('--retry-after <value>', 'Retry-After sent with 429 (seconds or HTTP date)', '1')
    .option('--reject-load <loadNumber...>', 'answer 400 to bodies for these loads')
    .option('--max-traces <n>', 'answer 413 to trace requests with more traces than this', '0')
    .option(
      '--strict',
      'also refuse (400) what the deployed service is reported to: dateTime not UTC YYYY-MM-DDTHH:MM:SSZ, no top-level "source", a loadNumber outside --load-number-pattern (default ^[A-Za-z0-9-]{1,35}$)',
    )
    .option('--load-number-pattern <regex>', 'refuse (400) a loadNumber this regular expression does not match as a whole (also without --strict)')
    .option('--tls-cert <file>', 'serve HTTPS with this certificate (PEM; with --tls-key), e.g. to try api.ca_file')
    .option('--tls-key <file>', "the certificate's private key (PEM)")
    .option('--no-gzip', 'refuse (415) bodies sent with Content-Encoding gzip, to rehearse a service without it (api.compress)')
    .option('-q, --quiet', 'do not print a line per request')
    .action(async (opts: Record<string, string | string[] | boolean | undefined>) => {
      const { runSandboxCommand } = await import('../../sandbox/command.js');
      await runSandboxCommand(opts);
    });
}
