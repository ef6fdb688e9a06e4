//! `cryoctl chamber ...`

use std::path::{Path, PathBuf};

use clap::Subcommand;
use cryo_proto::v1 as pb;
use serde_json::json;

use crate::Ctx;
use crate::client::{self, Failure, Result};
use crate::output;

#[derive(Subcommand)]
pub enum ChamberCmd {
    /// Scaffold a chamber: plan.md, cryo.toml, NOTES.md and the message folders.
    /// Existing files are kept.
    Init {
        /// Folder (default: the current one).
        dir: Option<PathBuf>,
        /// Agent command for cryo.toml (opencode, claude, codex, or any command).
        #[arg(long)]
        agent: Option<String>,
    },
    /// Register a chamber folder with cryod.
    Add {
        dir: PathBuf,
        /// Name (default: the folder's name, made unique).
        #[arg(long)]
        name: Option<String>,
        /// Scaffold missing files first.
        #[arg(long)]
        init: bool,
        /// Agent command for a scaffolded cryo.toml (with --init).
        #[arg(long, requires = "init")]
        agent: Option<String>,
        /// Start the chamber once registered.
        #[arg(long)]
        start: bool,
    },
    /// Start a chamber: its first start runs a bootstrap session.
    Start { chamber: Option<String> },
    /// Stop a chamber, ending a running session; returns once it has ended.
    Stop { chamber: Option<String> },
    /// List the registered chambers.
    #[command(alias = "ls")]
    List,
    /// Show one chamber (or every chamber).
    Status { chamber: Option<String> },
    /// Unregister a chamber. Its files stay where they are.
    #[command(alias = "rm")]
    Remove { chamber: Option<String> },
}

pub async fn run(ctx: Ctx, cmd: ChamberCmd) -> Result<()> {
    match cmd {
        ChamberCmd::Init { dir, agent } => init(&ctx, dir, agent).await,
        ChamberCmd::Add { dir, name, init, agent, start } => add(&ctx, dir, name, init, agent, start).await,
        ChamberCmd::Start { chamber } => start(&ctx, chamber).await,
        ChamberCmd::Stop { chamber } => stop(&ctx, chamber).await,
        ChamberCmd::List => list(&ctx).await,
        ChamberCmd::Status { chamber } => status(&ctx, chamber).await,
        ChamberCmd::Remove { chamber } => remove(&ctx, chamber).await,
    }
}

fn absolute(p: &Path) -> Result<PathBuf> {
    let cwd = std::env::current_dir()?;
    let joined = if p.is_absolute() { p.to_path_buf() } else { cwd.join(p) };
    // Normalise `.` and `..` without requiring the folder to exist.
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    Ok(out)
}

fn utf8(p: &Path) -> Result<String> {
    p.to_str().map(str::to_string).ok_or_else(|| Failure::refused(format!("{} is not UTF-8", p.display())))
}

/// A CHAMBER argument: a registered name, or a path; omitted, the current folder.
pub fn chamber_ref(arg: Option<&str>) -> Result<pb::ChamberRef> {
    let by = match arg {
        None => pb::chamber_ref::By::Path(utf8(&absolute(Path::new("."))?)?),
        Some(a) if a.contains('/') || a == "." || a == ".." => {
            pb::chamber_ref::By::Path(utf8(&absolute(Path::new(a))?)?)
        }
        Some(a) => pb::chamber_ref::By::Name(a.to_string()),
    };
    Ok(pb::ChamberRef { by: Some(by) })
}

/// Runs `call` with the chamber named by `arg`; a name that is not registered
/// but is a folder here is tried as a path.
async fn with_chamber<T, F, Fut>(arg: Option<&str>, mut call: F) -> Result<T>
where
    F: FnMut(pb::ChamberRef) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, tonic::Status>>,
{
    let r = chamber_ref(arg)?;
    match call(r.clone()).await {
        Err(s) if s.code() == tonic::Code::NotFound => {
            if let (Some(a), Some(pb::chamber_ref::By::Name(_))) = (arg, &r.by)
                && Path::new(a).is_dir()
            {
                let p = pb::ChamberRef { by: Some(pb::chamber_ref::By::Path(utf8(&absolute(Path::new(a))?)?)) };
                return call(p).await.map_err(Failure::from);
            }
            Err(s.into())
        }
        other => other.map_err(Failure::from),
    }
}

async fn init(ctx: &Ctx, dir: Option<PathBuf>, agent: Option<String>) -> Result<()> {
    let dir = absolute(&dir.unwrap_or_else(|| PathBuf::from(".")))?;
    let mut c = client::control(&ctx.socket).await?;
    let r = c
        .chamber_init(pb::ChamberInitRequest { dir: utf8(&dir)?, agent: agent.unwrap_or_default() })
        .await?
        .into_inner();
    if ctx.json {
        output::json(&init_json(&r));
    } else {
        print_init(&r);
    }
    Ok(())
}

fn init_json(r: &pb::ChamberInitReply) -> serde_json::Value {
    json!({ "path": r.path, "created": r.created, "kept": r.kept })
}

fn print_init(r: &pb::ChamberInitReply) {
    for f in &r.created {
        println!("created  {f}");
    }
    for f in &r.kept {
        println!("kept     {f}");
    }
    println!("chamber scaffolded in {}", r.path);
}

async fn add(
    ctx: &Ctx,
    dir: PathBuf,
    name: Option<String>,
    init: bool,
    agent: Option<String>,
    start: bool,
) -> Result<()> {
    let dir = absolute(&dir)?;
    let mut c = client::control(&ctx.socket).await?;
    let r = c
        .chamber_add(pb::ChamberAddRequest {
            dir: utf8(&dir)?,
            name: name.unwrap_or_default(),
            init,
            agent: agent.unwrap_or_default(),
            start,
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
        }));
        return Ok(());
    }
    if let Some(i) = &r.init {
        print_init(i);
    }
    for w in &r.warnings {
        eprintln!("warning: {w}");
    }
    if r.already_registered {
        println!("{} is already registered as {:?}; nothing changed", ch.path, ch.name);
    } else {
        println!("registered {:?} ({})", ch.name, ch.path);
    }
    Ok(())
}

pub fn state_name(s: i32) -> &'static str {
    match pb::ChamberState::try_from(s).unwrap_or(pb::ChamberState::Unspecified) {
        pb::ChamberState::Stopped => "stopped",
        pb::ChamberState::Idle => "idle",
        pb::ChamberState::Running => "running",
        pb::ChamberState::Faulted => "faulted",
        pb::ChamberState::Unspecified => "unknown",
    }
}

fn desired_name(s: i32) -> &'static str {
    match pb::DesiredState::try_from(s).unwrap_or(pb::DesiredState::Unspecified) {
        pb::DesiredState::Started => "started",
        pb::DesiredState::Stopped => "stopped",
        pb::DesiredState::Unspecified => "unknown",
    }
}

/// The stable JSON form of a chamber (documented in README.md).
pub fn chamber_json(c: &pb::Chamber) -> serde_json::Value {
    json!({
        "id": c.id,
        "name": c.name,
        "path": c.path,
        "state": state_name(c.state),
        "desired": desired_name(c.desired),
        "agent": c.agent,
        "timezone": c.timezone,
        "created_at": c.created_at,
        "fault": null_if_empty(&c.fault),
        "session": c.session,
        "next_wake": null_if_empty(&c.next_wake),
        "last_result": null_if_empty(&c.last_result),
        "mail_waiting": c.mail_waiting,
        "attention": null_if_empty(&c.attention),
    })
}

fn null_if_empty(s: &str) -> serde_json::Value {
    if s.is_empty() { serde_json::Value::Null } else { s.into() }
}

async fn list(ctx: &Ctx) -> Result<()> {
    let mut c = client::control(&ctx.socket).await?;
    let r = c.chamber_list(pb::ChamberListRequest {}).await?.into_inner();
    if ctx.json {
        output::json(&serde_json::Value::Array(r.chambers.iter().map(chamber_json).collect()));
        return Ok(());
    }
    if r.chambers.is_empty() {
        println!("no chambers registered (add one with `cryoctl chamber add DIR --init`)");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = r
        .chambers
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                state_name(c.state).to_string(),
                if c.session == 0 { "-".into() } else { c.session.to_string() },
                if c.next_wake.is_empty() { "-".into() } else { c.next_wake.clone() },
                c.mail_waiting.to_string(),
                c.path.clone(),
            ]
        })
        .collect();
    output::table(&["NAME", "STATE", "SESSION", "NEXT WAKE", "MAIL", "PATH"], &rows);
    Ok(())
}

async fn status(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let mut c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_status(pb::ChamberStatusRequest { chamber: Some(r) }).await }
    })
    .await?
    .into_inner();
    let _ = &mut c;
    if ctx.json {
        output::json(&serde_json::Value::Array(r.chambers.iter().map(chamber_json).collect()));
        return Ok(());
    }
    for ch in &r.chambers {
        println!("{}", ch.name);
        println!("  state     {} (desired: {})", state_name(ch.state), desired_name(ch.desired));
        println!("  path      {}", ch.path);
        if !ch.agent.is_empty() {
            println!("  agent     {}", ch.agent);
        }
        if !ch.timezone.is_empty() {
            println!("  timezone  {}", ch.timezone);
        }
        println!("  added     {}", ch.created_at);
        if ch.session > 0 {
            println!("  session   {}", ch.session);
        }
        if !ch.next_wake.is_empty() {
            println!("  next wake {}", ch.next_wake);
        }
        if !ch.last_result.is_empty() {
            println!("  last      {}", ch.last_result);
        }
        println!("  mail      {} unread", ch.mail_waiting);
        if !ch.attention.is_empty() {
            println!("  attention {}", ch.attention);
        }
        if !ch.fault.is_empty() {
            println!("  fault     {}", ch.fault);
        }
    }
    Ok(())
}

async fn remove(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_remove(pb::ChamberRemoveRequest { chamber: Some(r) }).await }
    })
    .await?
    .into_inner();
    let ch = r.chamber.unwrap_or_default();
    if ctx.json {
        output::json(&chamber_json(&ch));
    } else {
        println!("removed {:?} from the registry; its files in {} are untouched", ch.name, ch.path);
    }
    Ok(())
}

async fn start(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_start(pb::ChamberStartRequest { chamber: Some(r) }).await }
    })
    .await?
    .into_inner();
    let ch = r.chamber.unwrap_or_default();
    if ctx.json {
        output::json(&json!({ "chamber": chamber_json(&ch), "already": r.already }));
    } else if r.already {
        println!("{:?} is already started", ch.name);
    } else {
        println!("started {:?}", ch.name);
    }
    Ok(())
}

async fn stop(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_stop(pb::ChamberStopRequest { chamber: Some(r) }).await }
    })
    .await?
    .into_inner();
    let ch = r.chamber.unwrap_or_default();
    if ctx.json {
        output::json(&json!({ "chamber": chamber_json(&ch), "already": r.already, "ended_session": r.ended_session }));
    } else if r.already {
        println!("{:?} is already stopped", ch.name);
    } else if r.ended_session {
        println!("stopped {:?} (its running session was ended)", ch.name);
    } else {
        println!("stopped {:?}", ch.name);
    }
    Ok(())
}
