//! Pi's `--mode json`.

use serde_json::Value;

use super::*;

impl Reader {
    /// Pi: `session` (its id), `message_end` of each assistant message (its
    /// text, model, usage and cost, or its error), `tool_execution_start` and
    /// `_end`, `auto_retry_start` (a 429 it would wait out), `agent_end`.
    pub(super) fn pi(&mut self, v: &Value, out: &mut Vec<String>) {
        match str_at(v, "/type") {
            Some("session") => {
                self.usage.provider_session = str_at(v, "/id").map(str::to_string);
                out.push(format!(
                    "[session {} · model {}]",
                    or_q(&self.usage.provider_session),
                    or_q(&self.usage.model)
                ));
            }
            Some("message_end") if v["message"]["role"] == "assistant" => {
                let m = &v["message"];
                if let Some(model) = str_at(m, "/model") {
                    self.usage.model = Some(model.to_string());
                }
                let u = &m["usage"];
                let (read, written) = (num(u, "cacheRead"), num(u, "cacheWrite"));
                self.usage.input_tokens += num(u, "input") + read + written;
                self.usage.cached_tokens += read;
                self.usage.output_tokens += num(u, "output");
                self.cost_reported += u.pointer("/cost/total").and_then(Value::as_f64).unwrap_or(0.0);
                if self.cost_reported > 0.0 {
                    self.usage.cost_usd = Some(self.cost_reported);
                }
                for part in m["content"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("text") => push_text(out, "assistant", part["text"].as_str().unwrap_or("")),
                        Some("thinking") => push_text(out, "thinking", part["thinking"].as_str().unwrap_or("")),
                        _ => {}
                    }
                }
                if m["stopReason"] == "error" {
                    let why = str_at(m, "/errorMessage").unwrap_or("the model call failed");
                    out.push(format!("error: {}", clip(why)));
                    if says_limit(why) {
                        self.limited.get_or_insert(Limited { text: why.to_string(), ..Limited::default() });
                    }
                }
            }
            Some("tool_execution_start") => {
                let c =
                    ToolCall::new(str_at(v, "/toolName").unwrap_or("?"), &v["args"]).with_id(str_at(v, "/toolCallId"));
                out.push(format!("→ {}", c.shown));
                self.calls.push(c);
            }
            Some("tool_execution_end") => {
                let text: Vec<&str> = v["result"]["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["text"].as_str())
                    .collect();
                result(out, &text.join("\n"), v["isError"] == true);
            }
            Some("auto_retry_start") => {
                let why = str_at(v, "/errorMessage").unwrap_or("?");
                out.push(format!("error: {} (Pi retries)", clip(why)));
                // A limit it would only wait out.
                if says_limit(why) {
                    self.limited.get_or_insert(Limited { text: why.to_string(), ..Limited::default() });
                }
            }
            Some("agent_end") => out.push(self.summary()),
            _ => {}
        }
    }
}
