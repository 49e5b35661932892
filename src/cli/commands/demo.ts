/**
 * `demo`: sandbox, simulator and agent in one process (src/demo.ts, loaded only when the
 * command runs); exit 1 when its closing checks fail (something undelivered, out of order or refused).
 */
import type { Command } from 'commander';
import { EXIT } from '../../exit.js';

export function addDemoCommand(program: Command): void {
  program
    .command('demo')
    .description('start the sandbox and the agent in one process with the simulator at high speed; show traces and milestones arriving')
    .option('--time-scale <n>', 'simulated seconds per real second', '400')
    .option('--keep', "keep the demo's buffer directory instead of deleting it")
    .action(async (opts: { timeScale: string; keep?: boolean }) => {
      const { runDemo } = await import('../../demo.js');
      const ok = await runDemo({ timeScale: Number(opts.timeScale), keep: opts.keep ?? false });
      process.exitCode = ok ? EXIT.OK : EXIT.FAILURE;
    });
}
