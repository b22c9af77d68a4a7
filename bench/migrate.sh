#!/usr/bin/env bash
# Tablet migration speed and client pause (docs/migration.md).
#
# Starts a coordinator and 3 servers (R = 1) on free 127.0.0.1 ports, loads
# --records records of --value-size bytes into a table of 3 tablets with
# `shoal load`, then moves the first tablet to another server with `shoal
# migrate` while a Python client (clients/python, shoalkv) writes and reads
# keys of the whole table. Prints the bytes and objects the source copied,
# the move's time and MB/s (from the source's log line), and the longest
# single request any client saw during the run (retries included).
# Processes are ended by PID on exit; the data lives under a temporary
# directory that is removed.
#
#   bench/migrate.sh                              # 450,000 x 1000 B (about 150 MB per tablet)
#   bench/migrate.sh --records 30000 --value-size 1000
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$root/target/release/shoal
records=450000
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
dir=$(mktemp -d /tmp/shoal-migrate-bench.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cport=$(port)
coord=127.0.0.1:$cport
"$bin" coordinator --listen "$coord" --data-dir "$dir/coord" --replicas 1 --insecure-no-secret 2>"$dir/coord.log" &
pids+=($!)
for i in 0 1 2; do
    "$bin" server --coordinator "$coord" --native-port 0 --resp-port 0 --memcached-port 0 --backup-port 0 \
        --memory 1GiB --insecure-no-secret --data-dir "$dir/s$i" 2>"$dir/s$i.log" &
    pids+=($!)
done
for _ in $(seq 100); do
    n=$("$bin" stats --coordinator "$coord" --json 2>/dev/null | grep -c '"state":"up"' || true)
    [ "$n" -ge 3 ] && break
    sleep 0.2
done
"$bin" create-table bench --coordinator "$coord" >/dev/null
python3 - "$records" "$value_size" >"$dir/records.tsv" <<'EOF'
import sys
n, size = int(sys.argv[1]), int(sys.argv[2])
pad = "v" * size
out = sys.stdout
for i in range(n):
    out.write(f"key-{i:09d}\t{pad}\n")
EOF
echo "loading $records records of $value_size bytes ..."
"$bin" load bench "$dir/records.tsv" --coordinator "$coord" | tail -1
rm -f "$dir/records.tsv"
# The first tablet of the table and a server that is not its master, from the map.
read -r start master to < <(python3 - "$cport" <<'EOF'
import json, socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
body = json.dumps({"op": "get_map"}).encode()
s.sendall(struct.pack("<I", len(body)) + body)
def exact(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        assert c
        b += c
    return b
(n,) = struct.unpack("<I", exact(4))
m = json.loads(exact(n))["map"]
t = next(x for x in m["tables"] if x["name"] == "bench")
ts = sorted((x for x in m["tablets"] if x["table"] == t["id"]), key=lambda x: x["start_hash"])
to = next(x["id"] for x in m["servers"] if x["id"] != ts[0]["master"] and x["state"] == "up")
print(hex(ts[0]["start_hash"]), ts[0]["master"], to)
EOF
)
echo "moving tablet $start of table bench from server $master to server $to"
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
"$bin" migrate --coordinator "$coord" --table bench --start "$start" --to "$to"
sleep 2
kill "$loadpid" 2>/dev/null || true
echo "source's log:"
grep -h "migration" "$dir"/s*.log | grep -E "copied|committed|holding" | sed 's/^/  /'
last=$(tail -1 "$dir/load.out")
read -r w r lw lr <<<"$last"
echo "client load during the run: $w writes, $r reads; longest write ${lw}s, longest read ${lr}s"
