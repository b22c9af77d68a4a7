#!/usr/bin/env python3
"""Checks scrapes of Shoal's /metrics with the Prometheus client library's
parsers (tests/metrics.rs runs it; scripts/check installs prometheus_client).

    metrics_check.py FIRST SECOND --openmetrics OM [--moved SAMPLE]...

FIRST and SECOND are two scrapes in the Prometheus text format (0.0.4) of one
process, SECOND taken after some load; OM is a scrape in OpenMetrics. Exits
non-zero, naming each problem, unless:
  * every file parses (OM with the strict OpenMetrics parser);
  * every family is a counter, gauge or histogram named shoal_..., and a
    counter's samples end in _total;
  * histogram buckets are cumulative and end in +Inf equal to _count;
  * no counter (nor histogram sample) went down from FIRST to SECOND;
  * each --moved sample, e.g. 'shoal_requests_total{frontend="resp",command="set"}',
    is larger in SECOND than in FIRST (absent counts as 0).
"""

import argparse
import math
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text


def key(name, labels):
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}" if inner else name


def normalise(spec):
    """A sample spec as key() writes it (labels sorted)."""
    if "{" not in spec:
        return spec
    name, rest = spec.split("{", 1)
    labels = dict(part.split("=", 1) for part in rest.rstrip("}").split(",") if part)
    return key(name, {k: v.strip('"') for k, v in labels.items()})


def check(families, where, problems):
    """Checks one scrape's families; returns {sample key: value} of the
    samples that may only grow (counters, histograms)."""
    growing = {}
    for f in families:
        if not f.name.startswith("shoal_"):
            problems.append(f"{where}: family {f.name} lacks the shoal_ prefix")
        if f.type not in ("counter", "gauge", "histogram"):
            problems.append(f"{where}: family {f.name} has type {f.type}")
        buckets = {}
        for s in f.samples:
            if math.isnan(s.value):
                problems.append(f"{where}: {key(s.name, s.labels)} is NaN")
            if f.type == "counter":
                if not s.name.endswith("_total"):
                    problems.append(f"{where}: counter sample {s.name} does not end in _total")
                growing[key(s.name, s.labels)] = s.value
            elif f.type == "histogram":
                growing[key(s.name, s.labels)] = s.value
                if s.name.endswith("_bucket"):
                    rest = {k: v for k, v in s.labels.items() if k != "le"}
                    buckets.setdefault(key(f.name, rest), []).append((float(s.labels["le"]), s.value))
        for series, bs in buckets.items():
            counts = [c for _, c in sorted(bs)]
            if counts != sorted(counts):
                problems.append(f"{where}: buckets of {series} are not cumulative")
            if sorted(bs)[-1][0] != math.inf:
                problems.append(f"{where}: buckets of {series} do not end in +Inf")
            name, _, labels = series.partition("{")
            total = growing.get(f"{name}_count{{{labels}" if labels else f"{name}_count")
            if total is not None and counts[-1] != total:
                problems.append(f"{where}: {series}: +Inf bucket {counts[-1]} != count {total}")
    return growing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("--openmetrics", required=True)
    ap.add_argument("--moved", action="append", default=[])
    args = ap.parse_args()
    problems = []
    scrapes = []
    for path in (args.first, args.second):
        with open(path) as f:
            text = f.read()
        try:
            families = list(parse_text(text))
        except Exception as e:  # noqa: BLE001 - any parse failure is the finding
            print(f"{path}: does not parse as the Prometheus text format: {e!r}")
            return 1
        scrapes.append((families, check(families, path, problems)))
    with open(args.openmetrics) as f:
        om = f.read()
    try:
        om_families = list(parse_openmetrics(om))
    except Exception as e:  # noqa: BLE001
        print(f"{args.openmetrics}: does not parse as OpenMetrics: {e!r}")
        return 1
    (families, first), (_, second) = scrapes
    names = {f.name for f in families}
    om_names = {f.name for f in om_families}
    # The OpenMetrics parser names counter families without _total.
    if {n[: -len("_total")] if n.endswith("_total") else n for n in names} != om_names:
        problems.append(f"the formats list different families: {sorted(names ^ om_names)}")
    for k, v in first.items():
        if k in second and second[k] < v:
            problems.append(f"{k} went down: {v} -> {second[k]}")
    for spec in args.moved:
        k = normalise(spec)
        if k not in second:
            problems.append(f"{spec}: not in the second scrape")
        elif second[k] <= first.get(k, 0):
            problems.append(f"{spec}: did not move ({first.get(k, 0)} -> {second[k]})")
    for p in problems:
        print("problem:", p)
    samples = sum(len(f.samples) for f in families)
    print(f"metrics check: {len(families)} families, {samples} samples, {len(args.moved)} moved, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
