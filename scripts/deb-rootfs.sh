#!/bin/sh
# Build the Debian 13 (trixie) root file systems the package's tests (test/deb.test.ts) install
# the .deb into: amd64, booted with systemd-nspawn (a real systemd as PID 1), and arm64, entered
# with chroot under qemu-user-static. Usage: scripts/deb-rootfs.sh amd64|arm64
#
# Built once per machine, outside the clone, in $TA_CI_CACHE (default
# /var/cache/telematics-agent-ci)/trixie-<arch>-<hash of this script>/rootfs, so that CI and
# every clone reuse it; a change to this script builds a new one (and removes the old ones).
# The tests never change it: they mount an overlay on it. The last line printed is the path.
#
# What the image has, and why:
#   amd64: systemd systemd-sysv dbus, to boot with a real systemd and run the unit;
#   both: nothing to build or fetch with: no npm, no compiler (the package must not need them).
#     The packages the .deb depends on (nodejs, adduser, tzdata and what apt adds to them) are
#     downloaded into apt's cache, not installed, with apt's lists kept: `apt install ./x.deb`
#     in the test resolves the package's Depends itself, from the cache, with no network.
#
# Needs root, debootstrap and, for arm64, qemu-user-static with binfmt_misc (the F flag, so
# the emulator is found from inside the root). About 2 minutes for amd64, 10 for arm64 under
# emulation, some 300 MB each from Debian's mirror.
set -eu

ARCH=${1:-}
case $ARCH in
amd64) INCLUDE=systemd,systemd-sysv,dbus ;;
arm64) INCLUDE= ;;
*) echo "usage: deb-rootfs.sh amd64|arm64" >&2; exit 64 ;;
esac
SUITE=trixie
DEPENDS="nodejs adduser tzdata"
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${TA_CI_CACHE:-/var/cache/telematics-agent-ci}

hash=$(sha256sum "$0" | cut -c1-12)
dir=$CACHE/$SUITE-$ARCH-$hash
out=$dir/rootfs

if [ -f "$dir/ok" ] && [ -d "$out/usr" ]; then
	echo "$out"
	exit 0
fi
[ "$(id -u)" = 0 ] || { echo "deb-rootfs.sh: run as root (debootstrap)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "deb-rootfs.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
if [ "$ARCH" != "$(dpkg --print-architecture)" ]; then
	binfmt=/proc/sys/fs/binfmt_misc
	[ -f "$binfmt/status" ] || mount -t binfmt_misc binfmt_misc "$binfmt"
	[ -f "$binfmt/qemu-aarch64" ] || update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
	[ -f "$binfmt/qemu-aarch64" ] || { echo "deb-rootfs.sh: no qemu-aarch64 in binfmt_misc (apt-get install qemu-user-static binfmt-support)" >&2; exit 1; }
fi

mkdir -p "$CACHE"
# Roots of earlier versions of this script: never used again.
for old in "$CACHE/$SUITE-$ARCH-"*; do
	[ "$old" = "$dir" ] || [ ! -d "$old" ] || rm -rf "$old"
done
rm -rf "$dir"
mkdir -p "$dir"
debootstrap --arch="$ARCH" --variant=minbase ${INCLUDE:+--include="$INCLUDE"} "$SUITE" "$out.building" "$MIRROR"

# The Depends in apt's cache (see above). /proc for apt's own checks, only while it runs.
mount -t proc proc "$out.building/proc"
trap 'umount "$out.building/proc" 2>/dev/null || true' EXIT
chroot "$out.building" apt-get install -y -qq --download-only $DEPENDS >/dev/null
umount "$out.building/proc"
trap - EXIT
for pkg in $DEPENDS; do
	ls "$out.building/var/cache/apt/archives/${pkg}_"*.deb >/dev/null 2>&1 || chroot "$out.building" dpkg -s "$pkg" >/dev/null 2>&1 ||
		{ echo "deb-rootfs.sh: $pkg was not downloaded" >&2; exit 1; }
done

if [ "$ARCH" = amd64 ]; then
	# No getty: the container runs without a terminal, and a getty on its console would only
	# restart in a loop in the journal.
	for unit in console-getty.service getty@.service getty.target; do
		ln -sf /dev/null "$out.building/etc/systemd/system/$unit"
	done
fi
echo "ta-device" >"$out.building/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tta-device\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$out.building/etc/hosts"

mv "$out.building" "$out"
echo "$SUITE $ARCH $DEPENDS" >"$dir/ok"
echo "$out"
