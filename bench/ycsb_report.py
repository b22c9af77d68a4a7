#!/usr/bin/env python3
"""Reads the YCSB results of bench/ycsb.sh (YCSB's text export, one file per
system, workload and phase, listed in a manifest), prints a table, writes
JSON and plots throughput and latency per workload into a PNG."""
import argparse
import datetime
import json
import os
import platform
import re
import sys

OPS = ("READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE")
SYSTEM_ORDER = ("shoal", "redis", "memcached")
LABEL = {"shoal": "Shoal (native)", "redis": "Redis", "memcached": "memcached"}
# The operation whose latency the plot shows for each workload: the one the
# workload is about.
MAIN_OP = {"a": "UPDATE", "b": "READ", "c": "READ", "d": "READ", "e": "SCAN", "f": "READ-MODIFY-WRITE"}


def parse_export(path):
    """YCSB's text export: '[SECTION], metric, value' lines -> {section: {metric: value}}."""
    sections = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"^\[([^\]]+)\], ([^,]+), (.+)$", line.strip())
            if m:
                sections.setdefault(m.group(1), {})[m.group(2)] = m.group(3)
    return sections


def num(v):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return int(x) if x.is_integer() else x


def summarize(sections):
    overall = sections.get("OVERALL", {})
    ops, failed, not_ok = {}, 0, 0
    for sec, metrics in sections.items():
        if sec.endswith("-FAILED"):
            failed += int(num(metrics.get("Operations")) or 0)
        if sec not in OPS:
            continue
        returns = {k[len("Return="):]: num(v) for k, v in metrics.items() if k.startswith("Return=")}
        not_ok += sum(v for k, v in returns.items() if k != "OK")
        ops[sec] = {
            "operations": num(metrics.get("Operations")),
            "avg_us": num(metrics.get("AverageLatency(us)")),
            "min_us": num(metrics.get("MinLatency(us)")),
            "max_us": num(metrics.get("MaxLatency(us)")),
            "p95_us": num(metrics.get("95thPercentileLatency(us)")),
            "p99_us": num(metrics.get("99thPercentileLatency(us)")),
            "returns": returns,
        }
    return {
        "runtime_ms": num(overall.get("RunTime(ms)")),
        "throughput_ops_s": num(overall.get("Throughput(ops/sec)")),
        "operations": ops,
        "failed_operations": failed,
        "not_ok_returns": not_ok,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--png", required=True)
    for k in ("records", "ops", "threads", "servers", "elapsed"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--max-seconds", type=int, default=0)
    ap.add_argument("--shoal-memory", default="")
    ap.add_argument("--shoal-version", default="")
    a = ap.parse_args()

    results = []
    with open(a.manifest) as f:
        for line in f:
            system, workload, phase, path = line.rstrip("\n").split("\t")
            r = {"system": system, "workload": workload, "phase": phase}
            if phase == "skipped":
                r["skipped"] = path
            elif not os.path.exists(path):
                r["error"] = "YCSB wrote no results (it failed or timed out)"
            else:
                r.update(summarize(parse_export(path)))
                # YCSB stops a phase at maxexecutiontime, with fewer operations than asked.
                r["stopped_at_max_seconds"] = bool(a.max_seconds and r["runtime_ms"]
                                                   and r["runtime_ms"] >= a.max_seconds * 1000)
            results.append(r)

    doc = {
        "benchmark": "YCSB 0.17.0 core workloads, bench/ycsb.sh",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "config": {"records": a.records, "operations": a.ops, "threads": a.threads,
                   "shoal_servers": a.servers, "shoal_memory": a.shoal_memory,
                   "shoal_version": a.shoal_version.strip(), "elapsed_s": a.elapsed,
                   "max_seconds": a.max_seconds},
        "results": results,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    # The table: one line per workload, system and phase.
    print()
    print(f"YCSB: {a.records} records, {a.ops} operations, {a.threads} threads; latencies in microseconds")
    print(f"{'wl':<3}{'system':<11}{'phase':<6}{'ops/s':>10}  {'operation':<18}{'count':>8}{'avg':>9}{'p95':>8}{'p99':>8}  failed")
    bad = 0
    stopped = []
    for r in results:
        head = f"{r['workload']:<3}{r['system']:<11}{r['phase']:<6}"
        if "skipped" in r:
            print(f"{head}{'-':>10}  skipped: {r['skipped']}")
            continue
        if "error" in r:
            print(f"{head}{'-':>10}  {r['error']}")
            bad += 1
            continue
        problems = r["failed_operations"] + r["not_ok_returns"]
        bad += problems
        if r["stopped_at_max_seconds"]:
            stopped.append(f"{r['workload']} {r['system']} {r['phase']}")
        first = True
        for op, m in r["operations"].items():
            tp = f"{r['throughput_ops_s']:>10.0f}" if first else " " * 10
            print(f"{head if first else ' ' * 20}{tp}  {op:<18}{m['operations'] or 0:>8}{m['avg_us'] or 0:>9.0f}"
                  f"{m['p95_us'] or 0:>8}{m['p99_us'] or 0:>8}  {problems if first else ''}")
            first = False
    if stopped:
        print(f"\nstopped by --max-seconds before all their operations: {', '.join(stopped)}")
    print(f"\nJSON: {a.out}")
    plot(doc, a.png)
    if bad:
        print(f"{bad} operations failed or returned something other than OK (see the table)", file=sys.stderr)


def plot(doc, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG")
        return
    runs = [r for r in doc["results"] if r["phase"] == "run" and "operations" in r]
    workloads = sorted({r["workload"] for r in doc["results"]})
    systems = [s for s in SYSTEM_ORDER if any(r["system"] == s for r in doc["results"])]
    if not workloads or not systems:
        return
    by = {(r["system"], r["workload"]): r for r in runs}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(systems)
    colors = {"shoal": "#1f77b4", "redis": "#d62728", "memcached": "#2ca02c"}
    for i, s in enumerate(systems):
        xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(workloads))]
        tput, lat = [], []
        for w in workloads:
            r = by.get((s, w))
            tput.append(r["throughput_ops_s"] if r else 0)
            m = r["operations"].get(MAIN_OP[w]) if r else None
            lat.append((m["p99_us"] or 0) / 1000 if m else 0)
        ax1.bar(xs, tput, width, label=LABEL[s], color=colors[s])
        ax2.bar(xs, lat, width, label=LABEL[s], color=colors[s])
        for x, w in zip(xs, workloads):
            if (s, w) not in by:
                for ax in (ax1, ax2):
                    ax.annotate("n/a", (x, 0.02), xycoords=("data", "axes fraction"), ha="center", va="bottom",
                                fontsize=7, rotation=90)
    short = {"READ-MODIFY-WRITE": "rmw"}
    names = [f"{w.upper()}\n({short.get(MAIN_OP[w], MAIN_OP[w].lower())})" for w in workloads]
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(workloads)))
        ax.set_xticklabels(names)
        ax.set_xlabel("YCSB workload (operation whose latency is shown)")
        ax.grid(axis="y", alpha=0.3)
    ax1.set_ylabel("throughput (operations/s)")
    ax1.set_title("Throughput")
    ax2.set_yscale("log")
    ax2.set_ylabel("p99 latency (ms, log scale)")
    ax2.set_title("99th percentile latency of the workload's main operation")
    ax1.legend()
    c = doc["config"]
    fig.suptitle(f"YCSB 0.17.0: {c['records']} records, {c['operations']} operations, {c['threads']} threads; "
                 f"Shoal: {c['shoal_servers']} servers on one machine ({doc['machine']['cpus']} CPUs), "
                 f"{doc['date'][:10]}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"PNG: {path}")


if __name__ == "__main__":
    main()
