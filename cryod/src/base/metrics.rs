//! Figures while cryod runs, in the OpenMetrics text format: served at
//! `GET /metrics` (the hub's listener with its bearer token, or a loopback
//! address of its own, `[metrics] listen` in `cryod.toml`) and printed by
//! `cryoctl metrics`. `cryo-bench` reads its wake figures from here too, so
//! the bench and production measure the same thing.
//!
//! One process-wide registry of atomics: recording is a few relaxed adds,
//! never a lock on the wake path (a labelled family takes a short lock to
//! find its series, once per label set).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Bucket bounds (seconds) of the latency histograms: a millisecond to a
/// minute.
const LATENCY: &[f64] =
    &[0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0];

/// Bucket bounds (seconds) of session durations: a second to a day.
const DURATION: &[f64] = &[1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0];

/// A histogram with fixed buckets.
pub struct Histogram {
    bounds: &'static [f64],
    /// One count per bound, then the +Inf bucket (not cumulative).
    counts: Box<[AtomicU64]>,
    /// The sum in nanoseconds (seconds in the text).
    sum_ns: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum_ns: AtomicU64::new(0) }
    }

    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = self.bounds.iter().position(|b| secs <= *b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(d.as_nanos().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut total = 0;
        for (i, c) in self.counts.iter().enumerate() {
            total += c.load(Ordering::Relaxed);
            let le = self.bounds.get(i).map(|b| format!("{b}")).unwrap_or_else(|| "+Inf".into());
            let _ = writeln!(out, "{name}_bucket{{{}}} {total}", join(labels, &format!("le=\"{le}\"")));
        }
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_count{braces} {total}");
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
    }
}

fn join(a: &str, b: &str) -> String {
    if a.is_empty() { b.to_string() } else { format!("{a},{b}") }
}

/// Series of one histogram, by label values.
struct HistogramFamily {
    bounds: &'static [f64],
    series: Mutex<BTreeMap<String, &'static Histogram>>,
}

impl HistogramFamily {
    fn new(bounds: &'static [f64]) -> HistogramFamily {
        HistogramFamily { bounds, series: Mutex::default() }
    }

    /// The series of `labels` (`key="value",…`, already escaped), made on
    /// first use and kept for the process's life (label sets are few: the
    /// triggers, the outcomes, the verbs).
    fn with(&self, labels: String) -> &'static Histogram {
        let mut s = self.series.lock().expect("metrics lock");
        s.entry(labels).or_insert_with(|| Box::leak(Box::new(Histogram::new(self.bounds))))
    }
}

/// A counter by label values.
#[derive(Default)]
struct CounterFamily(Mutex<BTreeMap<String, u64>>);

impl CounterFamily {
    fn add(&self, labels: String) {
        *self.0.lock().expect("metrics lock").entry(labels).or_default() += 1;
    }
}

/// What the provider gateway counted, by chamber, account and model.
#[derive(Default)]
struct Spent {
    responses: u64,
    input: u64,
    output: u64,
    cached: u64,
    cost_usd: f64,
}

/// Every figure cryod keeps.
pub struct Metrics {
    wake_lateness: HistogramFamily,
    inbox_to_agent: Histogram,
    sessions: CounterFamily,
    session_duration: HistogramFamily,
    admission_wait: HistogramFamily,
    agent_calls: HistogramFamily,
    thaws: Histogram,
    spent: Mutex<BTreeMap<String, Spent>>,
}

/// What a scrape adds from the daemon's state at that moment.
#[derive(Debug, Default, Clone)]
pub struct Gauges {
    /// Chambers by state (`running`, `idle`, `paused`, `stopped`, `faulted`).
    pub chambers: BTreeMap<String, u64>,
    /// Wakes waiting for a session slot, and sessions holding one.
    pub admission_queued: u64,
    pub admission_running: u64,
    pub admission_limit: u64,
    /// Chambers at rest without a supervisor of their own.
    pub frozen: u64,
}

/// The process's registry.
pub fn get() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| Metrics {
        wake_lateness: HistogramFamily::new(LATENCY),
        inbox_to_agent: Histogram::new(LATENCY),
        sessions: CounterFamily::default(),
        session_duration: HistogramFamily::new(DURATION),
        admission_wait: HistogramFamily::new(LATENCY),
        agent_calls: HistogramFamily::new(LATENCY),
        thaws: Histogram::new(LATENCY),
        spent: Mutex::default(),
    })
}

/// A label value escaped as OpenMetrics wants it.
fn value(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl Metrics {
    /// An agent started `late` after its wake was due (or asked for); a wake
    /// by mail is also an inbox-to-agent figure.
    pub fn wake_started(&self, trigger: &str, late: Duration) {
        self.wake_lateness.with(format!("trigger=\"{}\"", value(trigger))).observe(late);
        if trigger == "inbox" {
            self.inbox_to_agent.observe(late);
        }
    }

    /// A session ended.
    pub fn session_ended(&self, trigger: &str, outcome: &str, lasted: Option<Duration>) {
        let labels = format!("trigger=\"{}\",outcome=\"{}\"", value(trigger), value(outcome));
        self.sessions.add(labels);
        if let Some(d) = lasted {
            self.session_duration.with(format!("trigger=\"{}\"", value(trigger))).observe(d);
        }
    }

    /// A wake waited `waited` for its session slot.
    pub fn admitted(&self, trigger: &str, waited: Duration) {
        self.admission_wait.with(format!("trigger=\"{}\"", value(trigger))).observe(waited);
    }

    /// A frozen chamber was booted again in `took` (its record read, its
    /// machine made).
    pub fn thawed(&self, took: Duration) {
        self.thaws.observe(took);
    }

    /// A `cryo-agent` call took `took` in cryod.
    pub fn agent_call(&self, verb: &str, took: Duration) {
        self.agent_calls.with(format!("verb=\"{}\"", value(verb))).observe(took);
    }

    /// A model's response through the gateway: its tokens as the provider
    /// counted them, and its cost when its model has a price.
    pub fn model_response(&self, chamber: &str, account: &str, model: &str, tokens: [u64; 3], cost: Option<f64>) {
        let labels =
            format!("chamber=\"{}\",account=\"{}\",model=\"{}\"", value(chamber), value(account), value(model));
        let mut spent = self.spent.lock().expect("metrics lock");
        let s = spent.entry(labels).or_default();
        s.responses += 1;
        s.input += tokens[0];
        s.output += tokens[1];
        s.cached += tokens[2];
        s.cost_usd += cost.unwrap_or(0.0);
    }

    /// The OpenMetrics text of every figure, with `gauges` read now.
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::new();
        let histograms: [(&str, &str, &HistogramFamily); 4] = [
            (
                "cryo_wake_lateness_seconds",
                "From a wake's due time to its agent's start, by trigger",
                &self.wake_lateness,
            ),
            (
                "cryo_session_duration_seconds",
                "Sessions from the agent's start to its end, by trigger",
                &self.session_duration,
            ),
            (
                "cryo_admission_wait_seconds",
                "How long a wake waited for a session slot, by trigger",
                &self.admission_wait,
            ),
            ("cryo_agent_call_seconds", "cryo-agent calls answered by cryod, by verb", &self.agent_calls),
        ];
        for (name, help, family) in histograms {
            head(&mut out, name, "histogram", help, Some("seconds"));
            for (labels, h) in family.series.lock().expect("metrics lock").iter() {
                h.render(&mut out, name, labels);
            }
        }
        let name = "cryo_inbox_to_agent_seconds";
        head(&mut out, name, "histogram", "From a message seen in an inbox to the agent it woke", Some("seconds"));
        self.inbox_to_agent.render(&mut out, name, "");
        let name = "cryo_thaw_seconds";
        head(
            &mut out,
            name,
            "histogram",
            "Frozen chambers booted again: their record read and their boot",
            Some("seconds"),
        );
        self.thaws.render(&mut out, name, "");

        head(&mut out, "cryo_sessions", "counter", "Sessions ended, by trigger and outcome", None);
        for (labels, n) in self.sessions.0.lock().expect("metrics lock").iter() {
            let _ = writeln!(out, "cryo_sessions_total{{{labels}}} {n}");
        }
        let spent = self.spent.lock().expect("metrics lock");
        let help = "Model responses through the gateway, by chamber, provider account and model";
        head(&mut out, "cryo_model_responses", "counter", help, None);
        for (labels, s) in spent.iter() {
            let _ = writeln!(out, "cryo_model_responses_total{{{labels}}} {}", s.responses);
        }
        let help = "Tokens the provider reported through the gateway (input counts cached ones too)";
        head(&mut out, "cryo_model_tokens", "counter", help, None);
        for (labels, s) in spent.iter() {
            for (kind, n) in [("input", s.input), ("output", s.output), ("cached", s.cached)] {
                let _ = writeln!(out, "cryo_model_tokens_total{{{labels},type=\"{kind}\"}} {n}");
            }
        }
        let help = "What the gateway's responses cost in USD (models with a price)";
        head(&mut out, "cryo_model_cost_usd", "counter", help, None);
        for (labels, s) in spent.iter() {
            let _ = writeln!(out, "cryo_model_cost_usd_total{{{labels}}} {}", s.cost_usd);
        }
        drop(spent);
        head(&mut out, "cryo_chambers", "gauge", "Chambers by state", None);
        for (state, n) in &gauges.chambers {
            let _ = writeln!(out, "cryo_chambers{{state=\"{}\"}} {n}", value(state));
        }
        let gauges = [
            ("cryo_admission_queue_depth", "Wakes waiting for a session slot", gauges.admission_queued),
            ("cryo_admission_running", "Sessions holding a slot", gauges.admission_running),
            ("cryo_admission_limit", "Session slots (max_concurrent_sessions)", gauges.admission_limit),
            ("cryo_chambers_frozen", "Chambers at rest without a supervisor of their own", gauges.frozen),
        ];
        for (name, help, v) in gauges {
            head(&mut out, name, "gauge", help, None);
            let _ = writeln!(out, "{name} {v}");
        }
        out.push_str("# EOF\n");
        out
    }
}

fn head(out: &mut String, name: &str, kind: &str, help: &str, unit: Option<&str>) {
    let _ = writeln!(out, "# TYPE {name} {kind}");
    if let Some(u) = unit {
        let _ = writeln!(out, "# UNIT {name} {u}");
    }
    let _ = writeln!(out, "# HELP {name} {help}.");
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of the Prometheus text format ([`to_prometheus`]).
pub const PROMETHEUS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Which format a client asked for, as the official client libraries
/// decide: OpenMetrics if its `Accept` names it, else the Prometheus text
/// format (0.0.4), which every scraper and `promtool` reads.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// [`Metrics::render`]'s OpenMetrics text in the Prometheus text format:
/// no `# EOF` and no `# UNIT`, and a counter's family named with its
/// `_total`, as that format wants.
pub fn to_prometheus(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        let mut words = line.splitn(4, ' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("#"), Some("EOF" | "UNIT"), ..) => continue,
            (Some("#"), Some("TYPE"), Some(name), Some("counter")) => {
                counters.insert(name.to_string());
                let _ = writeln!(out, "# TYPE {name}_total counter");
            }
            (Some("#"), Some("HELP"), Some(name), Some(help)) if counters.contains(name) => {
                let _ = writeln!(out, "# HELP {name}_total {help}");
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets are cumulative and end at the count; the sum is in seconds.
    #[test]
    fn a_histogram_renders_cumulative_buckets() {
        let h = Histogram::new(&[0.001, 0.01]);
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_secs(2));
        let mut out = String::new();
        h.render(&mut out, "x", "k=\"v\"");
        assert_eq!(
            out,
            "x_bucket{k=\"v\",le=\"0.001\"} 1\nx_bucket{k=\"v\",le=\"0.01\"} 2\nx_bucket{k=\"v\",le=\"+Inf\"} 3\n\
             x_count{k=\"v\"} 3\nx_sum{k=\"v\"} 2.0055\n"
        );
    }
}
