//! A small MCP client for the tests: JSON-RPC 2.0 over a child's stdio
//! (newline-delimited, the stdio transport) or over HTTP POSTs (streamable
//! HTTP, answered as JSON). Independent of the SDK the servers use, so the
//! tests see the wire as any client would.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long one answer may take.
const ANSWER_DEADLINE: Duration = Duration::from_secs(30);

/// The protocol version the tests ask for.
pub const PROTOCOL: &str = "2025-06-18";

/// A stdio MCP server, initialized.
pub struct StdioClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: u64,
    /// The `initialize` result.
    pub info: Value,
}

impl StdioClient {
    /// Spawns `cmd` and runs the handshake (`initialize`, then the
    /// `initialized` notification).
    pub fn start(mut cmd: Command) -> StdioClient {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning the MCP server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut c = StdioClient { child, stdin, lines, next_id: 1, info: Value::Null };
        let init = json!({
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": { "name": "cryo-tests", "version": "1" },
        });
        let r = c.request("initialize", init);
        c.info = r.get("result").cloned().unwrap_or_else(|| panic!("initialize failed: {r}"));
        c.notify("notifications/initialized", json!({}));
        c
    }

    fn write(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{msg}").expect("writing to the MCP server");
        stdin.flush().expect("flush");
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.write(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Sends a request and returns its whole response (`result` or `error`).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.write(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let deadline = Instant::now() + ANSWER_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line =
                self.lines.recv_timeout(left).unwrap_or_else(|_| panic!("no answer to {method} within the deadline"));
            let msg: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON-RPC: {line:?}: {e}"));
            if msg.get("id") == Some(&json!(id)) {
                return msg;
            }
        }
    }

    /// `tools/call`: the result (a tool error is a result with `isError`).
    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        let r = self.request("tools/call", json!({ "name": tool, "arguments": args }));
        r.get("result").cloned().unwrap_or_else(|| panic!("tools/call {tool} failed: {r}"))
    }

    /// The names of `tools/list`, sorted.
    pub fn tool_names(&mut self) -> Vec<String> {
        let mut names: Vec<String> = self.request("tools/list", json!({}))["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    }

    /// Closes stdin and waits for the server to exit.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + ANSWER_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the MCP server") {
                return status;
            }
            assert!(Instant::now() < deadline, "the MCP server did not exit when its stdin closed");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text of a tool result's first content block.
pub fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

/// Whether a tool result is a tool error.
pub fn is_error(result: &Value) -> bool {
    result["isError"] == json!(true)
}
