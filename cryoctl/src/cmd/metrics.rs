//! `cryoctl metrics`: the figures `GET /metrics` serves, as a table (or the
//! OpenMetrics text itself with `--raw`, or JSON).

use std::collections::BTreeMap;

use crate::output::{Cell, table};

/// One series: a counter's or gauge's value, or a histogram's buckets.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub labels: String,
    pub kind: String,
    pub value: f64,
    /// Histograms: the cumulative count at each upper bound (`+Inf` last).
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
}

impl Series {
    /// The upper bound of the bucket holding quantile `q` (a histogram's
    /// resolution), or `None` if it is empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last()?.1;
        if total == 0.0 {
            return None;
        }
        self.buckets.iter().find(|(_, c)| *c >= q * total).map(|(b, _)| *b)
    }
}

/// Reads OpenMetrics text into series, in the order they come.
pub fn parse(text: &str) -> Vec<Series> {
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    let mut out: Vec<Series> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut p = rest.split_whitespace();
            if let (Some(n), Some(k)) = (p.next(), p.next()) {
                kinds.insert(n.to_string(), k.to_string());
            }
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (head, value) = match line.rsplit_once(' ') {
            Some((h, v)) => (h, v.parse::<f64>().unwrap_or(f64::NAN)),
            None => continue,
        };
        let (sample, labels) = match head.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (head, ""),
        };
        // The family a sample belongs to, and what part of it it is.
        let (family, part) = ["_bucket", "_count", "_sum", "_total"]
            .iter()
            .find_map(|s| sample.strip_suffix(s).filter(|f| kinds.contains_key(*f)).map(|f| (f, *s)))
            .unwrap_or((sample, ""));
        let kind = kinds.get(family).cloned().unwrap_or_else(|| "unknown".into());
        let (labels, le) = split_le(labels);
        let i = match out.iter().position(|s| s.name == family && s.labels == labels) {
            Some(i) => i,
            None => {
                out.push(Series { name: family.into(), labels: labels.clone(), kind, ..Series::default() });
                out.len() - 1
            }
        };
        let s = &mut out[i];
        match part {
            "_bucket" => {
                let bound = if le.as_deref() == Some("+Inf") {
                    f64::INFINITY
                } else {
                    le.and_then(|l| l.parse().ok()).unwrap_or(f64::NAN)
                };
                s.buckets.push((bound, value));
            }
            "_sum" => s.sum = value,
            _ => s.value = value,
        }
    }
    out
}

/// A label set without its `le` (and the `le` value).
fn split_le(labels: &str) -> (String, Option<String>) {
    let mut le = None;
    let kept: Vec<&str> = labels
        .split(',')
        .filter(|l| !l.is_empty())
        .filter(|l| match l.strip_prefix("le=") {
            Some(v) => {
                le = Some(v.trim_matches('"').to_string());
                false
            }
            None => true,
        })
        .collect();
    (kept.join(","), le)
}

fn ms(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.is_infinite() => "> max".into(),
        Some(v) if v < 1.0 => format!("{:.1} ms", v * 1000.0),
        Some(v) => format!("{v:.1} s"),
    }
}

pub async fn run(ctx: crate::Ctx, raw: bool) -> crate::client::Result<()> {
    let mut c = crate::client::control(&ctx.socket).await?;
    let text = c.metrics(cryo_proto::v1::MetricsRequest {}).await?.into_inner().text;
    if raw {
        out!("{text}");
        return Ok(());
    }
    let series = parse(&text);
    if ctx.json {
        let all: Vec<serde_json::Value> = series
            .iter()
            .map(|s| {
                let count = s.buckets.last().map(|b| b.1).unwrap_or(s.value);
                serde_json::json!({
                    "name": s.name, "labels": s.labels, "type": s.kind, "value": count,
                    "sum": (s.kind == "histogram").then_some(s.sum),
                    "p50": s.quantile(0.5).filter(|v| v.is_finite()),
                    "p99": s.quantile(0.99).filter(|v| v.is_finite()),
                })
            })
            .collect();
        crate::output::json(&serde_json::Value::Array(all));
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = series
        .iter()
        .map(|s| {
            let hist = s.kind == "histogram";
            let count = if hist { s.buckets.last().map(|b| b.1).unwrap_or(0.0) } else { s.value };
            let mean = (hist && count > 0.0).then(|| s.sum / count);
            vec![
                s.name.trim_start_matches("cryo_").into(),
                s.labels.replace('"', "").into(),
                format!("{count}").into(),
                if hist { ms(mean) } else { String::new() }.into(),
                if hist { ms(s.quantile(0.5)) } else { String::new() }.into(),
                if hist { ms(s.quantile(0.99)) } else { String::new() }.into(),
            ]
        })
        .collect();
    table(&["METRIC", "LABELS", "COUNT/VALUE", "MEAN", "P50 ≤", "P99 ≤"], rows, 1);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_counters_and_gauges_are_read() {
        let text = "# TYPE cryo_x_seconds histogram\n# UNIT cryo_x_seconds seconds\n\
            cryo_x_seconds_bucket{trigger=\"inbox\",le=\"0.001\"} 1\n\
            cryo_x_seconds_bucket{trigger=\"inbox\",le=\"0.01\"} 3\n\
            cryo_x_seconds_bucket{trigger=\"inbox\",le=\"+Inf\"} 4\n\
            cryo_x_seconds_count{trigger=\"inbox\"} 4\ncryo_x_seconds_sum{trigger=\"inbox\"} 2.5\n\
            # TYPE cryo_sessions counter\ncryo_sessions_total{outcome=\"crashed\"} 2\n\
            # TYPE cryo_chambers gauge\ncryo_chambers{state=\"idle\"} 7\n# EOF\n";
        let s = parse(text);
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(
            (s[0].name.as_str(), s[0].labels.as_str(), s[0].value, s[0].sum),
            ("cryo_x_seconds", "trigger=\"inbox\"", 4.0, 2.5)
        );
        assert_eq!(s[0].quantile(0.5), Some(0.01));
        assert_eq!(s[0].quantile(0.99), Some(f64::INFINITY));
        assert_eq!((s[1].name.as_str(), s[1].value), ("cryo_sessions", 2.0));
        assert_eq!((s[2].name.as_str(), s[2].labels.as_str(), s[2].value), ("cryo_chambers", "state=\"idle\"", 7.0));
    }
}
