//! `cryoctl usage`: what sessions used (tokens and cost), summed by chamber,
//! provider account, day or model, over a window; and the figures `chamber
//! list` and `chamber status` show beside each chamber.

use chrono::{DateTime, Duration, Local, NaiveDate, TimeZone, Utc};
use cryo_proto::v1 as pb;
use serde_json::json;

use crate::client::{self, Failure, Result};
use crate::{Ctx, output};

/// The start of a window: `7d`, `24h`, `today`, a date (`2026-11-01`, local
/// midnight) or `all`.
pub fn since(arg: &str) -> Result<Option<DateTime<Utc>>> {
    let now = output::now();
    let midnight = |d: NaiveDate| {
        Local.from_local_datetime(&d.and_hms_opt(0, 0, 0).expect("midnight")).earliest().map(|t| t.with_timezone(&Utc))
    };
    let t = match arg.trim() {
        "all" => return Ok(None),
        "today" => midnight(now.with_timezone(&Local).date_naive()),
        a => match (NaiveDate::parse_from_str(a, "%Y-%m-%d"), cryo_core::time::parse_duration(a)) {
            (Ok(d), _) => midnight(d),
            (_, Some(d)) => Some(now - d),
            _ => None,
        },
    };
    t.map(Some).ok_or_else(|| Failure {
        message: format!("--since {arg:?}: give 7d, 24h, today, a date (2026-11-01) or all"),
        code: 2,
    })
}

/// The client of the command that asks (it has said Hello).
type Control = cryo_proto::Control;

/// Asks cryod for usage since `since`, summed `by`, of one chamber or all.
pub async fn fetch(
    c: &mut Control,
    by: &str,
    since: Option<DateTime<Utc>>,
    chamber: Option<pb::ChamberRef>,
) -> Result<pb::UsageReply> {
    let since = since.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)).unwrap_or_default();
    Ok(c.usage(pb::UsageRequest { by: by.to_string(), since, chamber }).await?.into_inner())
}

pub fn cost(usd: f64) -> String {
    if usd >= 100.0 {
        format!("${usd:.0}")
    } else if usd >= 1.0 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.4}")
    }
}

fn row_json(r: &pb::UsageRow) -> serde_json::Value {
    json!({
        "key": r.key, "sessions": r.sessions, "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens, "cached_tokens": r.cached_tokens, "cost_usd": r.cost_usd,
    })
}

/// `cryoctl usage [--by chamber|provider|day|model] [--since 7d]`.
pub async fn run(ctx: Ctx, by: String, since_arg: String) -> Result<()> {
    let from = since(&since_arg)?;
    let r = fetch(&mut client::control(&ctx.socket).await?, &by, from, None).await?;
    let total = r.total.unwrap_or_default();
    if ctx.json {
        output::json(&json!({
            "by": by, "since": from.map(|t| t.to_rfc3339()),
            "rows": r.rows.iter().map(row_json).collect::<Vec<_>>(), "total": row_json(&total),
        }));
        return Ok(());
    }
    if r.rows.is_empty() {
        outln!(
            "no sessions ended since {}",
            from.map(|t| output::local_time(&t.to_rfc3339())).unwrap_or("ever".into())
        );
        return Ok(());
    }
    let cells = |r: &pb::UsageRow| -> Vec<output::Cell> {
        vec![
            r.key.as_str().into(),
            r.sessions.to_string().into(),
            r.input_tokens.to_string().into(),
            r.cached_tokens.to_string().into(),
            r.output_tokens.to_string().into(),
            // Nothing known of what these sessions used (agents that report
            // nothing): no cost shown, rather than a false $0.
            if known(r) { cost(r.cost_usd) } else { "-".to_string() }.into(),
        ]
    };
    let mut rows: Vec<Vec<output::Cell>> = r.rows.iter().map(cells).collect();
    rows.push(cells(&pb::UsageRow { key: "TOTAL".into(), ..total }));
    let head = by.to_uppercase();
    output::table(&[head.as_str(), "SESSIONS", "INPUT", "CACHED", "OUTPUT", "COST"], rows, 0);
    Ok(())
}

/// Each chamber's cost since local midnight, by name (for `chamber list`).
pub async fn today_by_chamber(c: &mut Control) -> Result<std::collections::HashMap<String, f64>> {
    let r = fetch(c, "chamber", since("today")?, None).await?;
    // Sessions of agents whose use is unknown (no tokens, no cost) show none.
    Ok(r.rows.into_iter().filter(known).map(|r| (r.key, r.cost_usd)).collect())
}

/// Whether a row says anything of what sessions used.
fn known(r: &pb::UsageRow) -> bool {
    r.input_tokens + r.output_tokens > 0 || r.cost_usd > 0.0
}

/// One chamber's cost today, over 7 days and over 30 days, and its
/// sessions over 30 days (for `chamber status`); none if its agents' use is
/// unknown.
pub async fn windows(c: &mut Control, chamber: pb::ChamberRef) -> Result<Option<([f64; 3], u64)>> {
    let now = output::now();
    let r = fetch(c, "day", Some(now - Duration::days(30)), Some(chamber)).await?;
    if !r.rows.iter().any(known) {
        return Ok(None);
    }
    let today = since("today")?.unwrap_or(now).format("%Y-%m-%d").to_string();
    let week = (now - Duration::days(7)).format("%Y-%m-%d").to_string();
    let mut sums = [0.0; 3];
    for row in &r.rows {
        sums[2] += row.cost_usd;
        if row.key >= week {
            sums[1] += row.cost_usd;
        }
        if row.key >= today {
            sums[0] += row.cost_usd;
        }
    }
    Ok(Some((sums, r.total.map(|t| t.sessions).unwrap_or(0))))
}
