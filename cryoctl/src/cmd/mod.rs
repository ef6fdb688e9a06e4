//! One module per command group.

pub mod approvals;
pub mod chamber;
pub mod daemon;
pub mod demo;
pub mod doctor;
pub mod metrics;
pub mod notify;
pub mod schedule;
pub mod usage;

/// `cryoctl mcp`: the operator's MCP server (`cryo_mcp`) on stdio, over
/// cryod's socket, until the client closes standard input.
pub async fn mcp(ctx: crate::Ctx, read_only: bool) -> crate::client::Result<()> {
    use rmcp::ServiceExt;
    let c = crate::client::control(&ctx.socket).await?;
    let tools = cryo_mcp::OperatorTools::new(c, read_only);
    let mcp = |e: &dyn std::fmt::Display| crate::client::Failure::refused(format!("MCP: {e}"));
    let running = tools.serve(rmcp::transport::stdio()).await.map_err(|e| mcp(&e))?;
    running.waiting().await.map_err(|e| mcp(&e))?;
    Ok(())
}

/// `cryoctl history prune [--keep 2y]`.
pub async fn history_prune(ctx: crate::Ctx, keep: String) -> crate::client::Result<()> {
    let mut c = crate::client::control(&ctx.socket).await?;
    let r = c.history_prune(cryo_proto::v1::HistoryPruneRequest { keep }).await?.into_inner();
    if ctx.json {
        crate::output::json(&serde_json::json!({
            "before": (!r.before.is_empty()).then_some(&r.before),
            "sessions": r.sessions, "passed": r.passed, "claims": r.claims,
        }));
    } else if r.before.is_empty() {
        outln!("history is kept whole ([history] keep_sessions = \"all\"): nothing pruned");
    } else {
        outln!(
            "pruned before {}: {} sessions, {} passed slots, {} answered claims (their usage stays counted)",
            r.before,
            r.sessions,
            r.passed,
            r.claims
        );
    }
    Ok(())
}

/// `cryoctl hub`: the URL carries the token in its fragment, which a browser
/// never sends to a server (so it never lands in a log).
pub async fn hub(ctx: crate::Ctx) -> crate::client::Result<()> {
    let mut c = crate::client::control(&ctx.socket).await?;
    let r = c.hub(cryo_proto::v1::HubRequest {}).await?.into_inner();
    if ctx.json {
        let text = |s: &str| if s.is_empty() { serde_json::Value::Null } else { s.into() };
        crate::output::json(&serde_json::json!({
            "url": r.url, "token": r.token, "up": r.up, "error": text(&r.error), "note": text(&r.note),
        }));
    } else if r.up {
        outln!("{}#token={}", r.url, r.token);
        if !r.note.is_empty() {
            eprintln!("note: {}", r.note);
        }
    }
    if !r.up {
        return Err(crate::client::Failure::refused(format!("the hub is not running: {}", r.error)));
    }
    Ok(())
}

/// `cryoctl fleet drain NODE`: waits (unless `no_wait`) until the node has
/// handed every chamber over and left.
pub async fn fleet_drain(ctx: crate::Ctx, node: String, no_wait: bool) -> crate::client::Result<()> {
    let mut c = crate::client::control(&ctx.socket).await?;
    let id = c.fleet_drain(cryo_proto::v1::FleetDrainRequest { node: node.clone() }).await?.into_inner().node;
    if !no_wait {
        if !ctx.json {
            outln!("draining node {node} ({id}): it hands its chambers over as their sessions end");
        }
        loop {
            let r = c.fleet_status(cryo_proto::v1::FleetStatusRequest {}).await?.into_inner();
            let Some(n) = r.nodes.iter().find(|n| n.id == id && n.lease_left_ms > 0) else { break };
            if n.this {
                // This cryod drains itself: it exits once done (and could not answer then).
                if ctx.json {
                    crate::output::json(&serde_json::json!({ "node": id, "drained": false }));
                } else {
                    outln!("this cryod is the node draining; it exits once its chambers are handed over");
                }
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    if ctx.json {
        crate::output::json(&serde_json::json!({ "node": id, "drained": !no_wait }));
    } else if !no_wait {
        outln!("node {node} has left the fleet");
    } else {
        outln!("node {node} ({id}) is draining");
    }
    Ok(())
}

/// `cryoctl fleet status`.
pub async fn fleet_status(ctx: crate::Ctx) -> crate::client::Result<()> {
    let mut c = crate::client::control(&ctx.socket).await?;
    let r = c.fleet_status(cryo_proto::v1::FleetStatusRequest {}).await?.into_inner();
    if ctx.json {
        let nodes: Vec<serde_json::Value> = r
            .nodes
            .iter()
            .map(|n| {
                serde_json::json!({
                    "id": n.id, "name": n.name, "domain": n.domain, "host": n.host, "pid": n.pid,
                    "capacity": n.capacity, "draining": n.draining, "lease_left_ms": n.lease_left_ms,
                    "renewed_ago_ms": n.renewed_ago_ms, "chambers": n.chambers, "started_at": n.started_at,
                    "this": n.this, "live": n.lease_left_ms > 0,
                })
            })
            .collect();
        crate::output::json(&serde_json::json!({
            "fleet": r.fleet, "store": r.store, "trust": r.trust, "unowned": r.unowned, "nodes": nodes,
        }));
        return Ok(());
    }
    if !r.fleet {
        outln!("not a fleet: this cryod keeps its chambers in {}", r.store);
        return Ok(());
    }
    outln!("store: {}   this node's lease: {}   chambers being taken over: {}", r.store, r.trust, r.unowned);
    outln!(
        "{:<2}{:<16} {:<18} {:>8} {:>9} {:>8} {:>8}  STATE",
        "",
        "NODE",
        "ID",
        "CHAMBERS",
        "CAPACITY",
        "LEASE",
        "LAG"
    );
    for n in &r.nodes {
        let state = if n.lease_left_ms <= 0 {
            "expired"
        } else if n.draining {
            "draining"
        } else {
            "live"
        };
        outln!(
            "{:<2}{:<16} {:<18} {:>8} {:>9} {:>7.1}s {:>6}ms  {state}",
            if n.this { "*" } else { "" },
            n.name,
            n.id,
            n.chambers,
            n.capacity,
            n.lease_left_ms as f64 / 1000.0,
            n.renewed_ago_ms,
        );
    }
    Ok(())
}
