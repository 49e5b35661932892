#!/bin/sh
# Prints telematics-agent(1) in roff: the command's --help and each command's, as this version
# prints them, with the files the package installs. Usage: manpage.sh BIN VERSION EPOCH
set -eu
BIN=$1
VERSION=$2
DATE=$(date -u -d "@$3" +%Y-%m-%d)

# Help text as roff: backslashes escaped, no line taken for a request.
roff() { sed -e 's/\\/\\e/g' -e "s/^[.']/\\\\\&&/" -e 's/-/\\-/g'; }

cat <<HEAD
.TH TELEMATICS-AGENT 1 "$DATE" "telematics-agent $VERSION" "User Commands"
.SH NAME
telematics-agent \\- carrier telematics agent: GPS and temperature readings to a logistics service
.SH SYNOPSIS
.B telematics-agent
.I command
.RI [ options ]
.SH DESCRIPTION
Runs as the systemd service
.BR telematics-agent ;
the other commands inspect and feed its buffer beside it (run them as the service user:
.BR "sudo \\-u telematics-agent telematics-agent status" ).
.PP
.nf
HEAD
node "$BIN" --help | roff
echo ".fi"
echo ".SH COMMANDS"
node "$BIN" --help | sed -n '/^Commands:/,/^$/p' | sed -n 's/^  \([a-z][a-z-]*\).*/\1/p' | grep -vx help | while read -r cmd; do
	printf '.SS %s\n.nf\n' "$cmd"
	node "$BIN" "$cmd" --help | roff
	echo ".fi"
done
cat <<'TAIL'
.SH FILES
.TP
.I /etc/telematics-agent/agent.toml
The configuration (TOML).
.TP
.I /etc/telematics-agent/subscription\-key
The service's subscription key, 0640 root:telematics\-agent.
.TP
.I /var/lib/telematics\-agent/
The buffer (SQLite): every reading and milestone until the service has acknowledged it.
.SH SEE ALSO
.BR systemctl (1),
.BR journalctl (1),
/usr/share/doc/telematics\-agent/README.md,
/usr/share/doc/telematics\-agent/docs/operations.md
TAIL
