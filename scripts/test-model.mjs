#!/usr/bin/env node
/**
 * `npm run test:model -- [--runs N] [--seed S] [--path P] [--props all|name,...] [--out-of-order]`:
 * the model-based test of the buffer's ledger (test/ledger-model.test.ts) with more sequences
 * than CI runs, or a failing case again (fast-check prints its seed and path with the shrunk
 * sequence). vitest takes no options of its own for a test, so they go in the environment.
 */
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';

const OPTIONS = { '--runs': 'MODEL_RUNS', '--seed': 'MODEL_SEED', '--path': 'MODEL_PATH', '--props': 'MODEL_PROPS' };
const env = { ...process.env };
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  const [name, inline] = args[i].split('=', 2);
  if (name === '--out-of-order') {
    env.MODEL_OUT_OF_ORDER = '1';
    continue;
  }
  const variable = OPTIONS[name];
  const value = inline ?? args[++i];
  if (!variable || value === undefined) {
    console.error(`test:model: expected ${Object.keys(OPTIONS).join(' <value>, ')} <value> or --out-of-order, got ${JSON.stringify(args[i])}`);
    process.exit(2);
  }
  env[variable] = value;
}
const root = resolve(import.meta.dirname, '..');
const vitest = resolve(root, 'node_modules', 'vitest', 'vitest.mjs');
const run = spawnSync(process.execPath, [vitest, 'run', 'test/ledger-model.test.ts'], { cwd: root, env, stdio: 'inherit' });
process.exit(run.status ?? 1);
