//! `cryoctl chamber ...`: the verbs (clap's table) and their dispatch; one
//! file per group of verbs beside this one.

mod add;
mod diff;
mod life;
mod mail;
mod status;
mod work;

use std::path::{Path, PathBuf};

use clap::Subcommand;
use cryo_proto::v1 as pb;

use self::add::{add, hook, init, release};
use self::life::{Switch, acknowledge, move_to, remove, reset, start, stop, switch, trust, wake};
use self::mail::{log, messages, send, watch};
pub use self::status::{admission_line, hold_line};
use self::status::{list, status};
use self::work::{sync, todo};
use crate::Ctx;
use crate::client::{self, Failure, Result};

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
    /// Move a chamber of the seed system (cryochamber 0.2.x) over to cryo:
    /// its `[[providers]]`, `timer.json` overrides and TODOs carried, every
    /// file it rewrites kept in `history/seed-…/`, then registered.
    Adopt {
        /// The chamber's folder.
        dir: PathBuf,
        /// Name (default: the folder's name, made unique).
        #[arg(long)]
        name: Option<String>,
        /// Stop the seed's daemon if it still runs the chamber (as `cryo
        /// cancel` does); without this such a chamber is refused.
        #[arg(long)]
        stop_seed: bool,
        /// Start the chamber once registered.
        #[arg(long)]
        start: bool,
    },
    /// Hand a chamber back to the seed system: stopped, its `todo.json`
    /// written in the seed's time form (what it cannot hold is named),
    /// unregistered; `cryo start` in its folder runs it there again.
    Release {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
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
    /// Set what needs you on a chamber aside (a failure, a fault, an
    /// attention line, mail on a stopped chamber): it leaves the hub's
    /// queue until it changes, or until the snooze ends. Its work is not
    /// changed.
    #[command(alias = "ack")]
    Acknowledge {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// Snooze: it comes back after this long (e.g. `2h`, `30m`, `1 day`).
        #[arg(long = "for", value_name = "DURATION")]
        snooze: Option<String>,
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
    /// precheck, provider, on_end, sync, limits, budget and approvals) take
    /// effect only once the operator accepts them. A chamber whose agent
    /// changed them is held until then. Each changed key is shown with its
    /// value before and after (secrets left out).
    Trust {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// Only show what changed since last accepted; accept nothing.
        #[arg(long)]
        diff: bool,
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
    /// What a git-aware chamber's branch changed since it left its base (or one
    /// session's changes): each file's lines added and deleted, then the
    /// patch.
    Diff {
        /// The chamber: its name or folder (left out: the chamber whose folder you are in).
        #[arg(add = crate::complete::chambers())]
        chamber: Option<String>,
        /// One session's changes (its number, as `chamber status` and the log show).
        #[arg(long, value_name = "N")]
        session: Option<u64>,
        /// The files and their counts only, no patch.
        #[arg(long)]
        stat: bool,
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
    /// Pending and claimed TODOs (with --all, done ones too, the archived
    /// ones a page at a time).
    List {
        /// Done TODOs too: those in todo.json, and the newest `--limit` of
        /// those archived (past `[history] keep_done`).
        #[arg(long)]
        all: bool,
        /// How many archived done TODOs a page shows (with --all).
        #[arg(long, default_value_t = 50, requires = "all", value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
        /// The archive's page ending here (what a page's note names), older
        /// than the last shown.
        #[arg(long, value_name = "CURSOR", requires = "all")]
        before: Option<u64>,
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
            add(&ctx, dir, name, init, (agent, sandbox), start, (false, false)).await
        }
        ChamberCmd::Adopt { dir, name, stop_seed, start } => {
            add(&ctx, dir, name, false, (None, None), start, (true, stop_seed)).await
        }
        ChamberCmd::Release { chamber } => release(&ctx, chamber).await,
        ChamberCmd::Start { chamber, no_wait } => start(&ctx, chamber, no_wait).await,
        ChamberCmd::Stop { chamber, no_wait } => stop(&ctx, chamber, no_wait).await,
        ChamberCmd::Pause { chamber } => switch(&ctx, chamber, Switch::Pause).await,
        ChamberCmd::Resume { chamber } => switch(&ctx, chamber, Switch::Resume).await,
        ChamberCmd::Archive { chamber } => switch(&ctx, chamber, Switch::Archive).await,
        ChamberCmd::Unarchive { chamber } => switch(&ctx, chamber, Switch::Unarchive).await,
        ChamberCmd::Acknowledge { chamber, snooze } => acknowledge(&ctx, chamber, snooze).await,
        ChamberCmd::Reset { chamber, yes } => reset(&ctx, chamber, yes).await,
        ChamberCmd::Trust { chamber, diff } => trust(&ctx, chamber, diff).await,
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
        ChamberCmd::Diff { chamber, session, stat } => diff::diff(&ctx, chamber, session, stat).await,
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
        Err(s) if s.code() == tonic::Code::NotFound => match as_folder(arg, &r)? {
            Some(p) => call(p).await.map_err(Failure::from),
            None => Err(s.into()),
        },
        other => other.map_err(Failure::from),
    }
}

/// What to ask for once the chamber `arg` named as `r` was not found: the
/// folder of that name here, if `r` took it for a name and it is one.
fn as_folder(arg: Option<&str>, r: &pb::ChamberRef) -> Result<Option<pb::ChamberRef>> {
    if let (Some(a), Some(pb::chamber_ref::By::Name(_))) = (arg, &r.by)
        && Path::new(a).is_dir()
    {
        return Ok(Some(pb::ChamberRef { by: Some(pb::chamber_ref::By::Path(utf8(&absolute(Path::new(a))?)?)) }));
    }
    Ok(None)
}

/// Connects to cryod and asks `call` about the chamber `arg` names (as
/// [`with_chamber`] finds it); the reply's message.
async fn ask<T, F, Fut>(ctx: &Ctx, arg: Option<&str>, mut call: F) -> Result<T>
where
    F: FnMut(cryo_proto::Control, pb::ChamberRef) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
{
    let c = client::control(&ctx.socket).await?;
    with_chamber(arg, |r| call(c.clone(), r)).await.map(tonic::Response::into_inner)
}

/// The sandbox modes `--sandbox` takes.
const SANDBOXES: [&str; 3] = ["off", "landlock", "bwrap"];
