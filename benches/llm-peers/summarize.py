#!/usr/bin/env python3
"""Markdown tables of benches/llm-peers.sh from oha's JSON reports.

Usage: summarize.py DIR TARGETS RATES
  DIR      holds TARGET-serial.json and TARGET-RATE.json (oha --output-format json),
           each with a .cpu_us file beside it (the target's CPU time meanwhile)
  TARGETS  comma-separated, "direct" first (the baseline of the added columns)
  RATES    comma-separated requests/s of the open-loop runs

Definitions (per run):
  ok          responses with a 2xx status
  errors      non-2xx responses plus failed requests (connection errors,
              timeouts); requests still in flight when the run's duration
              ended ("aborted due to deadline") are neither
  achieved    ok / run time, requests per second
  error share errors / (ok + errors)
  p50, p99    oha's latency percentiles of the responses, milliseconds
  added       target's p50 (p99) minus the direct mock's in the same row set
  CPU/req     user + system CPU time of the target's processes during the run
              (the mock's own for direct; the peer's alone otherwise) per ok
              response, microseconds: what a request costs the gateway,
              which moves less with the machine's load than latency does;
              "—" below 0.1 s in all (the kernel counts in ticks of 10 ms)
  sustained   the highest rate tried with achieved >= 95% of it and error
              share < 1%
"""

import json
import os
import sys

DEADLINE = "aborted due to deadline"


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def cpu_us(path):
    try:
        with open(path, encoding="utf-8") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def stats(report, cpu=None):
    """achieved/s, p50 ms, p99 ms, error share, ok, errors, CPU µs per ok."""
    if report is None:
        return None
    summary = report.get("summary", {})
    codes = report.get("statusCodeDistribution", {}) or {}
    failures = report.get("errorDistribution", {}) or {}
    ok = sum(n for code, n in codes.items() if str(code).startswith("2"))
    bad = sum(n for code, n in codes.items() if not str(code).startswith("2"))
    bad += sum(n for what, n in failures.items() if DEADLINE not in what)
    secs = summary.get("total") or 0.0
    pct = report.get("latencyPercentiles", {}) or {}

    def ms(key):
        value = pct.get(key)
        return None if value is None else value * 1000.0

    return {
        "achieved": ok / secs if secs > 0 else 0.0,
        "p50": ms("p50"),
        "p99": ms("p99"),
        "share": bad / (ok + bad) if ok + bad > 0 else 1.0,
        "ok": ok,
        "errors": bad,
        "cpu": cpu / ok if cpu is not None and cpu >= 100_000 and ok > 0 else None,
    }


def fmt_cpu(v):
    return "—" if v is None else f"{v:.0f}"


def run(root, name):
    return stats(load(os.path.join(root, name + ".json")), cpu_us(os.path.join(root, name + ".cpu_us")))


def fmt_ms(v):
    if v is None:
        return "—"
    return f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"


def fmt_added(v, base):
    if v is None or base is None:
        return "—"
    d = v - base
    return f"{d:+.2f}" if abs(d) < 100 else f"{d:+.0f}"


def fmt_share(s):
    if s == 0:
        return "0%"
    if s < 0.001:
        return "<0.1%"
    return f"{s * 100:.1f}%"


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    root, targets, rates = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
    rates = sorted((r for r in rates if r), key=float)

    serial = {t: run(root, f"{t}-serial") for t in targets}
    runs = {(t, r): run(root, f"{t}-{r}") for t in targets for r in rates}

    print("Concurrency 1 (closed loop, one connection):")
    print()
    print(
        "| target | p50 ms | p99 ms | added p50 ms | added p99 ms | requests/s | error share "
        "| CPU µs/req |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    base = serial.get("direct")
    for t in targets:
        s = serial[t]
        if s is None:
            print(f"| {t} | — | — | — | — | — | not run | — |")
            continue
        added50 = "—" if t == "direct" or base is None else fmt_added(s["p50"], base["p50"])
        added99 = "—" if t == "direct" or base is None else fmt_added(s["p99"], base["p99"])
        print(
            f"| {t} | {fmt_ms(s['p50'])} | {fmt_ms(s['p99'])} | {added50} | {added99} "
            f"| {s['achieved']:.0f} | {fmt_share(s['share'])} | {fmt_cpu(s['cpu'])} |"
        )

    print()
    print("Open loop (fixed rate, latency corrected):")
    print()
    print(
        "| target | rate/s | achieved/s | p50 ms | p99 ms | added p50 ms | added p99 ms "
        "| error share | CPU µs/req |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    sustained = {t: None for t in targets}
    for r in rates:
        for t in targets:
            s = runs[(t, r)]
            if s is None:
                print(f"| {t} | {r} | — | — | — | — | — | not run | — |")
                continue
            b = runs.get(("direct", r))
            if t == "direct" or b is None:
                added50 = added99 = "—"
            else:
                added50, added99 = fmt_added(s["p50"], b["p50"]), fmt_added(s["p99"], b["p99"])
            print(
                f"| {t} | {r} | {s['achieved']:.0f} | {fmt_ms(s['p50'])} | {fmt_ms(s['p99'])} "
                f"| {added50} | {added99} | {fmt_share(s['share'])} | {fmt_cpu(s['cpu'])} |"
            )
            if s["achieved"] >= 0.95 * float(r) and s["share"] < 0.01:
                sustained[t] = r  # rates ascend

    print()
    print("Max sustained rate (highest rate tried with achieved >= 95% and error share < 1%):")
    print()
    print("| target | max sustained rate/s | p99 ms there |")
    print("|---|---:|---:|")
    for t in targets:
        r = sustained[t]
        if r is None:
            print(f"| {t} | below {rates[0] if rates else '—'} | — |")
        else:
            print(f"| {t} | {r} | {fmt_ms(runs[(t, r)]['p99'])} |")


if __name__ == "__main__":
    main()
