//! Codex's `exec --json`.

use serde_json::Value;

use super::*;

impl Reader {
    pub(super) fn codex(&mut self, v: &Value, out: &mut Vec<String>) {
        let item = &v["item"];
        match str_at(v, "/type") {
            Some("thread.started") => {
                self.usage.provider_session = str_at(v, "/thread_id").map(str::to_string);
                out.push(format!(
                    "[thread {} · model {}]",
                    or_q(&self.usage.provider_session),
                    or_q(&self.usage.model)
                ));
            }
            Some("item.started") => match item["type"].as_str() {
                Some("command_execution") => {
                    let command = item["command"].as_str().unwrap_or("");
                    out.push(format!("→ $ {}", clip(command)));
                    let key = call_key("$", command);
                    let (shown, id) = (format!("$ {}", clip(command)), item["id"].as_str().map(str::to_string));
                    self.calls.push(ToolCall { name: "$".into(), key, shown, id });
                }
                Some("mcp_tool_call") => {
                    let name =
                        format!("{}.{}", item["server"].as_str().unwrap_or("?"), item["tool"].as_str().unwrap_or("?"));
                    let c = ToolCall::new(&name, &item["arguments"]).with_id(item["id"].as_str());
                    out.push(format!("→ {}", c.shown));
                    self.calls.push(c);
                }
                _ => {}
            },
            Some("item.completed") => match item["type"].as_str() {
                Some("command_execution") => {
                    let code = item["exit_code"].as_i64();
                    let text = item["aggregated_output"].as_str().unwrap_or("");
                    result(out, text, code.is_some_and(|c| c != 0));
                }
                Some("mcp_tool_call") => {
                    let text: Vec<&str> = item["result"]["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c["text"].as_str())
                        .collect();
                    let error = item["error"].as_str().or_else(|| item["error"]["message"].as_str());
                    match error {
                        Some(e) => result(out, e, true),
                        None => result(out, &text.join("\n"), false),
                    }
                }
                Some("agent_message") => push_text(out, "assistant", item["text"].as_str().unwrap_or("")),
                Some("reasoning") => push_text(out, "thinking", item["text"].as_str().unwrap_or("")),
                Some("error") => out.push(format!("error: {}", clip(item["message"].as_str().unwrap_or("?")))),
                _ => {}
            },
            Some("turn.completed") => {
                let usage = &v["usage"];
                self.usage.input_tokens += num(usage, "input_tokens");
                self.usage.cached_tokens += num(usage, "cached_input_tokens");
                self.usage.output_tokens += num(usage, "output_tokens");
                out.push(self.summary());
            }
            Some("turn.failed") => {
                out.push(format!("error: {}", clip(str_at(v, "/error/message").unwrap_or("the turn failed"))))
            }
            Some("error") => {
                let message = str_at(v, "/message").unwrap_or("?");
                out.push(format!("error: {}", clip(message)));
                // "Reconnecting... 1/5 (exceeded retry limit, last status:
                // 429 Too Many Requests)": Codex would wait out the limit.
                if says_limit(message) {
                    self.limited.get_or_insert(Limited { text: message.to_string(), ..Limited::default() });
                }
            }
            _ => {}
        }
    }
}
