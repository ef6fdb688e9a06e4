//! Issue 43: OpenTelemetry. With `[telemetry] otlp_endpoint`, each wake is
//! a trace exported over OTLP/HTTP: an OTLP receiver on 127.0.0.1 gets
//! them, and OpenTelemetry's own types (`opentelemetry-proto`, not cryod's
//! encoder) decode them. The real Claude Code runs two wakes through the
//! gateway: each root span carries the GenAI attributes the ledger agrees
//! with, each model request and each tool call is its child, and the second
//! wake links the first.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;

use cryo_tests::model::{ModelServer, Script};
use cryo_tests::{Env, wait_until_telling, wait_until_within};

use crate::agents::{SESSION_DEADLINE, claude_provider, cli};

/// An OTLP/HTTP receiver: what was posted to `/v1/traces`, as sent.
struct Receiver {
    url: String,
    bodies: Arc<Mutex<Vec<(String, String)>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Receiver {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let bodies: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let kept = bodies.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
                let kept = kept.clone();
                async move {
                    let kind = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                    kept.lock().unwrap().push((kind, body));
                    axum::Json(serde_json::json!({}))
                }
            }),
        );
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await });
        Receiver { url, bodies, _runtime: runtime }
    }

    /// Every span received, decoded by OpenTelemetry's own types.
    fn spans(&self) -> Vec<Span> {
        let bodies = self.bodies.lock().unwrap().clone();
        bodies
            .iter()
            .flat_map(|(kind, body)| {
                assert_eq!(kind, "application/json");
                let req: ExportTraceServiceRequest =
                    serde_json::from_str(body).unwrap_or_else(|e| panic!("not OTLP JSON ({e}): {body}"));
                let resource = &req.resource_spans[0];
                let service = attrs(&resource.resource.as_ref().unwrap().attributes);
                assert_eq!(service["service.name"], "cryod");
                req.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans).collect::<Vec<_>>()
            })
            .collect()
    }
}

/// A span's attributes, each as text.
fn attrs(a: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> BTreeMap<String, String> {
    a.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::IntValue(n)) => n.to_string(),
                Some(Value::DoubleValue(f)) => f.to_string(),
                Some(Value::BoolValue(b)) => b.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

#[test]
fn each_wake_is_a_trace_of_its_model_requests_and_tool_calls_exported_over_otlp() {
    let Some(path) = cli("claude") else { return };
    let receiver = Receiver::start();
    let script = Script::new().on("- session: 2\n", &["cryo-agent hibernate --complete --summary second"]).on(
        "- session: 1\n",
        &["echo one", "cryo-agent todo add again --at +1s", "cryo-agent hibernate --summary first"],
    );
    let model = ModelServer::start(script);
    let env = Env::new();
    env.daemon_config(&format!("[telemetry]\notlp_endpoint = \"{}\"\n", receiver.url));
    let _d = env.start_daemon();
    let provider = claude_provider(&env, &model);
    let c = env.chamber("traced", "", &format!("agent = \"{}\"\n\n[provider]\n{provider}\n", path.display()));
    env.cryoctl(&["chamber", "start", "traced"]).ok();
    wait_until_within(SESSION_DEADLINE, "two sessions", || c.ended() >= 2);
    let roots = || receiver.spans().into_iter().filter(|s| s.parent_span_id.is_empty()).count();
    wait_until_telling(SESSION_DEADLINE, "two traces", || roots() >= 2, || format!("{:#?}", receiver.spans()));
    let spans = receiver.spans();
    let status = env.cryoctl(&["chamber", "status", "traced", "--json"]).json();
    // Newest first in status: session 1 is the last.
    let sessions: Vec<&serde_json::Value> = status[0]["sessions"].as_array().unwrap().iter().rev().collect();
    let mut roots: Vec<&Span> = spans.iter().filter(|s| s.parent_span_id.is_empty()).collect();
    roots.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(roots.len(), 2, "{spans:#?}");
    for (root, ledger) in roots.iter().zip(&sessions) {
        let a = attrs(&root.attributes);
        // Named after the agent: the chamber (GenAI conventions).
        assert_eq!(root.name, "invoke_agent traced");
        assert_eq!(a["gen_ai.operation.name"], "invoke_agent");
        assert_eq!(a["gen_ai.provider.name"], "anthropic");
        assert_eq!(a["gen_ai.agent.name"], "traced");
        assert_eq!(a["gen_ai.conversation.id"], ledger["provider_session"].as_str().unwrap(), "{a:?}");
        assert_eq!(a["gen_ai.response.model"], ledger["model"].as_str().unwrap(), "{a:?}");
        assert_eq!(a["gen_ai.usage.input_tokens"], ledger["input_tokens"].to_string(), "{a:?}");
        assert_eq!(a["gen_ai.usage.output_tokens"], ledger["output_tokens"].to_string(), "{a:?}");
        assert_eq!(a["cryo.session"], ledger["number"].to_string());
        assert!(root.start_time_unix_nano > 0 && root.start_time_unix_nano <= root.end_time_unix_nano);
        // Its children: each with the root as its parent, inside its trace.
        let children: Vec<&Span> = spans.iter().filter(|s| s.parent_span_id == root.span_id).collect();
        assert!(children.iter().all(|s| s.trace_id == root.trace_id));
        let chats = children.iter().filter(|s| attrs(&s.attributes)["gen_ai.operation.name"] == "chat").count();
        assert!(chats >= 1, "{children:#?}");
    }
    assert_ne!(roots[0].trace_id, roots[1].trace_id, "a trace per wake");
    // The second wake links the first.
    let link = &roots[1].links[0];
    assert_eq!((&link.trace_id, &link.span_id), (&roots[0].trace_id, &roots[0].span_id));
    assert!(roots[0].links.is_empty());
    // Every model request is a `chat` span, with what the provider counted.
    let chats: Vec<&Span> = spans
        .iter()
        .filter(|s| attrs(&s.attributes).get("gen_ai.operation.name").is_some_and(|o| o == "chat"))
        .collect();
    assert_eq!(chats.len(), model.seen().len(), "{chats:#?}");
    let asked: Vec<String> = model.seen().iter().filter_map(|s| s.body["model"].as_str().map(str::to_string)).collect();
    let port = model.url().rsplit(':').next().unwrap().trim_end_matches('/').to_string();
    for s in &chats {
        let a = attrs(&s.attributes);
        // What the request asked for, and where it went.
        assert!(asked.contains(&a["gen_ai.request.model"]), "{a:?} not in {asked:?}");
        assert_eq!(s.name, format!("chat {}", a["gen_ai.request.model"]));
        assert_eq!((a["server.address"].as_str(), a["server.port"].as_str()), ("127.0.0.1", port.as_str()), "{a:?}");
        assert!(!a.contains_key("error.type"), "{a:?}");
        assert_eq!((a["gen_ai.usage.input_tokens"].as_str(), a["gen_ai.usage.output_tokens"].as_str()), ("10", "5"));
        assert_eq!(a["http.response.status_code"], "200");
        assert_eq!(s.kind, 3, "a client span");
    }
    // The first wake's tool calls, each a span: the shell's three commands.
    let tools: Vec<BTreeMap<String, String>> = spans
        .iter()
        .filter(|s| s.trace_id == roots[0].trace_id && s.name.starts_with("execute_tool"))
        .map(|s| attrs(&s.attributes))
        .collect();
    assert_eq!(tools.len(), 3, "{tools:#?}");
    assert!(tools.iter().all(|a| a["gen_ai.tool.name"] == "Bash"), "{tools:#?}");
    assert!(tools.iter().any(|a| a["cryo.tool.call"].contains("echo one")), "{tools:#?}");
    // Each call's own id, as the CLI named it (Claude Code's `toolu_…`).
    assert!(tools.iter().all(|a| a.get("gen_ai.tool.call.id").is_some_and(|i| !i.is_empty())), "{tools:#?}");
}
