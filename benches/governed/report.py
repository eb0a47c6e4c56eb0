"""Report of benches/governed-vs-litellm.sh: what each stack let through,
measured where it lands, at the mock provider.

    report.py --limits R,T,B --window 60 --price-in 1 --price-out 4 \
              STACK=DIR [STACK=DIR ...]

Each DIR holds drive.json (drive.py's records), arrivals.json (the mock's
GET /mock/arrivals after the run), stats.json (GET /mock/stats) and cpu_us
(CPU time of the stack's own processes during the run, microseconds).

Per stack:
  * served: calls the mock answered 200 (outcome ok), the marker excluded;
  * requests / tokens in any window: the most calls, and the most tokens
    billed (input + output), whose mock arrival times fall in one interval
    of --window seconds, anywhere in the run (every arrival taken as an
    interval's end); above the limit: that minus the limit, if positive;
  * spent: the mock's bill of the stack's calls; above the budget: the
    bill minus the budget, if positive;
  * false refusals: 429s sent while every dimension had room for the call
    even if every call in flight at that moment were admitted at its
    largest estimate: calls in the window + in flight + 1 <= R, tokens in
    the window + in flight x the largest estimate + this call's estimate
    <= T, spend so far + in flight x the largest estimate's price + this
    call's <= B (the moment: the refused call's send time, moved onto the
    mock's clock by the marker call);
  * throughput: served per second and answers (200s and refusals) per
    second over the run; latency p50/p99 of 200s and of refusals; CPU of
    the stack's processes per answer.
"""

import argparse
import bisect
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def reason(err):
    text = json.dumps(err or {}).lower()
    if "budget" in text or "costmicrousd" in text:
        return "budget"
    if "tpm" in text or "token" in text:
        return "tokens"
    if "rpm" in text or "request" in text:
        return "requests"
    return "other"


def max_in_window(times, weights, window):
    """Largest sum of weights of events within any interval of `window`
    (closed at the end, open at the start), and where it ends."""
    best, best_end, s, j = 0, None, 0, 0
    for i, t in enumerate(times):
        s += weights[i]
        while times[j] <= t - window:
            s -= weights[j]
            j += 1
        if s > best:
            best, best_end = s, t
    return best, best_end


def analyse(name, d, limits, window, price_in, price_out):
    rpm, tpm, budget = limits
    drive = load(os.path.join(d, "drive.json"))
    arr = load(os.path.join(d, "arrivals.json"))
    if isinstance(arr, dict):
        arr = arr.get("arrivals", arr.get("items", []))
    cpu_us = int(open(os.path.join(d, "cpu_us")).read().strip() or 0)
    marker = [a for a in arr if a.get("model") == "align"]
    calls = [a for a in arr if a.get("model") != "align"]
    served = sorted((a for a in calls if a.get("outcome") == "ok"), key=lambda a: a["atMs"])
    # The driver's clock onto the mock's: the marker's arrival at the middle
    # of its round trip.
    m = drive["marker"]
    offset = (marker[0]["atMs"] / 1000.0 - (m["send"] + m["recv"]) / 2) if marker else 0.0
    times = [a["atMs"] / 1000.0 for a in served]
    toks = [a["inputTokens"] + a["outputTokens"] for a in served]
    money = [a["microUsd"] for a in served]
    max_req, req_end = max_in_window(times, [1] * len(times), window)
    max_tok, tok_end = max_in_window(times, toks, window)
    spent = sum(money)
    recs = drive["records"]
    ok = [r for r in recs if r["status"] == 200]
    refused = [r for r in recs if r["status"] == 429]
    errors = [r for r in recs if r["status"] not in (200, 429)]
    # Largest estimate per kind: the prompt as the mock counted it (most
    # seen in a 200) plus max_tokens.
    max_tokens = {"small": 16, "large": 64}
    prompt = {k: 0 for k in max_tokens}
    for r in ok:
        prompt[r["kind"]] = max(prompt[r["kind"]], r.get("prompt_tokens", 0))
    est_tok = {k: prompt[k] + max_tokens[k] for k in max_tokens}
    est_usd = {k: prompt[k] * price_in + max_tokens[k] * price_out for k in max_tokens}
    big_tok, big_usd = max(est_tok.values()), max(est_usd.values())
    sends = sorted(r["send"] for r in recs)
    recvs = sorted(r["recv"] for r in recs)
    tok_prefix = [0]
    for x in toks:
        tok_prefix.append(tok_prefix[-1] + x)
    usd_prefix = [0]
    for x in money:
        usd_prefix.append(usd_prefix[-1] + x)
    false_refusals = []
    by_reason = {}
    for r in refused:
        why = reason(r.get("error"))
        by_reason[why] = by_reason.get(why, 0) + 1
        t_client = r["send"]
        t = t_client + offset
        inflight = bisect.bisect_right(sends, t_client) - bisect.bisect_right(recvs, t_client) - 1
        inflight = max(0, inflight)
        hi = bisect.bisect_right(times, t)
        lo = bisect.bisect_right(times, t - window)
        req_room = (hi - lo) + inflight + 1 <= rpm
        tok_room = (tok_prefix[hi] - tok_prefix[lo]) + inflight * big_tok + est_tok[r["kind"]] <= tpm
        usd_room = usd_prefix[hi] + inflight * big_usd + est_usd[r["kind"]] <= budget
        if req_room and tok_room and usd_room:
            false_refusals.append((r, why, t, hi - lo, inflight))
    dur = drive["end"] - drive["start"]
    lat_ok = [(r["recv"] - r["send"]) * 1000 for r in ok]
    lat_ref = [(r["recv"] - r["send"]) * 1000 for r in refused]
    answers = len(ok) + len(refused)
    return {
        "name": name,
        "served": len(served),
        "ok": len(ok),
        "refused": len(refused),
        "errors": len(errors),
        "error_samples": [r.get("error") for r in errors[:3]],
        "by_reason": by_reason,
        "max_req": max_req,
        "req_over": max(0, max_req - rpm),
        "req_end": None if req_end is None else req_end - times[0],
        "max_tok": max_tok,
        "tok_over": max(0, max_tok - tpm),
        "tok_end": None if tok_end is None else tok_end - times[0],
        "spent": spent,
        "usd_over": max(0, spent - budget),
        "false": len(false_refusals),
        "false_samples": [
            {"reason": why, "at_s": round(t - (times[0] if times else 0), 3), "in_window": n, "in_flight": f,
             "error": (r.get("error") or {}).get("message", "")[:160]}
            for r, why, t, n, f in false_refusals[:3]
        ],
        "false_span": (
            (round(min(x[2] for x in false_refusals) - times[0], 3), round(max(x[2] for x in false_refusals) - times[0], 3))
            if false_refusals else None
        ),
        "false_by_reason": {w: sum(1 for x in false_refusals if x[1] == w) for w in {x[1] for x in false_refusals}},
        "duration": dur,
        "served_per_s": len(served) / dur if dur else 0,
        "answers_per_s": answers / dur if dur else 0,
        "p50_ok": pct(lat_ok, 50),
        "p99_ok": pct(lat_ok, 99),
        "p50_ref": pct(lat_ref, 50),
        "p99_ref": pct(lat_ref, 99),
        "cpu_ms_per_answer": (cpu_us / 1000.0 / answers) if answers else float("nan"),
        "offset": offset,
        "est": est_tok,
    }


def fmt_over(over, limit):
    if over == 0:
        return "**0**"
    return f"{over:,} (+{100.0 * over / limit:.1f} %)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limits", required=True, help="R,T,B: requests/window, tokens/window, budget micro-USD")
    ap.add_argument("--window", type=float, default=60)
    ap.add_argument("--price-in", type=float, default=1.0, help="micro-USD per input token")
    ap.add_argument("--price-out", type=float, default=4.0, help="micro-USD per output token")
    ap.add_argument("stacks", nargs="+", help="NAME=DIR")
    a = ap.parse_args()
    limits = tuple(int(x) for x in a.limits.split(","))
    rpm, tpm, budget = limits
    rows = []
    for s in a.stacks:
        name, d = s.split("=", 1)
        rows.append(analyse(name, d, limits, a.window, a.price_in, a.price_out))
    names = [r["name"] for r in rows]
    print(f"| figure (limits: {rpm:,} requests and {tpm:,} tokens per {a.window:g} s, budget ${budget / 1e6:.2f} a day) | "
          + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(rows))

    def line(label, f):
        print(f"| {label} | " + " | ".join(f(r) for r in rows) + " |")

    line("requests above the limit, worst 60 s window (most in one window)",
         lambda r: f"{fmt_over(r['req_over'], rpm)} ({r['max_req']:,})")
    line("tokens above the limit, worst 60 s window (most in one window)",
         lambda r: f"{fmt_over(r['tok_over'], tpm)} ({r['max_tok']:,})")
    line("money above the daily budget (spent)",
         lambda r: ("**$0**" if r["usd_over"] == 0 else f"${r['usd_over'] / 1e6:.4f} (+{100.0 * r['usd_over'] / budget:.1f} %)")
         + f" (${r['spent'] / 1e6:.4f})")
    line("false refusals while under every limit (of 429s)", lambda r: f"{r['false']:,} (of {r['refused']:,})")
    line("served by the mock (client 200s)", lambda r: f"{r['served']:,} ({r['ok']:,})")
    line("other errors", lambda r: f"{r['errors']:,}")
    line("admitted req/s / answered req/s", lambda r: f"{r['served_per_s']:.1f} / {r['answers_per_s']:.1f}")
    line("latency of a 200, p50 / p99 (ms)", lambda r: f"{r['p50_ok']:.1f} / {r['p99_ok']:.1f}")
    line("latency of a 429, p50 / p99 (ms)", lambda r: f"{r['p50_ref']:.1f} / {r['p99_ref']:.1f}")
    line("CPU of the stack's processes per answer (ms)", lambda r: f"{r['cpu_ms_per_answer']:.2f}")
    print()
    for r in rows:
        print(f"{r['name']}: refusals by reason {r['by_reason']}; false refusals by reason {r['false_by_reason']}"
              f" (sent between {r['false_span']} s into the run);"
              f" worst request window ends {r['req_end']:.1f} s into the run, worst token window {r['tok_end']:.1f} s;"
              f" estimates (tokens) {r['est']}; clock offset {r['offset']:.3f} s")
        for s in r["false_samples"]:
            print(f"  false refusal: {s}")
        for s in r["error_samples"]:
            print(f"  error: {s}")
    if len(rows) == 2 and rows[0]["answers_per_s"] and rows[0]["p99_ok"] and rows[0]["cpu_ms_per_answer"]:
        a0, a1 = rows
        print()
        print(f"ratios {a1['name']} / {a0['name']}: answered req/s {a1['answers_per_s'] / a0['answers_per_s']:.2f}x,"
              f" p50 of a 200 {a1['p50_ok'] / a0['p50_ok']:.1f}x, p99 of a 200 {a1['p99_ok'] / a0['p99_ok']:.1f}x,"
              f" CPU per answer {a1['cpu_ms_per_answer'] / a0['cpu_ms_per_answer']:.0f}x")
    if any(r["name"] == "pressure" and (r["req_over"] or r["tok_over"] or r["usd_over"]) for r in rows):
        print("governed-vs-litellm: PRESSURE OVERSHOT A LIMIT (a product bug)", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
