//! `cryoctl chamber schedule CHAMBER` and `cryoctl schedule`: the coming
//! wakes, in each chamber's local time with its zone and UTC offset, with
//! the recurrence, the gate, what a daylight-saving change does to a slot,
//! and what holds a wake back as things stand.

use cryo_proto::v1 as pb;

use crate::client::{self, Result};
use crate::{Ctx, output};

/// `chamber`: one chamber (`None`: every chamber, on one time line).
pub async fn run(ctx: &Ctx, chamber: Option<pb::ChamberRef>, count: u32) -> Result<()> {
    let all = chamber.is_none();
    let mut c = client::control(&ctx.socket).await?;
    let r = c.schedule(pb::ScheduleRequest { chamber, count }).await?.into_inner();
    if ctx.json {
        let wakes: Vec<serde_json::Value> = r.wakes.iter().map(cryo_proto::json::scheduled_json).collect();
        output::json(&serde_json::json!({ "wakes": wakes, "problems": r.problems }));
        return Ok(());
    }
    for p in &r.problems {
        eprintln!("cryoctl: {}", cryo_proto::escape_controls(p));
    }
    if r.wakes.is_empty() {
        outln!("no wakes scheduled (no pending TODO with a time)");
        return Ok(());
    }
    let width = r.wakes.iter().map(|w| w.chamber.chars().count()).max().unwrap_or(0);
    for w in &r.wakes {
        let when = chrono::DateTime::parse_from_rfc3339(&w.local)
            .map(|t| format!("{} {} (UTC{})", t.format("%a %Y-%m-%d %H:%M"), w.zone, t.format("%:z")))
            .unwrap_or_else(|_| w.local.clone());
        let who = if all { format!("{:width$}  ", w.chamber) } else { String::new() };
        let mut what = format!("TODO {} {:?}", w.todo, w.text);
        if !w.repeat.is_empty() {
            what.push_str(&format!(" · {}", w.repeat));
        }
        if !w.precheck.is_empty() {
            what.push_str(&format!(" · gated by `{}`", w.precheck));
        }
        if w.overdue {
            what.push_str(" · due now");
        }
        outln!("{when}  {who}{what}");
        let indent = " ".repeat(when.chars().count() + 2);
        if !w.note.is_empty() {
            outln!("{indent}DST: {}", w.note);
        }
        if !w.held.is_empty() {
            outln!("{indent}held: {}", w.held);
        }
    }
    Ok(())
}
