/**
 * The `telematics-agent` program: its commands (one file each in ./commands/), and how a
 * command's end becomes an exit status (src/exit.ts). Every subcommand has --help; output
 * meant for scripts is behind --json.
 */
import { Command, CommanderError } from 'commander';
import { AgentError } from '../errors.js';
import { EXIT } from '../exit.js';
import { VERSION } from '../version.js';
import { addBufferCommand } from './commands/buffer.js';
import { addDeadLetterCommand } from './commands/dead-letter.js';
import { addDemoCommand } from './commands/demo.js';
import { addFleetCommand } from './commands/fleet.js';
import { addLoadCommand } from './commands/load.js';
import { addMilestoneCommand } from './commands/milestone.js';
import { addRunCommand } from './commands/run.js';
import { addSandboxCommand } from './commands/sandbox.js';
import { addStatusCommand } from './commands/status.js';
import { addValidateConfigCommand } from './commands/validate-config.js';
import { err } from './common.js';

/** Set by `run`: the daemon keeps collecting when nobody reads its output any more. */
let daemon = false;

export function buildProgram(): Command {
  const program = new Command('telematics-agent')
    .description('Collects GPS and temperature readings, buffers them in SQLite and delivers traces and milestones to the carrier-events interface.')
    .version(VERSION)
    // Before any subcommand is added, so they inherit it: errors come back as exceptions
    // and get our exit statuses instead of commander's process.exit(1).
    .exitOverride()
    // A command's options are its own, read only before its subcommand: `milestone` has
    // `--load` and a `list` subcommand with `--load` too, and without this the parent took
    // `milestone list --load L`'s option, leaving `list` to fail with "required option".
    .enablePositionalOptions()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) })
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText(
      'after',
      `
Exit status: 0 ok, 1 run-time failure, 3 daemon not running (status), 5 delivery paused
(status), 6 a source unhealthy (status), 64 usage error,
65 bad input data or an unusable buffer (corrupt, newer version), 73 buffer cannot be
opened or created, 75 the buffer's schema needs an upgrade that the daemon still running must
do (restart the service), 78 invalid configuration, no key, or another daemon on the buffer.`,
    )
    .hook('preAction', (_program, command) => {
      daemon = command.name() === 'run';
    });

  // In the order `--help` lists them.
  addRunCommand(program);
  addValidateConfigCommand(program);
  addStatusCommand(program);
  addLoadCommand(program);
  addMilestoneCommand(program);
  addBufferCommand(program);
  addDeadLetterCommand(program);
  addSandboxCommand(program);
  addDemoCommand(program);
  addFleetCommand(program);
  return program;
}

export async function main(argv = process.argv): Promise<void> {
  // A reader that goes away (`telematics-agent load list | head -1`) is no failure of ours: a
  // command stops quietly, as one killed by SIGPIPE would, instead of dying with a stack trace.
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code !== 'EPIPE') throw e;
    if (!daemon) process.exit(EXIT.OK);
  });
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (e) {
    process.exitCode = exitCodeFor(e);
  }
}

/** Print what ended the command and give its exit status: each AgentError carries its own. */
export function exitCodeFor(e: unknown): number {
  if (e instanceof CommanderError) {
    // Commander has printed its message. --help and --version come through here too, with exit code 0.
    return e.exitCode === 0 ? EXIT.OK : EXIT.USAGE;
  }
  if (e instanceof AgentError) {
    err(e.report());
    return e.exitCode;
  }
  err(`error: ${(e as Error)?.message ?? String(e)}`);
  return EXIT.FAILURE;
}
