"""The official OpenAI and Anthropic Python SDKs, through cryo's gateway.

Run by a scripted agent inside a session: the SDK finds the gateway's base
URL and the session's token in its usual variables (OPENAI_BASE_URL and
OPENAI_API_KEY, or ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY). Each call is
the loop the SDK's own documentation shows; what it read is printed as one
JSON object, and an exception (IndexError on `chunk.choices[0]`) fails it.
"""

import json
import sys


def openai_calls():
    from openai import OpenAI

    client = OpenAI()
    messages = [{"role": "user", "content": "Say this is a test"}]
    seen = {}
    # Streamed, as in the README: no stream_options.
    stream = client.chat.completions.create(model="m1", messages=messages, stream=True)
    text, chunks = "", 0
    for chunk in stream:
        chunks += 1
        text += chunk.choices[0].delta.content or ""
    seen["streamed"] = {"text": text, "chunks": chunks}
    # Streamed, asking for usage: the usage event comes, with no choices.
    stream = client.chat.completions.create(
        model="m1", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    usage = None
    for chunk in stream:
        if chunk.choices:
            continue
        usage = chunk.usage.model_dump() if chunk.usage else None
    seen["asked"] = {"usage": usage}
    # Whole.
    completion = client.chat.completions.create(model="m1", messages=messages)
    seen["whole"] = {"text": completion.choices[0].message.content, "usage": completion.usage.model_dump()}
    return seen


def anthropic_calls():
    import anthropic

    client = anthropic.Anthropic()
    messages = [{"role": "user", "content": "Hello, Claude"}]
    seen = {}
    with client.messages.stream(model="claude-opus-5-5", max_tokens=64, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    seen["streamed"] = {"text": text, "output_tokens": final.usage.output_tokens}
    events = [e.type for e in client.messages.create(model="claude-opus-5-5", max_tokens=64, messages=messages, stream=True)]
    seen["events"] = events
    message = client.messages.create(model="claude-opus-5-5", max_tokens=64, messages=messages)
    seen["whole"] = {"text": message.content[0].text, "input_tokens": message.usage.input_tokens}
    return seen


if __name__ == "__main__":
    which = sys.argv[1]
    out = {"openai": openai_calls, "anthropic": anthropic_calls}[which]()
    print(json.dumps(out))
