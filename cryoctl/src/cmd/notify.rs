//! `cryoctl notify test [NAME]` and `cryoctl notify log`: the notifiers of
//! `cryod.toml` (`[[notify]]`), tried and read.

use cryo_proto::v1 as pb;

use crate::client::{self, Failure, Result};
use crate::{Ctx, output};

fn print(ctx: &Ctx, deliveries: &[pb::Delivery]) {
    if ctx.json {
        let all: Vec<serde_json::Value> = deliveries.iter().map(cryo_proto::json::delivery_json).collect();
        output::json(&serde_json::Value::Array(all));
        return;
    }
    for d in deliveries {
        let what = if d.chamber.is_empty() { d.kind.clone() } else { format!("{} {}", d.kind, d.chamber) };
        let mark = if d.ok { "ok" } else { "--" };
        outln!("{}  {mark}  {:<12} {what}: {} ({} ms)", output::local_time(&d.at), d.notifier, d.outcome, d.latency_ms);
    }
}

/// Sends a test event through one notifier (or all) and prints each result;
/// fails if any failed.
pub async fn test(ctx: Ctx, name: Option<String>) -> Result<()> {
    let mut c = client::control(&ctx.socket).await?;
    let r = c.notify_test(pb::NotifyTestRequest { name: name.unwrap_or_default() }).await?.into_inner();
    print(&ctx, &r.deliveries);
    match r.deliveries.iter().filter(|d| !d.ok).count() {
        0 => Ok(()),
        n => Err(Failure { message: format!("{n} notifier(s) failed"), code: 1 }),
    }
}

pub async fn log(ctx: Ctx, limit: u32) -> Result<()> {
    let mut c = client::control(&ctx.socket).await?;
    let r = c.notify_log(pb::NotifyLogRequest { limit }).await?.into_inner();
    if r.deliveries.is_empty() && !ctx.json {
        outln!("no notices since cryod started");
        return Ok(());
    }
    print(&ctx, &r.deliveries);
    Ok(())
}
