"""Load driver of benches/governed-vs-litellm.sh: N concurrent clients, spread
evenly over the instances of one stack, each sending chat completions
back to back for a fixed time; every answer recorded.

    drive.py --targets URL1,URL2 --key KEY --model NAME --mock URL \
             --clients 64 --duration 75 --pause-ms 100 --out FILE.json

The request mix is the same for every stack: client i's n-th request is
"large" when (i + n) is odd, "small" otherwise (half and half, interleaved).
After a refusal a client pauses --pause-ms before its next request (a
client that honoured Retry-After would wait out the minute; one that does
not hammers: this is in between and the same for both stacks).

Before the clients start, one marker request goes straight to the mock
(model "align"): its arrival time in the mock's clock and its send and
receive times in the driver's clock align the two timelines.

The output is one JSON document: the run's parameters, the marker's times
and one record per answer: client, instance, kind, send and receive times
(seconds on the driver's monotonic clock), status, the usage of a 200, and
for anything else the error's type, code, param and the first 300
characters of its message.
"""

import argparse
import asyncio
import json
import time

import aiohttp

# ~330 prompt tokens (o200k) for "large", ~25 for "small"; both far from the
# 1,024 tokens at which the mock's automatic prompt cache starts, so every
# input token is billed at the input price.
LARGE_PROMPT = (
    "Summarise the following operations note for the on-call engineer in two sentences. "
    + " ".join(
        f"Step {i}: check the gateway's admission counters, the Redis latency and the provider's error rate, then write down what changed."
        for i in range(1, 15)
    )
)
SMALL_PROMPT = "Say hello to the benchmark and name one prime number."
KINDS = {
    "small": {"prompt": SMALL_PROMPT, "max_tokens": 16},
    "large": {"prompt": LARGE_PROMPT, "max_tokens": 64},
}


def body(model, kind):
    k = KINDS[kind]
    return json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": k["prompt"]}],
            "max_tokens": k["max_tokens"],
        }
    ).encode()


async def client(i, session, url, headers, model, deadline, pause, t0, records):
    n = 0
    while True:
        now = time.monotonic()
        if now >= deadline:
            return
        kind = "large" if (i + n) % 2 else "small"
        n += 1
        rec = {"client": i, "kind": kind, "send": now - t0}
        try:
            async with session.post(url, data=body(model, kind), headers=headers) as r:
                raw = await r.read()
                rec["status"] = r.status
        except Exception as e:  # connection errors: status 0
            rec["status"] = 0
            rec["error"] = {"message": repr(e)[:300]}
            raw = b""
        rec["recv"] = time.monotonic() - t0
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {"error": {"message": raw[:300].decode("utf-8", "replace")}}
        if rec["status"] == 200:
            u = doc.get("usage") or {}
            rec["prompt_tokens"] = u.get("prompt_tokens", 0)
            rec["completion_tokens"] = u.get("completion_tokens", 0)
        elif rec["status"] != 0:
            err = doc.get("error") if isinstance(doc, dict) else None
            if not isinstance(err, dict):
                err = {"message": str(doc)[:300]}
            rec["error"] = {
                "type": err.get("type"),
                "code": err.get("code"),
                "param": err.get("param"),
                "dimension": err.get("dimension"),
                "message": str(err.get("message", ""))[:300],
            }
        records.append(rec)
        if rec["status"] != 200 and pause > 0:
            await asyncio.sleep(pause)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--mock", required=True)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=75)
    ap.add_argument("--pause-ms", type=float, default=100)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    targets = a.targets.split(",")
    headers = {"content-type": "application/json", "authorization": f"Bearer {a.key}"}
    timeout = aiohttp.ClientTimeout(total=60)
    sessions = [
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout)
        for _ in targets
    ]
    t0 = time.monotonic()
    # The marker: straight to the mock, model "align".
    async with aiohttp.ClientSession(timeout=timeout) as s:
        m_send = time.monotonic() - t0
        async with s.post(
            a.mock.rstrip("/") + "/v1/chat/completions",
            data=body("align", "small"),
            headers={"content-type": "application/json"},
        ) as r:
            await r.read()
        m_recv = time.monotonic() - t0
    records = []
    start = time.monotonic()
    deadline = start + a.duration
    tasks = [
        client(
            i,
            sessions[i % len(targets)],
            targets[i % len(targets)] + "/v1/chat/completions",
            headers,
            a.model,
            deadline,
            a.pause_ms / 1000.0,
            t0,
            records,
        )
        for i in range(a.clients)
    ]
    await asyncio.gather(*tasks)
    end = time.monotonic()
    for s in sessions:
        await s.close()
    for r in records:
        r["instance"] = r["client"] % len(targets)
    out = {
        "targets": targets,
        "clients": a.clients,
        "duration": a.duration,
        "pause_ms": a.pause_ms,
        "start": start - t0,
        "end": end - t0,
        "marker": {"send": m_send, "recv": m_recv},
        "records": records,
    }
    with open(a.out, "w") as f:
        json.dump(out, f)
    ok = sum(1 for r in records if r["status"] == 200)
    print(f"drive: {len(records)} answers, {ok} 200s in {end - start:.1f} s")


if __name__ == "__main__":
    asyncio.run(main())
