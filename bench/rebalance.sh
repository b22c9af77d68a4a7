#!/usr/bin/env bash
# Rebalancing a cluster after a server joins (docs/migration.md,
# "Rebalancing and drain").
#
# Starts a coordinator and 4 servers (R = 1) on free 127.0.0.1 ports, loads
# --records records of --value-size bytes into a table of 4 tablets (one per
# server) with `shoal load`, starts a fifth server, and runs `shoal
# rebalance` while a Python client (clients/python, shoalkv) writes and
# reads keys of the whole table. Prints the plan's moves and splits, the
# rebalance's time, each server's memory (live bytes, from its STATS) and
# load (operations per second, STATS ops_per_sec) before and after, their
# spreads (most minus least), and the longest
# single request any client saw (retries included). Processes are ended by
# PID on exit; the data lives under a temporary directory that is removed.
#
#   bench/rebalance.sh                                # 400,000 x 1000 B (about 100 MB per server)
#   bench/rebalance.sh --records 40000 --bin target/debug/shoal
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. bench/lib.sh
bin=$root/target/release/shoal
records=400000
value_size=1000
while [ $# -gt 0 ]; do
    case "$1" in
        --records) records=$2; shift 2 ;;
        --value-size) value_size=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        *) echo "unknown flag $1" >&2; exit 2 ;;
    esac
done
[ -x "$bin" ] || { echo "build it first: cargo build --release -p shoal" >&2; exit 2; }
dir=$(mktemp -d /tmp/shoal-rebalance-bench.XXXXXX)
pids=()
cleanup() {
    end_pids
    rm -rf "$dir"
}
trap cleanup EXIT
cport=$(free_port)
coord=127.0.0.1:$cport
"$bin" coordinator --listen "$coord" --data-dir "$dir/coord" --replicas 1 --insecure-no-secret 2>"$dir/coord.log" &
pids+=($!)
wait_port "$cport" coordinator
server() {
    "$bin" server --coordinator "$coord" --native-port 0 --resp-port 0 --memcached-port 0 --backup-port 0 \
        --memory 1GiB --insecure-no-secret --data-dir "$dir/s$1" 2>"$dir/s$1.log" &
    pids+=($!)
}
for i in 0 1 2 3; do server $i; done
wait_servers_up "$bin" "$coord" 4
"$bin" create-table bench --coordinator "$coord" >/dev/null
python3 - "$records" "$value_size" >"$dir/records.tsv" <<'EOF'
import sys
n, size = int(sys.argv[1]), int(sys.argv[2])
pad = "v" * size
out = sys.stdout
for i in range(n):
    out.write(f"key-{i:09d}\t{pad}\n")
EOF
echo "loading $records records of $value_size bytes into 4 servers ..."
"$bin" load bench "$dir/records.tsv" --coordinator "$coord" | tail -1
rm -f "$dir/records.tsv"
server 4
wait_servers_up "$bin" "$coord" 5
python3 - "$coord" "$records" >"$dir/load.out" <<'EOF' &
import sys, threading, time
sys.path.insert(0, "clients/python")
import shoalkv
coord, records = sys.argv[1], int(sys.argv[2])
longest = [0.0, 0.0]
ops = [0, 0]
def run(i):
    c = shoalkv.Client.cluster(coord)
    t = c.table_id(b"bench")
    n = 0
    while True:
        n += 1
        k = f"key-{(n * 7919 + i) % records:09d}".encode()
        t0 = time.monotonic()
        if i == 0:
            c.write(t, k, b"w" * 100)
        else:
            c.read(t, k)
        dt = time.monotonic() - t0
        longest[i] = max(longest[i], dt)
        ops[i] += 1
        if ops[i] % 200 == 0:
            print(f"{ops[0]} {ops[1]} {longest[0]:.4f} {longest[1]:.4f}", flush=True)
for i in (0, 1):
    threading.Thread(target=run, args=(i,), daemon=True).start()
time.sleep(1e9)
EOF
loadpid=$!
pids+=($loadpid)
sleep 2
echo "fifth server up; rebalancing ..."
t0=$(date +%s.%N)
"$bin" rebalance --coordinator "$coord" --json >"$dir/rebalance.json"
t1=$(date +%s.%N)
sleep 1
kill "$loadpid" 2>/dev/null || true
python3 - "$dir/rebalance.json" "$t0" "$t1" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
plan = next(l["plan"] for l in lines if "plan" in l)
done = lines[-1]
wall = float(sys.argv[3]) - float(sys.argv[2])
moves = [s for s in plan["steps"] if s["step"] == "move"]
splits = [s for s in plan["steps"] if s["step"] == "split"]
mb = lambda b: f"{b / 1e6:.1f}"
print(f"plan: {len(moves)} moves, {len(splits)} splits, about {mb(sum(m['bytes'] for m in moves))} MB to move")
for m in moves:
    print(f"  server {m['from']} -> {m['to']}: {mb(m['bytes'])} MB, {m['objects']} objects")
after = {a["server"]: a for a in (done.get("after") or [])}
print("server  before MB  after MB  before ops/s  after ops/s")
for b in plan["before"]:
    a = after.get(b["server"], {})
    print(f"{b['server']:>6}  {mb(b['bytes']):>9}  {mb(a.get('bytes', 0)):>8}  {b.get('ops', 0):>12}  {a.get('ops', 0):>11}")
print(f"spread of memory (most - least): {mb(done['spread_before'])} MB before, {mb(done['spread_after'] or 0)} MB after")
print(f"spread of load (most - least): {done.get('ops_spread_before', 0)} ops/s before, {done.get('ops_spread_after') or 0} ops/s after")
steps = done.get("steps_ms") or done["elapsed_ms"]
print(f"rebalance: {steps / 1000:.2f} s of splits and moves, {done['elapsed_ms'] / 1000:.2f} s in the coordinator's job "
      f"(with the final measurement), {wall:.2f} s for the command")
EOF
last=$(tail -1 "$dir/load.out")
read -r w r lw lr <<<"$last"
echo "client load during the run: $w writes, $r reads; longest write ${lw}s, longest read ${lr}s"
echo "source logs:"
grep -h "migration" "$dir"/s*.log | grep -E "copied" | sed 's/^.*INFO //; s/^/  /'
