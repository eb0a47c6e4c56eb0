"""Calls the gateway's `POST /v1/messages` with the official `anthropic`
SDK: a message non-streamed, one streamed, and a tool round trip
(tool_use -> tool_result -> text). Four calls in all.

Usage: python anthropic_sdk.py GATEWAY_ROOT API_KEY MODEL
Exits non-zero (with a traceback) on any failure; prints `ok` at the end.
"""

import sys

import anthropic

TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def main() -> None:
    root, key, model = sys.argv[1], sys.argv[2], sys.argv[3]
    client = anthropic.Anthropic(base_url=root, api_key=key, max_retries=0, timeout=30)
    ask = [{"role": "user", "content": "say ok"}]

    m = client.messages.create(model=model, max_tokens=64, messages=ask)
    assert m.type == "message" and m.role == "assistant", m
    assert m.content and m.content[0].type == "text" and m.content[0].text, m
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0, m.usage

    with client.messages.stream(model=model, max_tokens=64, messages=ask) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text, (text, final)
    assert final.stop_reason in ("end_turn", "max_tokens"), final
    assert final.usage.output_tokens > 0, final.usage

    # The tool round trip. The model may answer the offer with a tool_use or
    # with text (the mock provider does not call tools); either way the
    # second call carries a tool_use and its tool_result and gets text.
    weather = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.messages.create(model=model, max_tokens=64, tools=[TOOL], messages=weather)
    uses = [b for b in first.content if b.type == "tool_use"]
    if uses:
        assert first.stop_reason == "tool_use", first
        use = uses[0]
        assistant = [b.model_dump(exclude_none=True) for b in first.content]
    else:
        use = anthropic.types.ToolUseBlock(type="tool_use", id="toolu_01", name="get_weather", input={"city": "Paris"})
        assistant = [use.model_dump()]
    second = client.messages.create(
        model=model,
        max_tokens=64,
        tools=[TOOL],
        messages=weather
        + [
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}]},
        ],
    )
    assert any(b.type == "text" and b.text for b in second.content), second
    print("ok")


if __name__ == "__main__":
    main()
