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
