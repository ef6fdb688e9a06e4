//! Gemini CLI's `--output-format stream-json`.

use serde_json::Value;

use super::*;

impl Reader {
    /// Gemini CLI: `init`, `message` (the assistant's in `delta` pieces,
    /// gathered into one line), `tool_use`, `tool_result`, `error`, and a
    /// final `result` with `stats`.
    pub(super) fn gemini(&mut self, v: &Value, out: &mut Vec<String>) {
        let kind = str_at(v, "/type");
        if kind != Some("message") || v["role"] != "assistant" {
            self.flush_said(out);
        }
        match kind {
            Some("init") => {
                self.usage.provider_session = str_at(v, "/session_id").map(str::to_string);
                if let Some(m) = str_at(v, "/model") {
                    self.usage.model = Some(m.to_string());
                }
                out.push(format!(
                    "[session {} · model {}]",
                    or_q(&self.usage.provider_session),
                    or_q(&self.usage.model)
                ));
            }
            Some("message") if v["role"] == "assistant" => {
                self.hear(str_at(v, "/content").unwrap_or(""));
                if v["delta"] != true {
                    self.flush_said(out);
                }
            }
            Some("tool_use") => {
                let c = ToolCall::new(str_at(v, "/tool_name").unwrap_or("?"), &v["parameters"])
                    .with_id(str_at(v, "/tool_id"));
                out.push(format!("→ {}", c.shown));
                self.calls.push(c);
            }
            Some("tool_result") => {
                let error = v["status"] == "error";
                let text = str_at(v, "/output").or_else(|| str_at(v, "/error/message")).unwrap_or("");
                result(out, text, error);
            }
            Some("error") => {
                let message = str_at(v, "/message").unwrap_or("?");
                out.push(format!("error: {}", clip(message)));
            }
            Some("result") => {
                let stats = &v["stats"];
                self.usage.input_tokens = num(stats, "input_tokens");
                self.usage.output_tokens = num(stats, "output_tokens");
                self.usage.cached_tokens = num(stats, "cached");
                if v["status"] == "error" {
                    let why = str_at(v, "/error/message").unwrap_or("the run failed");
                    out.push(format!("error: {}", clip(why)));
                    if says_limit(why) || str_at(v, "/error/type").is_some_and(says_limit) {
                        self.limited.get_or_insert(Limited { text: why.to_string(), ..Limited::default() });
                    }
                }
                out.push(self.summary());
            }
            _ => {}
        }
    }
}
