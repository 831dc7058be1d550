#!/bin/sh
# Java 17 or later, which PySpark 4 needs for the Spark tests (local mode, tests/spark_session.py):
# nothing to do when `java` is there and new enough; Debian's openjdk-17-jre-headless is
# installed with apt-get when it is missing and running as root; otherwise one line says what
# to install.
set -e
if command -v java >/dev/null 2>&1; then
    major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
    if [ "${major:-0}" -ge 17 ]; then
        exit 0
    fi
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Java 17 for Spark (apt-get install -y openjdk-17-jre-headless)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null; }
    exit 0
fi
echo "error: Spark needs Java 17 or later and \`java\` is ${major:+version $major}${major:-missing}; install it as root (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) or put a JDK 17+ on PATH" >&2
exit 1
