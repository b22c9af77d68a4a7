#!/usr/bin/env bash
# YCSB's core workloads A-F against Shoal (native protocol, a `shoal local`
# cluster), Redis and memcached, through the same YCSB 0.17.0 client and the
# bindings of clients/ycsb (docs/ycsb.md), in one run.
#
# For each workload, the systems take turns (shoal, redis, memcached, then
# the next workload): each loads RECORDS records into a table of its own
# (usertable_<w>), runs OPS operations of the workload with THREADS threads,
# and the table is dropped (Redis FLUSHALL, memcached flush_all). memcached
# cannot scan, so workload E is not run on it. Every YCSB phase is bounded by
# YCSB's maxexecutiontime (--max-seconds) and by `timeout`. The script starts
# its own servers on free ports and stops them by PID.
#
# Results: a table on stdout, JSON in --out, a plot in --png (matplotlib,
# installed with pip if missing; without it the PNG is skipped).
#
# Usage: bench/ycsb.sh [options]   (see --help)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/clients/ycsb/lib.sh"

RECORDS=100000
OPS=100000
THREADS=4
WORKLOADS=a,b,c,d,e,f
SYSTEMS=shoal,redis,memcached
SERVERS=3
SHOAL_MEMORY=1GiB
MAX_SECONDS=120
OUT="$ROOT/docs/ycsb.json"
PNG="$ROOT/docs/ycsb.png"
BIN_ARG=""

usage() {
    cat <<USAGE
Usage: bench/ycsb.sh [options]

  --records N       records loaded per workload (default $RECORDS)
  --ops N           operations per workload run (default $OPS)
  --threads N       YCSB client threads (default $THREADS)
  --workloads LIST  comma-separated, of a,b,c,d,e,f (default $WORKLOADS)
  --systems LIST    comma-separated, of shoal,redis,memcached (default $SYSTEMS)
  --servers N       servers of the shoal local cluster (default $SERVERS)
  --shoal-memory S  memory per Shoal server (default $SHOAL_MEMORY)
  --max-seconds S   longest one YCSB phase may run (YCSB maxexecutiontime; default $MAX_SECONDS)
  --shoal-bin PATH  shoal binary (default \$SHOAL_BIN, target/release/shoal, target/debug/shoal)
  --out FILE        JSON results (default docs/ycsb.json)
  --png FILE        plot (default docs/ycsb.png)
USAGE
}

while [ $# -gt 0 ]; do
    case "$1" in
        --records) RECORDS="$2"; shift 2 ;;
        --ops) OPS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --workloads) WORKLOADS="$2"; shift 2 ;;
        --systems) SYSTEMS="$2"; shift 2 ;;
        --servers) SERVERS="$2"; shift 2 ;;
        --shoal-memory) SHOAL_MEMORY="$2"; shift 2 ;;
        --max-seconds) MAX_SECONDS="$2"; shift 2 ;;
        --shoal-bin) BIN_ARG="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --png) PNG="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done
for n in "$RECORDS" "$OPS" "$THREADS" "$SERVERS" "$MAX_SECONDS"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "counts must be positive integers (got $n)" >&2; exit 2; }
done
IFS=, read -r -a WL <<<"$WORKLOADS"
IFS=, read -r -a SYS <<<"$SYSTEMS"
for w in "${WL[@]}"; do [[ "$w" =~ ^[a-f]$ ]] || { echo "unknown workload $w" >&2; exit 2; }; done
for s in "${SYS[@]}"; do
    case "$s" in shoal|redis|memcached) ;; *) echo "unknown system $s" >&2; exit 2 ;; esac
done
has() { local x; for x in "${SYS[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }

# What the run needs, from Debian and PyPI.
need=()
has redis && ! command -v redis-server >/dev/null 2>&1 && need+=(redis-server)
has redis && ! command -v redis-cli >/dev/null 2>&1 && need+=(redis-tools)
has memcached && ! command -v memcached >/dev/null 2>&1 && need+=(memcached)
if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]} (Debian packages)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! python3 -c 'import matplotlib' >/dev/null 2>&1; then
    echo "installing matplotlib (pip) for the plot" >&2
    python3 -m pip install -q matplotlib >/dev/null 2>&1 \
        || python3 -m pip install -q --break-system-packages matplotlib >/dev/null 2>&1 \
        || echo "matplotlib could not be installed: no PNG" >&2
fi
BIN=""
has shoal && BIN=$(pick_shoal_bin "$BIN_ARG")
if [ ! -f "$YCSB_DIR/target/shoal-ycsb.jar" ] || [ -n "$(find "$YCSB_DIR/src" "$YCSB_DIR/pom.xml" -newer "$YCSB_DIR/target/shoal-ycsb.jar" 2>/dev/null | head -1)" ]; then
    SKIP_TESTS=1 "$YCSB_DIR/build.sh"
fi

work=$(mktemp -d)
SHOAL_PID=""; REDIS_PID=""; MC_PID=""
cleanup() {
    stop_pid "$SHOAL_PID" INT
    stop_pid "$REDIS_PID"
    stop_pid "$MC_PID"
    rm -rf "$work"
}
trap cleanup EXIT

if has shoal; then
    echo "starting shoal local ($SERVERS servers, $SHOAL_MEMORY each) with $BIN"
    start_shoal_local "$BIN" "$work/shoal" "$SERVERS" "$SHOAL_MEMORY"
fi
if has redis; then
    REDIS_PORT=$(free_port)
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
        --protected-mode no --logfile "$work/redis.log" &
    REDIS_PID=$!
fi
if has memcached; then
    MC_PORT=$(free_port)
    memcached -l 127.0.0.1 -p "$MC_PORT" -U 0 -m 4096 -t 2 -u "$(id -un)" >"$work/memcached.log" 2>&1 &
    MC_PID=$!
fi
wait_listening() {
    local port="$1" name="$2" i
    for i in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "$name did not listen on port $port within 10 s" >&2
    exit 1
}
has redis && wait_listening "$REDIS_PORT" redis-server
has memcached && wait_listening "$MC_PORT" memcached

db_args() {
    case "$1" in
        shoal) echo "-db shoal.ycsb.ShoalDB -p shoal.coordinator=$SHOAL_COORD" ;;
        redis) echo "-db shoal.ycsb.RedisDB -p redis.host=127.0.0.1 -p redis.port=$REDIS_PORT" ;;
        memcached) echo "-db shoal.ycsb.MemcachedDB -p memcached.hosts=127.0.0.1:$MC_PORT" ;;
    esac
}
drop_data() {
    case "$1" in
        shoal) "$BIN" drop-table "$2" --coordinator "$SHOAL_COORD" >/dev/null 2>&1 || true ;;
        redis) redis-cli -p "$REDIS_PORT" flushall >/dev/null ;;
        memcached) python3 -c 'import socket,sys; s=socket.create_connection(("127.0.0.1",int(sys.argv[1])),5); s.sendall(b"flush_all\r\n"); s.recv(64)' "$MC_PORT" ;;
    esac
}

manifest="$work/manifest.tsv"
: >"$manifest"
started=$(date +%s)
for w in "${WL[@]}"; do
    for s in "${SYS[@]}"; do
        if [ "$s" = memcached ] && [ "$w" = e ]; then
            printf '%s\t%s\t%s\t%s\n' "$s" "$w" skipped "memcached has no scan" >>"$manifest"
            continue
        fi
        table="usertable_$w"
        for phase in load run; do
            flag=-t; [ "$phase" = load ] && flag=-load
            out="$work/$s-$w-$phase.txt"
            echo "== workload $w, $s, $phase"
            # shellcheck disable=SC2046
            if ! timeout $((MAX_SECONDS + 90)) java -cp "$YCSB_DIR/target/shoal-ycsb.jar:$YCSB_DIR/target/lib/*" \
                site.ycsb.Client $flag $(db_args "$s") -P "$YCSB_DIR/workloads/workload$w" \
                -p table="$table" -p recordcount="$RECORDS" -p operationcount="$OPS" \
                -p maxexecutiontime="$MAX_SECONDS" -p exportfile="$out" -threads "$THREADS" \
                >"$work/$s-$w-$phase.log" 2>&1; then
                echo "YCSB $phase of workload $w on $s failed:" >&2
                tail -20 "$work/$s-$w-$phase.log" >&2
            fi
            printf '%s\t%s\t%s\t%s\n' "$s" "$w" "$phase" "$out" >>"$manifest"
        done
        drop_data "$s" "$table"
    done
done
elapsed=$(( $(date +%s) - started ))

mkdir -p "$(dirname "$OUT")" "$(dirname "$PNG")"
python3 "$ROOT/bench/ycsb_report.py" --manifest "$manifest" --out "$OUT" --png "$PNG" \
    --records "$RECORDS" --ops "$OPS" --threads "$THREADS" --servers "$SERVERS" \
    --shoal-memory "$SHOAL_MEMORY" --elapsed "$elapsed" --max-seconds "$MAX_SECONDS" \
    --shoal-version "$([ -n "$BIN" ] && "$BIN" --version 2>/dev/null || echo none)"
