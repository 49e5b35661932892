#!/bin/sh
# Remove the telematics-agent service installed by install.sh.
#
#   sudo sh /usr/local/lib/node_modules/telematics-agent/scripts/uninstall.sh [--purge]
#
# Stops and disables the service, removes the unit and the package. The buffer
# (/var/lib/telematics-agent: readings and milestones not yet delivered), the configuration
# and the key (/etc/telematics-agent) and the user stay unless --purge is given.
set -eu

NAME=telematics-agent
SERVICE_USER=telematics-agent
PREFIX=/usr/local
CONF_DIR=/etc/telematics-agent
STATE_DIR=/var/lib/telematics-agent
UNIT_DIR=/etc/systemd/system

usage() {
	cat <<EOF
usage: uninstall.sh [--purge] [--root DIR] [--no-package] [--no-systemctl]

  --purge          also delete $STATE_DIR (the buffer: undelivered data is lost),
                   $CONF_DIR (config and key), drop-ins and the user $SERVICE_USER
  --root DIR       uninstall below DIR instead of / (tests); userdel and systemctl are only printed
  --no-package     leave the npm package installed
  --no-systemctl   do not run systemctl (disable, stop, daemon-reload)
EOF
}
die() { printf 'uninstall.sh: %s\n' "$*" >&2; exit 1; }
usage_error() { printf 'uninstall.sh: %s\n' "$*" >&2; usage >&2; exit 64; }
run() { printf '+ %s\n' "$*"; "$@"; }
system() { if [ -n "$ROOT" ]; then printf 'would run: %s\n' "$*"; else run "$@"; fi; }

ROOT=
PURGE=0
NO_PACKAGE=0
NO_SYSTEMCTL=0
while [ $# -gt 0 ]; do
	case $1 in
	--root) [ $# -ge 2 ] || usage_error "--root needs a directory"; ROOT=$2; shift 2 ;;
	--root=*) ROOT=${1#--root=}; shift ;;
	--purge) PURGE=1; shift ;;
	--no-package) NO_PACKAGE=1; shift ;;
	--no-systemctl) NO_SYSTEMCTL=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage_error "unknown option: $1" ;;
	esac
done

if [ -n "$ROOT" ]; then
	[ -d "$ROOT" ] || die "--root $ROOT: not a directory"
	ROOT=$(cd "$ROOT" && pwd)
	[ "$ROOT" != / ] || die "--root /: leave --root out to uninstall from this system"
	NO_SYSTEMCTL=1
elif [ "$(id -u)" != 0 ]; then
	die "run as root (sudo), or with --root DIR"
fi

UNIT=$UNIT_DIR/$NAME.service
echo "== service"
if [ "$NO_SYSTEMCTL" = 1 ]; then
	printf 'would run: %s\n' "systemctl disable --now $NAME.service"
elif [ -e "$UNIT" ]; then
	# --now stops it: a graceful stop commits what is queued (up to TimeoutStopSec).
	if [ -d /run/systemd/system ]; then run systemctl disable --now "$NAME.service"; else run systemctl disable "$NAME.service"; fi
else
	echo "$UNIT is not installed"
fi
if [ -e "$ROOT$UNIT" ]; then
	run rm -f "$ROOT$UNIT"
fi
if [ "$NO_SYSTEMCTL" = 1 ]; then
	echo "would run: systemctl daemon-reload"
elif [ -d /run/systemd/system ]; then
	run systemctl daemon-reload
fi

if [ "$NO_PACKAGE" = 0 ]; then
	echo "== package"
	if [ -e "$ROOT$PREFIX/lib/node_modules/$NAME" ]; then
		# This script may live in the package it removes: sh has it open already, so that is fine.
		printf '+ npm uninstall -g --prefix %s %s\n' "$ROOT$PREFIX" "$NAME"
		(cd / && npm uninstall -g --prefix "$ROOT$PREFIX" "$NAME")
	else
		echo "$PREFIX/lib/node_modules/$NAME is not installed"
	fi
fi

if [ "$PURGE" = 1 ]; then
	echo "== purge"
	for dir in "$STATE_DIR" "$CONF_DIR" "$UNIT_DIR/$NAME.service.d"; do
		if [ -e "$ROOT$dir" ]; then run rm -rf "$ROOT$dir"; fi
	done
	if [ -n "$ROOT" ] || getent passwd "$SERVICE_USER" >/dev/null; then
		system userdel "$SERVICE_USER"
	fi
	echo "Purged."
else
	echo
	echo "Uninstalled. Kept (remove with --purge):"
	for dir in "$STATE_DIR" "$CONF_DIR"; do
		if [ -e "$ROOT$dir" ]; then echo "  $dir"; fi
	done
	echo "  the user $SERVICE_USER"
fi
