#!/usr/bin/env bash
# A/B of two builds of shoal on the same local cluster shape, alternating
# the builds round by round (the machine is shared and noisy): YCSB C
# (reads only) and B (95% reads, 5% writes), Zipfian keys, over the native
# protocol, against `shoal local --servers 3 --replicas 2`. The client is
# always build B's `shoal bench ycsb`, so only the servers differ.
#
# Prints per workload the median throughput and read p99 of each build and
# their ratio; the raw JSON lines go to bench/results/ab-<time>.jsonl.
#
# Usage: bench/ab.sh OLD_SHOAL NEW_SHOAL [--rounds N] [--seconds S] [--records N]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
A=$(realpath "$1"); B=$(realpath "$2"); shift 2
ROUNDS=3 SECONDS_PER=10 RECORDS=200000
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --seconds) SECONDS_PER=$2; shift 2 ;;
        --records) RECORDS=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
mkdir -p bench/results
out=bench/results/ab-$(date -u +%Y%m%dT%H%M%SZ).jsonl
root=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$root"; }
trap cleanup EXIT
run() { # build label round
    local bin=$1 label=$2 round=$3 dir="$root/$2-$3"
    "$bin" local --servers 3 --replicas 2 --root "$dir" --memory 512MiB --coordinator-port 7690 \
        --native-port 7710 --resp-port 6390 --backup-port 7810 --log-level warn >"$dir.out" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q "Redis protocol\|redis-cli" "$dir.out" 2>/dev/null && break; sleep 0.2; done
    sleep 1
    "$B" bench ycsb --coordinator 127.0.0.1:7690 --load --records "$RECORDS" --workload C,B --key-dist zipfian \
        --threads 4 --pipeline 1 --duration "$SECONDS_PER" --json |
        sed "s/^{/{\"build\":\"$label\",\"round\":$round,/" >>"$out"
    kill -INT "$pid"; wait "$pid" 2>/dev/null || true; pid=
}
for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then run "$A" old "$r"; run "$B" new "$r"; else run "$B" new "$r"; run "$A" old "$r"; fi
done
python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def pick(build, wl, op, key):
    v = [r[key] for r in rows if r.get("build") == build and r.get("workload") == wl and r.get("op") == op]
    return statistics.median(v) if v else float("nan"), len(v)
wls = sorted({r.get("workload") for r in rows if r.get("op") == "read"})
print(f"{'workload':10} {'old ops/s':>12} {'new ops/s':>12} {'new/old':>8}   {'old read p99 us':>15} {'new read p99 us':>15}")
for wl in wls:
    (o, n1), (n, n2) = pick("old", wl, "all", "ops_per_sec"), pick("new", wl, "all", "ops_per_sec")
    (op, _), (np_, _) = pick("old", wl, "read", "p99_us"), pick("new", wl, "read", "p99_us")
    print(f"{wl:10} {o:12.0f} {n:12.0f} {n/o:8.3f}   {op:15.0f} {np_:15.0f}   ({n1}/{n2} runs)")
print("raw:", sys.argv[1])
EOF
