#!/bin/sh
# Prints the package's debian/copyright (DEP-5) for the node_modules directory given: the agent's
# own files, then each npm package it ships with the license its package.json declares; each
# license's text is the LICENSE file that package ships beside its code.
set -eu
MODULES=$1
YEAR=$2
# The packages bundled into dist/pkg (scripts/bundle.mjs's BUNDLED), space-separated: their code
# is in the bundle, their package.json and license in node_modules.
BUNDLED=${3:-}
cat <<HEAD
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: telematics-agent
Comment: The npm packages below usr/lib/telematics-agent/node_modules/ are the agent's
 production dependencies as its package-lock.json pins them, less those only a build
 uses; each ships its own license text in its directory.

Files: *
Copyright: $YEAR telematics-agent maintainers
License: MIT

HEAD
node - "$MODULES" "$BUNDLED" "$YEAR" <<'JS'
const { readdirSync, readFileSync, existsSync } = require('node:fs');
const { join, relative } = require('node:path');
const root = process.argv[2];
const bundled = (process.argv[3] ?? '').split(' ').filter(Boolean);
const seen = new Set();
const out = [];
const licenseOf = (pkg) => {
  const license = typeof pkg.license === 'string' ? pkg.license : pkg.license?.type ?? 'unknown';
  // SPDX expressions as DEP-5 writes them.
  return license.replace(/^\((.*)\)$/, '$1').replace(/ OR /g, ' or ').replace(/ AND /g, ' and ');
};
const authorOf = (pkg) => {
  const author = typeof pkg.author === 'string' ? pkg.author : pkg.author?.name;
  return author ? author.replace(/\s*<[^>]*>/, '').replace(/\s*\([^)]*\)/, '') : `the authors of ${pkg.name}`;
};
// The bundle: the agent's own code and the packages inlined into it, each under its license.
if (bundled.length > 0) {
  const pkgs = bundled.map((name) => JSON.parse(readFileSync(join(root, name, 'package.json'), 'utf8')));
  const licenses = [...new Set(['MIT', ...pkgs.map(licenseOf)])];
  out.push(
    `Files: usr/lib/telematics-agent/dist/pkg/*\nCopyright: ${process.argv[4]} telematics-agent maintainers\n${pkgs.map((p) => ` ${authorOf(p)} (${p.name}, ${licenseOf(p)})`).join('\n')}\nLicense: ${licenses.join(' and ')}\nComment: ${bundled.join(', ')} are inlined into these files; their licenses are in\n their directories below usr/lib/telematics-agent/node_modules/.\n`,
  );
  for (const l of licenses) seen.add(l);
}
function walk(dir) {
  for (const entry of readdirSync(dir).sort()) {
    if (entry.startsWith('.')) continue;
    const path = join(dir, entry);
    if (entry.startsWith('@')) { walk(path); continue; }
    const pkg = JSON.parse(readFileSync(join(path, 'package.json'), 'utf8'));
    const license = licenseOf(pkg);
    out.push(`Files: usr/lib/telematics-agent/node_modules/${relative(root, path)}/*\nCopyright: ${authorOf(pkg)}\nLicense: ${license}\n`);
    for (const l of license.split(/ or | and /)) seen.add(l);
    if (existsSync(join(path, 'node_modules'))) walk(join(path, 'node_modules'));
  }
}
walk(root);
console.log(out.join('\n'));
const MIT = ` Permission is hereby granted, free of charge, to any person obtaining a copy
 of this software and associated documentation files (the "Software"), to deal
 in the Software without restriction, including without limitation the rights
 to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 copies of the Software, and to permit persons to whom the Software is
 furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in all
 copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
 SOFTWARE.`;
// Licenses Debian keeps in /usr/share/common-licenses; the others' texts are in the packages.
const common = new Set(['Apache-2.0', 'CC0-1.0']);
for (const l of [...new Set(['MIT', ...seen])].sort()) {
  let text;
  if (l === 'MIT') text = MIT;
  else if (common.has(l)) text = ` On Debian systems, the full text of the ${l} license is in\n /usr/share/common-licenses/${l}.`;
  else text = ` The full text is in the LICENSE file each package under this license ships in its\n directory below /usr/lib/telematics-agent/node_modules/.`;
  console.log(`License: ${l}\n${text}\n`);
}
JS
