#!/bin/sh
# Install telematics-agent as a systemd service on Debian / Raspberry Pi OS.
#
#   tar -xzf telematics-agent-0.3.0.tgz        # the `npm pack` tarball; unpacks package/
#   sudo sh package/scripts/install.sh --tarball telematics-agent-0.3.0.tgz
#
# Safe to run again (and to upgrade with a newer tarball): it never overwrites an existing
# /etc/telematics-agent/agent.toml or key, and replaces only the package and the unit.
# The unit and the config (config/agent.toml: placeholders and no source, so the agent refuses
# to start until it is edited) are taken from the package this script belongs to.
set -eu

NAME=telematics-agent
SERVICE_USER=telematics-agent
# npm -g's default prefix on Debian. The unit's ExecStart is $PREFIX/bin/telematics-agent:
# change one, change the other.
PREFIX=/usr/local
CONF_DIR=/etc/telematics-agent
STATE_DIR=/var/lib/telematics-agent
UNIT_DIR=/etc/systemd/system

usage() {
	cat <<EOF
usage: install.sh (--tarball FILE | --no-package) [--root DIR] [--no-systemctl]

  --tarball FILE   install this npm pack tarball with: npm install -g --prefix $PREFIX FILE
  --no-package     do not install the package (already installed, or tests)
  --root DIR       install below DIR instead of / (tests, image staging): files, directories
                   and modes are created there; useradd, chown and systemctl are only printed
  --no-systemctl   do not run systemctl (daemon-reload, enable)
EOF
}
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }
usage_error() { printf 'install.sh: %s\n' "$*" >&2; usage >&2; exit 64; }
run() { printf '+ %s\n' "$*"; "$@"; }
# Commands that change the real system: printed instead of run under --root.
system() { if [ -n "$ROOT" ]; then printf 'would run: %s\n' "$*"; else run "$@"; fi; }

ROOT=
TARBALL=
NO_PACKAGE=0
NO_SYSTEMCTL=0
while [ $# -gt 0 ]; do
	case $1 in
	--root) [ $# -ge 2 ] || usage_error "--root needs a directory"; ROOT=$2; shift 2 ;;
	--root=*) ROOT=${1#--root=}; shift ;;
	--tarball) [ $# -ge 2 ] || usage_error "--tarball needs a file"; TARBALL=$2; shift 2 ;;
	--tarball=*) TARBALL=${1#--tarball=}; shift ;;
	--no-package) NO_PACKAGE=1; shift ;;
	--no-systemctl) NO_SYSTEMCTL=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown option: $1" ;;
	esac
done

if [ -n "$TARBALL" ] && [ "$NO_PACKAGE" = 1 ]; then usage_error "give --tarball or --no-package, not both"; fi
if [ -z "$TARBALL" ] && [ "$NO_PACKAGE" = 0 ]; then usage_error "give --tarball FILE (or --no-package)"; fi
if [ -n "$ROOT" ]; then
	[ -d "$ROOT" ] || die "--root $ROOT: not a directory"
	ROOT=$(cd "$ROOT" && pwd)
	[ "$ROOT" != / ] || die "--root /: leave --root out to install on this system"
	NO_SYSTEMCTL=1
elif [ "$(id -u)" != 0 ]; then
	die "run as root (sudo), or with --root DIR"
fi
if [ -n "$TARBALL" ]; then
	[ -f "$TARBALL" ] || die "--tarball $TARBALL: no such file"
	# npm runs from / below, so the path must not be relative.
	TARBALL=$(cd "$(dirname "$TARBALL")" && pwd)/$(basename "$TARBALL")
fi

SRC=$(cd "$(dirname "$0")/.." && pwd)
UNIT_SRC=$SRC/systemd/$NAME.service
CONFIG_SRC=$SRC/config/agent.toml
[ -f "$UNIT_SRC" ] || die "$UNIT_SRC is missing: run this script from the package (tar -xzf the tarball) or a checkout"
[ -f "$CONFIG_SRC" ] || die "$CONFIG_SRC is missing"

if [ -z "$ROOT" ] && [ -n "$TARBALL" ]; then
	command -v node >/dev/null || die "node is not installed (Node.js 20 or newer: apt-get install nodejs npm)"
	node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' ||
		die "node $(node --version) is too old: telematics-agent needs Node.js 20 or newer"
fi
if [ -z "$ROOT" ] && [ ! -d /usr/share/zoneinfo ]; then
	echo "note: no /usr/share/zoneinfo (apt-get install tzdata): time zones will come from Node's ICU data, about 8 MB more memory"
fi

echo "== user $SERVICE_USER"
if [ -n "$ROOT" ] || ! getent passwd "$SERVICE_USER" >/dev/null; then
	system useradd --system --user-group --home-dir "$STATE_DIR" --no-create-home \
		--shell /usr/sbin/nologin --comment telematics-agent "$SERVICE_USER"
else
	echo "exists"
fi
# The unit's SupplementaryGroups=dialout (serial GPS) fails to start without this group.
if [ -z "$ROOT" ] && ! getent group dialout >/dev/null; then
	run groupadd --system dialout
fi

if [ -n "$TARBALL" ]; then
	echo "== package"
	# From /: as root, npm may run build scripts as the owner of the current directory, who
	# cannot write to $PREFIX.
	printf '+ npm install -g --prefix %s %s\n' "$ROOT$PREFIX" "$TARBALL"
	(cd / && npm install -g --prefix "$ROOT$PREFIX" "$TARBALL")
fi

echo "== directories"
mkdir -p "$ROOT$CONF_DIR" "$ROOT$CONF_DIR/agent.d" "$ROOT$STATE_DIR" "$ROOT$UNIT_DIR"
# The config directory (and agent.d/, its drop-ins) is readable by the service's group,
# writable by root only; the buffer (positions) is private to the service user. systemd would
# create the state directory at the first start, but the CLI (status, load, milestone) may be
# used before that.
chmod 0750 "$ROOT$CONF_DIR" "$ROOT$CONF_DIR/agent.d" "$ROOT$STATE_DIR"
system chown "root:$SERVICE_USER" "$CONF_DIR" "$CONF_DIR/agent.d"
system chown "$SERVICE_USER:$SERVICE_USER" "$STATE_DIR"

echo "== configuration"
CONFIG=$CONF_DIR/agent.toml
if [ -e "$ROOT$CONFIG" ]; then
	echo "$CONFIG exists: kept as it is"
else
	# Written under a restrictive umask so it is never readable by others, not even briefly.
	(umask 077 && cp "$CONFIG_SRC" "$ROOT$CONFIG")
	chmod 0640 "$ROOT$CONFIG"
	system chown "root:$SERVICE_USER" "$CONFIG"
	echo "$CONFIG created: the agent refuses to start until it is edited (validate-config names the lines)"
fi
KEY=$CONF_DIR/subscription-key
KEY_PRESENT=0
if [ -e "$ROOT$KEY" ]; then
	KEY_PRESENT=1
	mode=$(stat -c %a "$ROOT$KEY")
	case $mode in
	600 | 640 | 400 | 440) echo "$KEY exists (mode $mode): kept" ;;
	*) echo "warning: $KEY has mode $mode; make it 0640 root:$SERVICE_USER (chmod 0640)" >&2 ;;
	esac
fi

echo "== systemd unit"
# Always replaced: the unit is part of the package. Local changes belong in a drop-in
# (systemctl edit $NAME), which survives this.
(umask 022 && cp "$UNIT_SRC" "$ROOT$UNIT_DIR/$NAME.service.tmp")
chmod 0644 "$ROOT$UNIT_DIR/$NAME.service.tmp"
mv -f "$ROOT$UNIT_DIR/$NAME.service.tmp" "$ROOT$UNIT_DIR/$NAME.service"
echo "$UNIT_DIR/$NAME.service installed"
if [ -z "$ROOT" ] && [ ! -x "$PREFIX/bin/$NAME" ]; then
	echo "warning: $PREFIX/bin/$NAME is missing: the unit's ExecStart needs it (install with --tarball)" >&2
fi

if [ "$NO_SYSTEMCTL" = 1 ]; then
	printf 'would run: %s\n' "systemctl daemon-reload" "systemctl enable $NAME.service"
elif [ -d /run/systemd/system ]; then
	run systemctl daemon-reload
	# Enabled, not started: it starts at the next boot, or now with `systemctl start` once
	# configured. An upgrade restarts a running agent onto the new version.
	run systemctl enable "$NAME.service"
	if [ -n "$TARBALL" ]; then run systemctl try-restart "$NAME.service"; fi
else
	# No running systemd (a chroot building an image): enabling only writes symlinks.
	echo "systemd is not running: daemon-reload skipped"
	run systemctl enable "$NAME.service"
fi

cat <<EOF

Installed. Next steps:
  1. Edit the configuration (api.base_url, api.scac, a [[sources]] table; or put them in a
     drop-in, $CONF_DIR/agent.d/*.toml):
       sudoedit $CONFIG
EOF
if [ "$KEY_PRESENT" = 0 ]; then
	cat <<EOF
  2. Put the subscription key (paste it, Enter, then Ctrl-D):
       sudo install -m 0640 -o root -g $SERVICE_USER /dev/stdin $KEY
EOF
else
	echo "  2. The subscription key is in place ($KEY)."
fi
cat <<EOF
  3. Check both, as the service will see them:
       sudo -u $SERVICE_USER env CREDENTIALS_DIRECTORY=$CONF_DIR $NAME validate-config
  4. Start it and watch the log:
       sudo systemctl start $NAME && journalctl -u $NAME -f
EOF
