#!/usr/bin/env node
/**
 * Removes from an application directory's node_modules every package the agent cannot load at
 * run time, for the Debian packages (scripts/package.sh, after the native modules are built):
 *
 * - the code of the packages bundle.mjs inlines into dist/pkg (BUNDLED there: zod alone is
 *   8 MB); each keeps its package.json and license, for the copyright file (their code is in
 *   the bundle, under their licenses);
 * - what only a build uses: `prebuild-install` (better-sqlite3's download of a prebuilt binary,
 *   run by npm's install script, which the package never runs) and `nan` (C++ headers unix-dgram
 *   compiles with);
 * - type declarations (`@types/*`, which some packages list as dependencies).
 *
 * Kept: what the application's own dependencies, less those, reach through their packages'
 * `dependencies` and `optionalDependencies`, resolved as Node resolves them (a nested
 * node_modules first, then each one above). Every byte left out is one less on the SD card and
 * on the cellular link at each upgrade.
 *
 *   node scripts/prune-modules.mjs APP_DIR [BUNDLED_PACKAGE...]
 *
 * The packages named are the ones the source tree's scripts/bundle.mjs inlines (its BUNDLED
 * list, read by package.sh). Prints what it removed and the bytes saved.
 */
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';

/** Packages a build needs and a run never loads. */
const BUILD_ONLY = new Set(['prebuild-install', 'nan']);

const [app, ...bundled] = process.argv.slice(2);
if (!app) {
  console.error('usage: prune-modules.mjs APP_DIR [BUNDLED_PACKAGE...]');
  process.exit(64);
}
const modules = join(app, 'node_modules');

const readJson = (file) => JSON.parse(readFileSync(file, 'utf8'));
const skipped = (name) => BUILD_ONLY.has(name) || name.startsWith('@types/');

/** The directory of `name` as Node finds it from package directory `from`, or undefined. */
function resolve(from, name) {
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    if (dir === app || !dir.startsWith(app)) return undefined;
  }
}

const keep = new Set();
const roots = Object.keys(readJson(join(app, 'package.json')).dependencies ?? {}).filter((n) => !bundled.includes(n) && !skipped(n));
const queue = roots.map((name) => {
  const dir = resolve(app, name);
  if (!dir) throw new Error(`prune-modules: ${name}, a dependency of the application, is not in ${modules}`);
  return dir;
});
while (queue.length > 0) {
  const dir = queue.pop();
  if (keep.has(dir)) continue;
  keep.add(dir);
  const pkg = readJson(join(dir, 'package.json'));
  for (const [deps, optional] of [
    [pkg.dependencies, false],
    [pkg.optionalDependencies, true],
  ]) {
    for (const name of Object.keys(deps ?? {})) {
      if (skipped(name)) continue;
      const found = resolve(dir, name);
      if (found) queue.push(found);
      else if (!optional) throw new Error(`prune-modules: ${name}, a dependency of ${relative(app, dir)}, is not installed`);
    }
  }
}

/** Every package directory under `nodeModules`, nested ones included. */
function packages(nodeModules) {
  if (!existsSync(nodeModules)) return [];
  const out = [];
  for (const entry of readdirSync(nodeModules)) {
    const path = join(nodeModules, entry);
    if (entry.startsWith('@')) {
      for (const scoped of readdirSync(path)) out.push(join(path, scoped), ...packages(join(path, scoped, 'node_modules')));
    } else if (existsSync(join(path, 'package.json'))) {
      out.push(path, ...packages(join(path, 'node_modules')));
    }
  }
  return out;
}

function size(path) {
  const st = statSync(path);
  if (!st.isDirectory()) return st.size;
  return readdirSync(path).reduce((sum, e) => sum + size(join(path, e)), 0);
}

let bytes = 0;
const removed = [];
/** A license file: LICENSE, LICENCE.md, COPYING, NOTICE... */
const isLicense = (name) => /^(licen[cs]e|copying|notice)(\.|$)/i.test(name);
for (const name of bundled) {
  const dir = join(modules, name);
  // Also required by a package left to node_modules: kept whole.
  if (!existsSync(dir) || keep.has(dir)) continue;
  for (const entry of readdirSync(dir)) {
    if (entry === 'package.json' || isLicense(entry)) continue;
    bytes += size(join(dir, entry));
    rmSync(join(dir, entry), { recursive: true });
  }
  keep.add(dir);
  removed.push(`${name} (all but its package.json and license: inlined)`);
}
for (const dir of packages(modules)) {
  if (keep.has(dir) || !existsSync(dir)) continue;
  bytes += size(dir);
  removed.push(relative(modules, dir).split(sep).join('/'));
  rmSync(dir, { recursive: true });
}
for (const entry of readdirSync(modules)) {
  const path = join(modules, entry);
  if (entry.startsWith('@') && readdirSync(path).length === 0) rmSync(path, { recursive: true });
}
console.log(`   node_modules: ${keep.size} packages kept, ${removed.length} removed (${(bytes / 1e6).toFixed(1)} MB): ${removed.join(' ')}`);
