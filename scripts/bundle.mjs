#!/usr/bin/env node
/**
 * Bundles tsc's output (dist/) into dist/pkg/, the code that ships: `bin/telematics-agent.js`
 * imports dist/pkg/cli.js. Run by `npm run build` after tsc. The bench (bench/bundle.mjs)
 * bundles its drain worker with the same `bundle()`, so that it measures the same code.
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
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const BUNDLED = ['commander', 'smol-toml', 'zod'];

/**
 * Bundle the entry points (tsc's .js files under `outbase`) into `outdir`, which is emptied
 * first: chunk names carry content hashes, so no stale chunk is left behind.
 */
export async function bundle({ entryPoints, outbase, outdir }) {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  const deps = Object.keys({ ...pkg.dependencies, ...pkg.devDependencies });
  for (const name of BUNDLED) {
    if (!pkg.dependencies?.[name]) throw new Error(`scripts/bundle.mjs: ${name} is bundled but is not a dependency in package.json`);
  }
  rmSync(outdir, { recursive: true, force: true });
  await build({
    absWorkingDir: ROOT,
    entryPoints,
    outbase,
    outdir,
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
    // The version in the code itself (src/version.ts): package.json is its one home.
    define: { __TELEMATICS_AGENT_VERSION__: JSON.stringify(String(pkg.version)) },
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const DIST = join(ROOT, 'dist');
  await bundle({ entryPoints: [join(DIST, 'cli.js')], outbase: DIST, outdir: join(DIST, 'pkg') });
}
