#!/bin/sh
# Build the minimal Debian root file system that test/systemd-unit.test.ts boots with
# systemd-nspawn: a real systemd as PID 1, on which the agent is installed as the README
# says and run under its own unit. The tree goes to .nspawn/rootfs of this clone (git-ignored)
# and is built once: the tests never change it (each run boots an overlay on top of it).
# Run again with --force after changing the package list below; the stamp file records the
# list, so a changed list builds again by itself.
#
# Needs root and, on Debian: debootstrap (the tree) and systemd-container (systemd-nspawn,
# for the tests). About a minute and some 500 MB from Debian's mirror.
set -eu

# Each package, and why the image has it:
#   systemd systemd-sysv dbus: a real systemd as PID 1 with its bus (systemctl,
#     systemd-analyze security of the loaded unit, journald);
#   sudo: the README's install lines are run as they are written, by an operator with sudo
#     (sudo, sudoedit);
#   python3 make g++: `npm install -g` of the tarball builds unix-dgram (the agent's systemd
#     notifications; no prebuilt binaries), and better-sqlite3 where no prebuilt one is found,
#     as on a device; python3 also plays the GPS receiver on a pseudo-terminal;
#   tzdata: the zoneinfo files the agent reads time zones from, as install.sh asks.
# Not procps on purpose: a minimal Debian has no /bin/kill, and the unit's reload must work
# without it. Node.js and npm are not Debian's (bookworm has Node 18): the test copies in the
# node that runs it, with npm, so that better-sqlite3's compiled module matches.
PACKAGES=systemd,systemd-sysv,dbus,sudo,python3,make,g++,tzdata
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/.nspawn/rootfs
stamp=$root/.nspawn/rootfs.ok
want="$SUITE $PACKAGES"

if [ "${1:-}" != "--force" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$out/lib/systemd/systemd" ]; then
	echo "$out (built already; --force to build again)"
	exit 0
fi
[ "$(id -u)" = 0 ] || { echo "nspawn-rootfs.sh: run as root (debootstrap)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "nspawn-rootfs.sh: debootstrap is not installed (apt-get install debootstrap systemd-container)" >&2; exit 1; }

mkdir -p "$root/.nspawn"
tmp=$root/.nspawn/rootfs.building
rm -rf "$tmp" "$stamp"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp" "$MIRROR"

# No getty: the container runs without a terminal, and a getty on its console would only
# restart in a loop in the journal.
for unit in console-getty.service getty@.service getty.target; do
	ln -sf /dev/null "$tmp/etc/systemd/system/$unit"
done
# Package lists and caches are not needed at run time.
rm -rf "$tmp/var/cache/apt/archives"/*.deb "$tmp/var/lib/apt/lists"/*
# The machine name the tests boot it with, resolvable (sudo looks it up).
echo "ta-device" >"$tmp/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tta-device\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$tmp/etc/hosts"

rm -rf "$out"
mv "$tmp" "$out"
echo "$want" >"$stamp"
echo "$out built"
