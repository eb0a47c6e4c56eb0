#!/usr/bin/env python3
"""Tables of benches/agents-overhead.sh from oha's JSON reports.

Usage: agents-overhead-table.py DIR PATHS ROUNDS
  DIR     holds PATH-TARGET-ROUND.json (oha --output-format json; TARGET is
          direct or gateway) and warmup-PATH-TARGET.json, each with
          .cpu_us (the target's CPU time during the run) and .mock.json
          (the mock's /mock/stats after the run, reset before it) beside it
  PATHS   comma-separated: chat, messages, responses
  ROUNDS  how many interleaved rounds ran

Definitions (per run):
  p50, p99, p99.9  oha's latency percentiles, milliseconds, of whole
                   streamed answers (to the last byte), counted from each
                   request's scheduled start (--latency-correction)
  added p99        gateway p99 minus the direct p99 of the same path and
                   round; the table gives each round's and their median
  errors           non-2xx responses plus failed requests (connection
                   errors, timeouts); requests still in flight when the
                   run's time ended ("aborted due to deadline") are neither
  mock non-200     answers the mock itself sent with another status
  CPU/req          user + system CPU of the gateway's process per 2xx
                   response during its runs, microseconds (median over the
                   rounds); "—" under 0.1 s of CPU in all

Exit status 1 when any run (warm-ups included) has an error or is missing.
"""

import json
import statistics
import sys

DEADLINE = "aborted due to deadline"
TARGET_MS = 1.0
ENDPOINT = {
    "chat": "/v1/chat/completions",
    "messages": "/v1/messages",
    "responses": "/v1/responses",
}


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_int(path):
    try:
        with open(path, encoding="utf-8") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def field(obj, camel, snake):
    if not isinstance(obj, dict):
        return {}
    value = obj.get(camel, obj.get(snake))
    return value if value is not None else {}


def run(base):
    """Stats of one run (None when its report is missing)."""
    report = load(base + ".json")
    if report is None:
        return None
    summary = report.get("summary", {}) or {}
    codes = report.get("statusCodeDistribution", {}) or {}
    failures = report.get("errorDistribution", {}) or {}
    ok = sum(n for code, n in codes.items() if str(code).startswith("2"))
    non2xx = sum(n for code, n in codes.items() if not str(code).startswith("2"))
    failed = sum(n for what, n in failures.items() if DEADLINE not in what)
    pct = report.get("latencyPercentiles", {}) or {}

    def ms(key):
        value = pct.get(key)
        return None if value is None else value * 1000.0

    secs = summary.get("total") or 0.0
    mock = load(base + ".mock.json")
    by_status = field(mock, "byStatus", "by_status")
    by_endpoint = field(mock, "byEndpoint", "by_endpoint")
    cpu = read_int(base + ".cpu_us")
    return {
        "ok": ok,
        "non2xx": non2xx,
        "failed": failed,
        "errors": non2xx + failed,
        "other": {k: v for k, v in failures.items() if DEADLINE not in k},
        "achieved": ok / secs if secs > 0 else 0.0,
        "p50": ms("p50"),
        "p99": ms("p99"),
        "p999": ms("p99.9"),
        "mock_non200": sum(n for s, n in by_status.items() if str(s) != "200") if mock else None,
        "mock_endpoints": by_endpoint,
        "cpu": cpu / ok if cpu is not None and cpu >= 100_000 and ok > 0 else None,
    }


def f2(v):
    return "—" if v is None else f"{v:.2f}"


def signed(v):
    return "—" if v is None else f"{v:+.2f}"


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main():
    out, paths, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
    bad = False
    runs = {}
    for p in paths:
        for t in ("direct", "gateway"):
            for r in range(1, rounds + 1):
                runs[(p, t, r)] = run(f"{out}/{p}-{t}-{r}")
            runs[(p, t, "warm-up")] = run(f"{out}/warmup-{p}-{t}")

    print("| path | direct p50 | direct p99 | gateway p50 | gateway p99 | added p99 (median) "
          "| added p99 per round | ≤ 1 ms | gateway CPU µs/req | errors direct / gateway |")
    print("|---|---:|---:|---:|---:|---:|---|---|---:|---:|")
    for p in paths:
        d = [runs[(p, "direct", r)] for r in range(1, rounds + 1)]
        g = [runs[(p, "gateway", r)] for r in range(1, rounds + 1)]
        added = [
            gr["p99"] - dr["p99"] if dr and gr and None not in (dr["p99"], gr["p99"]) else None
            for dr, gr in zip(d, g)
        ]
        added_med = med(added)
        errs_d = sum(x["errors"] for x in d if x)
        errs_g = sum(x["errors"] for x in g if x)
        missing = sum(1 for x in d + g if x is None)
        if missing or errs_d or errs_g:
            bad = True
        cpu = med(x["cpu"] for x in g if x)
        cpu_txt = "—" if cpu is None else f"{cpu:.0f}"
        verdict = "—" if added_med is None else ("pass" if added_med <= TARGET_MS else "fail")
        print(
            f"| `{ENDPOINT[p]}` | {f2(med(x['p50'] for x in d if x))} | {f2(med(x['p99'] for x in d if x))} "
            f"| {f2(med(x['p50'] for x in g if x))} | {f2(med(x['p99'] for x in g if x))} "
            f"| **{signed(added_med)}** | {', '.join(signed(a) for a in added)} | {verdict} "
            f"| {cpu_txt} "
            f"| {errs_d} / {errs_g}{f' ({missing} runs missing)' if missing else ''} |"
        )
    print()
    print("Latency in ms (medians over the rounds for p50/p99); added = gateway − direct of the same round.")
    print()
    print("Every run (warm-ups last):")
    print()
    print("| path | target | round | achieved/s | p50 | p99 | p99.9 | non-2xx | failed | mock non-200 "
          "| mock endpoints hit |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    order = list(range(1, rounds + 1)) + ["warm-up"]
    for r in order:
        for p in paths:
            for t in ("direct", "gateway"):
                x = runs[(p, t, r)]
                if x is None:
                    print(f"| `{ENDPOINT[p]}` | {t} | {r} | missing | | | | | | | |")
                    bad = True
                    continue
                if x["errors"]:
                    bad = True
                hits = ", ".join(f"{k} {v}" for k, v in sorted(x["mock_endpoints"].items()))
                mock_bad = "?" if x["mock_non200"] is None else x["mock_non200"]
                print(
                    f"| `{ENDPOINT[p]}` | {t} | {r} | {x['achieved']:.0f} | {f2(x['p50'])} | {f2(x['p99'])} "
                    f"| {f2(x['p999'])} | {x['non2xx']} | {x['failed']} | {mock_bad} | {hits} |"
                )
                if x["other"]:
                    print(f"|  | failures: {x['other']} | | | | | | | | | |")
    print()
    print("errors: none" if not bad else "errors: SOME RUNS HAD ERRORS OR ARE MISSING (exit 1)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
