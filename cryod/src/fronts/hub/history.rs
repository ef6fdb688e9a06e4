//! What happened and what comes next, for the pictures on the hub's pages:
//! a chamber's sessions of the last days with a digest per day (sessions,
//! failures, messages in and out, cost), derived from the ledger and the
//! mailbox's file names; and the fleet's coming wakes with the sessions
//! running now.

use std::collections::BTreeMap;
use std::path::Path;

use axum::extract::{Path as UrlPath, Query, State};
use chrono_tz::Tz;
use cryo_core::session::Outcome;
use cryo_proto::json as j;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiResult, Hub, view};
use crate::chamber::mailbox::{Folder, Mailbox};
use crate::daemon::ChamberRef;
use crate::fronts::convert;

/// Most sessions a history holds.
const MAX_SESSIONS: u32 = 2000;

#[derive(Deserialize)]
pub(super) struct Days {
    #[serde(default)]
    days: Option<u32>,
}

/// One day's digest.
#[derive(Default)]
struct Day {
    sessions: u32,
    failures: u32,
    messages_in: u32,
    messages_out: u32,
    cost_usd: Option<f64>,
}

/// `GET /api/chambers/NAME/history?days=7`: `sessions` (those that began in
/// the window, oldest first, in `--json`'s shape with the outcome's `kind`
/// and whether it `failed`), `days` (one digest per day
/// in the chamber's zone, newest first), `upcoming` (the next wakes).
pub(super) async fn chamber(
    State(hub): State<Hub>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<Days>,
) -> ApiResult {
    let v = view(&hub, &name).await?;
    let days = q.days.unwrap_or(7).clamp(1, 90);
    let tz: Tz = v.snap.view.timezone.parse().unwrap_or(chrono_tz::UTC);
    let now = hub.daemon.now();
    let since = now - chrono::Duration::days(i64::from(days));
    let rows = hub.daemon.sessions(v.record.id, MAX_SESSIONS).await?;
    let mut digest: BTreeMap<chrono::NaiveDate, Day> = BTreeMap::new();
    for d in 0..days {
        digest.entry((now - chrono::Duration::days(i64::from(d))).with_timezone(&tz).date_naive()).or_default();
    }
    let mut sessions = Vec::new();
    for s in rows.iter().rev() {
        let Some(at) = s.started_at else { continue };
        if at < since {
            continue;
        }
        let kind = s.outcome.as_deref().and_then(Outcome::kind_of_described);
        let failed = kind.is_some_and(cryo_core::session::kind_failed);
        let day = digest.entry(at.with_timezone(&tz).date_naive()).or_default();
        day.sessions += 1;
        day.failures += u32::from(failed);
        if let Some(c) = s.usage.cost_usd {
            *day.cost_usd.get_or_insert(0.0) += c;
        }
        let mut v = j::session_json(&convert::session(s));
        v["kind"] = json!(kind);
        v["failed"] = json!(failed);
        sessions.push(v);
    }
    let root = Path::new(&v.record.path);
    let mb = Mailbox::new(root, tz);
    for f in [Folder::Inbox, Folder::InboxArchive, Folder::Outbox, Folder::OutboxArchive] {
        // Listed off the worker's other tasks, counted as listed (no copy
        // of a folder's names).
        let listed = tokio::task::block_in_place(|| {
            mb.each_name(f, |name| {
                let Some(at) = cryo_core::message::time_of_name(name).filter(|t| *t >= since) else { return };
                let day = digest.entry(at.with_timezone(&tz).date_naive()).or_default();
                if f.incoming() { day.messages_in += 1 } else { day.messages_out += 1 }
            })
        });
        if let Err(error) = listed {
            tracing::debug!(folder = f.rel(), %error, "cannot list a mail folder");
        }
    }
    let days: Vec<Value> = digest
        .iter()
        .rev()
        // The asked days only: a message named with a date to come (the
        // agent names its files) makes no day of its own.
        .filter(|(d, _)| **d >= since.with_timezone(&tz).date_naive() && **d <= now.with_timezone(&tz).date_naive())
        .take(days as usize)
        .map(|(d, x)| {
            json!({
                "day": d.to_string(), "sessions": x.sessions, "failures": x.failures,
                "messages_in": x.messages_in, "messages_out": x.messages_out, "cost_usd": x.cost_usd,
            })
        })
        .collect();
    let (upcoming, _) = hub.daemon.schedule(Some(&ChamberRef::Name(v.record.name.clone())), 20).await?;
    let upcoming: Vec<Value> = upcoming.iter().map(|p| j::scheduled_json(&convert::scheduled(p))).collect();
    Ok(axum::Json(json!({ "timezone": tz.name(), "sessions": sessions, "days": days, "upcoming": upcoming })))
}

#[derive(Deserialize)]
pub(super) struct Count {
    #[serde(default)]
    count: Option<usize>,
    /// Only the wakes of the next this many hours (the window a page draws).
    #[serde(default)]
    hours: Option<u32>,
}

/// `GET /api/schedule?count=50[&hours=24]`: every chamber's coming wakes on
/// one time line (`wakes`, in `cryoctl schedule --json`'s shape; with
/// `hours`, only those within that many hours), and the sessions running
/// now (`running`: chamber, session, started).
pub(super) async fn fleet(State(hub): State<Hub>, Query(q): Query<Count>) -> ApiResult {
    let (wakes, problems) = hub.daemon.schedule(None, q.count.unwrap_or(50)).await?;
    // At most a year ahead: an absurd `hours` is not an overflow.
    let end = q.hours.map(|h| hub.daemon.now() + chrono::Duration::hours(i64::from(h.min(24 * 366))));
    let wakes: Vec<Value> = wakes
        .iter()
        .filter(|p| end.is_none_or(|end| p.wake.at <= end))
        .map(|p| j::scheduled_json(&convert::scheduled(p)))
        .collect();
    let mut running = Vec::new();
    for v in hub.daemon.list().await {
        if !v.snap.view.in_session {
            continue;
        }
        let last = hub.daemon.sessions(v.record.id, 1).await?;
        let started = last.first().and_then(|s| s.started_at).map(crate::base::clock::rfc3339);
        running
            .push(json!({ "chamber": v.record.name, "session": last.first().map(|s| s.number), "started": started }));
    }
    Ok(axum::Json(json!({ "wakes": wakes, "running": running, "problems": problems })))
}
