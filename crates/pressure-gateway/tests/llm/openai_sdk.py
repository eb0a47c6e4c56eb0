"""Calls the gateway's OpenAI-compatible endpoint with the official `openai`
SDK, streaming and not, and checks the answers.

Usage: python openai_sdk.py BASE_URL USE_CASE
Exits non-zero (with a traceback) on any failure; prints `ok` at the end.
"""

import sys

import openai


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

    print("ok")


if __name__ == "__main__":
    main()
