//! `chamber send`, `messages`, `log` and `watch`: the conversation and the logs.

use std::path::Path;

use cryo_proto::json::{chamber_json, mail_json, state_name};
use cryo_proto::v1 as pb;
use serde_json::json;

use super::*;
use crate::Ctx;
use crate::client::{self, Result};
use crate::output;

pub(super) async fn send(
    ctx: &Ctx,
    chamber: String,
    text: Option<String>,
    from: String,
    subject: String,
) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let (chamber, text) = match text {
        Some(t) => (chamber, t),
        // One argument: a chamber (the text on standard input), or, inside
        // a chamber's folder, the text for that chamber.
        None => {
            let status = |r: pb::ChamberRef| {
                let mut c = c.clone();
                async move { c.chamber_status(pb::ChamberStatusRequest { chamber: Some(r) }).await }
            };
            let named = status(chamber_ref(Some(&chamber))?).await;
            let here = matches!(&named, Err(s) if s.code() == tonic::Code::NotFound)
                && !Path::new(&chamber).is_dir()
                && status(chamber_ref(None)?).await.is_ok();
            if here {
                (".".to_string(), chamber)
            } else {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
                (chamber, s)
            }
        }
    };
    let r = with_chamber(Some(&chamber), |r| {
        let mut c = c.clone();
        let (text, from, subject) = (text.clone(), from.clone(), subject.clone());
        async move { c.chamber_send(pb::ChamberSendRequest { chamber: Some(r), text, from, subject }).await }
    })
    .await?
    .into_inner();
    if ctx.json {
        let waits = if r.waits.is_empty() { serde_json::Value::Null } else { r.waits.clone().into() };
        output::json(&json!({ "file": r.file, "waits": waits }));
    } else {
        outln!("sent: {}", r.file);
        if !r.waits.is_empty() {
            outln!("  not read yet: {}", r.waits);
        }
    }
    Ok(())
}

/// Reads a server stream until it ends, Ctrl-C, or an error; `each` prints.
pub(super) async fn drain<T>(mut s: tonic::Streaming<T>, mut each: impl FnMut(T)) -> Result<()> {
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            item = s.message() => match item? {
                Some(v) => each(v),
                None => return Ok(()),
            },
        }
    }
}

pub(super) async fn log(ctx: &Ctx, chamber: Option<String>, follow: bool, agent: bool, lines: u32) -> Result<()> {
    let s = ask(ctx, chamber.as_deref(), |mut c, r| async move {
        c.chamber_log(pb::ChamberLogRequest { chamber: Some(r), agent, follow, lines }).await
    })
    .await?;
    let json = ctx.json;
    drain(s, |chunk| {
        for l in chunk.lines {
            if json {
                outln!("{}", json!({ "line": l }));
            } else {
                outln!("{l}");
            }
        }
    })
    .await
}

pub(super) fn print_mail(m: &pb::Mail, chamber: &str) {
    let when = m.timestamp.replace('T', " ");
    let when = when.split('.').next().unwrap_or(&when);
    let (from, to) = if m.direction == "out" { (m.from.as_str(), "operator") } else { (m.from.as_str(), chamber) };
    let q = if m.question { "  [question]" } else { "" };
    // A subject made from the body's first line is not said twice.
    let first = m.body.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    if m.subject.trim().is_empty() || m.subject.trim() == first {
        outln!("[{when}] {from} -> {to}{q}");
    } else {
        outln!("[{when}] {from} -> {to}: {}{q}", m.subject);
    }
    for line in m.body.lines() {
        outln!("    {line}");
    }
    outln!();
}

pub(super) async fn messages(ctx: &Ctx, chamber: Option<String>, follow: bool, last: u32) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let name = chamber.clone().unwrap_or_else(|| "agent".into());
    let s = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_messages(pb::ChamberMessagesRequest { chamber: Some(r), follow, last }).await }
    })
    .await?
    .into_inner();
    let json = ctx.json;
    let mut any = false;
    drain(s, |m| {
        any = true;
        if json {
            outln!("{}", mail_json(&m));
        } else {
            print_mail(&m, &name);
        }
    })
    .await?;
    if !any && !follow && !json {
        outln!("no messages yet");
    }
    Ok(())
}

pub(super) async fn watch(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let s = ask(ctx, chamber.as_deref(), |mut c, r| async move {
        c.chamber_watch(pb::ChamberWatchRequest { chamber: Some(r) }).await
    })
    .await?;
    let json = ctx.json;
    drain(s, |ch| {
        if json {
            outln!("{}", chamber_json(&ch));
        } else {
            let next = if ch.next_wake.is_empty() { "-".to_string() } else { ch.next_wake.clone() };
            let last = if ch.last_result.is_empty() { "-".to_string() } else { ch.last_result.clone() };
            outln!(
                "{}  {}  session {}  next wake {}  mail {}  last: {}",
                ch.name,
                state_name(ch.state),
                ch.session,
                next,
                ch.mail_waiting,
                last
            );
        }
    })
    .await
}
