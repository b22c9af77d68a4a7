# Shell helpers shared by the benchmark scripts (sourced, not run).

# A free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Waits up to 10 s until something listens on 127.0.0.1:$1 ($2 names it).
wait_port() {
    local port="$1" name="$2"
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "$(basename "$0"): $name did not listen on port $port within 10 s" >&2
    exit 1
}

# Ends the processes whose PIDs are in the array `pids` (SIGTERM, then
# waits for each); for a script's EXIT trap.
end_pids() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}

# Waits up to 30 s until the coordinator at $2 lists at least $3 servers
# up, asking with the shoal binary $1.
wait_servers_up() {
    local bin="$1" coord="$2" want="$3" n
    for _ in $(seq 150); do
        n=$("$bin" stats --coordinator "$coord" --json 2>/dev/null | grep -c '"state":"up"' || true)
        [ "$n" -ge "$want" ] && return 0
        sleep 0.2
    done
    echo "$(basename "$0"): fewer than $want servers up after 30 s" >&2
    exit 1
}
