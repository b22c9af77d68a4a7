#!/usr/bin/env bash
# DXRAM's small-object workloads (issue 18) over Shoal's chunks, Shoal's
# key-value tables and Redis, the same client threads against each:
#
#   fb-b    Facebook-B: 32-byte items, 95% get, 5% put
#   fb-f    Facebook-F: 64-byte items, 100% get
#   ycsb-a  YCSB-A: 1,000-byte items (10 x 100 B, written whole), 50% get, 50% put
#
# Starts a 4-server cluster (`shoal local`, every server a master and a
# backup, R replicas of every segment, the same for chunks and key-value
# tables) and one redis-server (defaults, persistence off: --save ''
# --appendonly no; a single process, no replicas) on free ports of
# 127.0.0.1. Then, ROUNDS times, for each workload, each system in turn
# (the order rotating by round) runs
#
#   shoal bench dxram --system chunks|kv|redis --workload W --items N ...
#
# which loads N items, runs the mix for SECS seconds (or OPS operations),
# one get or put at a time per client thread, items picked by YCSB's
# scrambled Zipfian (--key-dist), and drops them. Chunks are spread over 4
# chunk tables (one master each, item i in table i % 4): the stand-in for
# chunk-id ranges per server (docs/chunks.md, "DXRAM's workloads").
#
# Results: medians of the rounds on stdout (throughput, p50, p99; chunks /
# kv and chunks / redis), JSON lines in --out. Every run is bounded by
# count, time and `timeout`; the script stops only the processes it
# started, by PID.
#
# Usage: bench/dxram.sh [options]   (see --help)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

SERVERS=4
REPLICAS=3
MEMORY=1GiB
FB_ITEMS=1000000
YCSB_ITEMS=200000
SECS=30
OPS=100000000
THREADS=4
ROUNDS=3
KEY_DIST=zipfian
WORKLOADS=fb-b,fb-f,ycsb-a
STEP_TIMEOUT=600
OUT=""
SHOAL="${SHOAL_BIN:-}"

usage() {
    cat <<EOF
Usage: bench/dxram.sh [options]

  --servers N        servers of the shoal local cluster (default $SERVERS)
  --replicas R       replicas of every segment (default $REPLICAS)
  --memory SIZE      object memory per server (default $MEMORY)
  --fb-items N       items of fb-b and fb-f (default $FB_ITEMS)
  --ycsb-items N     items of ycsb-a (default $YCSB_ITEMS)
  --secs S           seconds of each mix (default $SECS)
  --ops N            most operations of each mix (default $OPS)
  --threads N        client threads (default $THREADS)
  --rounds N         rounds; the summary gives medians (default $ROUNDS)
  --key-dist D       zipfian or uniform (default $KEY_DIST)
  --workloads LIST   of fb-b,fb-f,ycsb-a (default all)
  --step-timeout S   limit of each run (default $STEP_TIMEOUT)
  --shoal-bin PATH   shoal binary (default \$SHOAL_BIN, else a release build)
  --out FILE         JSON lines (default bench/results/dxram-<time>.jsonl)
EOF
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --servers) SERVERS="$2"; shift 2 ;;
        --replicas) REPLICAS="$2"; shift 2 ;;
        --memory) MEMORY="$2"; shift 2 ;;
        --fb-items) FB_ITEMS="$2"; shift 2 ;;
        --ycsb-items) YCSB_ITEMS="$2"; shift 2 ;;
        --secs) SECS="$2"; shift 2 ;;
        --ops) OPS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --key-dist) KEY_DIST="$2"; shift 2 ;;
        --workloads) WORKLOADS="$2"; shift 2 ;;
        --step-timeout) STEP_TIMEOUT="$2"; shift 2 ;;
        --shoal-bin) SHOAL="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "dxram.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done

mkdir -p "$ROOT/bench/results"
OUT="${OUT:-$ROOT/bench/results/dxram-$(date -u +%Y%m%dT%H%M%SZ).jsonl}"
WORK="$(mktemp -d)"
log() { echo "[dxram $(date -u +%H:%M:%S)] $*" >&2; }

# free_port, wait_port, wait_servers_up, end_pids
source "$ROOT/bench/lib.sh"
pids=()
cleanup() {
    # shoal local stops its servers on SIGINT (Ctrl-C); up to 20 s.
    if [[ -n "${LOCAL_PID:-}" ]]; then
        kill -INT "$LOCAL_PID" 2>/dev/null || true
        for _ in $(seq 200); do kill -0 "$LOCAL_PID" 2>/dev/null || break; sleep 0.1; done
    fi
    end_pids
    # The servers of shoal local, if it left any behind.
    for p in "${kids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
kids=()
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! command -v redis-server >/dev/null; then
    log "installing redis-server"
    SUDO=""
    [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
    timeout 600 $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive timeout 600 $SUDO apt-get install -y -q redis-server redis-tools
fi

if [[ -z "$SHOAL" ]]; then
    log "building Shoal (release)"
    (cd "$ROOT" && timeout 1800 cargo build --release -q -p shoal)
    SHOAL="$ROOT/target/release/shoal"
fi

# --- the cluster and Redis ----------------------------------------------------

"$SHOAL" local --root "$WORK/cluster" --servers "$SERVERS" --replicas "$REPLICAS" --memory "$MEMORY" \
    --coordinator-port 0 --native-port 0 --resp-port 0 --memcached-port 0 --backup-port 0 \
    --log-level warn >"$WORK/local.out" 2>&1 </dev/null &
LOCAL_PID=$!
pids+=("$LOCAL_PID")
COORD=""
for _ in $(seq 600); do
    COORD=$(sed -n 's/^ *coordinator: *\([^ ]*\).*/\1/p' "$WORK/local.out" | head -1)
    [[ -n "$COORD" ]] && break
    kill -0 "$LOCAL_PID" 2>/dev/null || { cat "$WORK/local.out" >&2; exit 1; }
    sleep 0.1
done
[[ -n "$COORD" ]] || { log "shoal local printed no coordinator within 60 s"; exit 1; }
wait_servers_up "$SHOAL" "$COORD" "$SERVERS"
kids=($(cat "/proc/$LOCAL_PID/task/"*/children 2>/dev/null || true))
log "shoal local pid $LOCAL_PID: coordinator $COORD, $SERVERS servers, R=$REPLICAS (server pids ${kids[*]})"

REDIS_PORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
    --dir "$WORK" --logfile "$WORK/redis.log" &
REDIS_PID=$!
pids+=("$REDIS_PID")
wait_port "$REDIS_PORT" redis-server
log "redis-server pid $REDIS_PID on port $REDIS_PORT"

# --- rounds -------------------------------------------------------------------

: >"$OUT"
SYSTEMS=(chunks kv redis)
IFS=',' read -r -a WL <<<"$WORKLOADS"
for round in $(seq "$ROUNDS"); do
    # Rotate the order of the systems by round.
    shift_by=$(( (round - 1) % 3 ))
    order=("${SYSTEMS[@]:$shift_by}" "${SYSTEMS[@]:0:$shift_by}")
    for w in "${WL[@]}"; do
        items=$FB_ITEMS
        [[ "$w" == ycsb-a ]] && items=$YCSB_ITEMS
        for system in "${order[@]}"; do
            target=(--coordinator "$COORD")
            [[ "$system" == redis ]] && target=(--redis "127.0.0.1:$REDIS_PORT")
            log "round $round: $w on $system ($items items, ${SECS}s, $THREADS threads)"
            status=0
            out=$(timeout "$STEP_TIMEOUT" "$SHOAL" bench dxram --system "$system" --workload "$w" "${target[@]}" \
                --items "$items" --duration "$SECS" --operations "$OPS" --threads "$THREADS" \
                --key-dist "$KEY_DIST" --json 2>>"$WORK/bench.err") || status=$?
            [[ "$status" -ne 0 ]] && log "round $round: $w on $system exited with $status (see the error fields)"
            printf '%s\n' "$out" | python3 -c '
import json, sys
for l in sys.stdin:
    if l.strip():
        r = json.loads(l); r["round"] = int(sys.argv[1]); print(json.dumps(r))' "$round" >>"$OUT"
            if [[ "$status" -eq 124 ]]; then
                # A run that outlived --step-timeout: the store is stuck
                # (seen: a cluster whose backups refused every new replica),
                # and the runs after it would wait as long.
                log "round $round: $w on $system did not finish within ${STEP_TIMEOUT}s; stopping, summary of the runs so far"
                break 3
            fi
        done
    done
done

python3 - "$OUT" "$ROUNDS" "$SERVERS" "$REPLICAS" "$THREADS" "$KEY_DIST" <<'EOF'
import json, statistics, sys
path, rounds, servers, replicas, threads, dist = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if l.strip()]
med = lambda xs: statistics.median(xs) if xs else float("nan")
print(f"\nDXRAM's workloads: {servers}-server cluster, R={replicas}; Redis single process; {threads} client threads,"
      f" one operation at a time; {dist} keys; medians of {rounds} round(s)")
print(f"{'workload':<8} {'system':<7} {'op':<4} {'items':>8} {'masters':>7} {'kops/s':>8} {'p50 us':>8} {'p99 us':>8} {'runs':>4} {'errors':>6}")
summary = {}
for w in ["fb-b", "fb-f", "ycsb-a"]:
    for s in ["chunks", "kv", "redis"]:
        for op in ["all", "get", "put"]:
            rs = [r for r in rows if r["workload"] == w and r["system"] == s and r["op"] == op]
            if not rs:
                continue
            ops, p50, p99 = (med([r[k] for r in rs]) for k in ["ops_per_sec", "p50_us", "p99_us"])
            errs = sum(r["errors"] for r in rs)
            if op == "all":
                summary[(w, s)] = ops
            print(f"{w:<8} {s:<7} {op:<4} {rs[0]['items']:>8} {rs[0]['masters']:>7} {ops/1000:>8.1f} {p50:>8.1f} {p99:>8.1f} {len(rs):>4} {errs:>6}")
print()
for w in ["fb-b", "fb-f", "ycsb-a"]:
    c, k, r = (summary.get((w, s)) for s in ["chunks", "kv", "redis"])
    if c and k:
        line = f"{w:<8} chunks/kv {c / k:.2f}x"
        if r:
            line += f", chunks/redis {c / r:.2f}x, kv/redis {k / r:.2f}x"
        print(line + " (throughput, medians)")
failed = [r for r in rows if r.get("error")]
for r in failed:
    print(f"FAILED round {r['round']} {r['workload']} {r['system']} {r['op']}: {r['error']}")
print(f"JSON lines: {path}")
sys.exit(1 if failed else 0)
EOF
