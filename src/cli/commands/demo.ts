/**
 * `demo`: sandbox, simulator and agent in one process (src/demo.ts, loaded only when the
 * command runs); exit 1 when its closing checks fail (something undelivered, out of order or refused).
 */
import type { Command } from 'commander';
import { MAX_TIME_SCALE } from '../../config/sources.js';
import { EXIT } from '../../exit.js';
import { parseNumberArg } from '../common.js';

export function addDemoCommand(program: Command): void {
  program
    .command('demo')
    .description('start the sandbox and the agent in one process with the simulator at high speed; show traces and milestones arriving')
    .option('--time-scale <n>', 'simulated seconds per real second', '400')
    .option('--keep', "keep the demo's buffer directory instead of deleting it")
    .action(async (opts: { timeScale: string; keep?: boolean }) => {
      const timeScale = parseNumberArg(opts.timeScale, '--time-scale', `a number > 0 and <= ${MAX_TIME_SCALE} (simulated seconds per real second)`, (n) => n > 0 && n <= MAX_TIME_SCALE);
      const { runDemo } = await import('../../demo.js');
      const ok = await runDemo({ timeScale, keep: opts.keep ?? false });
      process.exitCode = ok ? EXIT.OK : EXIT.FAILURE;
    });
}
