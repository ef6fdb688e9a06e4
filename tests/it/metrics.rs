//! Issue 19: `GET /metrics` on the hub (with its token) and on a loopback
//! address of its own; the text read by an independent OpenMetrics parser
//! (Python's `prometheus_client`, Debian's python3-prometheus-client), and
//! its histograms moving with the wakes a real cryod runs.

use std::collections::BTreeMap;

use cryo_tests::{Env, wait_until};

use crate::hub::Hub;
use crate::scheduling::{HIBERNATE, quiet_chamber};

/// Parses OpenMetrics text with `prometheus_client` (which rejects what the
/// format forbids); returns every sample as `name{labels}` → value, labels
/// sorted.
pub(crate) fn parse(text: &str) -> BTreeMap<String, f64> {
    parse_with("prometheus_client.openmetrics.parser", "OpenMetrics", text)
}

/// Parses the Prometheus text format (0.0.4) with `prometheus_client`'s
/// own parser for it, as a scraper would.
fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    parse_with("prometheus_client.parser", "the Prometheus text format", text)
}

/// `text` through the parser in `module`, which says what `format` it takes.
fn parse_with(module: &str, format: &str, text: &str) -> BTreeMap<String, f64> {
    let script = format!(
        r#"
import json, sys
from {module} import text_string_to_metric_families
out = {{}}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f'{{k}}="{{v}}"' for k, v in sorted(s.labels.items()))
        out[f"{{s.name}}{{{{{{labels}}}}}}"] = s.value
print(json.dumps(out))
"#
    );
    let mut child = std::process::Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (apt-get install python3-prometheus-client)");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "not {format}: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sample(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    m.get(key).copied().unwrap_or_else(|| panic!("no sample {key} in {m:#?}"))
}

/// `GET /metrics` asking for OpenMetrics, as Prometheus does.
pub(crate) fn get_openmetrics(hub: &Hub) -> crate::hub::Resp {
    let accept = "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    hub.raw("GET", "/metrics", Some(&hub.token()), &[accept], None)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn metrics_parse_as_openmetrics_and_move_with_wakes() {
    let env = Env::new();
    let port = free_port();
    env.daemon_config(&format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"));
    let _d = env.start_daemon();
    let c = quiet_chamber(&env, "c", HIBERNATE);
    let hub = Hub::of(&env);

    let before = parse(&get_openmetrics(&hub).body);
    assert_eq!(sample(&before, "cryo_chambers{state=\"idle\"}"), 1.0);
    let derived = cryod::config::machine_session_limit() as f64;
    assert_eq!(sample(&before, "cryo_admission_limit{}"), derived, "derived from the machine's memory");
    assert_eq!(sample(&before, "cryo_inbox_to_agent_seconds_count{}"), 0.0);

    // A scheduled wake, an operator's and one by mail.
    env.cryoctl(&["chamber", "todo", "c", "add", "soon", "--at", "+2s"]).ok();
    c.wait_ended(2);
    env.cryoctl(&["chamber", "wake", "c"]).ok();
    c.wait_ended(3);
    env.cryoctl(&["chamber", "send", "c", "hello"]).ok();
    c.wait_ended(4);

    let r = get_openmetrics(&hub);
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").is_some_and(|t| t.starts_with("application/openmetrics-text")), "{}", r.headers);
    assert!(r.body.ends_with("# EOF\n"));
    let after = parse(&r.body);
    for trigger in ["scheduled", "manual", "inbox"] {
        let count = sample(&after, &format!("cryo_wake_lateness_seconds_count{{trigger=\"{trigger}\"}}"));
        assert_eq!(count, 1.0, "one {trigger} wake");
        let sessions = sample(&after, &format!("cryo_sessions_total{{outcome=\"hibernated\",trigger=\"{trigger}\"}}"));
        assert_eq!(sessions, 1.0, "one {trigger} session ended");
        let lasted = sample(&after, &format!("cryo_session_duration_seconds_count{{trigger=\"{trigger}\"}}"));
        assert_eq!(lasted, 1.0);
        assert!(sample(&after, &format!("cryo_admission_wait_seconds_count{{trigger=\"{trigger}\"}}")) >= 1.0);
    }
    assert_eq!(sample(&after, "cryo_inbox_to_agent_seconds_count{}"), 1.0);
    let late = sample(&after, "cryo_wake_lateness_seconds_sum{trigger=\"scheduled\"}");
    assert!((0.0..1.0).contains(&late), "the scheduled wake's lateness is {late} s");
    assert_eq!(sample(&after, "cryo_agent_call_seconds_count{verb=\"hibernate\"}"), 3.0);
    assert_eq!(sample(&after, "cryo_agent_call_seconds_count{verb=\"receive\"}"), 3.0);
    let inf = sample(&after, "cryo_agent_call_seconds_bucket{le=\"+Inf\",verb=\"send\"}");
    assert_eq!(inf, sample(&after, "cryo_agent_call_seconds_count{verb=\"send\"}"));

    // The token is required on the hub; the loopback listener has none.
    let denied = hub.with_token(None).get("/metrics");
    assert_eq!(denied.status, 401);
    // Without an Accept for OpenMetrics (curl, promtool, the text parsers
    // of the client libraries): the Prometheus text format, the same figures.
    let local = Hub::at(&format!("127.0.0.1:{port}")).get("/metrics");
    assert_eq!(local.status, 200);
    assert!(
        local.header("content-type").is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{}",
        local.headers
    );
    assert!(!local.body.contains("# EOF") && !local.body.contains("# UNIT"), "{}", local.body);
    assert_eq!(
        sample(&parse_prometheus(&local.body), "cryo_sessions_total{outcome=\"hibernated\",trigger=\"inbox\"}"),
        1.0,
        "the same figures"
    );

    // `cryoctl metrics` shows the same.
    let j = env.cryoctl(&["metrics", "--json"]).json();
    let row = j
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "cryo_wake_lateness_seconds" && s["labels"] == "trigger=\"inbox\"")
        .unwrap_or_else(|| panic!("no inbox lateness in {j}"))
        .clone();
    assert_eq!(row["value"], 1.0);
    let out = env.cryoctl(&["metrics"]);
    let table = out.ok();
    assert!(table.contains("wake_lateness_seconds") && table.contains("P99"), "{table}");
    wait_until("nothing running", || {
        parse(&get_openmetrics(&hub).body).get("cryo_chambers{state=\"running\"}") == Some(&0.0)
    });
}
