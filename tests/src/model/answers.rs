//! The scripted model's answers in each wire API's own shape: Anthropic
//! Messages, OpenAI Responses and Chat Completions, Gemini; a JSON body or
//! its server-sent events.

use serde_json::{Value, json};

use super::{Answer, Reply};

/// Server-sent events, one `event:`/`data:` pair each.
pub(super) fn sse(events: &[(&str, Value)]) -> String {
    events.iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n")).collect()
}

/// Anthropic Messages API: a JSON message, or its streamed events.
pub(super) fn messages_events(reply: &Reply, model: &str, n: usize, stream: bool) -> Answer {
    let usage = json!({ "input_tokens": 10, "output_tokens": 5 });
    let (block, stop) = match reply {
        Reply::Tool { name, arguments, id, .. } => (
            json!({ "type": "tool_use", "id": format!("toolu_{id:04}"), "name": name, "input": arguments }),
            "tool_use",
        ),
        Reply::Text(t) => (json!({ "type": "text", "text": t }), "end_turn"),
    };
    let id = format!("msg_{n:04}");
    if !stream {
        return Answer::Json(json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": [block], "stop_reason": stop, "stop_sequence": null, "usage": usage,
        }));
    }
    let (start_block, delta) = match reply {
        Reply::Tool { arguments, .. } => {
            let mut b = block.clone();
            b["input"] = json!({});
            (b, json!({ "type": "input_json_delta", "partial_json": arguments.to_string() }))
        }
        Reply::Text(t) => (json!({ "type": "text", "text": "" }), json!({ "type": "text_delta", "text": t })),
    };
    Answer::Stream(sse(&[
        (
            "message_start",
            json!({ "type": "message_start", "message": {
                "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": null, "stop_sequence": null, "usage": { "input_tokens": 10, "output_tokens": 1 } } }),
        ),
        ("content_block_start", json!({ "type": "content_block_start", "index": 0, "content_block": start_block })),
        ("content_block_delta", json!({ "type": "content_block_delta", "index": 0, "delta": delta })),
        ("content_block_stop", json!({ "type": "content_block_stop", "index": 0 })),
        (
            "message_delta",
            json!({ "type": "message_delta", "delta": { "stop_reason": stop, "stop_sequence": null },
                    "usage": { "output_tokens": 5 } }),
        ),
        ("message_stop", json!({ "type": "message_stop" })),
    ]))
}

/// OpenAI Responses API: a response object, or its streamed events.
pub(super) fn responses_events(reply: &Reply, model: &str, n: usize, stream: bool) -> Answer {
    let item = match reply {
        Reply::Tool { name, namespace, arguments, id } => {
            let mut item = json!({
                "type": "function_call", "id": format!("fc_{id:04}"), "call_id": format!("call_{id:04}"),
                "name": name, "arguments": arguments.to_string(), "status": "completed",
            });
            if let Some(ns) = namespace {
                item["namespace"] = json!(ns);
            }
            item
        }
        Reply::Text(t) => json!({
            "type": "message", "id": format!("msg_{n:04}"), "role": "assistant", "status": "completed",
            "content": [{ "type": "output_text", "text": t, "annotations": [] }],
        }),
    };
    let id = format!("resp_{n:04}");
    let usage = json!({
        "input_tokens": 10, "input_tokens_details": { "cached_tokens": 0 },
        "output_tokens": 5, "output_tokens_details": { "reasoning_tokens": 0 }, "total_tokens": 15,
    });
    let done = json!({
        "id": id, "object": "response", "created_at": 0, "status": "completed", "model": model,
        "output": [item.clone()], "usage": usage,
    });
    if !stream {
        return Answer::Json(done);
    }
    let mut in_progress = done.clone();
    in_progress["status"] = json!("in_progress");
    in_progress["output"] = json!([]);
    Answer::Stream(sse(&[
        ("response.created", json!({ "type": "response.created", "sequence_number": 0, "response": in_progress })),
        (
            "response.output_item.added",
            json!({ "type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": item }),
        ),
        (
            "response.output_item.done",
            json!({ "type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": item }),
        ),
        ("response.completed", json!({ "type": "response.completed", "sequence_number": 3, "response": done })),
    ]))
}

/// OpenAI Chat Completions API: a completion, or its streamed chunks
/// (`data:` lines ending with `[DONE]`); streamed, the usage comes only when
/// asked for (`stream_options.include_usage`), in an event of its own with
/// no choices, the others then carrying `"usage": null`, as OpenAI does.
pub(super) fn chat_events(reply: &Reply, model: &str, n: usize, (stream, include_usage): (bool, bool)) -> Answer {
    let id = format!("chatcmpl-{n:04}");
    let (message, finish) = match reply {
        Reply::Tool { name, arguments, id, .. } => (
            json!({ "role": "assistant", "content": null, "tool_calls": [{
                "index": 0, "id": format!("call_{id:04}"), "type": "function",
                "function": { "name": name, "arguments": arguments.to_string() } }] }),
            "tool_calls",
        ),
        Reply::Text(t) => (json!({ "role": "assistant", "content": t }), "stop"),
    };
    let usage = json!({ "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15 });
    if !stream {
        return Answer::Json(json!({
            "id": id, "object": "chat.completion", "created": 0, "model": model,
            "choices": [{ "index": 0, "message": message, "finish_reason": finish }], "usage": usage,
        }));
    }
    let chunk = |delta: Value, finish: Value| {
        let mut c = json!({ "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
                            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] });
        if include_usage {
            c["usage"] = Value::Null;
        }
        c
    };
    let mut chunks = vec![chunk(message, Value::Null), chunk(json!({}), json!(finish))];
    if include_usage {
        chunks.push(
            json!({ "id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [], "usage": usage }),
        );
    }
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    Answer::Stream(out)
}

/// Google's Gemini API: a `GenerateContentResponse`, or the same as one
/// server-sent event (`alt=sse`).
pub(super) fn gemini_events(reply: &Reply, model: &str, stream: bool) -> Answer {
    let part = match reply {
        Reply::Tool { name, arguments, .. } => json!({ "functionCall": { "name": name, "args": arguments } }),
        Reply::Text(t) => json!({ "text": t }),
    };
    let response = json!({
        "candidates": [{ "content": { "role": "model", "parts": [part] }, "finishReason": "STOP", "index": 0 }],
        "usageMetadata": { "promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15 },
        "modelVersion": model,
    });
    if !stream {
        return Answer::Json(response);
    }
    Answer::Stream(format!("data: {response}\r\n\r\n"))
}
