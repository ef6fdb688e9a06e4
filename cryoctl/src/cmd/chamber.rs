//! `cryoctl chamber ...`

use std::path::{Path, PathBuf};

use clap::Subcommand;
use cryo_proto::v1 as pb;
use serde_json::json;

use crate::Ctx;
use crate::client::{self, Failure, Result};
use crate::output;
use cryo_proto::json::{chamber_json, desired_name, mail_json, null_if_empty, session_json, state_name, todo_json};

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
        /// Sandbox for a new cryo.toml (default: the strongest this machine provides).
        #[arg(long, value_parser = SANDBOXES)]
        sandbox: Option<String>,
    },
    /// Register a chamber folder with cryod.
    Add {
        /// The chamber's folder.
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
        /// Sandbox for a scaffolded cryo.toml (with --init; default: the strongest
        /// this machine provides).
        #[arg(long, requires = "init", value_parser = SANDBOXES)]
        sandbox: Option<String>,
        /// Start the chamber once registered.
        #[arg(long)]
        start: bool,
    },
    /// Start a chamber: its first start runs a bootstrap session (returns
    /// once its agent has started, or says why it could not).
    Start {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// Return at once.
        #[arg(long)]
        no_wait: bool,
    },
    /// Stop a chamber, ending a running session; returns once it has ended.
    Stop {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// Return once the session was signalled.
        #[arg(long)]
        no_wait: bool,
    },
    /// Pause a started chamber: mail still arrives, no session starts.
    Pause {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
    },
    /// Resume a paused chamber; what became due meanwhile runs.
    Resume {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
    },
    /// Archive a chamber: stop it (ending a running session), hide it from
    /// `chamber list` and refuse to start it until it is unarchived.
    Archive {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
    },
    /// Unarchive a chamber: listed again, still stopped.
    Unarchive {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
    },
    /// Begin a chamber again: stop it, move todo.json, NOTES.md, messages/,
    /// the logs and .cryo/ into history/TIMESTAMP/, and lay out fresh ones
    /// (plan.md and cryo.toml stay). Asks first.
    Reset {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// Do not ask (for scripts).
        #[arg(long, short)]
        yes: bool,
    },
    /// Accept the chamber's cryo.toml as it is: the settings that decide
    /// its confinement or run commands (agent, sandbox, writable, readable,
    /// precheck, provider, on_end, sync, limits and budget) take
    /// effect only once the operator accepts them. A chamber whose agent
    /// changed them is held until then.
    Trust {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
    },
    /// Run a session now.
    Wake {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// Also write this message to the agent's inbox.
        #[arg(long, short)]
        message: Option<String>,
        /// End a running session first (its claimed TODOs are re-queued due now).
        #[arg(long)]
        replace: bool,
    },
    /// Write a message to the chamber's agent (TEXT, or standard input).
    Send {
        /// The chamber's name or folder; inside a chamber's folder, the text
        /// alone may be given.
        #[arg(add = crate::complete::chambers())]
        chamber: String,
        /// The message (Markdown); standard input if left out.
        text: Option<String>,
        #[arg(long, default_value = "operator")]
        from: String,
        #[arg(long, default_value = "")]
        subject: String,
    },
    /// The chamber's TODOs: `todo [CHAMBER] list|add|done|remove`.
    #[command(subcommand_precedence_over_arg = true)]
    Todo {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        #[command(subcommand)]
        op: TodoOp,
    },
    /// The chamber's sync bridges (Zulip, GitHub): status, or pull or push now.
    Sync {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        #[arg(value_enum, default_value = "status")]
        action: SyncAction,
    },
    /// List the registered chambers (archived ones with --archived).
    #[command(alias = "ls")]
    List {
        /// Archived chambers too.
        #[arg(long)]
        archived: bool,
    },
    /// Show one chamber (inside a chamber's folder: that one; elsewhere,
    /// without a name: every chamber).
    Status {
        /// A chamber's name or folder.
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// Keep showing it as it changes (until Ctrl-C).
        #[arg(long)]
        watch: bool,
    },
    /// The chamber's log (cryo.log, or the agent's own output with --agent).
    Log {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// Keep printing new lines (until Ctrl-C or the chamber is removed).
        #[arg(long, short)]
        follow: bool,
        /// cryo-agent.log: the agent process's raw output.
        #[arg(long)]
        agent: bool,
        /// Lines from the end to start with.
        #[arg(long, short = 'n', default_value_t = 50)]
        lines: u32,
    },
    /// The conversation with the agent, newest last.
    Messages {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// Keep printing new messages (until Ctrl-C or the chamber is removed).
        #[arg(long, short)]
        follow: bool,
        /// Messages from the end to start with.
        #[arg(long, default_value_t = 20)]
        last: u32,
    },
    /// Hand a chamber to another node of the fleet (a clean hand-over: a
    /// running session ends as at shutdown and goes on there). That node
    /// becomes the chamber's home.
    Move {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// The node's name or id (see `cryoctl fleet status`).
        #[arg(long, value_name = "NODE")]
        to: String,
    },
    /// The chamber's coming wakes: each TODO slot in local time with zone
    /// and UTC offset, its recurrence and gate, daylight-saving notes, and
    /// what holds it back. Missed slots are in `chamber status`.
    Schedule {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// How many wakes.
        #[arg(long, short = 'n', default_value_t = 10)]
        count: u32,
    },
    /// Create (or replace) the chamber's webhook secret and print the hub URL
    /// senders POST to and the secret, once (`POST /hooks/CHAMBER`, signed
    /// with HMAC-SHA256 as GitHub does; the payload arrives marked untrusted).
    Hook {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
    },
    /// Unregister a chamber. Its files stay where they are.
    #[command(alias = "rm")]
    Remove {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum SyncAction {
    /// Each bridge: connected or not, last pull, last push, last error.
    Status,
    /// Fetch new messages into the inbox now.
    Pull,
    /// Post the outbox now.
    Push,
}

#[derive(Subcommand)]
pub enum TodoOp {
    /// Pending and claimed TODOs (with --all, done ones too).
    List {
        /// Done TODOs too.
        #[arg(long)]
        all: bool,
    },
    /// Schedule work for the agent.
    Add {
        /// What the agent is to do.
        text: String,
        /// When: "+2h", "90m", "tomorrow 09:00", "14:30" (next), "2026-12-01T09:00" (the chamber's zone) or an RFC 3339 time.
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
        /// Repeat every DURATION ("6h", "1d"; at least a minute).
        #[arg(long, value_name = "DURATION", conflicts_with = "cron")]
        every: Option<String>,
        /// Repeat on a cron schedule, in the chamber's zone.
        #[arg(long, value_name = "\"MIN HOUR DOM MON DOW\"")]
        cron: Option<String>,
        /// Slots missed while down: run once (default) or skip them.
        #[arg(long, value_name = "once|skip")]
        missed: Option<String>,
        /// A shell command run in the chamber before a scheduled wake for this TODO: exit 0
        /// wakes the agent (its output in the prompt), 78 passes the slot (nothing to do),
        /// anything else wakes it with a notice.
        #[arg(long, value_name = "CMD")]
        precheck: Option<String>,
    },
    /// Mark a TODO done.
    Done {
        /// The TODO's id (`todo list` shows it).
        id: u64,
    },
    /// Remove a TODO.
    Remove {
        /// The TODO's id (`todo list` shows it).
        id: u64,
    },
}

pub async fn run(ctx: Ctx, cmd: ChamberCmd) -> Result<()> {
    match cmd {
        ChamberCmd::Init { dir, agent, sandbox } => init(&ctx, dir, agent, sandbox).await,
        ChamberCmd::Add { dir, name, init, agent, sandbox, start } => {
            add(&ctx, dir, name, init, (agent, sandbox), start).await
        }
        ChamberCmd::Start { chamber, no_wait } => start(&ctx, chamber, no_wait).await,
        ChamberCmd::Stop { chamber, no_wait } => stop(&ctx, chamber, no_wait).await,
        ChamberCmd::Pause { chamber } => switch(&ctx, chamber, Switch::Pause).await,
        ChamberCmd::Resume { chamber } => switch(&ctx, chamber, Switch::Resume).await,
        ChamberCmd::Archive { chamber } => switch(&ctx, chamber, Switch::Archive).await,
        ChamberCmd::Unarchive { chamber } => switch(&ctx, chamber, Switch::Unarchive).await,
        ChamberCmd::Reset { chamber, yes } => reset(&ctx, chamber, yes).await,
        ChamberCmd::Trust { chamber } => trust(&ctx, chamber).await,
        ChamberCmd::Wake { chamber, message, replace } => wake(&ctx, chamber, message, replace).await,
        ChamberCmd::Send { chamber, text, from, subject } => send(&ctx, chamber, text, from, subject).await,
        ChamberCmd::Todo { chamber, op } => todo(&ctx, chamber, op).await,
        ChamberCmd::Sync { chamber, action } => sync(&ctx, chamber, action).await,
        ChamberCmd::List { archived } => list(&ctx, archived).await,
        ChamberCmd::Status { chamber, watch: false } => status(&ctx, chamber).await,
        ChamberCmd::Status { chamber, watch: true } => watch(&ctx, chamber).await,
        ChamberCmd::Log { chamber, follow, agent, lines } => log(&ctx, chamber, follow, agent, lines).await,
        ChamberCmd::Messages { chamber, follow, last } => messages(&ctx, chamber, follow, last).await,
        ChamberCmd::Remove { chamber } => remove(&ctx, chamber).await,
        ChamberCmd::Move { chamber, to } => move_to(&ctx, chamber, to).await,
        ChamberCmd::Hook { chamber } => hook(&ctx, chamber).await,
        ChamberCmd::Schedule { chamber, count } => {
            let r = chamber_ref(chamber.as_deref())?;
            super::schedule::run(&ctx, Some(r), count).await
        }
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

async fn hook(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_hook(pb::ChamberHookRequest { chamber: Some(r) }).await }
    })
    .await?
    .into_inner();
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

/// The sandbox modes `--sandbox` takes.
const SANDBOXES: [&str; 3] = ["off", "landlock", "bwrap"];

async fn init(ctx: &Ctx, dir: Option<PathBuf>, agent: Option<String>, sandbox: Option<String>) -> Result<()> {
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

fn init_json(r: &pb::ChamberInitReply) -> serde_json::Value {
    json!({ "path": r.path, "created": r.created, "kept": r.kept, "sandbox": (!r.sandbox.is_empty()).then_some(&r.sandbox) })
}

fn print_init(r: &pb::ChamberInitReply) {
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

async fn add(
    ctx: &Ctx,
    dir: PathBuf,
    name: Option<String>,
    init: bool,
    (agent, sandbox): (Option<String>, Option<String>),
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
            sandbox: sandbox.unwrap_or_default(),
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
        eprintln!("warning: {}", cryo_proto::escape_controls(w));
    }
    if r.already_registered {
        outln!("{} is already registered as {:?}; nothing changed", ch.path, ch.name);
    } else {
        outln!("registered {:?} ({})", ch.name, ch.path);
    }
    Ok(())
}

async fn list(ctx: &Ctx, archived: bool) -> Result<()> {
    let mut c = client::control(&ctx.socket).await?;
    let r = c.chamber_list(pb::ChamberListRequest { archived }).await?.into_inner();
    if ctx.json {
        output::json(&serde_json::Value::Array(r.chambers.iter().map(chamber_json).collect()));
        return Ok(());
    }
    if r.chambers.is_empty() {
        outln!("no chambers registered (add one with `cryoctl chamber add DIR --init`)");
        return Ok(());
    }
    // A fleet's chambers show the node that runs each.
    let fleet = r.chambers.iter().any(|c| !c.node.is_empty());
    let today = super::usage::today_by_chamber(&mut c).await?;
    let rows: Vec<Vec<output::Cell>> = r
        .chambers
        .iter()
        .map(|c| {
            let result = if !c.attention.is_empty() {
                output::colored(format!("! {}", c.attention), "31")
            } else {
                dash(&c.last_result).into()
            };
            vec![
                c.name.as_str().into(),
                if c.archived { output::colored("archived", "2") } else { state_cell(c.state) },
                if c.session == 0 { "-".into() } else { c.session.to_string().into() },
                if c.next_wake.is_empty() { "-".into() } else { output::local_time(&c.next_wake).into() },
                if c.next_wake.is_empty() { "-".into() } else { output::time_left(&c.next_wake).into() },
                result,
                if c.mail_waiting == 0 { "-".into() } else { output::colored(c.mail_waiting.to_string(), "1") },
                if c.open_questions == 0 { "".into() } else { output::colored("?", "33") },
                today.get(&c.name).map(|usd| super::usage::cost(*usd)).unwrap_or_else(|| "-".into()).into(),
            ]
            .into_iter()
            .chain(fleet.then(|| dash(&c.node).into()))
            .collect()
        })
        .collect();
    let mut headers = vec!["NAME", "STATE", "SESSION", "NEXT WAKE", "IN", "LAST RESULT", "MAIL", "?", "COST"];
    if fleet {
        headers.push("NODE");
    }
    output::table(&headers, rows, 5);
    print_holds(&r.holds);
    Ok(())
}

/// `claude-3f9a1c2e: limited until Mon 14:05 (2 chambers waiting)`, one line
/// per provider account held at its limit.
pub fn hold_line(h: &pb::ProviderHold) -> String {
    let guessed = if h.default_hold {
        "; the provider named no reset, so this is cryod's default hold (`limit_hold_seconds` in cryod.toml)"
    } else {
        ""
    };
    format!(
        "{}: limited until {} ({} chamber(s) waiting){guessed}",
        h.provider,
        output::local_time(&h.until),
        h.waiting
    )
}

fn print_holds(holds: &[pb::ProviderHold]) {
    if !holds.is_empty() {
        outln!();
    }
    for h in holds {
        outln!("{}", hold_line(h));
    }
}

async fn status(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let mut c = client::control(&ctx.socket).await?;
    let one = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_status(pb::ChamberStatusRequest { chamber: Some(r) }).await }
    })
    .await;
    let r = match one {
        // Named none, outside any chamber's folder: every chamber.
        Err(f) if chamber.is_none() && f.code == cryo_proto::exit::NOT_FOUND => {
            c.chamber_status(pb::ChamberStatusRequest { chamber: None }).await?
        }
        other => other?,
    }
    .into_inner();
    // One chamber's cost over three windows.
    let windows = match r.chambers.as_slice() {
        [one] => {
            let by = pb::ChamberRef { by: Some(pb::chamber_ref::By::Name(one.name.clone())) };
            super::usage::windows(&mut c, by).await?
        }
        _ => None,
    };
    if ctx.json {
        let mut out: Vec<serde_json::Value> = r.chambers.iter().map(chamber_json).collect();
        if let Some(first) = out.first_mut() {
            first["sessions"] = r.sessions.iter().map(session_json).collect();
            first["passed"] = r.passed.iter().map(cryo_proto::json::passed_json).collect();
            first["passed_total"] = r.passed_total.into();
            first["budgets"] = r
                .budgets
                .iter()
                .map(|b| {
                    serde_json::json!({ "who": b.who, "key": b.key, "limit": b.limit, "used": b.used, "period": b.period })
                })
                .collect();
            if let Some(([today, week, month], sessions)) = windows {
                first["cost_usd"] =
                    serde_json::json!({ "today": today, "7d": week, "30d": month, "sessions_30d": sessions });
            }
        }
        output::json(&serde_json::Value::Array(out));
        return Ok(());
    }
    for ch in &r.chambers {
        outln!("{}", ch.name);
        outln!("  state     {} (desired: {})", state_name(ch.state), desired_name(ch.desired));
        outln!("  path      {}", ch.path);
        if !ch.agent.is_empty() {
            outln!("  agent     {}", ch.agent);
            if !ch.sandbox.is_empty() {
                outln!("  sandbox   {}", ch.sandbox);
            }
        }
        if !ch.timezone.is_empty() {
            outln!("  timezone  {}", ch.timezone);
        }
        outln!("  added     {}", ch.created_at);
        if ch.session > 0 {
            outln!("  session   {}", ch.session);
        }
        if !ch.next_wake.is_empty() {
            outln!("  next wake {}", ch.next_wake);
        }
        if !ch.last_result.is_empty() {
            outln!("  last      {}", ch.last_result);
        }
        outln!("  mail      {} unread", ch.mail_waiting);
        if !ch.handoffs.is_empty() {
            outln!("  on end    {}", ch.handoffs);
        }
        if r.passed_total > 0 {
            // Sessions against wakes that passed without one.
            let last = r.passed.first().map(|p| {
                let why = if p.reason.is_empty() { String::new() } else { format!(": {}", p.reason) };
                format!(" (last: TODO {} due {}, {}{why})", p.todo_id, output::local_time(&p.slot_at), p.what)
            });
            outln!(
                "  wakes     {} session(s), {} slot(s) passed by a pre-check or missed{}",
                ch.session,
                r.passed_total,
                last.unwrap_or_default()
            );
            // "Why did it not run at 09:00?"
            for p in r.passed.iter().filter(|p| p.what == "missed").take(3) {
                outln!("  missed    TODO {} due {}: {}", p.todo_id, output::local_time(&p.slot_at), p.reason);
            }
        }
        for h in &r.holds {
            outln!("  limit     {}", hold_line(h));
        }
        if let Some(([today, week, month], sessions)) = windows {
            use super::usage::cost;
            outln!(
                "  cost      {} today, {} over 7 days, {} over 30 days ({sessions} sessions)",
                cost(today),
                cost(week),
                cost(month)
            );
        }
        for b in &r.budgets {
            let mark = match b.used / b.limit {
                f if f >= 1.0 => " (reached)",
                f if f >= 0.8 => " (over 80%)",
                _ => "",
            };
            outln!("  budget    {}{mark}", b.line);
        }
        if !ch.attention.is_empty() {
            outln!("  attention {}", ch.attention);
        }
        if !ch.fault.is_empty() {
            outln!("  fault     {}", ch.fault);
        }
        if !ch.error.is_empty() {
            outln!("  error     {}", ch.error);
        }
        if ch.last_lateness_ms >= 0 {
            outln!("  lateness  {} (last session's start after its due time)", ms(ch.last_lateness_ms));
        }
        for b in &ch.bridges {
            let error = if b.last_error.is_empty() { String::new() } else { format!(": {}", b.last_error) };
            outln!("  sync      {} {}{error}", b.name, b.state);
        }
    }
    if !r.sessions.is_empty() {
        outln!();
        let rows: Vec<Vec<output::Cell>> = r
            .sessions
            .iter()
            .map(|s| {
                vec![
                    s.number.to_string().into(),
                    // A session that continued another's conversation says which.
                    if s.resumed_from > 0 {
                        format!("{} (cont. {})", s.trigger, s.resumed_from).into()
                    } else {
                        s.trigger.as_str().into()
                    },
                    if s.due_at.is_empty() { "-".into() } else { output::local_time(&s.due_at).into() },
                    if s.started_at.is_empty() { "-".into() } else { output::local_time(&s.started_at).into() },
                    if s.lateness_ms < 0 { "-".into() } else { ms(s.lateness_ms).into() },
                    duration(&s.started_at, &s.ended_at).into(),
                    tokens(s).into(),
                    if s.cost_usd < 0.0 { "-".into() } else { format!("${:.4}", s.cost_usd).into() },
                    dash(&s.outcome).into(),
                ]
            })
            .collect();
        let head = ["SESSION", "TRIGGER", "DUE", "STARTED", "LATE", "TOOK", "TOKENS", "COST", "OUTCOME"];
        output::table(&head, rows, 8);
    }
    Ok(())
}

/// A session's tokens, in / out (`-` when its agent's stream said none).
fn tokens(s: &pb::SessionInfo) -> String {
    if s.input_tokens == 0 && s.output_tokens == 0 {
        return "-".into();
    }
    format!("{}/{}", s.input_tokens, s.output_tokens)
}

/// A state, colored for a terminal.
fn state_cell(s: i32) -> output::Cell {
    let name = state_name(s);
    match name {
        "running" => output::colored(name, "32"),
        "paused" => output::colored(name, "33"),
        "faulted" => output::colored(name, "31"),
        "stopped" => output::colored(name, "2"),
        _ => name.into(),
    }
}

/// How long a session took (`-` while it runs).
fn duration(start: &str, end: &str) -> String {
    let (Ok(a), Ok(b)) = (chrono::DateTime::parse_from_rfc3339(start), chrono::DateTime::parse_from_rfc3339(end))
    else {
        return "-".into();
    };
    let secs = (b - a).num_seconds().max(0);
    if secs < 60 { format!("{secs}s") } else { format!("{}m {}s", secs / 60, secs % 60) }
}

fn dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.to_string() }
}

/// A lateness as people read it: `12ms`, `3.4s`, then minutes, hours, days.
fn ms(n: i64) -> String {
    if n < 1000 {
        format!("{n}ms")
    } else if n < 60_000 {
        format!("{:.1}s", n as f64 / 1000.0)
    } else {
        cryo_core::time::humanize(chrono::Duration::milliseconds(n))
    }
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
        if ch.state == pb::ChamberState::Running as i32 {
            outln!("ended {:?}'s running session {} (as a stop does: its TODOs are re-queued)", ch.name, ch.session);
        }
        outln!("removed {:?} from the registry; its files in {} are untouched", ch.name, ch.path);
    }
    Ok(())
}

async fn start(ctx: &Ctx, chamber: Option<String>, no_wait: bool) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_start(pb::ChamberStartRequest { chamber: Some(r), no_wait }).await }
    })
    .await?
    .into_inner();
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

async fn stop(ctx: &Ctx, chamber: Option<String>, no_wait: bool) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_stop(pb::ChamberStopRequest { chamber: Some(r), no_wait }).await }
    })
    .await?
    .into_inner();
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

async fn move_to(ctx: &Ctx, chamber: Option<String>, to: String) -> Result<()> {
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
enum Switch {
    Pause,
    Resume,
    Archive,
    Unarchive,
}

async fn switch(ctx: &Ctx, chamber: Option<String>, op: Switch) -> Result<()> {
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

async fn reset(ctx: &Ctx, chamber: Option<String>, yes: bool) -> Result<()> {
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

async fn trust(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_trust(pb::ChamberTrustRequest { chamber: Some(r) }).await }
    })
    .await?
    .into_inner();
    let ch = r.chamber.unwrap_or_default();
    if ctx.json {
        output::json(&json!({ "chamber": chamber_json(&ch), "accepted": r.accepted }));
    } else if r.accepted.is_empty() {
        outln!("{:?}: nothing changed since its settings were last accepted", ch.name);
    } else {
        outln!("{:?}: accepted {} ({})", ch.name, r.accepted.join(", "), ch.state);
    }
    Ok(())
}

/// Asks on the terminal for the chamber's name before a reset.
fn confirm_reset(ch: &pb::Chamber) -> Result<()> {
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

async fn wake(ctx: &Ctx, chamber: Option<String>, message: Option<String>, replace: bool) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        let message = message.clone().unwrap_or_default();
        async move { c.chamber_wake(pb::ChamberWakeRequest { chamber: Some(r), message, replace }).await }
    })
    .await?
    .into_inner();
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

async fn send(ctx: &Ctx, chamber: String, text: Option<String>, from: String, subject: String) -> Result<()> {
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

async fn sync(ctx: &Ctx, chamber: Option<String>, action: SyncAction) -> Result<()> {
    use pb::chamber_sync_request::Action;
    let action = match action {
        SyncAction::Status => Action::Status,
        SyncAction::Pull => Action::Pull,
        SyncAction::Push => Action::Push,
    };
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_sync(pb::ChamberSyncRequest { chamber: Some(r), action: action as i32 }).await }
    })
    .await?
    .into_inner();
    let failed: Vec<&pb::SyncResult> = r.results.iter().filter(|x| !x.error.is_empty()).collect();
    if ctx.json {
        let results: Vec<serde_json::Value> = r
            .results
            .iter()
            .map(|x| serde_json::json!({ "bridge": x.bridge, "count": x.count, "error": null_if_empty(&x.error) }))
            .collect();
        output::json(&serde_json::json!({
            "bridges": r.bridges.iter().map(cryo_proto::json::bridge_json).collect::<Vec<_>>(),
            "results": results,
        }));
    } else if r.bridges.is_empty() {
        outln!(
            "no sync bridges (configure [sync.zulip] or [sync.github] in cryo.toml; they run while the chamber is started)"
        );
    } else {
        for x in &r.results {
            let verb = if action == Action::Pull { "delivered" } else { "posted" };
            if x.error.is_empty() {
                outln!("{}: {verb} {}", x.bridge, x.count);
            }
        }
        let rows: Vec<Vec<output::Cell>> = r
            .bridges
            .iter()
            .map(|b| {
                let time = |t: &str| if t.is_empty() { "-".to_string() } else { output::local_time(t) };
                vec![
                    b.name.as_str().into(),
                    b.state.as_str().into(),
                    time(&b.last_pull).into(),
                    time(&b.last_push).into(),
                    dash(&b.last_error).into(),
                ]
            })
            .collect();
        output::table(&["BRIDGE", "STATE", "LAST PULL", "LAST PUSH", "LAST ERROR"], rows, 4);
    }
    match failed.as_slice() {
        [] => Ok(()),
        f => Err(client::Failure::refused(
            f.iter().map(|x| format!("{}: {}", x.bridge, x.error)).collect::<Vec<_>>().join("; "),
        )),
    }
}

async fn todo(ctx: &Ctx, chamber: Option<String>, op: TodoOp) -> Result<()> {
    use pb::chamber_todo_request::Op;
    // A listing shows the same TODOs as a table or as JSON.
    let hide_done = matches!(op, TodoOp::List { all: false });
    let op = match op {
        TodoOp::List { .. } => Op::List(pb::TodoListRequest {}),
        TodoOp::Add { text, at, every, cron, missed, precheck } => Op::Add(pb::TodoAddRequest {
            text,
            at: at.unwrap_or_default(),
            every: every.unwrap_or_default(),
            cron: cron.unwrap_or_default(),
            missed: missed.unwrap_or_default(),
            precheck: precheck.unwrap_or_default(),
        }),
        TodoOp::Done { id } => Op::Done(pb::TodoIdRequest { id }),
        TodoOp::Remove { id } => Op::Remove(pb::TodoIdRequest { id }),
    };
    let c = client::control(&ctx.socket).await?;
    let r = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        let op = op.clone();
        async move { c.chamber_todo(pb::ChamberTodoRequest { chamber: Some(r), op: Some(op) }).await }
    })
    .await?
    .into_inner();
    let shown: Vec<&pb::Todo> = r.todos.iter().filter(|t| !hide_done || t.state != "done").collect();
    if ctx.json {
        output::json(&serde_json::Value::Array(shown.iter().map(|t| todo_json(t)).collect()));
        return Ok(());
    }
    if shown.is_empty() {
        outln!("no pending TODOs");
        return Ok(());
    }
    let rows: Vec<Vec<output::Cell>> = shown
        .iter()
        .map(|t| {
            let repeat = if !t.every.is_empty() {
                format!("every {}", t.every)
            } else if !t.cron.is_empty() {
                format!("cron {}", t.cron)
            } else {
                "-".into()
            };
            let at = if t.at.is_empty() { "-".to_string() } else { output::local_time(&t.at) };
            vec![t.id.to_string().into(), t.state.as_str().into(), at.into(), repeat.into(), t.text.as_str().into()]
        })
        .collect();
    output::table(&["ID", "STATE", "AT", "REPEAT", "TEXT"], rows, 4);
    Ok(())
}

/// Reads a server stream until it ends, Ctrl-C, or an error; `each` prints.
async fn drain<T>(mut s: tonic::Streaming<T>, mut each: impl FnMut(T)) -> Result<()> {
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

async fn log(ctx: &Ctx, chamber: Option<String>, follow: bool, agent: bool, lines: u32) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let s = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_log(pb::ChamberLogRequest { chamber: Some(r), agent, follow, lines }).await }
    })
    .await?
    .into_inner();
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

fn print_mail(m: &pb::Mail, chamber: &str) {
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

async fn messages(ctx: &Ctx, chamber: Option<String>, follow: bool, last: u32) -> Result<()> {
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

async fn watch(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let c = client::control(&ctx.socket).await?;
    let s = with_chamber(chamber.as_deref(), |r| {
        let mut c = c.clone();
        async move { c.chamber_watch(pb::ChamberWatchRequest { chamber: Some(r) }).await }
    })
    .await?
    .into_inner();
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
