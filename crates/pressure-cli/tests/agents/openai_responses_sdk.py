"""Calls the gateway's `POST /v1/responses` with the official `openai`
SDK: `client.responses.create` non-streamed, streamed, and a function-call
round trip (function_call -> function_call_output -> text). Four calls.

Usage: python openai_responses_sdk.py GATEWAY_ROOT API_KEY MODEL
Exits non-zero (with a traceback) on any failure; prints `ok` at the end.
"""

import json
import sys

import openai

TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def main() -> None:
    root, key, model = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=root + "/v1", api_key=key, max_retries=0, timeout=30)

    r = client.responses.create(model=model, input="say ok", max_output_tokens=64)
    assert r.object == "response" and r.status in ("completed", "incomplete"), r
    assert r.output_text, r
    assert r.usage is not None and r.usage.input_tokens > 0 and r.usage.output_tokens > 0, r.usage

    deltas, completed = [], None
    for event in client.responses.create(model=model, input="say ok", max_output_tokens=64, stream=True):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type in ("response.completed", "response.incomplete"):
            completed = event.response
    assert completed is not None, "no response.completed event"
    assert "".join(deltas) == completed.output_text and deltas, (deltas, completed)
    assert completed.usage is not None and completed.usage.output_tokens > 0, completed.usage

    # The function-call round trip. The model may answer the offer with a
    # function_call or with text; either way the second call carries a
    # function_call and its output and gets text.
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.responses.create(model=model, input=ask, tools=[TOOL], max_output_tokens=64)
    calls = [o for o in first.output if o.type == "function_call"]
    if calls:
        call = {"type": "function_call", "call_id": calls[0].call_id, "name": calls[0].name, "arguments": calls[0].arguments}
        json.loads(call["arguments"])
    else:
        call = {"type": "function_call", "call_id": "call_01", "name": "get_weather", "arguments": '{"city":"Paris"}'}
    second = client.responses.create(
        model=model,
        input=ask + [call, {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 21 C"}],
        tools=[TOOL],
        max_output_tokens=64,
    )
    assert second.output_text, second
    print("ok")


if __name__ == "__main__":
    main()
