//! Claude Code's `-p --output-format stream-json --verbose`, and Qwen Code's
//! `--output-format stream-json` (the same events).

use serde_json::Value;

use super::*;

impl Reader {
    pub(super) fn claude(&mut self, v: &Value, out: &mut Vec<String>) {
        let u = &mut self.usage;
        if let Some(s) = str_at(v, "/session_id") {
            u.provider_session = Some(s.to_string());
        }
        match (str_at(v, "/type"), str_at(v, "/subtype")) {
            (Some("system"), Some("init")) => {
                if let Some(m) = str_at(v, "/model") {
                    u.model = Some(m.to_string());
                }
                let failed: Vec<&str> = v["mcp_servers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|s| s["status"] != "connected")
                    .filter_map(|s| s["name"].as_str())
                    .collect();
                out.push(format!(
                    "[session {} · model {}]",
                    u.provider_session.as_deref().unwrap_or("?"),
                    or_q(&u.model)
                ));
                if !failed.is_empty() {
                    out.push(format!("error: MCP server(s) not connected: {}", failed.join(", ")));
                }
            }
            (Some("system"), Some("api_retry")) if v["error_status"] == 429 => {
                self.retry_ms = v["retry_delay_ms"].as_u64();
                out.push(format!(
                    "limit: the provider refused (429); Claude Code retries in {} s",
                    self.retry_ms.unwrap_or(0) / 1000
                ));
            }
            (Some("assistant"), _) => {
                if let Some(m) = str_at(v, "/message/model").filter(|m| !m.starts_with('<')) {
                    u.model = Some(m.to_string());
                }
                if let Some(id) = str_at(v, "/message/id") {
                    let mu = &v["message"]["usage"];
                    let (read, written) = (num(mu, "cache_read_input_tokens"), num(mu, "cache_creation_input_tokens"));
                    let seen = (num(mu, "input_tokens") + read + written, num(mu, "output_tokens"), read, written);
                    self.messages.insert(id.to_string(), seen);
                    let sum =
                        self.messages.values().fold((0, 0, 0, 0), |a, m| (a.0 + m.0, a.1 + m.1, a.2 + m.2, a.3 + m.3));
                    (u.input_tokens, u.output_tokens, u.cached_tokens, u.cache_write_tokens) = sum;
                }
                for part in v["message"]["content"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("text") => push_text(out, "assistant", part["text"].as_str().unwrap_or("")),
                        Some("tool_use") => {
                            let (name, input) = (part["name"].as_str().unwrap_or("?"), &part["input"]);
                            // Qwen Code calls a deferred tool (MCP's) through
                            // its `tool_call`: shown as the tool it calls.
                            let (name, input) = match (self.kind, name, input["name"].as_str()) {
                                (Kind::Qwen, "tool_call", Some(inner)) => (inner, &input["arguments"]),
                                _ => (name, input),
                            };
                            let c = ToolCall::new(name, input).with_id(part["id"].as_str());
                            out.push(format!("→ {}", c.shown));
                            self.calls.push(c);
                        }
                        _ => {}
                    }
                }
            }
            (Some("user"), _) => {
                for part in v["message"]["content"].as_array().into_iter().flatten() {
                    if part["type"] == "tool_result" {
                        let text = match &part["content"] {
                            Value::String(s) => s.clone(),
                            Value::Array(parts) => parts
                                .iter()
                                .map(|p| {
                                    p["text"].as_str().map(str::to_string).unwrap_or_else(|| {
                                        p["tool_name"].as_str().map(|t| format!("(loaded {t})")).unwrap_or_default()
                                    })
                                })
                                .collect::<Vec<_>>()
                                .join("\n"),
                            _ => String::new(),
                        };
                        result(out, &text, part["is_error"] == true);
                    }
                }
            }
            (Some("result"), _) => {
                let usage = &v["usage"];
                let (read, written) =
                    (num(usage, "cache_read_input_tokens"), num(usage, "cache_creation_input_tokens"));
                u.input_tokens = num(usage, "input_tokens") + read + written;
                u.output_tokens = num(usage, "output_tokens");
                u.cached_tokens = read;
                u.cache_write_tokens = written;
                u.cost_usd = v["total_cost_usd"].as_f64().or(u.cost_usd);
                if v["is_error"] == true {
                    let why = str_at(v, "/result").unwrap_or("the run failed");
                    out.push(format!("error: {}", clip(why)));
                    if v["api_error_status"] == 429 || v["api_error"] == "usage_limit_reached" {
                        let info = v.pointer("/api_error_params/rate_limit_info");
                        self.limited = Some(Limited {
                            resets_at: info.and_then(|i| i["resetsAt"].as_i64()),
                            retry_after_ms: self.retry_ms,
                            text: why.to_string(),
                            exact: false,
                        });
                    }
                }
                out.push(self.summary());
            }
            _ => {}
        }
    }
}
