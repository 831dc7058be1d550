#!/bin/sh
# SoftHSM2, the PKCS#11 module the tests sign through (tests/hsm.py makes a token in a
# temporary folder and generates its keys inside it): nothing to do when Debian's module
# is there; installed with apt-get when missing and running as root; otherwise one line
# says what to install. Only the module: the tests never touch the system's tokens.
set -e
MODULE=/usr/lib/softhsm/libsofthsm2.so
if [ -e "$MODULE" ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing SoftHSM2, a PKCS#11 module for the tests (apt-get install -y softhsm2)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends softhsm2 >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends softhsm2 >/dev/null; }
    exit 0
fi
echo "error: SoftHSM2's PKCS#11 module ($MODULE) is missing; install it as root (Debian/Ubuntu: apt-get install -y softhsm2)" >&2
exit 1
