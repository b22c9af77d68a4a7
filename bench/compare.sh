#!/usr/bin/env bash
# Shoal against Redis and memcached on this machine, in one run.
#
# Installs redis-server, redis-tools and memcached from Debian's packages if
# they are missing, builds Shoal in release mode, starts each store on
# 127.0.0.1 (free ports, persistence off) and runs the same clients against
# each:
#
#   throughput  redis-benchmark -t set,get -d 100 -r KEYS -n REQUESTS -c 50,
#               without pipelining and with -P 16, against Redis and Shoal's
#               RESP port, with the server's CPU time per million requests
#   ycsb        shoal bench ycsb, workloads A, B, C, 100-byte values,
#               Zipfian, against Shoal native, Shoal RESP, Redis RESP and
#               memcached
#   latency     one client, one request at a time: redis-benchmark -c 1
#               (Redis, Shoal RESP), shoal bench ycsb --threads 1
#               --pipeline 1 (Shoal native, Shoal RESP, Redis RESP)
#   memcached   shoal bench ycsb --protocol memcached (memcached's text
#               protocol, get/set), workloads A, B, C, Zipfian, the same
#               client and keys against Shoal's memcached port and a real
#               memcached, one request at a time per thread (--pipeline 1)
#               and pipelined (--pipeline 16), the two stores alternating
#   cache       a cache with expiry: CACHE_KEYS keys with 100-byte values
#               written with a time to live (SET EX, memcached exptime),
#               30% of them (record numbers ending in 00-29) for
#               CACHE_SHORT_TTL seconds and the rest for an hour; once the
#               short ones have expired, workload B (95% GET, 5% SET with
#               the same rule, uniform keys) for CACHE_SECS, so that about
#               30% of the keys are expired at any time. Shoal (RESP port,
#               --eviction oldest), Redis and memcached, each in a fresh
#               process per run, the order alternating: throughput, and RSS
#               growth per live key (the 70% with an hour to live)
#   memory      MEMORY_KEYS keys with 100-byte values loaded into a fresh
#               process of each store: RSS per object and bytes per object
#               beyond key and value (RSS growth from /proc/<pid>/status,
#               plus Shoal's hash table, resident from the start)
#
# Throughput and latency steps run --runs times; the summary gives medians.
# Every step runs under `timeout`; the script kills only the processes it
# started, by PID. Results: a table on stdout and JSON in --out.
#
# Usage: bench/compare.sh [--quick] [options]   (see --help)

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Scale (the full run's defaults; --quick lowers them all).
KEYS=1000000            # redis-benchmark -r: key space
REQUESTS=2000000        # redis-benchmark -n per test (set and get each)
CLIENTS=50              # redis-benchmark -c
YCSB_RECORDS=1000000    # shoal bench ycsb --records
YCSB_OPS=1000000        # shoal bench ycsb --operations per workload
YCSB_THREADS=4
LATENCY_REQUESTS=100000 # redis-benchmark -c 1 -n, and ycsb ops at 1x1
MEMORY_KEYS=1000000,10000000 # keys loaded for the memory step (comma-separated list)
CACHE_KEYS=1000000      # keys of the cache step
CACHE_SHORT_TTL=5       # seconds the short-lived 30% of them live
CACHE_SECS=20           # seconds of the cache step's workload
RUNS=3                  # repetitions of throughput and latency steps
STEP_TIMEOUT=600        # seconds any one step may take
ONLY="throughput,ycsb,memcached,memory,cache" # sections to run
OUT=""

usage() {
    cat <<EOF
Usage: bench/compare.sh [--quick] [options]

  --quick                small counts for a smoke run (about a minute)
  --keys N               redis-benchmark key space, -r (default $KEYS)
  --requests N           redis-benchmark requests per test, -n (default $REQUESTS)
  --clients N            redis-benchmark connections, -c (default $CLIENTS)
  --ycsb-records N       records for shoal bench ycsb (default $YCSB_RECORDS)
  --ycsb-ops N           operations per ycsb workload (default $YCSB_OPS)
  --ycsb-threads N       ycsb client threads (default $YCSB_THREADS)
  --latency-requests N   requests of the one-client latency runs (default $LATENCY_REQUESTS)
  --memory-keys N[,N..]  keys loaded for the memory step (default $MEMORY_KEYS)
  --cache-keys N         keys of the cache step (default $CACHE_KEYS)
  --cache-secs N         seconds of the cache step's workload (default $CACHE_SECS)
  --runs N               repetitions of throughput, latency and cache steps (default $RUNS)
  --step-timeout SECS    limit of each step (default $STEP_TIMEOUT)
  --only LIST            sections to run, of throughput,ycsb,memcached,memory,cache
                         (default all)
  --out FILE             JSON results (default bench/results/compare-<time>.json)
EOF
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick)
            KEYS=10000; REQUESTS=20000; YCSB_RECORDS=10000; YCSB_OPS=20000
            LATENCY_REQUESTS=5000; MEMORY_KEYS=20000; RUNS=1; STEP_TIMEOUT=120
            CACHE_KEYS=20000; CACHE_SHORT_TTL=2; CACHE_SECS=3
            shift ;;
        --keys) KEYS="$2"; shift 2 ;;
        --requests) REQUESTS="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --ycsb-records) YCSB_RECORDS="$2"; shift 2 ;;
        --ycsb-ops) YCSB_OPS="$2"; shift 2 ;;
        --ycsb-threads) YCSB_THREADS="$2"; shift 2 ;;
        --latency-requests) LATENCY_REQUESTS="$2"; shift 2 ;;
        --memory-keys) MEMORY_KEYS="$2"; shift 2 ;;
        --cache-keys) CACHE_KEYS="$2"; shift 2 ;;
        --cache-secs) CACHE_SECS="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --step-timeout) STEP_TIMEOUT="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "compare.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done

mkdir -p "$ROOT/bench/results"
OUT="${OUT:-$ROOT/bench/results/compare-$(date -u +%Y%m%dT%H%M%SZ).json}"
WORK="$(mktemp -d)"
RECORDS="$WORK/records.jsonl"   # one JSON object per measurement
: >"$RECORDS"

# want SECTION: whether --only includes it.
want() { [[ ",$ONLY," == *",$1,"* ]]; }

log() { echo "[compare $(date -u +%H:%M:%S)] $*" >&2; }

# --- processes we start, and only those, are stopped by PID ------------------

PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        # Bounded wait: SIGKILL what is still there after 5 s.
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

stop() {
    local pid="$1"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
}

# free_port, wait_port
source "$ROOT/bench/lib.sh"

# CPU seconds (user + system) a process has used.
cpu_secs() {
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat"
}

rss_kib() {
    awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

# Appends one measurement: record key=value ... (numbers stay numbers).
record() {
    python3 - "$@" >>"$RECORDS" <<'EOF'
import json, sys
out = {}
for kv in sys.argv[1:]:
    k, v = kv.split("=", 1)
    try:
        out[k] = int(v)
    except ValueError:
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = v
print(json.dumps(out))
EOF
}

# --- install, build, start --------------------------------------------------

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null || ! command -v memcached >/dev/null; then
    log "installing redis-server, redis-tools and memcached"
    SUDO=""
    [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
    timeout "$STEP_TIMEOUT" $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive timeout "$STEP_TIMEOUT" $SUDO apt-get install -y -q redis-server redis-tools memcached
fi

log "building Shoal (release)"
(cd "$ROOT" && timeout 1800 cargo build --release -q -p shoal)
SHOAL="$ROOT/target/release/shoal"

# start_shoal MEMORY [FLAGS...]: a server with MEMORY for objects (e.g. 2GiB).
start_shoal() {
    local memory="$1"; shift
    SHOAL_NATIVE=$(free_port); SHOAL_RESP=$(free_port); SHOAL_MC=$(free_port)
    "$SHOAL" server --listen 127.0.0.1 --native-port "$SHOAL_NATIVE" --resp-port "$SHOAL_RESP" \
        --memcached-port "$SHOAL_MC" --memory "$memory" --log-level warn "$@" >"$WORK/shoal.log" 2>&1 &
    SHOAL_PID=$!; PIDS+=("$SHOAL_PID")
    wait_port "$SHOAL_NATIVE" shoal; wait_port "$SHOAL_RESP" shoal; wait_port "$SHOAL_MC" shoal
}

start_redis() {
    REDIS_PORT=$(free_port)
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
        --logfile "$WORK/redis.log" &
    REDIS_PID=$!; PIDS+=("$REDIS_PID")
    wait_port "$REDIS_PORT" redis-server
}

start_memcached() {
    MEMCACHED_PORT=$(free_port)
    memcached -l 127.0.0.1 -p "$MEMCACHED_PORT" -U 0 -m 8192 -u "$(id -un)" >"$WORK/memcached.log" 2>&1 &
    MEMCACHED_PID=$!; PIDS+=("$MEMCACHED_PID")
    wait_port "$MEMCACHED_PORT" memcached
}

start_shoal 4GiB; start_redis; start_memcached
log "shoal pid $SHOAL_PID (native $SHOAL_NATIVE, resp $SHOAL_RESP, memcached $SHOAL_MC); redis pid $REDIS_PID ($REDIS_PORT); memcached pid $MEMCACHED_PID ($MEMCACHED_PORT)"

# --- redis-benchmark --------------------------------------------------------

# redis_benchmark STEP STORE PORT PID RUN ARGS...: one redis-benchmark run,
# one record per test with the server's CPU seconds per million requests
# (the run's CPU time over all its tests' requests).
redis_benchmark() {
    local step="$1" store="$2" port="$3" pid="$4" run="$5"; shift 5
    local before after csv
    before=$(cpu_secs "$pid")
    if ! csv=$(timeout "$STEP_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$port" --csv "$@"); then
        log "FAILED: redis-benchmark $* against $store"
        record step="$step" store="$store" run="$run" failed="redis-benchmark $*"
        return 0
    fi
    after=$(cpu_secs "$pid")
    python3 - "$step" "$store" "$run" "$before" "$after" "$*" "$csv" >>"$RECORDS" <<'EOF'
import csv, io, json, sys
step, store, run, before, after, args, text = sys.argv[1:]
rows = list(csv.DictReader(io.StringIO(text)))
if not rows:
    sys.exit("redis-benchmark printed no results")
n = int(args.split("-n ")[1].split()[0])
cpu = float(after) - float(before)
for r in rows:
    print(json.dumps({
        "step": step, "store": store, "run": int(run), "test": r["test"], "args": args,
        "ops_per_sec": float(r["rps"]), "avg_ms": float(r["avg_latency_ms"]),
        "p50_ms": float(r["p50_latency_ms"]), "p99_ms": float(r["p99_latency_ms"]),
        "max_ms": float(r["max_latency_ms"]),
        "server_cpu_secs_per_million": cpu / (n * len(rows) / 1e6),
    }))
EOF
}

for run in $(seq "$RUNS"); do
    want throughput || break
    for pipe in 1 16; do
        log "redis-benchmark -P $pipe, run $run: Redis, Shoal RESP"
        redis_benchmark "throughput_p$pipe" redis "$REDIS_PORT" "$REDIS_PID" "$run" \
            -t set,get -d 100 -r "$KEYS" -n "$REQUESTS" -c "$CLIENTS" -P "$pipe"
        redis_benchmark "throughput_p$pipe" shoal-resp "$SHOAL_RESP" "$SHOAL_PID" "$run" \
            -t set,get -d 100 -r "$KEYS" -n "$REQUESTS" -c "$CLIENTS" -P "$pipe"
    done
    log "redis-benchmark -c 1, run $run: Redis, Shoal RESP"
    redis_benchmark latency redis "$REDIS_PORT" "$REDIS_PID" "$run" -c 1 -n "$LATENCY_REQUESTS" -t get,set
    redis_benchmark latency shoal-resp "$SHOAL_RESP" "$SHOAL_PID" "$run" -c 1 -n "$LATENCY_REQUESTS" -t get,set
done

# --- shoal bench ycsb -------------------------------------------------------

# ycsb STEP STORE PROTOCOL ADDR PID RUN ARGS...: one ycsb run, its JSON lines
# tagged, with the server's CPU seconds per million operations.
ycsb() {
    local step="$1" store="$2" protocol="$3" addr="$4" pid="$5" run="$6"; shift 6
    local before after out
    before=$(cpu_secs "$pid")
    if ! out=$(timeout "$STEP_TIMEOUT" "$SHOAL" bench ycsb --json --protocol "$protocol" --server "$addr" \
        --value-size 100 "$@" 2>>"$WORK/ycsb.log"); then
        log "FAILED or reported errors: shoal bench ycsb $* against $store (see the error fields)"
    fi
    after=$(cpu_secs "$pid")
    python3 - "$step" "$store" "$run" "$before" "$after" "$out" >>"$RECORDS" <<'EOF'
import json, sys
step, store, run, before, after, text = sys.argv[1:]
lines = [json.loads(l) for l in text.splitlines() if l.strip()]
ops = sum(l["ops"] for l in lines if l["op"] == "all")
cpu = float(after) - float(before)
for l in lines:
    l.update(step=step, store=store, run=int(run))
    if l["op"] == "all" and ops:
        l["server_cpu_secs_per_million"] = cpu / (ops / 1e6)
    if l.get("error"):
        print(f"ycsb {store} {l['workload']} {l['op']}: {l['error']}", file=sys.stderr)
    print(json.dumps(l))
EOF
}

YCSB_COMMON=(--records "$YCSB_RECORDS" --operations "$YCSB_OPS" --key-dist zipfian)
for target in "shoal-native native 127.0.0.1:$SHOAL_NATIVE $SHOAL_PID" \
              "shoal-resp resp 127.0.0.1:$SHOAL_RESP $SHOAL_PID" \
              "redis resp 127.0.0.1:$REDIS_PORT $REDIS_PID" \
              "memcached memcached 127.0.0.1:$MEMCACHED_PORT $MEMCACHED_PID"; do
    read -r store protocol addr pid <<<"$target"
    want ycsb || break
    log "ycsb load $YCSB_RECORDS records: $store"
    ycsb ycsb_load "$store" "$protocol" "$addr" "$pid" 0 --records "$YCSB_RECORDS" --load --workload C --operations 1 \
        --threads "$YCSB_THREADS"
    for run in $(seq "$RUNS"); do
        log "ycsb A,B,C ($YCSB_THREADS threads), run $run: $store"
        ycsb ycsb "$store" "$protocol" "$addr" "$pid" "$run" "${YCSB_COMMON[@]}" --workload A,B,C \
            --threads "$YCSB_THREADS" --pipeline 1
        if [[ "$store" != memcached ]]; then
            log "ycsb one request at a time, run $run: $store"
            ycsb ycsb_latency "$store" "$protocol" "$addr" "$pid" "$run" --records "$YCSB_RECORDS" \
                --operations "$LATENCY_REQUESTS" --key-dist zipfian --workload C,W --threads 1 --pipeline 1
        fi
    done
done

# --- memcached's protocol: Shoal's memcached port against memcached ----------

# The same client (shoal bench ycsb's memcached text-protocol client), keys
# and values against both; the order of the two stores alternates by run.
if want memcached; then
    MC_TARGETS=("shoal-memcached 127.0.0.1:$SHOAL_MC $SHOAL_PID" "memcached 127.0.0.1:$MEMCACHED_PORT $MEMCACHED_PID")
    for target in "${MC_TARGETS[@]}"; do
        read -r store addr pid <<<"$target"
        log "memcached protocol: load $YCSB_RECORDS records: $store"
        ycsb mc_load "$store" memcached "$addr" "$pid" 0 --records "$YCSB_RECORDS" --load --workload C \
            --operations 1 --threads "$YCSB_THREADS" --pipeline 64
    done
    for run in $(seq "$RUNS"); do
        order=("${MC_TARGETS[@]}")
        (( run % 2 == 0 )) && order=("${MC_TARGETS[1]}" "${MC_TARGETS[0]}")
        for pipe in 1 16; do
            for target in "${order[@]}"; do
                read -r store addr pid <<<"$target"
                log "memcached protocol A,B,C ($YCSB_THREADS threads, pipeline $pipe), run $run: $store"
                ycsb "mc_p$pipe" "$store" memcached "$addr" "$pid" "$run" "${YCSB_COMMON[@]}" --workload A,B,C \
                    --threads "$YCSB_THREADS" --pipeline "$pipe"
            done
        done
    done
fi

# --- memory -----------------------------------------------------------------

stop "$SHOAL_PID"; stop "$REDIS_PID"; stop "$MEMCACHED_PID"
IFS=',' read -r -a MEMORY_COUNTS <<<"$MEMORY_KEYS"
want memory || MEMORY_COUNTS=()
for keys in "${MEMORY_COUNTS[@]}"; do
    KEY_BYTES=$(python3 - "$keys" <<'EOF'
import sys
n = int(sys.argv[1])
def fnv(v):
    h = 0xcbf29ce484222325
    for b in v.to_bytes(8, "little"):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h
print(sum(len("user%d" % fnv(i)) for i in range(n)))
EOF
)
    for store in shoal redis memcached; do
        case "$store" in
            # Memory for objects: 256 bytes per object, about 1.7 times
            # what they take, as an operator would size it. The hash table
            # (a 16th of that) is resident from the start, so it is added
            # to the growth below.
            shoal) start_shoal "$(( (keys * 256 + 1048575) / 1048576 ))MiB"; pid=$SHOAL_PID; protocol=native; addr="127.0.0.1:$SHOAL_NATIVE" ;;
            redis) start_redis; pid=$REDIS_PID; protocol=resp; addr="127.0.0.1:$REDIS_PORT" ;;
            memcached) start_memcached; pid=$MEMCACHED_PID; protocol=memcached; addr="127.0.0.1:$MEMCACHED_PORT" ;;
        esac
        sleep 0.5
        before=$(rss_kib "$pid")
        log "memory: loading $keys keys into $store"
        timeout "$STEP_TIMEOUT" "$SHOAL" bench ycsb --json --protocol "$protocol" --server "$addr" --records "$keys" \
            --load --workload C --operations 1 --threads 2 --pipeline 256 --value-size 100 >/dev/null 2>>"$WORK/ycsb.log"
        sleep 1
        after=$(rss_kib "$pid")
        # Memory the store holds from the start for its index (Shoal's hash
        # table; Redis and memcached grow theirs as keys come, so it is in
        # their growth).
        preallocated=0
        if [[ "$store" == shoal ]]; then
            preallocated=$("$SHOAL" stats --server "$addr" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["hash_table_bytes"])')
        fi
        record step=memory store="$store" keys="$keys" key_bytes="$KEY_BYTES" value_bytes=100 \
            rss_before_kib="$before" rss_after_kib="$after" preallocated_bytes="$preallocated"
        stop "$pid"
    done
done

# --- cache: SET EX and GET with 30% of the keys expired -----------------------

CACHE_STORES=(shoal redis memcached)
for run in $(seq "$RUNS"); do
    want cache || break
    order=("${CACHE_STORES[@]}")
    (( run % 2 == 0 )) && order=(memcached redis shoal)
    for store in "${order[@]}"; do
        case "$store" in
            # Memory sized as in the memory step (256 bytes per key, at
            # least 64 MiB, the smallest that holds a few segments), in
            # cache mode as a cache would run.
            shoal) mib=$(( (CACHE_KEYS * 256 + 1048575) / 1048576 )); (( mib < 64 )) && mib=64
                   start_shoal "${mib}MiB" --eviction oldest
                   pid=$SHOAL_PID; protocol=resp; addr="127.0.0.1:$SHOAL_RESP" ;;
            redis) start_redis; pid=$REDIS_PID; protocol=resp; addr="127.0.0.1:$REDIS_PORT" ;;
            memcached) start_memcached; pid=$MEMCACHED_PID; protocol=memcached; addr="127.0.0.1:$MEMCACHED_PORT" ;;
        esac
        sleep 0.5
        before=$(rss_kib "$pid")
        ttl=(--ttl 3600 --short-ttl "$CACHE_SHORT_TTL" --short-ttl-percent 30)
        log "cache, run $run: loading $CACHE_KEYS keys with expiry into $store"
        ycsb cache_load "$store" "$protocol" "$addr" "$pid" "$run" --records "$CACHE_KEYS" --load --workload C \
            --operations 1 --threads 2 --pipeline 64 "${ttl[@]}"
        sleep $(( CACHE_SHORT_TTL + 1 ))
        log "cache, run $run: workload B for ${CACHE_SECS}s against $store"
        ycsb cache "$store" "$protocol" "$addr" "$pid" "$run" --records "$CACHE_KEYS" --workload B \
            --key-dist uniform --duration "$CACHE_SECS" --operations 1000000000 --threads 4 --pipeline 8 "${ttl[@]}"
        after=$(rss_kib "$pid")
        preallocated=0
        if [[ "$store" == shoal ]]; then
            preallocated=$("$SHOAL" stats --server "127.0.0.1:$SHOAL_NATIVE" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["hash_table_bytes"])')
        fi
        record step=cache_memory store="$store" run="$run" keys="$CACHE_KEYS" live_keys=$(( CACHE_KEYS * 70 / 100 )) \
            rss_before_kib="$before" rss_after_kib="$after" preallocated_bytes="$preallocated"
        stop "$pid"
    done
done

# --- summary ----------------------------------------------------------------

python3 - "$RECORDS" "$OUT" "$RUNS" <<'EOF'
import json, statistics, sys, platform, os
records = [json.loads(l) for l in open(sys.argv[1])]
out, runs = sys.argv[2], int(sys.argv[3])
med = lambda xs: statistics.median(xs) if xs else float("nan")

def pick(step, **kw):
    return [r for r in records if r.get("step") == step and all(r.get(k) == v for k, v in kw.items())]

summary = []
print(f"\nShoal vs Redis vs memcached on {platform.node()}, {os.cpu_count()} cores; medians of {runs} run(s)\n")
print("redis-benchmark (requests/s, p99 ms, server CPU s per million requests)")
print(f"{'step':<16}{'test':<6}{'store':<12}{'ops/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'cpu s/M':>9}")
for step in ["throughput_p1", "throughput_p16", "latency"]:
    for test in ["SET", "GET"]:
        row = {}
        for store in ["redis", "shoal-resp"]:
            rs = pick(step, store=store, test=test)
            if not rs:
                continue
            s = {k: med([r[k] for r in rs]) for k in ["ops_per_sec", "p50_ms", "p99_ms", "server_cpu_secs_per_million"]}
            row[store] = s
            summary.append(dict(kind="redis-benchmark", step=step, test=test, store=store, **s))
            print(f"{step:<16}{test:<6}{store:<12}{s['ops_per_sec']:>12.0f}{s['p50_ms']:>9.3f}{s['p99_ms']:>9.3f}{s['server_cpu_secs_per_million']:>9.2f}")
        if "redis" in row and "shoal-resp" in row:
            ratio = row["shoal-resp"]["ops_per_sec"] / row["redis"]["ops_per_sec"]
            summary.append(dict(kind="ratio", step=step, test=test, shoal_over_redis_ops=ratio))
            print(f"{'':<16}{test:<6}{'shoal/redis':<12}{ratio:>11.2f}x")

print("\nshoal bench ycsb (zipfian, 100-byte values; ops/s, p50/p99/p99.9 us, server CPU s per million ops)")
print(f"{'step':<14}{'wl':<4}{'store':<14}{'threads':>8}{'ops/s':>11}{'p50':>8}{'p99':>8}{'p99.9':>8}{'cpu s/M':>9}")
for step in ["ycsb", "ycsb_latency"]:
    for wl in ["A", "B", "C", "W"]:
        for store in ["shoal-native", "shoal-resp", "redis", "memcached"]:
            rs = pick(step, store=store, workload=wl, op="all")
            if not rs:
                continue
            s = {k: med([r.get(k, float("nan")) for r in rs]) for k in ["ops_per_sec", "p50_us", "p99_us", "p999_us", "server_cpu_secs_per_million"]}
            s["errors"] = sum(r["errors"] for r in rs)
            summary.append(dict(kind="ycsb", step=step, workload=wl, store=store, threads=rs[0]["threads"], pipeline=rs[0]["pipeline"], **s))
            print(f"{step:<14}{wl:<4}{store:<14}{rs[0]['threads']:>8}{s['ops_per_sec']:>11.0f}{s['p50_us']:>8.1f}{s['p99_us']:>8.1f}{s['p999_us']:>8.1f}{s['server_cpu_secs_per_million']:>9.2f}")

print("\nmemcached's protocol: shoal bench ycsb --protocol memcached (zipfian, 100-byte values; ops/s, p50/p99 us, server CPU s per million ops)")
print(f"{'step':<8}{'wl':<4}{'store':<17}{'threads':>8}{'ops/s':>11}{'p50':>8}{'p99':>8}{'cpu s/M':>9}")
for step in ["mc_p1", "mc_p16"]:
    for wl in ["A", "B", "C"]:
        row = {}
        for store in ["shoal-memcached", "memcached"]:
            rs = pick(step, store=store, workload=wl, op="all")
            if not rs:
                continue
            s = {k: med([r.get(k, float("nan")) for r in rs]) for k in ["ops_per_sec", "p50_us", "p99_us", "server_cpu_secs_per_million"]}
            s["errors"] = sum(r["errors"] for r in rs)
            s["runs"] = len(rs)
            row[store] = s
            summary.append(dict(kind="memcached", step=step, workload=wl, store=store, threads=rs[0]["threads"], pipeline=rs[0]["pipeline"], **s))
            print(f"{step:<8}{wl:<4}{store:<17}{rs[0]['threads']:>8}{s['ops_per_sec']:>11.0f}{s['p50_us']:>8.1f}{s['p99_us']:>8.1f}{s['server_cpu_secs_per_million']:>9.2f}")
        if len(row) == 2:
            ratio = row["shoal-memcached"]["ops_per_sec"] / row["memcached"]["ops_per_sec"]
            summary.append(dict(kind="ratio", step=step, workload=wl, shoal_over_memcached_ops=ratio))
            print(f"{'':<8}{wl:<4}{'shoal/memcached':<17}{'':>8}{ratio:>10.2f}x")

print("\nmemory (fresh process per store; RSS growth over the load)")
print(f"{'store':<11}{'keys':>10}{'RSS MiB':>9}{'B/object':>10}{'beyond k+v':>11}")
for r in pick("memory"):
    grown = (r["rss_after_kib"] - r["rss_before_kib"]) * 1024 + r.get("preallocated_bytes", 0)
    per = grown / r["keys"]
    beyond = per - (r["key_bytes"] / r["keys"] + r["value_bytes"])
    s = dict(kind="memory", store=r["store"], keys=r["keys"], rss_after_kib=r["rss_after_kib"],
             rss_growth_bytes=grown, bytes_per_object=per, bytes_beyond_key_value=beyond,
             avg_key_bytes=r["key_bytes"] / r["keys"], value_bytes=r["value_bytes"])
    summary.append(s)
    print(f"{r['store']:<11}{r['keys']:>10}{r['rss_after_kib']/1024:>9.1f}{per:>10.1f}{beyond:>11.1f}")

print("\ncache with expiry: SET EX / GET, 30% of the keys expired (workload B, uniform; medians over runs)")
print(f"{'store':<11}{'ops/s':>11}{'p99 us':>9}{'live keys':>11}{'RSS MiB':>9}{'B/live key':>11}")
cache_rows = {}
for store in ["shoal", "redis", "memcached"]:
    ops = [r for r in pick("cache", store=store, workload="B", op="all")]
    mem = pick("cache_memory", store=store)
    if not ops or not mem:
        continue
    per = med([((m["rss_after_kib"] - m["rss_before_kib"]) * 1024 + m["preallocated_bytes"]) / m["live_keys"] for m in mem])
    s = dict(kind="cache", store=store, ops_per_sec=med([r["ops_per_sec"] for r in ops]),
             p99_us=med([r["p99_us"] for r in ops]), errors=sum(r["errors"] for r in ops),
             live_keys=mem[0]["live_keys"], rss_after_kib=med([m["rss_after_kib"] for m in mem]),
             bytes_per_live_key=per, runs=len(mem))
    cache_rows[store] = s
    summary.append(s)
    print(f"{store:<11}{s['ops_per_sec']:>11.0f}{s['p99_us']:>9.1f}{s['live_keys']:>11}{s['rss_after_kib']/1024:>9.1f}{per:>11.1f}")
for peer in ["redis", "memcached"]:
    if "shoal" in cache_rows and peer in cache_rows:
        a, b = cache_rows["shoal"], cache_rows[peer]
        r = dict(kind="ratio", step="cache", peer=peer, shoal_over_peer_ops=a["ops_per_sec"] / b["ops_per_sec"],
                 shoal_over_peer_bytes_per_live_key=a["bytes_per_live_key"] / b["bytes_per_live_key"])
        summary.append(r)
        print(f"shoal/{peer:<10}{r['shoal_over_peer_ops']:>6.2f}x ops/s, {r['shoal_over_peer_bytes_per_live_key']:.2f}x bytes per live key")

json.dump({"host": platform.node(), "cores": os.cpu_count(), "runs": runs, "summary": summary, "records": records},
          open(out, "w"), indent=1)
print(f"\nJSON: {out}")
EOF
