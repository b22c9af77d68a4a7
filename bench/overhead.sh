#!/usr/bin/env bash
# Memory per chunk beyond its payload (issue 18): Shoal's chunks against
# Shoal's key-value objects with 8-byte keys, Redis and memcached with
# 8-byte keys, in one run.
#
# For each payload size (16, 32, 64, 128 bytes) the script starts a fresh
# redis-server (defaults, persistence off: --save '' --appendonly no) and a
# fresh memcached (defaults, -m MEMCACHED_MB so that every item fits) on
# free ports of 127.0.0.1, runs
#
#   shoal bench overhead --chunks --objects N --chunk-sizes SIZE \
#       --redis ... --memcached ... --json
#
# (Shoal's chunks and objects in in-process stores, the bytes from the
# store's statistics; Redis from INFO memory's used_memory; memcached from
# its stats; both also from their RSS), and stops them. A fresh process per
# size, rather than a flush between sizes, so that RSS growth and
# memcached's counts start from an empty store (memcached reclaims flushed
# items lazily). Redis and memcached come from Debian's packages, installed
# if missing.
#
# Results: a table on stdout, JSON lines in --out. Every step runs under
# `timeout`; the script stops only the processes it started, by PID.
#
# Usage: bench/overhead.sh [options]   (see --help)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

OBJECTS=10000000
SIZES=16,32,64,128
MEMCACHED_MB=4096
STEP_TIMEOUT=1800
OUT=""
SHOAL="${SHOAL_BIN:-}"

usage() {
    cat <<EOF
Usage: bench/overhead.sh [options]

  --objects N        items of each size per store (default $OBJECTS)
  --sizes LIST       payload sizes, comma-separated (default $SIZES)
  --memcached-mb N   memcached -m (default $MEMCACHED_MB)
  --step-timeout S   limit of each size's run (default $STEP_TIMEOUT)
  --shoal-bin PATH   shoal binary (default \$SHOAL_BIN, else a release build)
  --out FILE         JSON lines (default bench/results/overhead-<time>.jsonl)
EOF
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --objects) OBJECTS="$2"; shift 2 ;;
        --sizes) SIZES="$2"; shift 2 ;;
        --memcached-mb) MEMCACHED_MB="$2"; shift 2 ;;
        --step-timeout) STEP_TIMEOUT="$2"; shift 2 ;;
        --shoal-bin) SHOAL="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "overhead.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done

mkdir -p "$ROOT/bench/results"
OUT="${OUT:-$ROOT/bench/results/overhead-$(date -u +%Y%m%dT%H%M%SZ).jsonl}"
WORK="$(mktemp -d)"
log() { echo "[overhead $(date -u +%H:%M:%S)] $*" >&2; }

# free_port, wait_port, end_pids
source "$ROOT/bench/lib.sh"
pids=()
cleanup() { end_pids; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! command -v redis-server >/dev/null || ! command -v memcached >/dev/null; then
    log "installing redis-server and memcached"
    SUDO=""
    [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
    timeout 600 $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive timeout 600 $SUDO apt-get install -y -q redis-server redis-tools memcached
fi

if [[ -z "$SHOAL" ]]; then
    log "building Shoal (release)"
    (cd "$ROOT" && timeout 1800 cargo build --release -q -p shoal)
    SHOAL="$ROOT/target/release/shoal"
fi

: >"$OUT"
IFS=',' read -r -a SIZE_LIST <<<"$SIZES"
for size in "${SIZE_LIST[@]}"; do
    REDIS_PORT=$(free_port)
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
        --dir "$WORK" --logfile "$WORK/redis.log" &
    REDIS_PID=$!
    MEMCACHED_PORT=$(free_port)
    memcached -l 127.0.0.1 -p "$MEMCACHED_PORT" -U 0 -m "$MEMCACHED_MB" -u "$(id -un)" >"$WORK/memcached.log" 2>&1 &
    MEMCACHED_PID=$!
    pids=("$REDIS_PID" "$MEMCACHED_PID")
    wait_port "$REDIS_PORT" redis-server
    wait_port "$MEMCACHED_PORT" memcached
    log "size $size: redis pid $REDIS_PID (port $REDIS_PORT), memcached pid $MEMCACHED_PID (port $MEMCACHED_PORT)"
    status=0
    timeout "$STEP_TIMEOUT" "$SHOAL" bench overhead --chunks --objects "$OBJECTS" --chunk-sizes "$size" \
        --redis "127.0.0.1:$REDIS_PORT" --memcached "127.0.0.1:$MEMCACHED_PORT" --json >>"$OUT" || status=$?
    [[ "$status" -ne 0 ]] && log "size $size: shoal bench overhead exited with $status (see the error fields)"
    end_pids
    pids=()
done

python3 - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
shoal = {(r["kind"], r["payload_bytes"]): r for r in rows if r["bench"] == "overhead_chunks"}
peers = {(r["kind"], r["value_bytes"]): r for r in rows if r["bench"] == "overhead_chunks_peer"}
sizes = sorted({s for _, s in shoal} | {s for _, s in peers})
fmt = lambda x: "-" if x is None else f"{x:.2f}"
print("\nbytes per item beyond its payload (Shoal) or beyond its 8-byte key and value (Redis, memcached)")
print(f"{'payload':>7}  {'items':>9}  {'chunks':>7}  {'chunks+slack':>12}  {'kv 8B key':>9}  {'kv+slack':>8}"
      f"  {'redis own':>9}  {'redis RSS':>9}  {'mc own':>7}  {'mc slab':>7}  {'mc RSS':>7}")
for s in sizes:
    c, k = shoal.get(("chunks", s), {}), shoal.get(("kv 8-byte keys", s), {})
    r, m = peers.get(("redis", s), {}), peers.get(("memcached", s), {})
    items = c.get("items") or r.get("items") or m.get("items")
    print(f"{s:>7}  {items:>9}  {fmt(c.get('log_bytes_per_item')):>7}  {fmt(c.get('stats_bytes_per_item')):>12}"
          f"  {fmt(k.get('log_bytes_per_item')):>9}  {fmt(k.get('stats_bytes_per_item')):>8}"
          f"  {fmt(r.get('own_bytes_per_item')):>9}  {fmt(r.get('rss_bytes_per_item')):>9}"
          f"  {fmt(m.get('own_bytes_per_item')):>7}  {fmt(m.get('slab_bytes_per_item')):>7}  {fmt(m.get('rss_bytes_per_item')):>7}")
errors = [f"{r.get('kind')} {r.get('payload_bytes', r.get('value_bytes'))}: {r['error']}" for r in rows if r.get("error")]
for e in errors:
    print("FAILED:", e)
print("\nchunks, kv: log = entry headers (and keys) + index; +slack: seglets in use x seglet + index - payloads."
      "\nredis own: INFO used_memory growth; mc own: stats bytes + hash_bytes growth; mc slab: slab chunks in use"
      "\n+ hash_bytes growth; RSS: VmRSS growth; each per item, less key and value.")
print(f"JSON lines: {sys.argv[1]}")
sys.exit(1 if errors else 0)
EOF
