#!/usr/bin/env bash
# Builds the YCSB bindings (clients/ycsb): target/shoal-ycsb.jar and its
# runtime classpath in target/lib/ (YCSB 0.17.0 core included), after the
# JUnit tests (the wire-format vectors; with SHOAL_COORDINATOR set, also the
# tests against that cluster).
# Installs Debian's maven and default-jdk-headless if missing. Maven's
# downloads are kept in ~/.m2 as usual; SHOAL_YCSB_OFFLINE=1 builds offline
# from there. SKIP_TESTS=1 skips the tests.
# Usage: clients/ycsb/build.sh
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
    echo "installing maven and default-jdk-headless (Debian packages)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven default-jdk-headless >/dev/null
fi
args=(-B -q -Dstyle.color=never)
[ "${SHOAL_YCSB_OFFLINE:-}" = 1 ] && args+=(-o)
[ "${SKIP_TESTS:-}" = 1 ] && args+=(-DskipTests)
# -q hides the per-class lines; print the test summary from the reports.
rm -rf target/surefire-reports
status=0
mvn "${args[@]}" package || status=$?
if [ -d target/surefire-reports ]; then
    awk '/^Tests run:/ { gsub(",", ""); r += $3; f += $5; e += $7; s += $9 }
         END { printf "ycsb-junit: %d tests, %d failures, %d errors, %d skipped\n", r, f, e, s }' \
        target/surefire-reports/*.txt
fi
exit "$status"
