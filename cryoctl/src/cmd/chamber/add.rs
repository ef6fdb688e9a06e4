//! `chamber init`, `add` and `hook`: a chamber made and registered.

use std::path::PathBuf;

use cryo_proto::json::chamber_json;
use cryo_proto::v1 as pb;
use serde_json::json;

use super::*;
use crate::Ctx;
use crate::client::{self, Result};
use crate::output;

pub(super) async fn hook(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let r = ask(ctx, chamber.as_deref(), |mut c, r| async move {
        c.chamber_hook(pb::ChamberHookRequest { chamber: Some(r) }).await
    })
    .await?;
    if ctx.json {
        output::json(&serde_json::json!({ "chamber": r.chamber, "url": r.url, "secret": r.secret }));
        return Ok(());
    }
    outln!("webhook for {} (the secret is shown once; run this again to replace it)", r.chamber);
    if r.url.is_empty() {
        outln!("  url     (the hub is not up: POST /hooks/{} on its address)", r.chamber);
    } else {
        outln!("  url     {}", r.url);
    }
    outln!("  secret  {}", r.secret);
    outln!("  sign    X-Hub-Signature-256: sha256=HMAC-SHA256(secret, body), as GitHub does");
    Ok(())
}

pub(super) async fn init(
    ctx: &Ctx,
    dir: Option<PathBuf>,
    agent: Option<String>,
    sandbox: Option<String>,
) -> Result<()> {
    let dir = absolute(&dir.unwrap_or_else(|| PathBuf::from(".")))?;
    let mut c = client::control(&ctx.socket).await?;
    let req = pb::ChamberInitRequest {
        dir: utf8(&dir)?,
        agent: agent.unwrap_or_default(),
        sandbox: sandbox.unwrap_or_default(),
    };
    let r = c.chamber_init(req).await?.into_inner();
    if ctx.json {
        output::json(&init_json(&r));
    } else {
        print_init(&r);
    }
    Ok(())
}

pub(super) fn init_json(r: &pb::ChamberInitReply) -> serde_json::Value {
    json!({ "path": r.path, "created": r.created, "kept": r.kept, "sandbox": (!r.sandbox.is_empty()).then_some(&r.sandbox) })
}

pub(super) fn print_init(r: &pb::ChamberInitReply) {
    for f in &r.created {
        outln!("created  {f}");
    }
    for f in &r.kept {
        outln!("kept     {f}");
    }
    if !r.sandbox.is_empty() {
        outln!("sandbox  {} (the `sandbox` key of cryo.toml)", r.sandbox);
    }
    outln!("chamber scaffolded in {}", r.path);
}

pub(super) async fn add(
    ctx: &Ctx,
    dir: PathBuf,
    name: Option<String>,
    init: bool,
    (agent, sandbox): (Option<String>, Option<String>),
    start: bool,
    (adopt, stop_seed): (bool, bool),
) -> Result<()> {
    let dir = absolute(&dir)?;
    let mut c = client::control(&ctx.socket).await?;
    let r = c
        .chamber_add(pb::ChamberAddRequest {
            dir: utf8(&dir)?,
            name: name.unwrap_or_default(),
            init,
            agent: agent.unwrap_or_default(),
            sandbox: sandbox.unwrap_or_default(),
            start,
            adopt,
            stop_seed,
        })
        .await?
        .into_inner();
    let ch = r.chamber.clone().unwrap_or_default();
    if ctx.json {
        output::json(&json!({
            "chamber": chamber_json(&ch),
            "already_registered": r.already_registered,
            "init": r.init.as_ref().map(init_json),
            "warnings": r.warnings,
            "adopted": r.adopted.as_ref().map(seed_move_json),
        }));
        return Ok(());
    }
    if let Some(i) = &r.init {
        print_init(i);
    }
    if let Some(m) = &r.adopted {
        outln!("moved over from the seed system (cryochamber):");
        print_seed_move(m);
    }
    for w in &r.warnings {
        eprintln!("warning: {}", cryo_proto::escape_controls(w));
    }
    if r.already_registered {
        outln!("{} is already registered as {:?}; nothing changed", ch.path, ch.name);
    } else {
        outln!("registered {:?} ({})", ch.name, ch.path);
    }
    Ok(())
}

pub(super) fn seed_move_json(m: &pb::SeedMove) -> serde_json::Value {
    json!({ "carried": m.carried, "left": m.left, "backup": m.backup })
}

/// What a move between the seed system and cryo did, on one screen.
pub(super) fn print_seed_move(m: &pb::SeedMove) {
    for l in &m.carried {
        outln!("  carried   {}", cryo_proto::escape_controls(l));
    }
    for l in &m.left {
        outln!("  not       {}", cryo_proto::escape_controls(l));
    }
    if !m.backup.is_empty() {
        outln!("  backup    {} (every file rewritten, as it was)", m.backup);
    }
}

pub(super) async fn release(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let r = ask(ctx, chamber.as_deref(), |mut c, r| async move {
        c.chamber_release(pb::ChamberReleaseRequest { chamber: Some(r) }).await
    })
    .await?;
    let m = r.released.unwrap_or_default();
    if ctx.json {
        output::json(&json!({ "path": r.path, "released": seed_move_json(&m) }));
        return Ok(());
    }
    outln!("handed {} back to the seed system (cryochamber); cryo no longer runs it:", r.path);
    print_seed_move(&m);
    Ok(())
}
