#!/usr/bin/env bash
# Shoal's crash-recovery benchmarks (issue 5's benchmarks).
#
# Builds Shoal in release mode and runs `shoal bench recovery`, which does
# the whole measurement with real processes: for each size and run it
# starts a cluster of its own (a coordinator and 4 servers, every server a
# master and a backup, R=2, so 3 recovery masters remain, each with enough
# backups), fills ONE master with SIZE MB of object data (100-byte values,
# keys picked by hash so that they fall in that master's tablet, written
# with multi-writes), kills it with SIGKILL and measures:
#
#   1. recovery speed   kill -> every tablet served again (no recovery left
#                       in the coordinator's map, no tablet of the dead
#                       server, and a read of one of its keys answered), with
#                       detection (kill -> map says down) and each recovery
#                       master's replica collection, replay and
#                       re-replication (from the servers' STATS); GB/s
#                       (key+value bytes / total) against the 1 GB/s target,
#                       and the time ratio against the size ratio (linear?)
#   2. impact           (--impact-runs, default 1) a run at 1 GB (--quick:
#                       128 MB) with closed-loop clients on the OTHER
#                       masters' keys (95% read, 5% write): throughput and
#                       p99 before the kill vs during the recovery (target:
#                       >= 70% of the throughput kept)
#   3. availability     in every run, a client reading one of the victim's
#                       keys in a loop: the longest time between two
#                       successful reads around the kill
#
# Every run also reads back a sample of the victim's keys (every 1000th)
# and counts any that are missing or wrong.
#
# Results: the tables on stdout (and in --out with .txt), one JSON object
# per run and per size (medians) in --out. Every phase of every run is
# bounded (--step-timeout), the whole benchmark by --total-timeout; the
# benchmark stops its own processes by PID; if it is itself stopped, this
# script stops the cluster processes it had started (PIDs listed in each
# run's directory, checked against their command line) and nothing else.
#
# Usage: bench/recovery.sh [--quick] [options]   (see --help)

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

SIZES="512,1024,2048"  # MB of object data on the victim
RUNS=3                 # runs per size (medians)
IMPACT_RUNS=1          # extra runs with load on the other masters
IMPACT_SIZE=1024       # MB of those runs
STEP_TIMEOUT=240       # seconds any phase of a run may take
TOTAL_TIMEOUT=1500     # seconds for the whole benchmark
OUT=""
WORKDIR_BASE=""

usage() {
    cat <<EOF
Usage: bench/recovery.sh [--quick] [options]

  --quick               64 and 128 MB, 1 run each, impact at 128 MB
                        (about 3 minutes with the build done)
  --sizes LIST          MB of object data on the victim (default $SIZES)
  --runs N              runs per size; the report gives medians (default $RUNS)
  --impact-runs N       runs with clients on the other masters (default $IMPACT_RUNS)
  --impact-size MB      size of those runs (default $IMPACT_SIZE)
  --step-timeout SECS   limit of each phase of a run (default $STEP_TIMEOUT)
  --total-timeout SECS  limit of the whole benchmark (default $TOTAL_TIMEOUT)
  --workdir DIR         where the runs' data go (default: a new temporary
                        directory; 2 GB runs need about 12 GB of disk)
  --out FILE            JSON results (default bench/results/recovery-<time>.json)

The full run takes about 15 minutes on 2 cores and needs about 16 GB of
free memory at 2 GB (every recovery master currently reads the whole
dead log into memory).
EOF
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) SIZES="64,128"; RUNS=1; IMPACT_RUNS=1; IMPACT_SIZE=128; STEP_TIMEOUT=60; TOTAL_TIMEOUT=300; shift ;;
        --sizes) SIZES="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --impact-runs) IMPACT_RUNS="$2"; shift 2 ;;
        --impact-size) IMPACT_SIZE="$2"; shift 2 ;;
        --step-timeout) STEP_TIMEOUT="$2"; shift 2 ;;
        --total-timeout) TOTAL_TIMEOUT="$2"; shift 2 ;;
        --workdir) WORKDIR_BASE="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "recovery.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done

log() { echo "[recovery $(date -u +%H:%M:%S)] $*" >&2; }

mkdir -p "$ROOT/bench/results"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="${OUT:-$ROOT/bench/results/recovery-$STAMP.json}"
: >"$OUT"
if [[ -n "$WORKDIR_BASE" ]]; then
    mkdir -p "$WORKDIR_BASE"
    WORK="$(mktemp -d "$WORKDIR_BASE/shoal-recovery.XXXXXX")"
else
    WORK="$(mktemp -d -t shoal-recovery.XXXXXX)"
fi

BENCH_PID=""
cleanup() {
    # The benchmark, if it still runs (it stops its cluster itself).
    if [[ -n "$BENCH_PID" ]] && kill -0 "$BENCH_PID" 2>/dev/null; then
        kill -INT "$BENCH_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$BENCH_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$BENCH_PID" 2>/dev/null || true
    fi
    # Cluster processes it started and could not stop (it was killed): only
    # PIDs it listed whose command line still names this work directory.
    local f pid
    for f in "$WORK"/*/pids; do
        [[ -f "$f" ]] || continue
        while read -r pid; do
            [[ "$pid" =~ ^[0-9]+$ ]] || continue
            if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$WORK/"; then
                kill -9 "$pid" 2>/dev/null || true
            fi
        done <"$f"
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building Shoal (release)"
(cd "$ROOT" && timeout 1800 cargo build --release -q -p shoal)
SHOAL="$ROOT/target/release/shoal"

log "sizes $SIZES MB, $RUNS run(s) each, $IMPACT_RUNS impact run(s) at $IMPACT_SIZE MB; data under $WORK"
set +e
timeout --signal=INT --kill-after=30 "$TOTAL_TIMEOUT" \
    "$SHOAL" bench recovery \
    --sizes "$SIZES" --runs "$RUNS" \
    --impact-runs "$IMPACT_RUNS" --impact-size "$IMPACT_SIZE" \
    --servers 4 --replicas 2 --value-size 100 \
    --timeout-secs "$STEP_TIMEOUT" --root "$WORK" \
    --json-out "$OUT" >"$WORK/tables.txt" &
BENCH_PID=$!
wait "$BENCH_PID"
STATUS=$?
BENCH_PID=""
set -e

cat "$WORK/tables.txt"
cp "$WORK/tables.txt" "${OUT%.json}.txt"
log "results: $OUT (tables: ${OUT%.json}.txt)"
case "$STATUS" in
    0) ;;
    124) log "the benchmark did not finish within $TOTAL_TIMEOUT s"; exit 1 ;;
    *) log "the benchmark reported failed runs (exit $STATUS)"; exit 1 ;;
esac
