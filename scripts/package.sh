#!/usr/bin/env bash
# Build the Debian packages: dist/deb/telematics-agent_<version>_<arch>.deb for amd64 and arm64
# (`npm run package`), with dpkg-deb, Debian's own tool. Each holds the bundled agent, its
# production node_modules exactly as package-lock.json has them (npm ci --omit=dev), and its
# native modules (better-sqlite3, unix-dgram) compiled here for that architecture: nothing is
# compiled or downloaded on the device.
#
#   scripts/package.sh [--arch amd64|arm64]... [--source DIR] [--version V] [--out DIR] [--no-build]
#
#   --arch     one architecture (repeatable); default both
#   --source   the checkout to package (default: this one). The packaging (this script and
#              packaging/deb/) is always this checkout's: the tests package an older commit
#              from a `git worktree` with it, for the upgrade from that version.
#   --version  the package's version (default: package.json's)
#   --no-build use the source's dist/pkg as it is (default: npm run build there first)
#
# arm64 is cross-compiled with Debian's g++-aarch64-linux-gnu, not built in an arm64 root
# under qemu-user-static: a cross build takes about a minute, the same build emulated some
# twenty, and node-gyp supports it directly (--arch). The module is checked to be an aarch64
# ELF; test/deb.test.ts loads it in an arm64 Debian under emulation.
#
# The modules are built against this machine's Node headers, which must be Node 20: they are
# for Node's ABI 115, Debian 13's nodejs (20.19); hence Depends: nodejs (<< 21) as well.
# Environment: TA_NATIVE_CACHE=DIR keeps the compiled modules there (keyed by module
# version, architecture, Node, compiler and flags), so the tests' several builds compile once.
#
# Needs: node 20 with npm, dpkg-dev (dpkg-deb, dpkg-buildflags), python3, make, g++ (amd64),
# g++-aarch64-linux-gnu (arm64), file.
set -euo pipefail

NAME=telematics-agent
HERE=$(cd "$(dirname "$0")/.." && pwd)
PACKAGING=$HERE/packaging/deb
SOURCE=$HERE
OUT=
VERSION=
BUILD=1
ARCHES=()

die() { printf 'package.sh: %s\n' "$*" >&2; exit 1; }
while [ $# -gt 0 ]; do
	case $1 in
	--arch) ARCHES+=("$2"); shift 2 ;;
	--source) SOURCE=$(cd "$2" && pwd); shift 2 ;;
	--version) VERSION=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	--no-build) BUILD=0; shift ;;
	-h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown option: $1 (--help)" ;;
	esac
done
[ ${#ARCHES[@]} -gt 0 ] || ARCHES=(amd64 arm64)
OUT=${OUT:-$HERE/dist/deb}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

for cmd in node npm dpkg-deb dpkg-buildflags readelf file make python3; do
	command -v "$cmd" >/dev/null || die "$cmd not found (apt-get install dpkg-dev file make python3)"
done
VERSION=${VERSION:-$(node -p "require('$SOURCE/package.json').version")}
[[ $VERSION =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] || die "version $VERSION is not a Debian version"
# Every date in the package (changelog, file times) is the commit's: the same commit gives
# the same files.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$SOURCE" log -1 --format=%ct 2>/dev/null || date +%s)}
COMMIT=$(git -C "$SOURCE" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

# The Node the modules are compiled against: its headers and ABI.
NODEDIR=${NODEDIR:-$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")}
[ -f "$NODEDIR/include/node/node.h" ] || die "no Node headers in $NODEDIR/include/node (set NODEDIR)"
ABI=$(node -p process.versions.modules)
[ "$(node -p 'process.versions.node.split(".")[0]')" = 20 ] && [ "$ABI" = 115 ] ||
	die "node $(node --version) (ABI $ABI): build with Node 20 (ABI 115), the Node the packages depend on"
NODE_GYP=${npm_config_node_gyp:-$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")/node_modules/node-gyp/bin/node-gyp.js}
[ -f "$NODE_GYP" ] || die "node-gyp not found at $NODE_GYP"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/$NAME-package.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

if [ "$BUILD" = 1 ]; then
	echo "== npm run build ($SOURCE)"
	(cd "$SOURCE" && npm run --silent build)
fi
[ -f "$SOURCE/dist/pkg/cli.js" ] || die "$SOURCE/dist/pkg/cli.js is missing (npm run build)"

# The packages bundle.mjs inlines into dist/pkg (its BUNDLED list).
BUNDLED=$(sed -n "s/^.*const BUNDLED = \[\(.*\)\];.*$/\1/p" "$SOURCE/scripts/bundle.mjs" 2>/dev/null | tr -d "',") || true

echo "== production node_modules from package-lock.json"
APP=$WORK/app
mkdir -p "$APP/dist"
cp -a "$SOURCE/package.json" "$SOURCE/package-lock.json" "$SOURCE/bin" "$SOURCE/data" "$APP/"
cp -a "$SOURCE/dist/pkg" "$APP/dist/pkg"
# Source maps point into src/, which is not shipped, and Node reads them only with
# --enable-source-maps.
find "$APP/dist/pkg" -name '*.map' -delete
# --ignore-scripts: the native modules are built below, per architecture.
(cd "$APP" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --prefer-offline --loglevel=error)
rm -rf "$APP/node_modules/.bin" "$APP/package-lock.json"
# What the npm packages carry for their own development, never loaded at run time: dotfiles
# (.eslintrc, .npmignore, .github, .husky...), their test suites, and the HTML page of
# pino's documentation site (it loads scripts from CDNs: lintian's privacy-breach).
find "$APP/node_modules" -mindepth 1 -name '.*' ! -name .package-lock.json -prune -exec rm -rf {} +
for pkg in "$APP"/node_modules/*/ "$APP"/node_modules/@*/*/ "$APP"/node_modules/*/node_modules/*/; do
	if [ -f "$pkg/package.json" ]; then rm -rf "$pkg/test" "$pkg/tests" "$pkg/__tests__"; fi
done
find "$APP/node_modules" -name '*.html' -delete

# Debian's hardening flags (fortify, stack protector, relro, now) for the architecture.
# -ffile-prefix-map keeps the build directory's name out of the binaries.
buildflags() {
	DEB_HOST_ARCH=$1 DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get "$2" 2>/dev/null
}

# build_native ARCH MODULE TARGET: node_modules/MODULE/build/Release/TARGET.node for ARCH, the
# only file of the module's build kept; its C/C++ sources go.
build_native() {
	local arch=$1 mod=$2 target=$3 lib=$4
	local dir=$lib/node_modules/$mod gyp_arch triplet elf
	case $arch in
	amd64) gyp_arch=x64 triplet=x86_64-linux-gnu elf='x86-64' ;;
	arm64) gyp_arch=arm64 triplet=aarch64-linux-gnu elf='ARM aarch64' ;;
	*) die "unknown architecture $arch" ;;
	esac
	local cc=$triplet-gcc cxx=$triplet-g++ strip=$triplet-strip
	if ! command -v "$cxx" >/dev/null && [ "$arch" = "$(dpkg --print-architecture)" ]; then cc=gcc cxx=g++ strip=strip; fi
	command -v "$cxx" >/dev/null || die "$cxx not found (apt-get install g++-$triplet)"
	local cflags cxxflags cppflags ldflags
	cflags=$(buildflags "$arch" CFLAGS) cxxflags=$(buildflags "$arch" CXXFLAGS)
	cppflags=$(buildflags "$arch" CPPFLAGS) ldflags=$(buildflags "$arch" LDFLAGS)
	local version key cached=
	version=$(node -p "require('$dir/package.json').version")
	key=$(printf '%s\n' "$mod $version $arch $(node --version) $("$cxx" -dumpfullversion) $cflags $cxxflags $cppflags $ldflags" | sha256sum | cut -c1-16)
	[ -z "${TA_NATIVE_CACHE:-}" ] || cached=$TA_NATIVE_CACHE/$mod-$version-$arch-$key.node
	local built=$WORK/$arch-$target.node
	if [ -n "$cached" ] && [ -f "$cached" ]; then
		echo "   $mod $version ($arch): from $cached"
		cp "$cached" "$built"
	else
		echo "   $mod $version ($arch): compiling with $cxx"
		(cd "$dir" && CC=$cc CXX=$cxx LINK=$cxx AR=$triplet-ar CFLAGS=$cflags CXXFLAGS=$cxxflags CPPFLAGS=$cppflags LDFLAGS=$ldflags \
			node "$NODE_GYP" rebuild --release --arch="$gyp_arch" --nodedir="$NODEDIR" --jobs=2 >"$WORK/$arch-$mod.log" 2>&1) ||
			{ tail -40 "$WORK/$arch-$mod.log" >&2; die "building $mod for $arch failed"; }
		cp "$dir/build/Release/$target.node" "$built"
		"$strip" --strip-unneeded --remove-section=.comment --remove-section=.note "$built"
		if [ -n "$cached" ]; then mkdir -p "$TA_NATIVE_CACHE" && cp "$built" "$cached.tmp" && mv "$cached.tmp" "$cached"; fi
	fi
	file -b "$built" | grep -q "ELF 64-bit LSB shared object, $elf" || die "$mod: $(file -b "$built"), not $elf"
	rm -rf "$dir/build" "$dir/deps" "$dir/src"
	mkdir -p "$dir/build/Release"
	install -m 0644 "$built" "$dir/build/Release/$target.node"
}

# The Depends of the compiled modules' shared libraries, with the lowest versions their symbol
# versions allow (what dpkg-shlibdeps finds; it cannot look into another architecture's libraries
# without them installed): GLIBC_2.34 -> libc6 (>= 2.34), GLIBCXX_3.4.30 -> libstdc++6 (>= 12).
shlib_depends() {
	readelf -W -d -V "$@" | awk '
		function vcmp(a, b,   x, y, n, i) { n = split(a, x, "."); split(b, y, "."); for (i = 1; i <= n || i in y; i++) { if (x[i] + 0 != y[i] + 0) return x[i] + 0 - y[i]; } return 0 }
		function need(pkg, v) { if (!(pkg in min) || vcmp(v, min[pkg]) > 0) min[pkg] = v }
		/\(NEEDED\)/ { lib = $NF; gsub(/[\[\]]/, "", lib); needed[lib] = 1 }
		/File: / { file = $0; sub(/.*File: /, "", file); sub(/ .*/, "", file) }
		/Name: GLIBC_[0-9]/ { v = $0; sub(/.*Name: GLIBC_/, "", v); sub(/ .*/, "", v); need("libc6", v) }
		/Name: GLIBCXX_3\.4/ { v = $0; sub(/.*Name: GLIBCXX_3\.4\.?/, "", v); sub(/ .*/, "", v); if (v == "") v = 0
			gcc = v <= 21 ? "5.2" : v == 22 ? "6" : v <= 24 ? "7" : v == 25 ? "8" : v <= 28 ? "9" : v == 29 ? "11" : v == 30 ? "12" : v == 31 ? "13.1" : v == 32 ? "14" : "unknown"
			if (gcc == "unknown") { print "GLIBCXX_3.4." v ": add it to shlib_depends in scripts/package.sh" > "/dev/stderr"; exit 1 }
			need("libstdc++6", gcc) }
		/Name: GCC_[0-9]/ { v = $0; sub(/.*Name: GCC_/, "", v); sub(/ .*/, "", v); need("libgcc-s1", v) }
		END {
			for (lib in needed) {
				if (lib ~ /^lib(c|m|pthread|dl|rt)\.so\./ || lib ~ /^ld-linux/) pkg = "libc6"; else if (lib == "libstdc++.so.6") pkg = "libstdc++6"; else if (lib == "libgcc_s.so.1") pkg = "libgcc-s1"
				else { print lib ": which Debian package? (shlib_depends in scripts/package.sh)" > "/dev/stderr"; exit 1 }
				if (!(pkg in min)) min[pkg] = pkg == "libgcc-s1" ? "3.0" : pkg == "libstdc++6" ? "5.2" : "2.17"
				uses[pkg] = 1
			}
			for (pkg in uses) printf "%s (>= %s)\n", pkg, min[pkg]
		}' | sort | paste -sd, | sed 's/,/, /g'
}

for arch in "${ARCHES[@]}"; do
	echo "== $arch"
	PKG=$WORK/$arch
	LIB=$PKG/usr/lib/$NAME
	DOC=$PKG/usr/share/doc/$NAME
	mkdir -p "$PKG/usr/lib" "$PKG/usr/bin" "$PKG/usr/lib/systemd/system" "$PKG/etc/$NAME" "$DOC" "$PKG/usr/share/lintian/overrides" "$PKG/DEBIAN"
	cp -a "$APP" "$LIB"
	build_native "$arch" better-sqlite3 better_sqlite3 "$LIB"
	build_native "$arch" unix-dgram unix_dgram "$LIB"
	# No compiled file of another architecture (a module that came with prebuilt binaries).
	while IFS= read -r f; do
		case $f in *"$([ "$arch" = amd64 ] && echo x86-64 || echo 'ARM aarch64')"*) ;; *) die "a binary not for $arch: $f" ;; esac
	done < <(find "$LIB" -type f -exec file {} + | grep ': *ELF')
	# Only what runs: not the packages the bundle inlines, nor what only the build above used.
	# shellcheck disable=SC2086 # BUNDLED: one argument per package name
	node "$HERE/scripts/prune-modules.mjs" "$LIB" $BUNDLED

	# The command: npm's layout (bin/ runs dist/pkg/cli.js), under Debian's names. It runs
	# Debian's node, the one the package depends on and its modules are compiled for, not
	# `env node`: systemd's PATH puts /usr/local/bin first, where another Node may be.
	sed -i '1s|^#!/usr/bin/env node$|#!/usr/bin/node|' "$LIB/bin/$NAME.js"
	[ "$(head -n1 "$LIB/bin/$NAME.js")" = '#!/usr/bin/node' ] || die "bin/$NAME.js: its first line is not #!/usr/bin/env node"
	chmod 0755 "$LIB/bin/$NAME.js"
	ln -s "../lib/$NAME/bin/$NAME.js" "$PKG/usr/bin/$NAME"

	# The unit, as install.sh installs it but for the package's paths: every /usr/local path
	# in it is replaced, and none may be left. In /usr/lib/systemd/system, not /lib/...: on
	# Debian 13 /lib is a link to usr/lib, and a file shipped through it (an aliased location,
	# DEP17) can be lost when packages move files.
	sed -e "s|/usr/local/bin/$NAME|/usr/bin/$NAME|g" \
		-e "s|file:/usr/local/lib/node_modules/$NAME/README.md|file:/usr/share/doc/$NAME/README.md|" \
		-e "s|file:/usr/local/lib/node_modules/$NAME/docs/|file:/usr/share/doc/$NAME/docs/|" \
		-e "s|^# telematics-agent as a systemd service\. scripts/install\.sh puts this file in$|# telematics-agent as a systemd service, from its Debian package, which replaces this file|" \
		-e "s|^# /etc/systemd/system/ and replaces it on every install: change it with a drop-in$|# on every upgrade: change it with a drop-in|" \
		-e "s|^# npm -g installs into /usr/local on Debian; scripts/install.sh does exactly that\.$|# The Debian package's command (/usr/lib/$NAME/bin/$NAME.js).|" \
		-e "s|(created by scripts/install.sh)|(created by the package's postinst)|" \
		-e "s|^# scripts/install.sh; the service only reads it).|# the package's postinst; the service only reads it).|" \
		-e "s|install.sh suggests$|the README suggests|" \
		"$SOURCE/systemd/$NAME.service" >"$PKG/usr/lib/systemd/system/$NAME.service"
	if grep -n '/usr/local\|install\.sh' "$PKG/usr/lib/systemd/system/$NAME.service" >&2; then
		die "systemd/$NAME.service: the lines above are not rewritten for the package (scripts/package.sh)"
	fi

	# The conffile: the installed config the operator edits (config/agent.toml; a tree from
	# before it existed ships its example).
	config=$SOURCE/config/agent.toml
	[ -f "$config" ] || config=$SOURCE/config/agent.example.toml
	install -m 0644 "$config" "$PKG/etc/$NAME/agent.toml"

	# Documentation and examples; the docs keep their place beside the README, whose links
	# point into docs/.
	install -m 0644 "$SOURCE/README.md" "$DOC/"
	mkdir -p "$DOC/docs" "$DOC/examples"
	install -m 0644 "$SOURCE"/docs/*.md "$DOC/docs/"
	install -m 0644 "$SOURCE/config/agent.example.toml" "$SOURCE/config/stops.example.json" "$DOC/examples/"
	# A native package (its version has no Debian revision: the project packages itself), so
	# changelog.gz, not changelog.Debian.gz. What changed is in docs/releases.md, shipped with
	# the docs (a tree from before it existed says only the commit).
	{
		printf '%s (%s) unstable; urgency=medium\n\n  * Package of %s, commit %s.\n' "$NAME" "$VERSION" "$NAME $VERSION" "$COMMIT"
		[ ! -f "$SOURCE/docs/releases.md" ] || printf '  * What changed: /usr/share/doc/%s/docs/releases.md\n' "$NAME"
		printf '\n -- %s  %s\n' "$(sed -n 's/^Maintainer: //p' "$PACKAGING/control.in")" "$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
	} | gzip -9n >"$DOC/changelog.gz"
	"$PACKAGING/copyright.sh" "$LIB/node_modules" "$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)" "$BUNDLED" >"$DOC/copyright"
	# The manual page is the command's own --help and that of each command, so it says what
	# this version does.
	mkdir -p "$PKG/usr/share/man/man1"
	"$PACKAGING/manpage.sh" "$LIB/bin/$NAME.js" "$VERSION" "$SOURCE_DATE_EPOCH" | gzip -9n >"$PKG/usr/share/man/man1/$NAME.1.gz"
	install -m 0644 "$PACKAGING/lintian-overrides" "$PKG/usr/share/lintian/overrides/$NAME"

	# Modes as Debian wants them: directories and scripts 0755, everything else 0644 (npm
	# packages ship files with all sorts of modes).
	find "$PKG" -path "$PKG/DEBIAN" -prune -o -type d -exec chmod 0755 {} +
	find "$PKG" -path "$PKG/DEBIAN" -prune -o -type f -exec chmod 0644 {} +
	chmod 0755 "$LIB/bin/$NAME.js"
	# Scripts stay runnable (lintian: script-not-executable): the packages' own command-line
	# tools, e.g. pino-pretty's.
	find "$LIB/node_modules" -type f -exec sh -c 'for f; do [ "$(head -c2 "$f")" != "#!" ] || chmod 0755 "$f"; done' sh {} +

	for script in postinst prerm postrm; do install -m 0755 "$PACKAGING/$script" "$PKG/DEBIAN/$script"; done
	echo "/etc/$NAME/agent.toml" >"$PKG/DEBIAN/conffiles"
	chmod 0644 "$PKG/DEBIAN/conffiles"
	shlibs=$(shlib_depends "$LIB"/node_modules/*/build/Release/*.node)
	size=$(du -sk --apparent-size --exclude=DEBIAN "$PKG" | cut -f1)
	sed -e "s|@VERSION@|$VERSION|" -e "s|@ARCH@|$arch|" -e "s|@SHLIBS@|$shlibs|" -e "s|@SIZE@|$size|" "$PACKAGING/control.in" >"$PKG/DEBIAN/control"
	(cd "$PKG" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) >"$PKG/DEBIAN/md5sums"
	chmod 0644 "$PKG/DEBIAN/control" "$PKG/DEBIAN/md5sums"
	find "$PKG" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

	deb=$OUT/${NAME}_${VERSION}_$arch.deb
	dpkg-deb --root-owner-group -Zxz --build "$PKG" "$deb" >/dev/null
	echo "$deb ($(du -h "$deb" | cut -f1); installed $((size / 1024)) MB; Depends: $(sed -n 's/^Depends: //p' "$PKG/DEBIAN/control"))"
done
