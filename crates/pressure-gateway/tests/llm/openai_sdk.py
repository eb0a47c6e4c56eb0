"""Calls the gateway's OpenAI-compatible endpoint with the official `openai`
SDK, streaming and not, and checks the answers.

Usage: python openai_sdk.py BASE_URL USE_CASE [EMBEDDING_USE_CASE]
With EMBEDDING_USE_CASE, also checks `models.list()`, `models.retrieve()`
and `embeddings.create()`.
Exits non-zero (with a traceback) on any failure; prints `ok` at the end.
"""

import sys
import time

import openai

MESSAGES = [{"role": "user", "content": "hello"}]


def check_stream_choices(client: openai.OpenAI, use_case: str) -> None:
    """Without include_usage no chunk lacks choices, so the loop every
    tutorial writes over chunk.choices[0] works; with it, usage comes last."""
    for extra in ({}, {"stream_options": {"include_usage": False}}):
        stream = client.chat.completions.create(model=use_case, messages=MESSAGES, stream=True, **extra)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
        assert text == "hello there", (extra, text)
    stream = client.chat.completions.create(
        model=use_case, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[-1].choices == [], chunks[-1]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 11, chunks[-1]
    assert all(c.choices for c in chunks[:-1]), chunks


def check_manual_queue(client: openai.OpenAI) -> None:
    """A queued request reads like any completion."""
    r = client.chat.completions.create(model="queue", messages=MESSAGES)
    content = r.choices[0].message.content
    assert "queued" in content and r.id in content, r
    assert (r.model_extra or {})["pressure"]["ticket"] == r.id, r


def check_give_up_waits(base_url: str) -> None:
    """Every level rate-limited: the SDK's own retries (2) wait the
    gateway's Retry-After (2 s) instead of re-running the chain at once."""
    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=2, timeout=20)
    started = time.monotonic()
    try:
        client.chat.completions.create(model="busy", messages=MESSAGES)
    except openai.RateLimitError as e:
        assert e.response.headers.get("retry-after") == "2", e.response.headers
    else:
        raise AssertionError("every level is rate-limited: a 429")
    waited = time.monotonic() - started
    # Without the header the SDK backs off ~0.5 s then ~1 s.
    assert waited >= 3.5, f"the SDK waited only {waited:.2f} s"


def main() -> None:
    base_url, use_case = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=20)
    messages = [{"role": "user", "content": "hello"}]

    # Not streamed: a typed ChatCompletion, plus the raw degradation header.
    raw = client.chat.completions.with_raw_response.create(model=use_case, messages=messages)
    assert raw.headers.get("x-pressure-degradation") == "primary", raw.headers
    completion = raw.parse()
    assert completion.object == "chat.completion", completion
    assert completion.choices[0].message.role == "assistant", completion
    assert completion.choices[0].message.content == "hello there", completion
    assert completion.choices[0].finish_reason == "stop", completion
    assert completion.usage is not None and completion.usage.total_tokens == 11, completion
    pressure = (completion.model_extra or {}).get("pressure")
    assert pressure and pressure["degradation"] == "primary", completion

    # Streamed: typed chunks, the text reassembled.
    stream = client.chat.completions.create(model=use_case, messages=messages, stream=True)
    text = ""
    chunks = 0
    for chunk in stream:
        chunks += 1
        assert chunk.object == "chat.completion.chunk", chunk
        for choice in chunk.choices:
            text += choice.delta.content or ""
    assert chunks >= 2, chunks
    assert text == "hello there", text

    # Errors are typed by the SDK too.
    try:
        client.chat.completions.create(model="no-such-use-case", messages=messages)
    except openai.NotFoundError as e:
        assert e.status_code == 404, e
    else:
        raise AssertionError("an unknown use case must be a 404")

    check_stream_choices(client, use_case)
    check_manual_queue(client)
    check_give_up_waits(base_url)
    if len(sys.argv) > 3:
        embedding_use_case = sys.argv[3]
        check_models(client, use_case, embedding_use_case)
        check_embeddings(client, embedding_use_case)

    print("ok")


def check_models(client: openai.OpenAI, use_case: str, embedding_use_case: str) -> None:
    """`GET /v1/models[/{id}]`: typed Model objects, and a typed 404."""
    ids = [m.id for m in client.models.list()]
    assert use_case in ids and embedding_use_case in ids, ids
    model = client.models.retrieve(embedding_use_case)
    assert model.id == embedding_use_case, model
    assert model.object == "model", model
    assert model.owned_by == "pressure", model
    assert isinstance(model.created, int), model
    try:
        client.models.retrieve("no-such-use-case")
    except openai.NotFoundError as e:
        assert e.status_code == 404, e
    else:
        raise AssertionError("an unknown model must be a 404")


def check_embeddings(client: openai.OpenAI, embedding_use_case: str) -> None:
    """`POST /v1/embeddings`: the SDK's default base64 and explicit floats,
    `dimensions`, and a typed 400 for a chat use case."""
    inputs = ["hello", "world", "again"]
    # The SDK asks for base64 by default and decodes it into floats.
    result = client.embeddings.create(model=embedding_use_case, input=inputs)
    assert result.object == "list", result
    assert len(result.data) == len(inputs), result
    for i, item in enumerate(result.data):
        assert item.index == i, item
        assert len(item.embedding) == 4, item
        assert all(isinstance(x, float) for x in item.embedding), item
    assert result.usage.prompt_tokens > 0, result
    assert result.usage.total_tokens == result.usage.prompt_tokens, result
    assert (result.model_extra or {}).get("pressure", {}).get("degradation") == "primary", result

    floats = client.embeddings.create(
        model=embedding_use_case, input="hello", encoding_format="float", dimensions=3
    )
    assert len(floats.data) == 1 and len(floats.data[0].embedding) == 3, floats

    try:
        client.embeddings.create(model=embedding_use_case, input=[])
    except openai.BadRequestError as e:
        assert e.status_code == 400, e
    else:
        raise AssertionError("an empty input must be a 400")


if __name__ == "__main__":
    main()
