#!/usr/bin/env bash
# Shoal's replication benchmarks on a local cluster (issue 4's benchmarks).
#
# Builds Shoal in release mode, starts clusters with `shoal local` (a
# coordinator and N servers, every server a master and a backup, on free
# loopback ports under a temporary root) and drives them with
# `shoal bench ycsb --coordinator` (each request sent to its key's master):
#
#   1. tailwind vs conventional   4 servers, R=3, 100-byte values, YCSB A,
#      B and W (write only), Zipfian 0.99: throughput, write latency p50/p99,
#      backup CPU time per GB replicated
#   2. cost of durability         workload W with R=0,1,2,3 (Tailwind):
#      write throughput and server CPU-seconds per million writes
#   3. fair durability comparison Shoal R=2 (3 servers) against Redis with
#      two replicas (each SET followed by WAIT 2 0) and against Redis with
#      AOF appendfsync everysec, same client (shoal bench ycsb), workloads
#      W and A; Redis without persistence as a reference
#
# CPU: utime+stime from /proc of the `shoal server` children of the
# `shoal local` process, sampled before and after each workload run.
# Backup CPU: the CPU of the backup service's own threads in every server
# (threads named shoal-backup, the replication connections, and
# shoal-backup-flush, the disk writer), from /proc/<pid>/task/<tid>/stat;
# an estimate by subtraction (server CPU per operation with R=3 minus with
# R=0, times the operations) is printed beside it. Bytes replicated: the
# servers' backup_bytes_received and bytes_replicated statistics
# (`shoal stats --json`).
#
# Each figure is the median of --runs runs (--quick: 1). Results: tables on
# stdout and JSON in --out. Every step runs under `timeout`, every workload
# is bounded by operations and seconds, and the script stops only the
# processes it started, by PID (a cluster with SIGINT, then SIGKILL to it
# and the children it had if it does not stop in time).
#
# Usage: bench/cluster.sh [--quick] [options]   (see --help)

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

RECORDS=200000        # records loaded per cluster
DURATION=12           # seconds per workload run
MAX_OPS=5000000       # most operations per workload run
THREADS=4             # ycsb client threads
PIPELINE=4            # requests in flight per thread
RUNS=3                # runs per figure (medians)
MEMORY=1GiB           # object memory per server
STEP_TIMEOUT=300      # seconds any one step may take
PARTS="1,2,3"
OUT=""

usage() {
    cat <<EOF
Usage: bench/cluster.sh [--quick] [options]

  --quick              smoke run: small counts, 1 run each (about 2 minutes)
  --records N          records loaded per cluster (default $RECORDS)
  --duration SECS      seconds per workload run (default $DURATION)
  --max-ops N          most operations per workload run (default $MAX_OPS)
  --threads N          ycsb client threads (default $THREADS)
  --pipeline N         requests in flight per thread (default $PIPELINE)
  --runs N             runs per figure; the report gives medians (default $RUNS)
  --memory SIZE        object memory per server (default $MEMORY)
  --parts LIST         which benchmarks: 1 (tailwind vs conventional),
                       2 (cost of durability), 3 (vs Redis) (default $PARTS)
  --step-timeout SECS  limit of each step (default $STEP_TIMEOUT)
  --out FILE           JSON results (default bench/results/cluster-<time>.json)

The full run takes about 20 minutes on 2 cores.
EOF
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) RECORDS=20000; DURATION=2; MAX_OPS=500000; RUNS=1; STEP_TIMEOUT=60; shift ;;
        --records) RECORDS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --max-ops) MAX_OPS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --pipeline) PIPELINE="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --memory) MEMORY="$2"; shift 2 ;;
        --parts) PARTS="$2"; shift 2 ;;
        --step-timeout) STEP_TIMEOUT="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "cluster.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done

part() { [[ ",$PARTS," == *",$1,"* ]]; }

mkdir -p "$ROOT/bench/results"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="${OUT:-$ROOT/bench/results/cluster-$STAMP.json}"
WORK="$(mktemp -d)"
RECORDS_FILE="$WORK/records.jsonl"   # one JSON object per measurement
: >"$RECORDS_FILE"
STARTED_AT=$(date +%s)

log() { echo "[cluster $(date -u +%H:%M:%S)] $*" >&2; }

# --- processes we start, and only those, are stopped by PID ------------------

PIDS=()        # every process this script started (and shoal local's children)
LOCAL_PID=""   # the running shoal local, if any
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill -INT "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# forget PID: a stopped process leaves PIDS (its number may be reused).
forget() {
    local keep=() p
    for p in "${PIDS[@]}"; do [[ "$p" == "$1" ]] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

# stop PID [SIGNAL]: signal it, wait up to 20 s, then SIGKILL it.
stop() {
    local pid="$1" sig="${2:-TERM}"
    kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 200); do
        if ! kill -0 "$pid" 2>/dev/null; then wait "$pid" 2>/dev/null || true; forget "$pid"; return 0; fi
        sleep 0.1
    done
    log "process $pid did not stop within 20 s; killing it"
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    forget "$pid"
}

# free_port, wait_port
source "$ROOT/bench/lib.sh"

# --- install, build ---------------------------------------------------------

if part 3 && { ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; }; then
    log "installing redis-server and redis-tools"
    SUDO=""
    [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
    timeout "$STEP_TIMEOUT" $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive timeout "$STEP_TIMEOUT" $SUDO apt-get install -y -q redis-server redis-tools
fi

log "building Shoal (release)"
(cd "$ROOT" && timeout 1800 cargo build --release -q -p shoal)
SHOAL="$ROOT/target/release/shoal"

# --- measuring processes ----------------------------------------------------

# snap.py KIND PID... : CPU seconds and counters of the processes, as JSON.
#   KIND shoal: PID is shoal local; its `shoal server` children are measured
#   (process CPU, backup threads' CPU) and their native
#   statistics summed (addresses in $WORK/servers).
#   KIND procs: the CPU of the PIDs given.
cat >"$WORK/snap.py" <<'EOF'
import json, os, subprocess, sys
hz = os.sysconf("SC_CLK_TCK")

def cpu(stat_path):
    with open(stat_path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / hz

def children(pid):
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            out += [int(c) for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
        except OSError:
            pass
    return out

kind, pids = sys.argv[1], [int(p) for p in sys.argv[3:]]
res = {"server_cpu": 0.0, "backup_cpu": 0.0, "backup_net_cpu": 0.0, "backup_flush_cpu": 0.0,
       "processes": 0}
if kind == "shoal":
    procs = []
    for c in children(pids[0]):
        try:
            argv = open(f"/proc/{c}/cmdline").read().split("\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1] == "server":
            procs.append(c)
else:
    procs = pids
for p in procs:
    try:
        res["server_cpu"] += cpu(f"/proc/{p}/stat")
        res["processes"] += 1
        for t in os.listdir(f"/proc/{p}/task"):
            base = f"/proc/{p}/task/{t}"
            try:
                comm = open(f"{base}/comm").read().strip()
                if not comm.startswith("shoal-backup"):
                    continue
                c = cpu(f"{base}/stat")
                res["backup_cpu"] += c
                if comm == "shoal-backup":
                    res["backup_net_cpu"] += c
                else:
                    res["backup_flush_cpu"] += c
            except OSError:
                pass
    except OSError:
        pass
stats = {}
if kind == "shoal":
    for addr in open(sys.argv[2]).read().split():
        try:
            out = subprocess.run([os.environ["SHOAL"], "stats", "--server", addr, "--json"],
                                 capture_output=True, text=True, timeout=10).stdout
            for k, v in json.loads(out).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    stats[k] = stats.get(k, 0) + v
        except Exception as e:
            print(f"cluster.sh: stats of {addr}: {e}", file=sys.stderr)
res["stats"] = stats
print(json.dumps(res))
EOF
export SHOAL

# --- clusters ---------------------------------------------------------------

# start_cluster NAME SERVERS REPLICAS MODE: starts shoal local in the
# background; sets LOCAL_PID, COORD, SERVER_NATIVE (all) and SERVER_RESP
# (the first server's Redis port).
start_cluster() {
    local name="$1" servers="$2" replicas="$3" mode="$4"
    local root="$WORK/$name"
    mkdir -p "$root"
    "$SHOAL" local --root "$root/data" --servers "$servers" --replicas "$replicas" --replication "$mode" \
        --coordinator-port 0 --native-port 0 --resp-port 0 --memcached-port 0 --backup-port 0 --memory "$MEMORY" --cluster-mode off \
        --log-level info >"$root/out" 2>&1 &
    LOCAL_PID=$!; PIDS+=("$LOCAL_PID")
    local ok=""
    for _ in $(seq 600); do
        if grep -qs "Shoal is running" "$root/out"; then ok=1; break; fi
        kill -0 "$LOCAL_PID" 2>/dev/null || break
        sleep 0.1
    done
    if [[ -z "$ok" ]]; then
        log "shoal local ($name) did not start within 60 s:"; tail -20 "$root/out" >&2
        for f in "$root"/data/*/log; do echo "== $f" >&2; tail -5 "$f" >&2; done
        exit 1
    fi
    # Its children, so that a cluster that will not stop can be killed.
    local kids
    kids=$(python3 -c 'import os,sys; p=sys.argv[1]; print(" ".join(c for t in os.listdir(f"/proc/{p}/task") for c in open(f"/proc/{p}/task/{t}/children").read().split()))' "$LOCAL_PID")
    CLUSTER_KIDS=($kids)
    PIDS+=("${CLUSTER_KIDS[@]}")
    COORD=$(awk '/^  coordinator:/ {print $2}' "$root/out")
    awk '/^  server [0-9]+: native protocol/ {gsub(",", "", $5); print $5}' "$root/out" >"$WORK/servers"
    SERVER_RESP=$(awk '/^  server [0-9]+: native protocol/ {gsub(",", "", $8); print $8; exit}' "$root/out")
    log "cluster $name: shoal local pid $LOCAL_PID, coordinator $COORD, $(wc -w <"$WORK/servers") servers, R=$replicas, $mode"
}

stop_cluster() {
    stop "$LOCAL_PID" INT
    for pid in "${CLUSTER_KIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then log "process $pid outlived shoal local; killing it"; stop "$pid" KILL; fi
        forget "$pid"
    done
    LOCAL_PID=""
}

# measure STEP CONFIG RUN KIND PIDS -- YCSB ARGS...: one ycsb run between two
# snapshots; its JSON lines tagged and its "all" line given the deltas.
measure() {
    local step="$1" config="$2" run="$3" kind="$4" pids="$5"; shift 6
    local before after out
    before=$(python3 "$WORK/snap.py" "$kind" "$WORK/servers" $pids)
    if ! out=$(timeout "$STEP_TIMEOUT" "$SHOAL" bench ycsb --json --value-size 100 --key-dist zipfian \
        --records "$RECORDS" --threads "$THREADS" --pipeline "$PIPELINE" "$@" 2>>"$WORK/ycsb.log"); then
        log "FAILED or reported errors: shoal bench ycsb $* ($config; see the error fields)"
    fi
    after=$(python3 "$WORK/snap.py" "$kind" "$WORK/servers" $pids)
    python3 - "$step" "$config" "$run" "$before" "$after" "$out" >>"$RECORDS_FILE" <<'EOF'
import json, sys
step, config, run, before, after, text = sys.argv[1:]
b, a = json.loads(before), json.loads(after)
lines = [json.loads(l) for l in text.splitlines() if l.strip()]
if not lines:
    print(json.dumps({"step": step, "config": config, "run": int(run), "failed": True}))
writes = sum(l["ops"] for l in lines if l["op"] in ("update", "insert"))
for l in lines:
    l.update(step=step, config=config, run=int(run))
    if l["op"] == "all":
        l["writes"] = writes
        for k in ["server_cpu", "backup_cpu", "backup_net_cpu", "backup_flush_cpu"]:
            l[k] = a[k] - b[k]
        for k in ["bytes_replicated", "backup_bytes_received", "writes", "replication_rounds",
                  "backup_conventional_appends", "backup_segments_flushed"]:
            if k in a["stats"] and k in b["stats"]:
                l["stat_" + k] = a["stats"][k] - b["stats"][k]
        l["server_processes"] = a["processes"]
    if l.get("error"):
        print(f"ycsb {config} {l['workload']} {l['op']}: {l['error']}", file=sys.stderr)
    print(json.dumps(l))
EOF
}

# shoal_session NAME SERVERS REPLICAS MODE WORKLOADS: a fresh cluster,
# loaded, then RUNS rounds of each workload (one ycsb run each).
shoal_session() {
    local name="$1" servers="$2" replicas="$3" mode="$4" workloads="$5"
    start_cluster "$name" "$servers" "$replicas" "$mode"
    log "$name: loading $RECORDS records"
    measure load "$name" 0 shoal "$LOCAL_PID" -- --coordinator "$COORD" --load --workload C --operations 1
    for run in $(seq "$RUNS"); do
        for w in $workloads; do
            log "$name: workload $w, run $run/$RUNS"
            measure ycsb "$name" "$run" shoal "$LOCAL_PID" -- --coordinator "$COORD" --workload "$w" \
                --duration "$DURATION" --operations "$MAX_OPS"
        done
    done
    stop_cluster
}

if part 1 || part 2; then
    shoal_session tailwind-r3 4 3 tailwind "A B W"
fi
if part 1; then
    shoal_session conventional-r3 4 3 conventional "A B W"
fi
if part 1 || part 2; then
    # R=0 is the baseline of the CPU subtraction (part 1) and of part 2.
    shoal_session tailwind-r0 4 0 tailwind "A B W"
fi
if part 2; then
    shoal_session tailwind-r1 4 1 tailwind "W"
    shoal_session tailwind-r2 4 2 tailwind "W"
fi

# --- part 3: Shoal R=2 against Redis ----------------------------------------

redis_start() {  # redis_start NAME ARGS...: sets REDIS_PID, REDIS_PORT
    local name="$1"; shift
    REDIS_PORT=$(free_port)
    mkdir -p "$WORK/$name"
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$WORK/$name" --daemonize no \
        --logfile "$WORK/$name/log" --save '' --repl-diskless-sync-delay 0 "$@" &
    REDIS_PID=$!; PIDS+=("$REDIS_PID")
    wait_port "$REDIS_PORT" "redis-server ($name)"
}

# redis_session NAME WAIT PIDS: load the primary at $PRIMARY_PORT, run W and A.
redis_session() {
    local name="$1" wait="$2" pids="$3"
    local extra=()
    [[ "$wait" -gt 0 ]] && extra=(--resp-wait "$wait")
    log "$name: loading $RECORDS records"
    measure load "$name" 0 procs "$pids" -- --protocol resp --server "127.0.0.1:$PRIMARY_PORT" --load \
        --workload C --operations 1
    for run in $(seq "$RUNS"); do
        for w in W A; do
            log "$name: workload $w, run $run/$RUNS"
            measure ycsb "$name" "$run" procs "$pids" -- --protocol resp --server "127.0.0.1:$PRIMARY_PORT" \
                --workload "$w" --duration "$DURATION" --operations "$MAX_OPS" "${extra[@]}"
        done
    done
}

if part 3; then
    # Shoal: 3 servers (each a master and a backup), R=2; the native
    # cluster client and the Redis protocol through the first server.
    start_cluster shoal-r2 3 2 tailwind
    log "shoal-r2: loading $RECORDS records (native and Redis protocol)"
    measure load shoal-r2-native 0 shoal "$LOCAL_PID" -- --coordinator "$COORD" --load --workload C --operations 1
    measure load shoal-r2-resp 0 shoal "$LOCAL_PID" -- --protocol resp --server "$SERVER_RESP" --load \
        --workload C --operations 1
    for run in $(seq "$RUNS"); do
        for w in W A; do
            log "shoal-r2: workload $w, run $run/$RUNS"
            measure ycsb shoal-r2-native "$run" shoal "$LOCAL_PID" -- --coordinator "$COORD" --workload "$w" \
                --duration "$DURATION" --operations "$MAX_OPS"
            measure ycsb shoal-r2-resp "$run" shoal "$LOCAL_PID" -- --protocol resp --server "$SERVER_RESP" \
                --workload "$w" --duration "$DURATION" --operations "$MAX_OPS"
        done
    done
    stop_cluster

    # Redis, a primary and two replicas, no persistence; WAIT 2 0 per SET.
    redis_start redis-primary --appendonly no; PRIMARY_PORT=$REDIS_PORT; P0=$REDIS_PID
    redis_start redis-replica1 --appendonly no --replicaof 127.0.0.1 "$PRIMARY_PORT"; P1=$REDIS_PID
    redis_start redis-replica2 --appendonly no --replicaof 127.0.0.1 "$PRIMARY_PORT"; P2=$REDIS_PID
    # Both replicas past their initial sync (state=online), or WAIT stalls.
    online() { redis-cli -p "$PRIMARY_PORT" info replication | tr -d '\r' | grep -c 'state=online' || true; }
    for _ in $(seq 300); do [[ "$(online)" == 2 ]] && break; sleep 0.1; done
    [[ "$(online)" == 2 ]] || { log "Redis replicas did not come online within 30 s"; exit 1; }
    redis_session redis-2replicas-wait 2 "$P0 $P1 $P2"
    stop "$P0"; stop "$P1"; stop "$P2"

    # Redis with AOF, fsync every second.
    redis_start redis-aof --appendonly yes --appendfsync everysec; PRIMARY_PORT=$REDIS_PORT
    redis_session redis-aof-everysec 0 "$REDIS_PID"
    stop "$REDIS_PID"

    # Redis without persistence or replicas: the reference without durability.
    redis_start redis-none --appendonly no; PRIMARY_PORT=$REDIS_PORT
    redis_session redis-none 0 "$REDIS_PID"
    stop "$REDIS_PID"
fi

# --- summary ----------------------------------------------------------------

python3 - "$RECORDS_FILE" "$OUT" "$RUNS" "$THREADS" "$PIPELINE" "$RECORDS" "$DURATION" "$(( $(date +%s) - STARTED_AT ))" <<'EOF'
import json, os, platform, statistics, sys
records = [json.loads(l) for l in open(sys.argv[1])]
out, runs, threads, pipeline, nrec, duration, elapsed = sys.argv[2], *map(int, sys.argv[3:])
nan = float("nan")
med = lambda xs: statistics.median(xs) if xs else nan
GB = 1e9

def rows(config, workload, op):
    return [r for r in records if r.get("step") == "ycsb" and r.get("config") == config
            and r.get("workload") == workload and r.get("op") == op]

def m(config, workload, op, key):
    return med([r[key] for r in rows(config, workload, op) if r.get(key) is not None])

def ratio(a, b):
    return a / b if b and b == b and a == a else nan

summary = {"host": platform.node(), "cores": os.cpu_count(), "runs": runs, "threads": threads,
           "pipeline": pipeline, "records": nrec, "duration_secs": duration, "elapsed_secs": elapsed,
           "value_bytes": 100, "key_dist": "zipfian 0.99"}
errors = sum(r.get("errors", 0) for r in records if r.get("op") == "all")
failed = [r for r in records if r.get("failed") or (r.get("op") == "all" and r.get("error"))]
print(f"\nShoal cluster benchmarks on {platform.node()}, {os.cpu_count()} cores; medians of {runs} run(s), "
      f"{duration} s per run, {nrec} records, 100-byte values, Zipfian 0.99, {threads} threads x {pipeline} in flight")

def backup(config, w):
    """Backup CPU seconds per GB received by backups, per run, then the median."""
    vals, nets, subs = [], [], []
    for r in rows(config, w, "all"):
        got = r.get("stat_backup_bytes_received")
        if not got:
            continue
        vals.append(r["backup_cpu"] / (got / GB))
        nets.append(r["backup_net_cpu"] / (got / GB))
        base = rows("tailwind-r0", w, "all")
        base_cpu_op = med([b["server_cpu"] / b["ops"] for b in base if b["ops"]])
        if r["ops"] and base_cpu_op == base_cpu_op:
            subs.append((r["server_cpu"] / r["ops"] - base_cpu_op) * r["ops"] / (got / GB))
    return med(vals), med(nets), med(subs)

# Part 1
have1 = rows("tailwind-r3", "W", "all") and rows("conventional-r3", "W", "all")
if have1:
    print("\n1. Tailwind vs conventional replication: 4 servers, R=3")
    print(f"{'wl':<3}{'mode':<14}{'kops/s':>9}{'w p50 us':>10}{'w p99 us':>10}{'backup s/GB':>13}{'(net thr)':>10}{'(by R=0 sub)':>13}{'GB to backups':>14}{'errors':>8}")
    part1 = []
    for w in ["A", "B", "W"]:
        line = {}
        for mode in ["tailwind", "conventional"]:
            c = f"{mode}-r3"
            s = {"ops_per_sec": m(c, w, "all", "ops_per_sec"), "write_p50_us": m(c, w, "update", "p50_us"),
                 "write_p99_us": m(c, w, "update", "p99_us"),
                 "gb_to_backups": med([(r.get("stat_backup_bytes_received") or 0) / GB for r in rows(c, w, "all")]),
                 "errors": sum(r["errors"] for r in rows(c, w, "all"))}
            s["backup_cpu_secs_per_gb"], s["backup_net_cpu_secs_per_gb"], s["backup_cpu_secs_per_gb_by_subtraction"] = backup(c, w)
            line[mode] = s
            print(f"{w:<3}{mode:<14}{s['ops_per_sec']/1e3:>9.1f}{s['write_p50_us']:>10.0f}{s['write_p99_us']:>10.0f}"
                  f"{s['backup_cpu_secs_per_gb']:>13.2f}{s['backup_net_cpu_secs_per_gb']:>10.2f}"
                  f"{s['backup_cpu_secs_per_gb_by_subtraction']:>13.2f}{s['gb_to_backups']:>14.3f}{s['errors']:>8}")
        t, c = line["tailwind"], line["conventional"]
        r = {"workload": w, **{f"tailwind_{k}": v for k, v in t.items()}, **{f"conventional_{k}": v for k, v in c.items()},
             "throughput_ratio": ratio(t["ops_per_sec"], c["ops_per_sec"]),
             "write_p50_ratio": ratio(c["write_p50_us"], t["write_p50_us"]),
             "write_p99_ratio": ratio(c["write_p99_us"], t["write_p99_us"]),
             "backup_cpu_per_gb_ratio": ratio(t["backup_cpu_secs_per_gb"], c["backup_cpu_secs_per_gb"])}
        part1.append(r)
    print("\n   ratios against the targets (tailwind vs conventional)")
    print(f"{'wl':<3}{'throughput':>12}{'(>=1.5x A,W)':>14}{'w p50 lower':>13}{'(>=2x)':>8}{'w p99 lower':>13}{'(>=3x)':>8}{'backup CPU/GB':>15}{'(<=0.33)':>10}")
    ok = lambda v, good: "yes" if good(v) else ("-" if v != v else "no")
    for r in part1:
        print(f"{r['workload']:<3}{r['throughput_ratio']:>11.2f}x{ok(r['throughput_ratio'], lambda v: v >= 1.5) if r['workload'] != 'B' else 'n/a':>14}"
              f"{r['write_p50_ratio']:>12.2f}x{ok(r['write_p50_ratio'], lambda v: v >= 2):>8}"
              f"{r['write_p99_ratio']:>12.2f}x{ok(r['write_p99_ratio'], lambda v: v >= 3):>8}"
              f"{r['backup_cpu_per_gb_ratio']:>14.2f}x{ok(r['backup_cpu_per_gb_ratio'], lambda v: v <= 1/3):>10}")
    print("   backup s/GB: CPU of every server's backup threads (shoal-backup: replication connections;"
          "\n   shoal-backup-flush: disk) per GB the backups received; (net thr): the connection thread alone;"
          "\n   (by R=0 sub): (server CPU per op at R=3 - at R=0, same workload) x ops / GB, an estimate that"
          "\n   also counts the masters' replication work")
    summary["tailwind_vs_conventional"] = part1

# Part 2
cfgs = [(n, f"tailwind-r{n}") for n in range(4)]
have2 = all(rows(c, "W", "all") for _, c in cfgs)
if have2:
    print("\n2. Cost of durability: workload W (write only), 4 servers, Tailwind")
    print(f"{'R':<3}{'kwrites/s':>10}{'vs R=0':>8}{'w p50 us':>10}{'w p99 us':>10}{'cpu s/M writes':>16}{'vs R=0':>8}")
    part2 = []
    base_tp = m("tailwind-r0", "W", "all", "ops_per_sec")
    cpum = lambda c: med([r["server_cpu"] / (r["writes"] / 1e6) for r in rows(c, "W", "all") if r["writes"]])
    base_cpu = cpum("tailwind-r0")
    for n, c in cfgs:
        s = {"replicas": n, "writes_per_sec": m(c, "W", "all", "ops_per_sec"), "write_p50_us": m(c, "W", "update", "p50_us"),
             "write_p99_us": m(c, "W", "update", "p99_us"), "server_cpu_secs_per_million_writes": cpum(c)}
        s["throughput_vs_r0"] = ratio(s["writes_per_sec"], base_tp)
        s["cpu_vs_r0"] = ratio(s["server_cpu_secs_per_million_writes"], base_cpu)
        part2.append(s)
        print(f"{n:<3}{s['writes_per_sec']/1e3:>10.1f}{s['throughput_vs_r0']:>7.2f}x{s['write_p50_us']:>10.0f}{s['write_p99_us']:>10.0f}"
              f"{s['server_cpu_secs_per_million_writes']:>16.2f}{s['cpu_vs_r0']:>7.2f}x")
    r3 = part2[3]
    print(f"   targets: R=3 keeps >= 70% of R=0's write throughput: {r3['throughput_vs_r0']*100:.0f}% "
          f"({'met' if r3['throughput_vs_r0'] >= 0.7 else 'not met'}); CPU-seconds per million writes at R=3 <= 2x R=0's: "
          f"{r3['cpu_vs_r0']:.2f}x ({'met' if r3['cpu_vs_r0'] <= 2 else 'not met'})")
    print("   CPU: all server processes (masters and backups) per million writes; the R=3 row is the W runs of part 1's Tailwind cluster")
    summary["cost_of_durability"] = part2

# Part 3
cfg3 = ["shoal-r2-native", "shoal-r2-resp", "redis-2replicas-wait", "redis-aof-everysec", "redis-none"]
if any(rows(c, "W", "all") for c in cfg3):
    print("\n3. Durability-fair comparison: Shoal R=2 (3 servers) vs Redis (same client, same machine)")
    print(f"{'wl':<3}{'store':<22}{'kops/s':>9}{'w p50 us':>10}{'w p99 us':>10}{'cpu s/M ops':>13}{'errors':>8}")
    part3 = []
    for w in ["W", "A"]:
        for c in cfg3:
            rs = rows(c, w, "all")
            if not rs:
                continue
            s = {"workload": w, "store": c, "ops_per_sec": m(c, w, "all", "ops_per_sec"),
                 "write_p50_us": m(c, w, "update", "p50_us"), "write_p99_us": m(c, w, "update", "p99_us"),
                 "server_cpu_secs_per_million_ops": med([r["server_cpu"] / (r["ops"] / 1e6) for r in rs if r["ops"]]),
                 "errors": sum(r["errors"] for r in rs)}
            part3.append(s)
            print(f"{w:<3}{c:<22}{s['ops_per_sec']/1e3:>9.1f}{s['write_p50_us']:>10.0f}{s['write_p99_us']:>10.0f}"
                  f"{s['server_cpu_secs_per_million_ops']:>13.2f}{s['errors']:>8}")
        get = lambda c: next((s for s in part3 if s.get("store") == c and s["workload"] == w), None)
        for shoal in ["shoal-r2-native", "shoal-r2-resp"]:
            for redis in ["redis-2replicas-wait", "redis-aof-everysec"]:
                a, b = get(shoal), get(redis)
                if a and b:
                    v = ratio(a["ops_per_sec"], b["ops_per_sec"])
                    part3.append({"workload": w, "ratio": f"{shoal}/{redis}", "throughput_ratio": v})
                    print(f"   {w}: {shoal} / {redis} throughput {v:.2f}x")
    print("   CPU: all Shoal server processes, or all redis-server processes of the setup (primary and replicas)")
    summary["vs_redis"] = part3

if errors or failed:
    print(f"\nerrors: {errors} refused operations; {len(failed)} runs reported an error (see 'error' in the JSON records)")
json.dump({"summary": summary, "records": records}, open(out, "w"), indent=1)
print(f"\nJSON: {out}  (total {elapsed} s)")
EOF
