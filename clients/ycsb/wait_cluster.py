#!/usr/bin/env python3
"""Waits until the coordinator at HOST:PORT reports N servers up (at most
TIMEOUT seconds, default 30), asking its control port for the map
(docs/coordinator.md: u32 little-endian length + JSON). Exits 1 on timeout.
Usage: clients/ycsb/wait_cluster.py HOST:PORT N [TIMEOUT]"""
import json
import socket
import struct
import sys
import time


def get_map(host, port):
    with socket.create_connection((host, port), timeout=5) as s:
        body = json.dumps({"op": "get_map"}).encode()
        s.sendall(struct.pack("<I", len(body)) + body)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                raise OSError("closed")
            head += chunk
        n = struct.unpack("<I", head)[0]
        data = b""
        while len(data) < n:
            chunk = s.recv(n - len(data))
            if not chunk:
                raise OSError("closed")
            data += chunk
        return json.loads(data)["map"]


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    want = int(sys.argv[2])
    deadline = time.monotonic() + (float(sys.argv[3]) if len(sys.argv) > 3 else 30)
    up = 0
    while time.monotonic() < deadline:
        try:
            up = sum(1 for s in get_map(host, int(port))["servers"] if s["state"] == "up")
            if up >= want:
                return 0
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    print(f"wait_cluster: {up} of {want} servers up at {sys.argv[1]} after the timeout", file=sys.stderr)
    return 1


sys.exit(main())
