#!/usr/bin/env bash
# Shoal's streams against Apache Kafka and Redis Streams on this machine, in
# one run (issue 14; KerA Fig. 5.7-5.8: one broker).
#
#   shoal   a standalone `shoal server` (one master, no backups: R=0, the
#           records only in memory), fresh for every configuration, driven
#           by `shoal bench stream` (the client library's Producer and
#           Consumer): P producers, batches of B records of 100 B, at most
#           IN_FLIGHT requests unanswered per producer, a stream of one
#           streamlet with Q logs; then one consumer reads everything back
#   kafka   one KRaft broker (broker and controller in one JVM, -Xmx1g),
#           its jars fetched from Maven Central with Maven into
#           target/kafka-jars/ (not committed), log on local disk,
#           replication factor 1, producers with acks=all, fresh for every
#           round; driven by Kafka's own tools: ProducerPerformance
#           (--record-size 100 --throughput -1, batch.size = B records'
#           bytes, max.in.flight.requests.per.connection = IN_FLIGHT; P
#           producers are P processes) and ConsumerPerformance
#   redis   redis-server from Debian (persistence off), fresh for every
#           round: redis-benchmark sending XADD s * f <100-byte value>,
#           pipelined B deep (-P B), P connections (-c P)
#
# Configurations: one producer with B = 1, 10, 100, 1000 on all three
# systems; Shoal with P = 1, 2, 4, 8 producers and Q = 1, 2, 4 logs at
# B = 100; Kafka and Redis with P = 4 at B = 100 (Kafka on a topic of 4
# partitions); Shoal's produce-to-consume latency while producing (--e2e)
# at P = 1, B = 100; and one record at a time, produced and read back
# before the next: Shoal's --round-trip against Kafka's EndToEndLatency. Each configuration runs --runs times, the systems alternating
# within a round; the summary gives medians and the ratios Shoal/Kafka and
# Shoal/Redis. Every step runs under `timeout`; the script ends only the
# processes it started, by PID. Results: a table on stdout and JSON lines
# in --out.
#
# Usage: bench/streams.sh [--quick] [options]   (see --help)

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

KAFKA_VERSION=4.4.0     # org.apache.kafka:kafka_2.13 and kafka-tools
RECORDS=1000000         # records per configuration (B = 1: a tenth, B = 10: half)
RUNS=3
IN_FLIGHT=5             # Kafka's default max.in.flight.requests.per.connection
LINGER_MS=5             # Kafka 4's default linger.ms
BATCHES="1,10,100,1000"
PRODUCERS="1,2,4,8"     # Shoal, at B = 100
LOGS="1,2,4"            # Shoal, at B = 100
PEER_PRODUCERS=4        # Kafka and Redis multi-producer runs, at B = 100
E2E_RECORDS=5000        # records of the one-at-a-time produce-to-consume runs
STEP_TIMEOUT=180
SKIP=""                 # systems to leave out, of shoal,kafka,redis
OUT=""

usage() {
    cat <<EOF
Usage: bench/streams.sh [--quick] [options]

  --quick               100,000 records per configuration, one round, fewer
                        configurations (about two minutes)
  --records N           records per configuration (default $RECORDS; B = 1
                        runs a tenth of them, B = 10 half)
  --runs N              rounds (default $RUNS)
  --batches LIST        batch sizes in records, one producer (default $BATCHES)
  --producers LIST      Shoal producer counts at B = 100 (default $PRODUCERS)
  --logs LIST           Shoal logs per streamlet at B = 100 (default $LOGS)
  --peer-producers N    producers of the Kafka and Redis multi-producer
                        runs (default $PEER_PRODUCERS; 0: none)
  --in-flight N         requests in flight per producer (default $IN_FLIGHT)
  --e2e-records N       records of the one-at-a-time produce-to-consume
                        latency runs, Shoal and Kafka (default $E2E_RECORDS; 0: none)
  --kafka-version V     Kafka's version on Maven Central (default $KAFKA_VERSION)
  --skip LIST           leave out some of shoal,kafka,redis
  --step-timeout SECS   limit of each step (default $STEP_TIMEOUT)
  --out FILE            JSON lines (default bench/results/streams-<time>.jsonl)
EOF
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) RECORDS=100000; RUNS=1; E2E_RECORDS=1000; BATCHES="1,100,1000"; PRODUCERS="1,4"; LOGS="1,4"; STEP_TIMEOUT=60; shift ;;
        --records) RECORDS="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --batches) BATCHES="$2"; shift 2 ;;
        --producers) PRODUCERS="$2"; shift 2 ;;
        --logs) LOGS="$2"; shift 2 ;;
        --peer-producers) PEER_PRODUCERS="$2"; shift 2 ;;
        --in-flight) IN_FLIGHT="$2"; shift 2 ;;
        --e2e-records) E2E_RECORDS="$2"; shift 2 ;;
        --kafka-version) KAFKA_VERSION="$2"; shift 2 ;;
        --skip) SKIP="$2"; shift 2 ;;
        --step-timeout) STEP_TIMEOUT="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "streams.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done

mkdir -p "$ROOT/bench/results"
OUT="${OUT:-$ROOT/bench/results/streams-$(date -u +%Y%m%dT%H%M%SZ).jsonl}"
: >"$OUT"
WORK="$(mktemp -d)"

log() { echo "[streams $(date -u +%H:%M:%S)] $*" >&2; }
use() { [[ ",$SKIP," != *",$1,"* ]]; }

# --- processes we start, and only those, are ended by PID ----------------------

PIDS=()
stop() {
    local pid="$1"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    for pid in "${PIDS[@]}"; do stop "$pid"; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port, wait_port
source "$ROOT/bench/lib.sh"

# Records for batch size $1: a tenth at B = 1, half at B = 10.
records_for() {
    if [[ -n "${RECORDS_OVERRIDE:-}" ]]; then echo "$RECORDS_OVERRIDE"; return; fi
    case "$1" in
        1) echo $((RECORDS / 10)) ;;
        10) echo $((RECORDS / 2)) ;;
        *) echo "$RECORDS" ;;
    esac
}

# record KEY=VALUE ...: one JSON line in $OUT (numbers stay numbers).
record() {
    python3 - "$@" >>"$OUT" <<'EOF'
import json, sys
out = {}
for kv in sys.argv[1:]:
    k, v = kv.split("=", 1)
    for conv in (int, float):
        try:
            out[k] = conv(v)
            break
        except ValueError:
            pass
    else:
        out[k] = v
print(json.dumps(out))
EOF
}

# --- install and build -----------------------------------------------------------

if use redis && { ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; }; then
    log "installing redis-server and redis-tools"
    SUDO=""; [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
    timeout "$STEP_TIMEOUT" $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive timeout 600 $SUDO apt-get install -y -q redis-server redis-tools
fi
if use kafka && { ! command -v java >/dev/null || ! command -v mvn >/dev/null; }; then
    log "installing a Java runtime and Maven"
    SUDO=""; [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
    timeout "$STEP_TIMEOUT" $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get install -y -q default-jre-headless maven
fi

KAFKA_LIBS="$ROOT/target/kafka-jars/$KAFKA_VERSION/libs"
if use kafka && [[ ! -f "$KAFKA_LIBS/kafka_2.13-$KAFKA_VERSION.jar" || ! -f "$KAFKA_LIBS/kafka-tools-$KAFKA_VERSION.jar" ]]; then
    log "fetching Kafka $KAFKA_VERSION's jars from Maven Central"
    dir="$ROOT/target/kafka-jars/$KAFKA_VERSION"
    mkdir -p "$dir"
    cat >"$dir/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>shoal.bench</groupId>
  <artifactId>kafka-jars</artifactId>
  <version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
  </dependencies>
</project>
EOF
    (cd "$dir" && timeout 900 mvn -q -B dependency:copy-dependencies -DoutputDirectory=libs -DincludeScope=runtime)
fi

if use shoal; then
    log "building Shoal (release)"
    (cd "$ROOT" && timeout 1800 cargo build --release -q -p shoal)
fi
SHOAL="$ROOT/target/release/shoal"

# --- Shoal -----------------------------------------------------------------------

start_shoal() {
    SHOAL_PORT=$(free_port)
    "$SHOAL" server --listen 127.0.0.1 --native-port "$SHOAL_PORT" --resp-port 0 --memcached-port 0 \
        --memory 3GiB --log-level warn >"$WORK/shoal.log" 2>&1 &
    SHOAL_PID=$!; PIDS+=("$SHOAL_PID")
    wait_port "$SHOAL_PORT" shoal
}

# shoal_run RUN P B Q [--e2e]: one `shoal bench stream` on a fresh server.
shoal_run() {
    local run="$1" p="$2" b="$3" q="$4"; shift 4
    local n out
    n=$(records_for "$b")
    start_shoal
    log "shoal: P=$p B=$b Q=$q $* ($n records), round $run"
    if ! out=$(timeout "$STEP_TIMEOUT" "$SHOAL" bench stream --server "127.0.0.1:$SHOAL_PORT" --json \
        --producers "$p" --batch "$b" --logs "$q" --record-size 100 --in-flight "$IN_FLIGHT" \
        --records "$n" --duration 60 "$@" 2>>"$WORK/bench.log"); then
        log "FAILED or incomplete: shoal bench stream P=$p B=$b Q=$q $* (see the error fields)"
    fi
    stop "$SHOAL_PID"
    python3 - "$run" "$out" "$*" >>"$OUT" <<'EOF'
import json, sys
run, text, extra = sys.argv[1:]
for line in text.splitlines():
    if not line.strip():
        continue
    r = json.loads(line)
    if r.get("error"):
        print(f"shoal {r['phase']}: {r['error']}", file=sys.stderr)
    print(json.dumps({
        # The --e2e run's produce phase ran beside its consumers: a phase of its own.
        "system": "shoal", "run": int(run),
        # --round-trip is compared with Kafka's EndToEndLatency (consume_e2e, B = 1).
        "phase": "produce_e2e" if r["phase"] == "produce" and "--e2e" in extra
                 else "consume_e2e" if r["phase"] == "round_trip" else r["phase"], "producers": r["producers"],
        "batch": r["batch"], "logs": r["logs"], "partitions": r["streamlets"], "records": r["records"],
        "records_per_sec": r["records_per_sec"], "mb_per_sec": r["mb_per_sec"],
        "p50_ms": r["p50_us"] / 1000, "p99_ms": r["p99_us"] / 1000, "error": r["error"],
    }))
EOF
}

# --- Kafka -----------------------------------------------------------------------

# The broker gets a fixed 1 GiB heap; the tools (StorageTool, TopicCommand,
# the performance tools) 512 MiB at most each.
KAFKA_BROKER=(java -Xms1g -Xmx1g -XX:+UseG1GC -cp "$KAFKA_LIBS/*")
KAFKA_TOOL=(java -Xmx512m -cp "$KAFKA_LIBS/*")

start_kafka() {
    KAFKA_PORT=$(free_port); KAFKA_CONTROLLER=$(free_port)
    KAFKA_DIR="$WORK/kafka"
    rm -rf "$KAFKA_DIR"; mkdir -p "$KAFKA_DIR/data"
    cat >"$KAFKA_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
    local id
    id=$(timeout 60 "${KAFKA_TOOL[@]}" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
    timeout 60 "${KAFKA_TOOL[@]}" kafka.tools.StorageTool format -t "$id" -c "$KAFKA_DIR/server.properties" \
        >"$KAFKA_DIR/format.log" 2>&1
    "${KAFKA_BROKER[@]}" kafka.Kafka "$KAFKA_DIR/server.properties" >"$KAFKA_DIR/broker.log" 2>&1 &
    KAFKA_PID=$!; PIDS+=("$KAFKA_PID")
    for _ in $(seq 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null && break
        kill -0 "$KAFKA_PID" 2>/dev/null || { tail -20 "$KAFKA_DIR/broker.log" >&2; exit 1; }
        sleep 0.1
    done
    wait_port "$KAFKA_PORT" kafka
}

KAFKA_TOPICS=0
# kafka_topic PARTITIONS: creates a fresh topic, its name in $TOPIC.
kafka_topic() {
    KAFKA_TOPICS=$((KAFKA_TOPICS + 1))
    TOPIC="bench$KAFKA_TOPICS"
    timeout 60 "${KAFKA_TOOL[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
        --create --topic "$TOPIC" --partitions "$1" --replication-factor 1 >>"$WORK/kafka-tools.log" 2>&1
}

# kafka_run RUN P B PARTITIONS: P ProducerPerformance processes, then one
# ConsumerPerformance reading every record back.
kafka_run() {
    local run="$1" p="$2" b="$3" parts="$4"
    local n per batch_bytes i pids=() ok=1
    n=$(records_for "$b"); per=$((n / p))
    # A record of 100 B takes about 110 B in a batch (varint lengths and
    # deltas); a batch has a 61-byte header: room for B records, not B+1.
    batch_bytes=$((b * 110 + 61))
    kafka_topic "$parts"
    log "kafka: P=$p B=$b (batch.size=$batch_bytes) partitions=$parts ($n records), round $run"
    for i in $(seq "$p"); do
        timeout "$STEP_TIMEOUT" "${KAFKA_TOOL[@]}" org.apache.kafka.tools.ProducerPerformance \
            --topic "$TOPIC" --num-records "$per" --record-size 100 --throughput -1 \
            --producer-props "bootstrap.servers=127.0.0.1:$KAFKA_PORT" acks=all "batch.size=$batch_bytes" \
            "linger.ms=$LINGER_MS" "max.in.flight.requests.per.connection=$IN_FLIGHT" \
            >"$WORK/producer-$i.out" 2>>"$WORK/kafka-tools.log" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || ok=0; done
    python3 - "$run" "$p" "$b" "$parts" "$ok" "$WORK"/producer-*.out >>"$OUT" <<'EOF'
import json, re, sys
run, p, b, parts, ok = sys.argv[1:6]
total, p50, p99, error = 0.0, [], [], None if ok == "1" else "a producer failed"
n = 0
for f in sys.argv[6:]:
    lines = [l for l in open(f) if "records sent" in l and "50th" in l]
    if not lines:
        error = error or f"no summary in {f}"
        continue
    l = lines[-1]
    n += int(l.split()[0])
    total += float(re.search(r"([\d.]+) records/sec", l).group(1))
    p50.append(float(re.search(r"([\d.]+) ms 50th", l).group(1)))
    p99.append(float(re.search(r"([\d.]+) ms 99th", l).group(1)))
print(json.dumps({
    "system": "kafka", "run": int(run), "phase": "produce", "producers": int(p), "batch": int(b), "logs": 1,
    "partitions": int(parts), "records": n, "records_per_sec": total, "mb_per_sec": total * 100 / 1e6,
    "p50_ms": max(p50, default=0), "p99_ms": max(p99, default=0), "error": error,
}))
EOF
    rm -f "$WORK"/producer-*.out
    local out
    if ! out=$(timeout "$STEP_TIMEOUT" "${KAFKA_TOOL[@]}" org.apache.kafka.tools.ConsumerPerformance \
        --bootstrap-server "127.0.0.1:$KAFKA_PORT" --topic "$TOPIC" --messages "$((per * p))" --timeout 30000 \
        2>>"$WORK/kafka-tools.log"); then
        log "FAILED: ConsumerPerformance on $TOPIC"
    fi
    python3 - "$run" "$p" "$b" "$parts" "$((per * p))" "$out" >>"$OUT" <<'EOF'
import json, sys
run, p, b, parts, want, text = sys.argv[1:]
lines = [l for l in text.splitlines() if l.strip()]
rec = {"system": "kafka", "run": int(run), "phase": "consume", "producers": int(p), "batch": int(b), "logs": 1,
       "partitions": int(parts)}
try:
    head = [h.strip() for h in lines[-2].split(",")]
    row = dict(zip(head, (v.strip() for v in lines[-1].split(","))))
    n = int(row["data.consumed.in.nMsg"])
    # fetch.nMsg.sec leaves out the consumer group's join (Shoal's consumer has none).
    rate = float(row["fetch.nMsg.sec"])
    rec.update(records=n, records_per_sec=rate, mb_per_sec=rate * 100 / 1e6,
               error=None if n >= int(want) else f"read {n} of {want}")
except Exception as e:
    rec.update(records=0, records_per_sec=0, mb_per_sec=0, error=f"no result: {e}")
print(json.dumps(rec))
EOF
}

# kafka_e2e RUN: Kafka's EndToEndLatency, one record at a time (sent with
# acks=all, then polled by its consumer before the next is sent).
kafka_e2e() {
    local run="$1" out
    kafka_topic 1
    log "kafka: EndToEndLatency, $E2E_RECORDS records, round $run"
    if ! out=$(timeout "$STEP_TIMEOUT" "${KAFKA_TOOL[@]}" org.apache.kafka.tools.EndToEndLatency \
        --bootstrap-server "127.0.0.1:$KAFKA_PORT" --topic "$TOPIC" --num-records "$E2E_RECORDS" \
        --producer-acks all --record-size 100 2>>"$WORK/kafka-tools.log"); then
        log "FAILED: EndToEndLatency"
    fi
    python3 - "$run" "$out" >>"$OUT" <<'EOF'
import json, re, sys
run, text = sys.argv[1:]
rec = {"system": "kafka", "run": int(run), "phase": "consume_e2e", "producers": 1, "batch": 1, "logs": 1,
       "partitions": 1}
m = re.search(r"50th = (\d+), 99th = (\d+)", text)
if m:
    # EndToEndLatency reports whole milliseconds.
    rec.update(p50_ms=float(m.group(1)), p99_ms=float(m.group(2)), error=None)
else:
    rec.update(error="no percentiles in its output")
print(json.dumps(rec))
EOF
}

# --- Redis -----------------------------------------------------------------------

start_redis() {
    REDIS_PORT=$(free_port)
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
        --logfile "$WORK/redis.log" &
    REDIS_PID=$!; PIDS+=("$REDIS_PID")
    wait_port "$REDIS_PORT" redis-server
}

VALUE=$(printf 'v%.0s' $(seq 100))
# redis_run RUN P B: redis-benchmark XADD, P connections, pipelined B deep.
redis_run() {
    local run="$1" p="$2" b="$3" n csv
    n=$(records_for "$b")
    log "redis: XADD P=$p pipeline=$b ($n records), round $run"
    redis-cli -p "$REDIS_PORT" del s >/dev/null
    if ! csv=$(timeout "$STEP_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" --csv -c "$p" -P "$b" -n "$n" \
        XADD s '*' f "$VALUE"); then
        log "FAILED: redis-benchmark XADD"
    fi
    local len
    len=$(redis-cli -p "$REDIS_PORT" xlen s)
    python3 - "$run" "$p" "$b" "$n" "$len" "$csv" >>"$OUT" <<'EOF'
import csv, io, json, sys
run, p, b, n, length, text = sys.argv[1:]
rows = list(csv.DictReader(io.StringIO(text)))
rec = {"system": "redis", "run": int(run), "phase": "produce", "producers": int(p), "batch": int(b), "logs": 1,
       "partitions": 1, "records": int(length)}
if rows:
    r = rows[-1]
    rate = float(r["rps"])
    rec.update(records_per_sec=rate, mb_per_sec=rate * 100 / 1e6, p50_ms=float(r["p50_latency_ms"]),
               p99_ms=float(r["p99_latency_ms"]), error=None if int(length) == int(n) else f"XLEN {length}, sent {n}")
else:
    rec.update(records_per_sec=0, mb_per_sec=0, error="no result")
print(json.dumps(rec))
EOF
    redis-cli -p "$REDIS_PORT" del s >/dev/null
}

# --- the rounds ------------------------------------------------------------------

IFS=, read -r -a BATCH_LIST <<<"$BATCHES"
IFS=, read -r -a PRODUCER_LIST <<<"$PRODUCERS"
IFS=, read -r -a LOG_LIST <<<"$LOGS"

log "$(nproc) cores; $(java -version 2>&1 | head -1); $(redis-server --version | cut -d' ' -f1-3); Kafka $KAFKA_VERSION"
for run in $(seq "$RUNS"); do
    if use shoal; then
        for b in "${BATCH_LIST[@]}"; do shoal_run "$run" 1 "$b" 1; done
        for q in "${LOG_LIST[@]}"; do
            for p in "${PRODUCER_LIST[@]}"; do
                # P = 1, Q = 1, B = 100 ran above when B = 100 is listed.
                [[ "$p" == 1 && "$q" == 1 && ",$BATCHES," == *",100,"* ]] && continue
                shoal_run "$run" "$p" 100 "$q"
            done
        done
        shoal_run "$run" 1 100 1 --e2e
        # One record at a time, as Kafka's EndToEndLatency sends them.
        if [[ "$E2E_RECORDS" -gt 0 ]]; then
            RECORDS_OVERRIDE="$E2E_RECORDS" IN_FLIGHT=1 shoal_run "$run" 1 1 1 --round-trip
        fi
    fi
    if use kafka; then
        log "kafka: starting the broker, round $run"
        start_kafka
        for b in "${BATCH_LIST[@]}"; do kafka_run "$run" 1 "$b" 1; done
        if [[ "$PEER_PRODUCERS" -gt 1 ]]; then kafka_run "$run" "$PEER_PRODUCERS" 100 "$PEER_PRODUCERS"; fi
        if [[ "$E2E_RECORDS" -gt 0 ]]; then kafka_e2e "$run"; fi
        stop "$KAFKA_PID"; rm -rf "$KAFKA_DIR"
    fi
    if use redis; then
        start_redis
        for b in "${BATCH_LIST[@]}"; do redis_run "$run" 1 "$b"; done
        if [[ "$PEER_PRODUCERS" -gt 1 ]]; then redis_run "$run" "$PEER_PRODUCERS" 100; fi
        stop "$REDIS_PID"
    fi
done

# --- summary ---------------------------------------------------------------------

python3 - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def key(r):
    return (r["system"], r["phase"], r["producers"], r["batch"], r["logs"], r["partitions"])
groups = {}
for r in rows:
    groups.setdefault(key(r), []).append(r)
def med(rs, f):
    vals = [r[f] for r in rs if f in r and r[f] is not None]
    return statistics.median(vals) if vals else None
summary = {k: {"records_per_sec": med(v, "records_per_sec"), "mb_per_sec": med(v, "mb_per_sec"),
               "p50_ms": med(v, "p50_ms"), "p99_ms": med(v, "p99_ms"), "runs": len(v),
               "errors": sorted({r["error"] for r in v if r.get("error")})} for k, v in groups.items()}
def fmt(x, spec):
    return "-" if x is None else format(x, spec)
print("\nmedians of %d round(s); records of 100 B; MB = 10^6 bytes; latency: Shoal per batch (first record handed over"
      " to acknowledgement), Kafka per record (ProducerPerformance), Redis per request (redis-benchmark)" %
      max((r["run"] for r in rows), default=0))
print(f"{'system':<6} {'phase':<11} {'P':>2} {'B':>5} {'Q':>2} {'parts':>5} {'records/s':>11} {'MB/s':>7}"
      f" {'p50 ms':>8} {'p99 ms':>8}  errors")
for k in sorted(summary, key=lambda k: (k[1], k[0], k[2], k[3], k[4])):
    s = summary[k]
    print(f"{k[0]:<6} {k[1]:<11} {k[2]:>2} {k[3]:>5} {k[4]:>2} {k[5]:>5} {fmt(s['records_per_sec'], ',.0f'):>11}"
          f" {fmt(s['mb_per_sec'], '.1f'):>7} {fmt(s['p50_ms'], '.2f'):>8} {fmt(s['p99_ms'], '.2f'):>8}"
          f"  {'; '.join(s['errors'])}")
print("\nratios of medians (records/s), same P and B; Shoal at Q=1 against one partition, and at Q=P against P partitions")
print(f"{'phase':<8} {'P':>2} {'B':>5} {'Shoal/Kafka':>12} {'target':>7} {'Shoal/Redis':>12} {'target':>7}")
for k in sorted(summary):
    system, phase, p, b, q, parts = k
    if system != "kafka" or phase == "consume_e2e":
        continue
    sq = q if p == 1 else p
    shoal = summary.get(("shoal", phase, p, b, sq, 1))
    redis = summary.get(("redis", phase, p, b, 1, 1))
    if not shoal:
        continue
    s = shoal["records_per_sec"]
    kr = s / summary[k]["records_per_sec"] if summary[k]["records_per_sec"] else None
    rr = s / redis["records_per_sec"] if redis and redis["records_per_sec"] else None
    kt = 1.5 if phase == "produce" else 1.0
    rt = 2.0 if phase == "produce" else None
    print(f"{phase:<8} {p:>2} {b:>5} {fmt(kr, '.2f'):>12} {('>=' + str(kt)):>7} {fmt(rr, '.2f'):>12}"
          f" {('>=' + str(rt)) if rt else '':>7}")
shoal, kafka = summary.get(("shoal", "consume_e2e", 1, 1, 1, 1)), summary.get(("kafka", "consume_e2e", 1, 1, 1, 1))
if shoal and kafka:
    print(f"\nproduce-to-consume latency, one record at a time: Shoal p50 {fmt(shoal['p50_ms'], '.3f')} ms,"
          f" p99 {fmt(shoal['p99_ms'], '.3f')} ms; Kafka (EndToEndLatency, whole ms) p50 {fmt(kafka['p50_ms'], '.0f')} ms,"
          f" p99 {fmt(kafka['p99_ms'], '.0f')} ms")
EOF
log "results in $OUT"
