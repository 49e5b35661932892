#!/bin/sh
# Build LazyFS (a FUSE file system that drops every write not yet fsynced on command: a
# simulated power cut) into .lazyfs/ of this clone, where test/power-cut.test.ts looks for
# it. LazyFS is https://github.com/dsrhaslab/lazyfs; the source is a copy vendored beside the
# clone, ../shared/tools/lazyfs (LAZYFS_SRC to use another: its source under src/ and a
# build.sh OUT_DIR, with CMake files that use Debian's toml11 and spdlog); its build is
# offline. Needs, on Debian: g++ cmake libfuse3-dev fuse3 libtoml11-dev libspdlog-dev.
# Does nothing when .lazyfs/lazyfs is there already (--force builds again).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
src=${LAZYFS_SRC:-$root/../shared/tools/lazyfs}
out=$root/.lazyfs
if [ -x "$out/lazyfs" ] && [ "${1:-}" != "--force" ]; then
  echo "$out/lazyfs (built already; --force to build again)"
  exit 0
fi
if [ ! -x "$src/build.sh" ]; then
  echo "lazyfs.sh: no LazyFS source at $src (set LAZYFS_SRC)" >&2
  exit 1
fi
rm -rf "$out"
"$src/build.sh" "$out"
