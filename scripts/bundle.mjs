#!/usr/bin/env node
/**
 * Bundles tsc's output (dist/) into dist/pkg/, the code that ships: `bin/telematics-agent.js`
 * imports dist/pkg/cli.js, and the bench forks dist/pkg/bench/drain-worker.js so that it
 * measures the same code. Run by `npm run build` after tsc.
 *
 * Why: the agent is meant to idle in little memory. Plain Node ESM evaluates every module a
 * package's entry reaches (zod's alone pulls in some 40 locale modules it never uses), and
 * every module record costs memory; the bundle keeps only what is used, in a few files.
 *
 * - Code splitting keeps what the commands (src/cli/commands/) and the sources load with
 *   `import()` in chunks of its own, loaded only when needed (a truck with only gpsd never
 *   loads the NMEA parser).
 * - Only the packages in BUNDLED are inlined. The others stay imports resolved from
 *   node_modules at run time: native addons (better-sqlite3), packages that start workers or
 *   processes from files beside their own (pino with its transports, pino-pretty),
 *   one loaded through createRequire (@photostructure/tz-lookup, src/geo/timezone.ts), and
 *   development-only ones (undici, the bench's reference client). A new dependency stays
 *   external until it is listed here.
 * - Bundled CommonJS (commander) calls `require('node:events')`; ESM has no `require`, so each
 *   output file starts by making one.
 */
import { readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const DIST = join(ROOT, 'dist');
const OUT = join(DIST, 'pkg');
const BUNDLED = ['commander', 'smol-toml', 'zod'];

const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
const deps = Object.keys({ ...pkg.dependencies, ...pkg.devDependencies });
for (const name of BUNDLED) {
  if (!pkg.dependencies?.[name]) throw new Error(`scripts/bundle.mjs: ${name} is bundled but is not a dependency in package.json`);
}

// Chunk names carry content hashes: start empty so that no stale chunk is left behind.
rmSync(OUT, { recursive: true, force: true });

await build({
  absWorkingDir: ROOT,
  entryPoints: [join(DIST, 'cli.js'), join(DIST, 'bench', 'drain-worker.js')],
  outbase: DIST,
  outdir: OUT,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  external: deps.filter((name) => !BUNDLED.includes(name)),
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
  // tsc's .js.map files are read through, so positions map back to src/*.ts (as with tsc's maps,
  // the sources are referenced, not embedded).
  sourcemap: true,
  sourcesContent: false,
  logLevel: 'warning',
});
