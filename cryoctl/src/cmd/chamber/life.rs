//! A chamber's life: `start`, `stop`, `pause`/`resume`, `archive`, `move`, `reset`, `trust`, `wake`, `remove`.

use cryo_proto::json::{chamber_json, null_if_empty};
use cryo_proto::v1 as pb;
use serde_json::json;

use super::*;
use crate::Ctx;
use crate::client::{self, Failure, Result};
use crate::output;

pub(super) async fn remove(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let r = ask(ctx, chamber.as_deref(), |mut c, r| async move {
        c.chamber_remove(pb::ChamberRemoveRequest { chamber: Some(r) }).await
    })
    .await?;
    let ch = r.chamber.unwrap_or_default();
    if ctx.json {
        output::json(&chamber_json(&ch));
    } else {
        if ch.state == pb::ChamberState::Running as i32 {
            outln!("ended {:?}'s running session {} (as a stop does: its TODOs are re-queued)", ch.name, ch.session);
        }
        outln!(
            "removed {:?} from the registry; its files in {} are untouched (but a [git] chamber's worktree: its branches are kept, history/ says where)",
            ch.name,
            ch.path
        );
    }
    Ok(())
}

pub(super) async fn start(ctx: &Ctx, chamber: Option<String>, no_wait: bool) -> Result<()> {
    let r = ask(ctx, chamber.as_deref(), |mut c, r| async move {
        c.chamber_start(pb::ChamberStartRequest { chamber: Some(r), no_wait }).await
    })
    .await?;
    let ch = r.chamber.unwrap_or_default();
    if ctx.json {
        output::json(&json!({ "chamber": chamber_json(&ch), "already": r.already }));
    } else if r.already {
        outln!("{:?} is already started", ch.name);
    } else {
        outln!("started {:?}", ch.name);
    }
    Ok(())
}

pub(super) async fn stop(ctx: &Ctx, chamber: Option<String>, no_wait: bool) -> Result<()> {
    let r = ask(ctx, chamber.as_deref(), |mut c, r| async move {
        c.chamber_stop(pb::ChamberStopRequest { chamber: Some(r), no_wait }).await
    })
    .await?;
    let ch = r.chamber.unwrap_or_default();
    if ctx.json {
        output::json(&json!({ "chamber": chamber_json(&ch), "already": r.already, "ended_session": r.ended_session }));
    } else if r.already {
        outln!("{:?} is already stopped", ch.name);
    } else if r.ended_session {
        outln!("stopped {:?} (its running session was ended)", ch.name);
    } else {
        outln!("stopped {:?}", ch.name);
    }
    Ok(())
}

pub(super) async fn move_to(ctx: &Ctx, chamber: Option<String>, to: String) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let (mut c, to) = (c.clone(), to.clone());
        async move { c.chamber_move(pb::ChamberMoveRequest { chamber: Some(r), to }).await }
    })
    .await?
    .into_inner();
    let ch = r.chamber.unwrap_or_default();
    if ctx.json {
        output::json(&json!({ "chamber": chamber_json(&ch), "node": r.node, "already": r.already }));
    } else if r.already {
        outln!("{:?} is on node {to} already", ch.name);
    } else {
        outln!("moved {:?} to node {to} ({})", ch.name, r.node);
    }
    Ok(())
}

/// The four on/off operations on a chamber, which share a request and a reply.
#[derive(Clone, Copy)]
pub(super) enum Switch {
    Pause,
    Resume,
    Archive,
    Unarchive,
}

pub(super) async fn switch(ctx: &Ctx, chamber: Option<String>, op: Switch) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move {
            let req = pb::ChamberPauseRequest { chamber: Some(r) };
            match op {
                Switch::Pause => c.chamber_pause(req).await,
                Switch::Resume => c.chamber_resume(req).await,
                Switch::Archive => c.chamber_archive(req).await,
                Switch::Unarchive => c.chamber_unarchive(req).await,
            }
        }
    })
    .await?
    .into_inner();
    let ch = r.chamber.unwrap_or_default();
    let name = &ch.name;
    if ctx.json {
        output::json(&json!({ "chamber": chamber_json(&ch), "already": r.already }));
        return Ok(());
    }
    let line = match (op, r.already) {
        (Switch::Pause, true) => format!("{name:?} was paused already"),
        (Switch::Resume, true) => format!("{name:?} was not paused already"),
        (Switch::Archive, true) => format!("{name:?} was archived already"),
        (Switch::Unarchive, true) => format!("{name:?} was not archived already"),
        (Switch::Pause, false) => format!("paused {name:?}"),
        (Switch::Resume, false) => format!("resumed {name:?}"),
        (Switch::Archive, false) => format!("archived {name:?} (stopped; `cryoctl chamber list --archived` shows it)"),
        (Switch::Unarchive, false) => {
            format!("unarchived {name:?} (stopped; `cryoctl chamber start {name}` starts it)")
        }
    };
    outln!("{line}");
    Ok(())
}

pub(super) async fn acknowledge(ctx: &Ctx, chamber: Option<String>, snooze: Option<String>) -> Result<()> {
    let secs = match snooze.as_deref() {
        None => 0,
        Some(s) => match cryo_core::time::parse_duration(s).and_then(|d| u64::try_from(d.num_seconds()).ok()) {
            Some(secs) if secs > 0 => secs,
            _ => {
                let message = format!("--for {s:?} is not a duration: write it as 30m, 2h or 1 day");
                return Err(Failure { message, code: 2 });
            }
        },
    };
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move {
            let req = pb::ChamberAcknowledgeRequest { chamber: Some(r), until: String::new(), snooze_secs: secs };
            c.chamber_acknowledge(req).await
        }
    })
    .await?
    .into_inner();
    let ch = r.chamber.unwrap_or_default();
    if ctx.json {
        output::json(&json!({ "chamber": chamber_json(&ch) }));
    } else if ch.snoozed_until.is_empty() {
        outln!("set aside what {:?} needs of you, until it changes", ch.name);
    } else {
        outln!("snoozed what {:?} needs of you until {}", ch.name, output::local_time(&ch.snoozed_until));
    }
    Ok(())
}

pub(super) async fn reset(ctx: &Ctx, chamber: Option<String>, yes: bool) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    if !yes {
        let status = with_chamber(chamber.as_deref(), |r| {
            let mut c = c.clone();
            async move { c.chamber_status(pb::ChamberStatusRequest { chamber: Some(r) }).await }
        })
        .await?
        .into_inner();
        let ch = status.chambers.into_iter().next().unwrap_or_default();
        confirm_reset(&ch)?;
    }
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_reset(pb::ChamberResetRequest { chamber: Some(r) }).await }
    })
    .await?
    .into_inner();
    let ch = r.chamber.unwrap_or_default();
    if ctx.json {
        output::json(&json!({ "chamber": chamber_json(&ch), "history": r.history }));
    } else {
        outln!("reset {:?}: its earlier files are in {}/ (the chamber is stopped)", ch.name, r.history);
    }
    Ok(())
}

pub(super) async fn trust(ctx: &Ctx, chamber: Option<String>, diff: bool) -> Result<()> {
    let r = ask(ctx, chamber.as_deref(), |mut c, r| async move {
        c.chamber_trust(pb::ChamberTrustRequest { chamber: Some(r), diff }).await
    })
    .await?;
    let ch = r.chamber.unwrap_or_default();
    if ctx.json {
        let changes: Vec<_> = r
            .changes
            .iter()
            .map(|c| json!({ "key": c.key, "before": (!c.before.is_empty()).then_some(&c.before), "after": c.after }))
            .collect();
        let key = if diff { "changed" } else { "accepted" };
        output::json(&json!({ "chamber": chamber_json(&ch), key: r.accepted, "changes": changes }));
        return Ok(());
    }
    if r.changes.is_empty() {
        outln!("{:?}: nothing changed since its settings were last accepted", ch.name);
        return Ok(());
    }
    let n = r.changes.len();
    let s = if n == 1 { "" } else { "s" };
    if diff {
        outln!(
            "{:?}: {n} setting{s} changed since last accepted (`cryoctl chamber trust {}` accepts them):",
            ch.name,
            ch.name
        );
    } else {
        outln!("{:?}: accepted {n} changed setting{s}:", ch.name);
    }
    for c in &r.changes {
        let before = if c.before.is_empty() { "(not recorded)" } else { c.before.as_str() };
        outln!("  {}: {before} → {}", c.key, c.after);
    }
    Ok(())
}

/// Asks on the terminal for the chamber's name before a reset.
pub(super) fn confirm_reset(ch: &pb::Chamber) -> Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return Err(Failure::refused("a reset asks first: run it on a terminal, or pass --yes"));
    }
    eprint!(
        "Reset {:?}? It is stopped, and its todo.json, NOTES.md, messages and logs move into {}/history/.\n\
         Type its name to go on: ",
        ch.name, ch.path
    );
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| Failure::refused(format!("cannot read the answer: {e}")))?;
    if line.trim() != ch.name {
        return Err(Failure::refused("not reset: the name did not match"));
    }
    Ok(())
}

pub(super) async fn wake(ctx: &Ctx, chamber: Option<String>, message: Option<String>, replace: bool) -> Result<()> {
    let r = ask(ctx, chamber.as_deref(), |mut c, r| {
        let message = message.clone().unwrap_or_default();
        async move { c.chamber_wake(pb::ChamberWakeRequest { chamber: Some(r), message, replace }).await }
    })
    .await?;
    let ch = r.chamber.clone().unwrap_or_default();
    if ctx.json {
        output::json(&json!({
            "chamber": chamber_json(&ch),
            "replaced": r.replaced,
            "queued": r.queued,
            "message_file": null_if_empty(&r.message_file),
        }));
        return Ok(());
    }
    if r.replaced {
        outln!("ended the running session of {:?}", ch.name);
    }
    if !r.message_file.is_empty() {
        outln!("wrote {}", r.message_file);
    }
    if r.queued {
        outln!("{:?} will wake when its running session ends", ch.name);
    } else {
        outln!("waking {:?}", ch.name);
    }
    Ok(())
}
