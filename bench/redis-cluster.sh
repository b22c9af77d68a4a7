#!/usr/bin/env bash
# Shoal in Redis Cluster mode against one Redis, with redis-benchmark.
#
# Starts one redis-server (persistence off) and a 4-server `shoal local`
# cluster in its default Redis Cluster mode (docs/redis-cluster.md), and
# runs the same redis-benchmark load against each, alternating the stores
# in every round: `redis-benchmark --cluster` against Shoal (it reads the
# slot map and sends each key to its master), plain `redis-benchmark`
# against Redis. SET and GET, 100-byte values, -r KEYS, -c CLIENTS, without
# pipelining and with -P 16. Shoal runs with each replica count of
# --replicas (default 0 and 3: no durability, as this Redis, and Shoal's
# default). Afterwards every Shoal server's forwarded_requests must be 0.
#
# All processes share this machine's cores; the script kills only what it
# started, by PID. Results: a table of medians and Shoal/Redis ratios on
# stdout, every run as JSON in --out.
#
# Usage: bench/redis-cluster.sh [--quick] [--runs N] [--requests N]
#        [--keys N] [--clients N] [--replicas R[,R..]] [--out FILE]

set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS=3
REQUESTS=1000000
KEYS=1000000
CLIENTS=50
REPLICAS=0,3
STEP_TIMEOUT=600
OUT=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) RUNS=1; REQUESTS=50000; KEYS=10000; STEP_TIMEOUT=120; shift ;;
        --runs) RUNS="$2"; shift 2 ;;
        --requests) REQUESTS="$2"; shift 2 ;;
        --keys) KEYS="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --replicas) REPLICAS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "redis-cluster.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$ROOT/bench/results"
OUT="${OUT:-$ROOT/bench/results/redis-cluster-$(date -u +%Y%m%dT%H%M%SZ).json}"
WORK="$(mktemp -d)"
RECORDS="$WORK/records.jsonl"
: >"$RECORDS"
log() { echo "[redis-cluster $(date -u +%H:%M:%S)] $*" >&2; }

PIDS=()
stop() {
    local pid="$1"
    kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
}
cleanup() {
    for pid in "${PIDS[@]}"; do stop "$pid"; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
source "$ROOT/bench/lib.sh"

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
    log "installing redis-server and redis-tools"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server redis-tools
fi
SHOAL="${SHOAL:-}"
if [[ -z "$SHOAL" ]]; then
    log "building shoal (release)"
    (cd "$ROOT" && cargo build --release -q -p shoal)
    SHOAL="$ROOT/target/release/shoal"
fi

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!; PIDS+=("$REDIS_PID")
wait_port "$REDIS_PORT" redis-server

# start_shoal R: a 4-server cluster with R replicas; sets SHOAL_PID, SHOAL_PORTS.
start_shoal() {
    local r="$1" dir="$WORK/shoal-r$1"
    mkdir -p "$dir"
    "$SHOAL" local --servers 4 --replicas "$r" --root "$dir/data" --memory 1GiB --coordinator-port 0 \
        --native-port 0 --resp-port 0 --memcached-port 0 --backup-port 0 --log-level warn >"$dir/out" 2>&1 &
    SHOAL_PID=$!; PIDS+=("$SHOAL_PID")
    for _ in $(seq 600); do
        grep -qs "Shoal is running" "$dir/out" && break
        kill -0 "$SHOAL_PID" 2>/dev/null || break
        sleep 0.1
    done
    grep -qs "Shoal is running" "$dir/out" || { cat "$dir/out" >&2; log "shoal local did not start"; exit 1; }
    mapfile -t SHOAL_PORTS < <(awk '/^  server [0-9]+: native protocol/ { sub(",", "", $8); n = split($8, a, ":"); print a[n] }' "$dir/out")
}

# bench STORE R PIPE RUN ARGS...: one redis-benchmark run, one record per test.
bench() {
    local store="$1" r="$2" pipe="$3" run="$4"; shift 4
    local csv
    if ! csv=$(timeout "$STEP_TIMEOUT" redis-benchmark --csv -t set,get -d 100 -r "$KEYS" -n "$REQUESTS" \
        -c "$CLIENTS" -P "$pipe" "$@" 2>"$WORK/bench.err"); then
        log "FAILED: redis-benchmark $* against $store: $(tail -2 "$WORK/bench.err")"
        return 0
    fi
    python3 - "$store" "$r" "$pipe" "$run" "$csv" >>"$RECORDS" <<'PY'
import csv, io, json, sys
store, r, pipe, run, text = sys.argv[1:]
# --cluster prints the masters it found before the CSV.
text = text[text.find('"test"'):]
for row in csv.DictReader(io.StringIO(text)):
    print(json.dumps({"store": store, "replicas": int(r), "pipeline": int(pipe), "run": int(run),
                      "test": row["test"], "ops_per_sec": float(row["rps"]),
                      "p50_ms": float(row["p50_latency_ms"]), "p99_ms": float(row["p99_latency_ms"])}))
PY
}

IFS=',' read -r -a REPLICA_COUNTS <<<"$REPLICAS"
FORWARDED=()
for r in "${REPLICA_COUNTS[@]}"; do
    start_shoal "$r"
    log "shoal local, R=$r, Redis ports ${SHOAL_PORTS[*]}; redis on $REDIS_PORT"
    for run in $(seq "$RUNS"); do
        for pipe in 1 16; do
            # Alternate which store goes first.
            if (( run % 2 )); then order="redis shoal"; else order="shoal redis"; fi
            for store in $order; do
                log "run $run, -P $pipe: $store"
                if [[ $store == redis ]]; then
                    bench redis 0 "$pipe" "$run" -h 127.0.0.1 -p "$REDIS_PORT"
                else
                    bench shoal "$r" "$pipe" "$run" --cluster -h 127.0.0.1 -p "${SHOAL_PORTS[0]}"
                fi
            done
        done
    done
    fwd=0
    for p in "${SHOAL_PORTS[@]}"; do
        n=$(redis-cli -p "$p" info stats | tr -d '\r' | awk -F: '$1 == "forwarded_requests" { print $2 }')
        fwd=$((fwd + n))
    done
    FORWARDED+=("$r:$fwd")
    log "R=$r: forwarded_requests over the servers: $fwd"
    stop "$SHOAL_PID"
done

python3 - "$RECORDS" "$OUT" "$RUNS" "${FORWARDED[*]}" <<'PY'
import json, os, platform, statistics, sys
records = [json.loads(l) for l in open(sys.argv[1])]
out, runs, forwarded = sys.argv[2], int(sys.argv[3]), sys.argv[4]
med = statistics.median
print(f"\nredis-benchmark: Shoal (4 servers, --cluster) vs one Redis on {platform.node()}, "
      f"{os.cpu_count()} cores; medians of {runs} run(s)")
print(f"{'test':<5}{'-P':>4}{'store':>12}{'ops/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'vs redis':>10}")
summary = []
for pipe in sorted({r["pipeline"] for r in records}):
    for test in ["SET", "GET"]:
        base = [r for r in records if r["store"] == "redis" and r["pipeline"] == pipe and r["test"] == test]
        if not base:
            continue
        b = med([r["ops_per_sec"] for r in base])
        print(f"{test:<5}{pipe:>4}{'redis':>12}{b:>12.0f}{med([r['p50_ms'] for r in base]):>9.3f}{med([r['p99_ms'] for r in base]):>9.3f}")
        for rep in sorted({r["replicas"] for r in records if r["store"] == "shoal"}):
            rs = [r for r in records if r["store"] == "shoal" and r["replicas"] == rep and r["pipeline"] == pipe and r["test"] == test]
            if not rs:
                continue
            s = med([r["ops_per_sec"] for r in rs])
            name = f"shoal R={rep}"
            print(f"{test:<5}{pipe:>4}{name:>12}{s:>12.0f}{med([r['p50_ms'] for r in rs]):>9.3f}{med([r['p99_ms'] for r in rs]):>9.3f}{s / b:>9.2f}x")
            summary.append({"test": test, "pipeline": pipe, "replicas": rep, "shoal_ops": s, "redis_ops": b, "ratio": s / b})
print(f"forwarded requests (R:count): {forwarded}")
json.dump({"host": platform.node(), "runs": runs, "forwarded": forwarded, "summary": summary, "records": records},
          open(out, "w"), indent=1)
print(f"JSON: {out}")
PY
