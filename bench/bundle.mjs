#!/usr/bin/env node
/**
 * Bundles the bench's drain worker (tsc's output in dist-bench/, see tsconfig.bench.json)
 * into dist-bench/pkg/ with the same esbuild settings as the agent's own bundle, so that the
 * memory and CPU it measures are those of the code that ships (dist/pkg/), not of tsc's one
 * file per module. Run by `npm run build:bench`; nothing here is part of the package.
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundle } from '../scripts/bundle.mjs';

const OUT = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist-bench');
await bundle({ entryPoints: [join(OUT, 'bench', 'drain-worker.js')], outbase: join(OUT, 'bench'), outdir: join(OUT, 'pkg') });
