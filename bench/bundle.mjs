#!/usr/bin/env node
/**
 * Bundles the bench's drain worker (tsc's output in dist-bench/, see tsconfig.bench.json)
 * into dist-bench/pkg/ with the same esbuild settings as the agent's own bundle, so that the
 * memory and CPU it measures are those of the bundled code, not of tsc's one file per module.
 * Run by `npm run build:bench`; nothing here is part of the package.
 *
 * The CLI's entry is bundled beside it, as in the package's bundle before the bench left
 * src/: the worker's code is then cut into the same chunks as it was for every figure
 * measured so far. Bundled alone it idles some 1.5 MB smaller (row 3a), since it no longer
 * loads chunks it shares with the CLI (the TOML parser among them, which `run` loads too).
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundle } from '../scripts/bundle.mjs';

const OUT = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist-bench');
await bundle({ entryPoints: [join(OUT, 'src', 'cli.js'), join(OUT, 'bench', 'drain-worker.js')], outbase: OUT, outdir: join(OUT, 'pkg') });
