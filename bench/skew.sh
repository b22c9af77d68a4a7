#!/usr/bin/env bash
# Symmetric caching under skew (issue 12, docs/symmetric-caching.md).
#
# On this machine every server shares the same two cores, so each server
# gets a bottleneck of its own: its own network namespace, joined to a
# bridge by a veth pair whose both ends are limited by tc (tbf) to --rate,
# so a server's NIC, not the shared CPU, saturates first. The coordinator
# and the YCSB clients (shoal bench ycsb over the native protocol, one
# closed-loop connection per server and thread) run in the root namespace.
#
# For each run, and each configuration in turn (alternated: off, eventual,
# strong, off, ...), it starts a fresh cluster, loads --records records of
# 100 bytes, runs each --workloads mix (Zipf 0.99) for --duration seconds
# and reads, per server, the requests it served (INFO total_commands_processed)
# and its NIC's bytes (in and out, from /sys in its namespace) before and
# after. Prints one line per (configuration, workload, run), then medians
# per (configuration, workload) with the gain over "off" and the per-server
# load's max/mean; JSON lines go to --out.
#
# Needs root (ip netns, tc); installs iproute2 if it is missing. Every
# namespace, link and process it made is removed on exit; processes are
# ended by PID. Bounded: clusters x workloads x --duration.
#
#   bench/skew.sh                         # 3 runs, rate 10mbit, 4 servers
#   bench/skew.sh --runs 1 --duration 5 --workloads C,B
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

servers=4
rate=10mbit
records=100000
duration=8
threads=16
pipeline=2
runs=3
workloads=C,U1,B,U10
configs=off,eventual,strong
replicas=2
out=""
shoal=""
while [ $# -gt 0 ]; do
    case $1 in
    --servers) servers=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --records) records=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --pipeline) pipeline=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --shoal) shoal=$2; shift 2 ;;
    -h | --help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "skew.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$(id -u)" != 0 ]; then
    echo "skew.sh: needs root (network namespaces and tc)" >&2
    exit 2
fi
if ! command -v tc >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2
fi
if ! command -v redis-cli >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools
fi
if [ -z "$shoal" ]; then
    cargo build -q --release -p shoal
    shoal=$root/target/release/shoal
fi
work=$(mktemp -d /tmp/shoal-skew.XXXXXX)
[ -n "$out" ] || out=$work/results.jsonl
: >"$out"
# Names unique to this run (interface names are at most 15 characters).
tag=$(printf '%04x' $(($$ % 65536)))
br=sk${tag}br
subnet=10.213
pids=()

cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    for i in $(seq "$servers"); do ip netns del "sk${tag}n$i" 2>/dev/null || true; done
    ip link del "$br" 2>/dev/null || true
}
trap 'cleanup; rm -rf "$work/cluster"' EXIT
trap 'exit 130' INT TERM

# The bridge, and per server a namespace and a rate-limited veth pair.
ip link add "$br" type bridge
ip addr add "$subnet.0.1/24" dev "$br"
ip link set "$br" up
for i in $(seq "$servers"); do
    ns=sk${tag}n$i
    ip netns add "$ns"
    ip link add "sk${tag}h$i" type veth peer name "sk${tag}s$i"
    ip link set "sk${tag}s$i" netns "$ns"
    ip link set "sk${tag}h$i" master "$br" up
    ip netns exec "$ns" ip addr add "$subnet.0.$((10 + i))/24" dev "sk${tag}s$i"
    ip netns exec "$ns" ip link set "sk${tag}s$i" up
    ip netns exec "$ns" ip link set lo up
    # Both directions of the server's NIC: out (in its namespace) and in
    # (the host end's egress).
    ip netns exec "$ns" tc qdisc add dev "sk${tag}s$i" root tbf rate "$rate" burst 32kb latency 100ms
    tc qdisc add dev "sk${tag}h$i" root tbf rate "$rate" burst 32kb latency 100ms
done

coord=$subnet.0.1:17600
start_cluster() { # $1: off|eventual|strong
    local mode=$1 dir=$work/cluster
    rm -rf "$dir"
    mkdir -p "$dir"
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secret"
    chmod 600 "$dir/secret"
    "$shoal" coordinator --listen "$coord" --data-dir "$dir/coordinator" --replicas "$replicas" \
        --cluster-secret-file "$dir/secret" --log-level warn 2>"$dir/coordinator.log" &
    pids+=($!)
    local sc=(--sc off)
    [ "$mode" = off ] || sc=(--sc on --sc-consistency "$mode")
    for i in $(seq "$servers"); do
        ip netns exec "sk${tag}n$i" "$shoal" server --coordinator "$coord" --listen "$subnet.0.$((10 + i))" \
            --data-dir "$dir/server-$i" --memory 512MiB --no-memcached --cluster-secret-file "$dir/secret" \
            --log-level warn "${sc[@]}" 2>"$dir/server-$i.log" &
        pids+=($!)
    done
    for i in $(seq "$servers"); do
        local ok=""
        for _ in $(seq 150); do
            if [ "$(redis-cli -h "$subnet.0.$((10 + i))" -p 6380 ping 2>/dev/null)" = PONG ]; then
                ok=1
                break
            fi
            sleep 0.2
        done
        if [ -z "$ok" ]; then
            echo "skew.sh: server $i did not come up (logs in $dir)" >&2
            exit 1
        fi
    done
    # Leases and the map reach every server within a second.
    sleep 1.5
}

stop_cluster() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}

# Per server: "requests nic_bytes" (requests served; NIC bytes in + out).
server_counters() {
    for i in $(seq "$servers"); do
        local ns=sk${tag}n$i dev=sk${tag}s$i req rx tx
        req=$(redis-cli -h "$subnet.0.$((10 + i))" -p 6380 info stats | tr -d '\r' |
            awk -F: '/^total_commands_processed:/ {print $2}')
        rx=$(ip netns exec "$ns" cat "/sys/class/net/$dev/statistics/rx_bytes")
        tx=$(ip netns exec "$ns" cat "/sys/class/net/$dev/statistics/tx_bytes")
        echo "$req $((rx + tx))"
    done
}

ycsb() {
    "$shoal" bench ycsb --coordinator "$coord" --records "$records" --value-size 100 --json "$@"
}

IFS=, read -r -a wl <<<"$workloads"
IFS=, read -r -a cf <<<"$configs"
echo "skew: $servers servers, NIC $rate each way, $records records of 100 B, Zipf 0.99," \
    "$threads threads x $pipeline in flight, $duration s per workload, $runs run(s); results in $out"
for run in $(seq "$runs"); do
    for mode in "${cf[@]}"; do
        start_cluster "$mode"
        ycsb --load --workload C --operations 1 --threads 4 >/dev/null
        # A first round of hot keys (the default --sc-epoch-ms is 1 s).
        ycsb --workload C --duration 2 --threads "$threads" --pipeline "$pipeline" >/dev/null
        for w in "${wl[@]}"; do
            before=$(server_counters)
            lines=$(ycsb --workload "$w" --duration "$duration" --threads "$threads" --pipeline "$pipeline" |
                grep "\"workload\":\"$w\"")
            after=$(server_counters)
            python3 - "$mode" "$w" "$run" "$lines" "$before" "$after" >>"$out" <<'EOF'
import json, sys
mode, w, run, lines, before, after = sys.argv[1:7]
ops = {r["op"]: r for r in map(json.loads, lines.splitlines())}
r = ops["all"]
lat = {op: {"p50_us": ops[op]["p50_us"], "p99_us": ops[op]["p99_us"]} for op in ("read", "update") if op in ops}
b = [list(map(int, l.split())) for l in before.splitlines()]
a = [list(map(int, l.split())) for l in after.splitlines()]
req = [x[0] - y[0] for x, y in zip(a, b)]
nic = [x[1] - y[1] for x, y in zip(a, b)]
def spread(v):
    m = sum(v) / len(v)
    return max(v) / m if m else 0.0
print(json.dumps({"bench": "skew", "config": mode, "workload": w, "run": int(run),
                  "ops_per_sec": r["ops_per_sec"], "p50_us": r["p50_us"], "p99_us": r["p99_us"], "latency": lat,
                  "server_requests": req, "server_nic_bytes": nic,
                  "requests_max_over_mean": spread(req), "nic_max_over_mean": spread(nic),
                  "spread_reads": r.get("spread_reads", 0), "errors": r["errors"]}))
EOF
            tail -1 "$out" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); l = r["latency"]; rd = l.get("read", {}); up = l.get("update", {}); print("run %d %-8s %-4s %9.0f ops/s  read p50/p99 %6.0f/%6.0f us  update p50/p99 %6.0f/%6.0f us  requests max/mean %.2f  nic max/mean %.2f" % (r["run"], r["config"], r["workload"], r["ops_per_sec"], rd.get("p50_us", 0), rd.get("p99_us", 0), up.get("p50_us", 0), up.get("p99_us", 0), r["requests_max_over_mean"], r["nic_max_over_mean"]))'
        done
        stop_cluster
    done
done

python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = []
for r in rows:
    k = (r["config"], r["workload"])
    if k not in keys:
        keys.append(k)
med = {}
for k in keys:
    rs = [r for r in rows if (r["config"], r["workload"]) == k]
    med[k] = {f: statistics.median(r[f] for r in rs) for f in
              ("ops_per_sec", "requests_max_over_mean", "nic_max_over_mean")}
    for op in ("read", "update"):
        for p in ("p50_us", "p99_us"):
            v = [r["latency"][op][p] for r in rs if op in r["latency"]]
            med[k][op + "_" + p] = statistics.median(v) if v else 0.0
    med[k]["runs"] = len(rs)
print()
print("medians   workload      ops/s  x off  read p50/p99 us  update p50/p99 us  req max/mean  nic max/mean  runs")
for (c, w) in sorted(keys, key=lambda k: (k[1], k[0])):
    m = med[(c, w)]
    base = med.get(("off", w), {}).get("ops_per_sec")
    gain = m["ops_per_sec"] / base if base else float("nan")
    print("%-9s %-8s %10.0f  %5.2f  %7.0f/%7.0f  %8.0f/%8.0f  %12.2f  %12.2f  %4d" % (c, w, m["ops_per_sec"], gain,
          m["read_p50_us"], m["read_p99_us"], m["update_p50_us"], m["update_p99_us"], m["requests_max_over_mean"],
          m["nic_max_over_mean"], m["runs"]))
EOF
