#!/usr/bin/env python3
"""Compares client authentication (AUTH, HELLO ... AUTH, NOAUTH, WRONGPASS,
CONFIG GET requirepass) between Shoal and a real redis-server, reply by
reply, raw bytes included.

Usage: auth_compat.py --shoal-port PORT --shoal-open-port PORT
                      --acl-file FILE [--redis-server PATH]

--shoal-port is a Shoal server started with `--password secret` and the
ACL file FILE (users alice, bob, carol, whose lines this script checks);
--shoal-open-port a Shoal server without credentials. The script starts
two redis-servers to match: one with an ACL file holding the same users
plus `user default on >secret` (Redis ignores requirepass when it loads an
ACL file, Shoal refuses the combination, so the default user's password
is given to each in its own way), and one without credentials. Every
session below runs on a fresh connection to each pair; the replies must be
equal byte for byte, except the id and version fields of HELLO's map.
Then redis-py logs in each way a program does (password, username and
password, RESP3 with HELLO 3 AUTH) and the outcomes must match too.
Exits 1 on any difference.
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

# Sessions against the servers with credentials. Each is a list of
# commands; the whole list is sent in one write (a pipeline), so a command
# after a failed AUTH must not run.
PROTECTED = [
    [["PING"], ["GET", "k"], ["SET", "k", "v"], ["ECHO", "x"], ["SELECT", "1"], ["CLIENT", "SETNAME", "x"],
     ["COMMAND", "COUNT"], ["CONFIG", "GET", "requirepass"], ["DBSIZE"]],
    [["NOSUCH", "x"], ["GET"], ["AUTH"], ["AUTH", "a", "b", "c"]],
    [["AUTH", "wrong"], ["SET", "k", "v"], ["GET", "k"]],
    [["AUTH", "default", "wrong"], ["AUTH", "nosuch", "x"], ["AUTH", "bob", "bpw"], ["AUTH", "alice", "apw3"],
     ["GET", "k"]],
    [["AUTH", "secret"], ["GET", "k"], ["AUTH", "wrong"], ["GET", "k"], ["AUTH", "default", "secret"]],
    [["AUTH", "alice", "apw"], ["SET", "k", "from-alice"], ["GET", "k"], ["DEL", "k"]],
    [["AUTH", "alice", "apw2"], ["GET", "k"], ["AUTH", "carol", "anything"], ["GET", "k"]],
    [["HELLO"], ["HELLO", "3"], ["HELLO", "2", "SETNAME", "early"], ["AUTH", "secret"], ["CLIENT", "GETNAME"]],
    [["HELLO", "3", "AUTH", "default", "wrong"], ["GET", "k"]],
    [["HELLO", "3", "AUTH", "alice"], ["HELLO", "4", "AUTH", "alice", "apw"], ["HELLO", "x", "AUTH", "alice", "apw"],
     ["GET", "k"]],
    [["HELLO", "3", "AUTH", "alice", "apw"], ["GET", "k"], ["HELLO", "2"], ["GET", "k"]],
    [["HELLO", "2", "AUTH", "default", "secret", "SETNAME", "me"], ["CLIENT", "GETNAME"]],
    [["HELLO", "3", "AUTH", "alice", "apw", "BAD"], ["GET", "k"], ["CLIENT", "GETNAME"]],
    [["HELLO", "3", "SETNAME", "bad name", "AUTH", "alice", "apw"], ["GET", "k"]],
    [["HELLO", "3", "AUTH", "bob", "bpw"], ["HELLO", "2", "AUTH", "carol", ""], ["SET", "k", "v"], ["DEL", "k"]],
    [["AUTH", "secret"], ["HELLO", "3", "AUTH", "default", "wrong"], ["GET", "k"]],
    [["QUIT"]],
]

# Sessions against the servers without credentials.
OPEN = [
    [["AUTH", "x"], ["AUTH", "default", "x"], ["AUTH", "nosuch", "x"], ["AUTH", "default", ""], ["GET", "k"]],
    [["HELLO", "3", "AUTH", "default", "x"], ["GET", "k"]],
    [["HELLO", "2", "AUTH", "nosuch", "x"], ["CONFIG", "GET", "requirepass"]],
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(path, extra):
    port = free_port()
    proc = subprocess.Popen(
        [path, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--daemonize", "no", "--loglevel", "warning"] + extra,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start on port %d" % port)


def encode(cmd):
    out = b"*%d\r\n" % len(cmd)
    for a in cmd:
        a = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def read_reply(f):
    """One whole reply from the file `f`, as raw bytes (None at EOF)."""
    line = f.readline()
    if not line:
        return None
    out = line
    kind, rest = line[:1], line[1:-2]
    if kind in b"$=!":
        n = int(rest)
        if n >= 0:
            out += f.read(n + 2)
    elif kind in b"*~>%|":
        n = int(rest)
        for _ in range(max(n, 0) * (2 if kind in b"%|" else 1)):
            out += read_reply(f)
    return out


HELLO_FIELDS = re.compile(rb"(\$2\r\nid\r\n):\d+(\r\n)|(\$7\r\nversion\r\n)\$\d+\r\n[^\r]*(\r\n)")


def normalize(reply):
    """Hides HELLO's id and version, which differ between servers by design."""
    return HELLO_FIELDS.sub(lambda m: (m.group(1) or m.group(3)) + b"?" + (m.group(2) or m.group(4)), reply)


def run_session(port, session):
    """The replies to `session`, sent as one pipeline; "<closed>" once the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"".join(encode(c) for c in session))
        f = s.makefile("rb")
        replies = []
        for _ in session:
            r = read_reply(f)
            if r is None:
                replies.append(b"<closed>")
                break
            replies.append(normalize(r))
        if session[-1] == ["QUIT"]:
            replies.append(b"<closed>" if f.read(1) == b"" else b"<open>")
        return replies


def py_outcome(port, **kw):
    """What a redis-py program sees logging in with `kw` and doing a round trip."""
    try:
        # No retries: redis-py retries a refused login (a ConnectionError) with backoff.
        r = redis.Redis(port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0), **kw)
        r.set("py", "1")
        v = r.get("py")
        r.delete("py")
        return ("ok", v)
    except redis.exceptions.RedisError as e:
        return (type(e).__name__, str(e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shoal-port", type=int, required=True)
    ap.add_argument("--shoal-open-port", type=int, required=True)
    ap.add_argument("--acl-file", required=True)
    ap.add_argument("--redis-server", default="redis-server")
    args = ap.parse_args()
    with open(args.acl_file) as f:
        users = f.read()
    tmp = tempfile.mkdtemp(prefix="auth-compat-")
    redis_acl = os.path.join(tmp, "users.acl")
    with open(redis_acl, "w") as f:
        f.write("user default on >secret ~* &* +@all\n" + users)
    procs = []
    try:
        proc, protected = start_redis(args.redis_server, ["--aclfile", redis_acl])
        procs.append(proc)
        proc, open_port = start_redis(args.redis_server, [])
        procs.append(proc)
        diffs = []
        checked = 0
        pairs = [(PROTECTED, protected, args.shoal_port), (OPEN, open_port, args.shoal_open_port)]
        for sessions, redis_port, shoal_port in pairs:
            for session in sessions:
                want = run_session(redis_port, session)
                got = run_session(shoal_port, session)
                checked += len(want)
                if want != got:
                    diffs.append("session %r:\n  redis: %r\n  shoal: %r" % (session, want, got))
        logins = [
            (protected, args.shoal_port, {}),
            (protected, args.shoal_port, {"password": "secret"}),
            (protected, args.shoal_port, {"password": "wrong"}),
            (protected, args.shoal_port, {"username": "alice", "password": "apw"}),
            (protected, args.shoal_port, {"username": "alice", "password": "nope"}),
            (protected, args.shoal_port, {"username": "bob", "password": "bpw"}),
            (protected, args.shoal_port, {"username": "alice", "password": "apw", "protocol": 3}),
            (protected, args.shoal_port, {"username": "alice", "password": "bad", "protocol": 3}),
            (protected, args.shoal_port, {"protocol": 3}),
            (open_port, args.shoal_open_port, {"password": "anything"}),
            (open_port, args.shoal_open_port, {"username": "default", "password": "x", "protocol": 3}),
        ]
        for redis_port, shoal_port, kw in logins:
            want, got = py_outcome(redis_port, **kw), py_outcome(shoal_port, **kw)
            checked += 1
            if want != got:
                diffs.append("redis-py %r:\n  redis: %r\n  shoal: %r" % (kw, want, got))
        print("auth_compat: %d replies compared, %d differences" % (checked, len(diffs)))
        for d in diffs[:20]:
            print(d)
        sys.exit(1 if diffs else 0)
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
