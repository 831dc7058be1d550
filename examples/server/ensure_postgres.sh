#!/bin/sh
# PostgreSQL's server binaries for the local stack (examples/server/stack.py), which
# `make test` and `make server` need: nothing to do when Debian's package (in
# /usr/lib/postgresql/<version>/bin, not on PATH) or a pg_ctl on PATH is there; installed
# with apt-get when missing and running as root; otherwise one line says what to install.
# Only the binaries: the stack runs its own server in a temporary folder (test fixtures
# and the launcher start it), never the system's.
set -e
if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing PostgreSQL's server binaries (apt-get install -y postgresql)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq postgresql >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; }
    exit 0
fi
echo "error: PostgreSQL's server binaries (pg_ctl) are missing; install them as root (Debian/Ubuntu: apt-get install -y postgresql) or put pg_ctl on PATH" >&2
exit 1
