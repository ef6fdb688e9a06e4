//! An ACP agent, as cryod's client (`acp`) writes it.

use serde_json::Value;

use super::*;

impl Reader {
    /// An ACP agent, as cryod's client writes it (see `acp`): its
    /// `session/update`s (message pieces, with the usage of each model
    /// request in `_meta.usage` for Qwen Code; tool calls and their
    /// updates), the permissions it was given, and the prompt's result (with
    /// `usage`, or Gemini CLI's `_meta.quota`, where the agent reports there).
    pub(super) fn acp(&mut self, v: &Value, out: &mut Vec<String>) {
        let update = &v["update"];
        let kind = str_at(v, "/type");
        if kind != Some("update") || update["sessionUpdate"] != "agent_message_chunk" {
            self.flush_said(out);
        }
        match kind {
            Some("session") => {
                self.usage.provider_session = str_at(v, "/sessionId").map(str::to_string);
                if let Some(m) = str_at(v, "/model") {
                    self.usage.model = Some(m.to_string());
                }
                let how = if v["resumed"] == true { "resumed" } else { "session" };
                out.push(format!("[{how} {} · model {}]", or_q(&self.usage.provider_session), or_q(&self.usage.model)));
            }
            Some("update") => match update["sessionUpdate"].as_str() {
                Some("agent_message_chunk") => {
                    self.hear(str_at(update, "/content/text").unwrap_or(""));
                    let u = &update["_meta"]["usage"];
                    if u.is_object() {
                        self.usage.input_tokens += num(u, "inputTokens");
                        self.usage.cached_tokens += num(u, "cachedReadTokens");
                        self.usage.output_tokens += num(u, "outputTokens") + num(u, "thoughtTokens");
                    }
                }
                Some("tool_call" | "tool_call_update") => {
                    let id = str_at(update, "/toolCallId").unwrap_or("").to_string();
                    let input = &update["rawInput"];
                    let has_input = input.as_object().is_some_and(|o| !o.is_empty());
                    if has_input && !self.shown.contains(&id) && self.shown.len() < MAX_SHOWN {
                        let name =
                            str_at(update, "/_meta/toolName").or_else(|| str_at(update, "/title")).unwrap_or("?");
                        let c = ToolCall::new(name, input).with_id(Some(id.as_str()));
                        out.push(format!("→ {}", c.shown));
                        self.calls.push(c);
                        self.shown.insert(id);
                    }
                    if let Some(status @ ("completed" | "failed")) = str_at(update, "/status") {
                        // A shell's own output where the agent gives it
                        // (Qwen Code's `rawOutput.output`), else the content.
                        if let Some(o) = str_at(update, "/rawOutput/output").filter(|o| !o.is_empty()) {
                            result(out, o, status == "failed");
                            return;
                        }
                        let text: Vec<&str> = update["content"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|c| c.pointer("/content/text").and_then(Value::as_str).or(c["path"].as_str()))
                            .collect();
                        result(out, &text.join("\n"), status == "failed");
                    }
                }
                _ => {}
            },
            Some("permission") => {
                let (tool, chose) = (clip(str_at(v, "/tool").unwrap_or("?")), str_at(v, "/chose").unwrap_or("?"));
                out.push(match str_at(v, "/message").filter(|m| !m.is_empty()) {
                    Some(why) => format!("permission: {tool} ({chose}: {})", clip(why)),
                    None => format!("permission: {tool} ({chose})"),
                })
            }
            Some("result") => {
                let r = &v["result"];
                let quota = &r["_meta"]["quota"];
                if self.usage.input_tokens == 0 && self.usage.output_tokens == 0 {
                    if r["usage"].is_object() {
                        self.usage.input_tokens = num(&r["usage"], "inputTokens");
                        self.usage.output_tokens = num(&r["usage"], "outputTokens");
                    } else if quota.is_object() {
                        self.usage.input_tokens = num(&quota["token_count"], "input_tokens");
                        self.usage.output_tokens = num(&quota["token_count"], "output_tokens");
                    }
                }
                if let Some(m) = quota.pointer("/model_usage/0/model").and_then(Value::as_str) {
                    self.usage.model.get_or_insert_with(|| m.to_string());
                }
                if r["stopReason"] != "end_turn" {
                    out.push(format!("stopped: {}", str_at(r, "/stopReason").unwrap_or("?")));
                }
                out.push(self.summary());
            }
            Some("error") => {
                let why = str_at(v, "/message").unwrap_or("?");
                out.push(format!("error: {}", clip(why)));
                if says_limit(why) {
                    self.limited.get_or_insert(Limited { text: why.to_string(), ..Limited::default() });
                }
            }
            _ => {}
        }
    }
}
