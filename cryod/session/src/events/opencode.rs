//! OpenCode's `run --format json`.

use serde_json::Value;

use super::*;

impl Reader {
    pub(super) fn opencode(&mut self, v: &Value, out: &mut Vec<String>) {
        if let Some(s) = str_at(v, "/sessionID") {
            if self.usage.provider_session.is_none() {
                out.push(format!("[session {s} · model {}]", or_q(&self.usage.model)));
            }
            self.usage.provider_session = Some(s.to_string());
        }
        let part = &v["part"];
        match str_at(v, "/type") {
            Some("text") => push_text(out, "assistant", part["text"].as_str().unwrap_or("")),
            Some("tool_use") => {
                let state = &part["state"];
                let id = part["callID"].as_str().or_else(|| part["id"].as_str());
                let c = ToolCall::new(part["tool"].as_str().unwrap_or("?"), &state["input"]).with_id(id);
                out.push(format!("→ {}", c.shown));
                self.calls.push(c);
                let error = state["status"] == "error";
                let text = state["output"].as_str().or_else(|| state["error"].as_str()).unwrap_or("");
                result(out, text, error);
            }
            Some("step_finish") => {
                let t = &part["tokens"];
                let (read, written) = (num(&t["cache"], "read"), num(&t["cache"], "write"));
                self.usage.input_tokens += num(t, "input") + read + written;
                self.usage.cached_tokens += read;
                self.usage.output_tokens += num(t, "output") + num(t, "reasoning");
                self.cost_reported += part["cost"].as_f64().unwrap_or(0.0);
                if self.cost_reported > 0.0 {
                    self.usage.cost_usd = Some(self.cost_reported);
                }
                if part["reason"] == "stop" {
                    out.push(self.summary());
                }
            }
            Some("error") => {
                let why = str_at(v, "/error/data/message").or_else(|| str_at(v, "/error/name")).unwrap_or("?");
                out.push(format!("error: {}", clip(why)));
            }
            _ => {}
        }
    }
}
