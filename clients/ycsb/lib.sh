# Shell helpers for scripts/ycsb-smoke and bench/ycsb.sh (sourced, not run).
# They start and stop only the processes they start, by PID.

YCSB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The shoal binary: $1, else $SHOAL_BIN, else target/release/shoal, else
# target/debug/shoal (relative to the repository root).
pick_shoal_bin() {
    local root="$YCSB_DIR/../.."
    local bin="${1:-${SHOAL_BIN:-}}"
    if [ -z "$bin" ]; then
        if [ -x "$root/target/release/shoal" ]; then bin="$root/target/release/shoal"
        elif [ -x "$root/target/debug/shoal" ]; then bin="$root/target/debug/shoal"
        else
            echo "no shoal binary: build it (cargo build --release) or set SHOAL_BIN" >&2
            return 1
        fi
    fi
    [ -x "$bin" ] || { echo "$bin is not an executable" >&2; return 1; }
    echo "$bin"
}

# start_shoal_local BIN ROOT SERVERS [MEMORY]: starts `shoal local` with
# every port picked free, waits (at most 60 s) until it prints its
# coordinator and every server is up. Sets SHOAL_PID and SHOAL_COORD.
start_shoal_local() {
    local bin="$1" root="$2" servers="$3" memory="${4:-512MiB}"
    rm -rf "$root"
    mkdir -p "$root"
    "$bin" local --servers "$servers" --root "$root/cluster" --memory "$memory" \
        --coordinator-port 0 --native-port 0 --resp-port 0 --memcached-port 0 --backup-port 0 \
        --log-level warn >"$root/local.out" 2>&1 </dev/null &
    SHOAL_PID=$!
    SHOAL_COORD=""
    local i
    for i in $(seq 600); do
        SHOAL_COORD=$(sed -n 's/^ *coordinator: *\([^ ]*\).*/\1/p' "$root/local.out" | head -1)
        [ -n "$SHOAL_COORD" ] && break
        if ! kill -0 "$SHOAL_PID" 2>/dev/null; then
            echo "shoal local exited:" >&2
            cat "$root/local.out" >&2
            return 1
        fi
        sleep 0.1
    done
    if [ -z "$SHOAL_COORD" ]; then
        echo "shoal local printed no coordinator address within 60 s" >&2
        return 1
    fi
    python3 "$YCSB_DIR/wait_cluster.py" "$SHOAL_COORD" "$servers" 60
}

# stop_pid PID [SIGNAL]: SIGNAL (default TERM), then up to 20 s for it to
# exit, then SIGKILL.
stop_pid() {
    local pid="$1" sig="${2:-TERM}" i
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    kill "-$sig" "$pid" 2>/dev/null || true
    for i in $(seq 200); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}


# A free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
