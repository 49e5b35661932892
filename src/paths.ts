/**
 * Files that ship with the package (package.json, data/, systemd/), found from the package
 * root. A path relative to the module's own `import.meta.url` is right for only one layout:
 * the modules tsc writes to dist/ sit at their source depth, while the shipped CLI is a
 * bundle in dist/pkg/ whose shared chunks sit at a different one, so `../../data` would
 * point outside the package from there.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const PACKAGE_NAME = 'telematics-agent';

let root: { dir: string; version: string } | undefined;

/** The nearest directory at or above `start` whose package.json names this package. */
function findRoot(start: string): { dir: string; version: string } {
  for (let dir = start; ; ) {
    let manifest: { name?: unknown; version?: unknown } | undefined;
    try {
      manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as typeof manifest;
    } catch {
      // No package.json here, or not ours to read: keep walking up.
    }
    if (manifest?.name === PACKAGE_NAME) return { dir, version: String(manifest.version) };
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`no package.json of ${PACKAGE_NAME} at or above ${start}`);
    dir = parent;
  }
}

function packageRoot(): { dir: string; version: string } {
  return (root ??= findRoot(dirname(fileURLToPath(import.meta.url))));
}

/** Absolute path of a file shipped with the package, e.g. `packageFile('data', 'places-na.bin')`. */
export function packageFile(...parts: string[]): string {
  return join(packageRoot().dir, ...parts);
}

/** The package's version, from its package.json. */
export function packageVersion(): string {
  return packageRoot().version;
}
