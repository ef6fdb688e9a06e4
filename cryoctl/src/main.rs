//! `cryoctl`: the operator's CLI. Everything but `daemon run` talks to cryod
//! over gRPC; `daemon run` runs cryod itself, through the same function as the
//! `cryod` binary.

#[macro_use]
mod output;
mod client;
mod cmd;
mod complete;
mod extras;
mod quick;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Run AI coding agents on work that spans days, weeks or years.
#[derive(Parser)]
#[command(name = "cryoctl", version, propagate_version = true)]
struct Cli {
    /// cryod's socket (default: $XDG_RUNTIME_DIR/cryo/cryod.sock).
    #[arg(long, global = true, env = "CRYO_SOCKET", value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The daemon.
    #[command(subcommand)]
    Daemon(DaemonCmd),
    /// Chambers: create, register, list, inspect, remove.
    #[command(subcommand)]
    Chamber(cmd::chamber::ChamberCmd),
    /// Check the environment cryo runs in, one line each, with what to do.
    Doctor,
    /// The web hub's address, with its access token, and whether it is up.
    Hub,
    /// cryod's figures (wake lateness, sessions, admission, agent calls):
    /// what `GET /metrics` serves, as a table.
    Metrics {
        /// Print the OpenMetrics text itself.
        #[arg(long)]
        raw: bool,
    },
    /// Serve cryo's operator tools (list, status, messages, send, wake,
    /// pause, resume, TODOs) and chamber resources to an MCP client on
    /// stdin/stdout: `claude mcp add cryo -- cryoctl mcp`.
    Mcp {
        /// Offer only the tools that read (list, status, messages, TODOs).
        #[arg(long)]
        read_only: bool,
    },
    /// What sessions used, tokens and cost, summed by chamber, provider
    /// account, day (UTC) or model; the whole fleet's on a fleet.
    Usage {
        #[arg(long, default_value = "chamber", value_parser = ["chamber", "provider", "day", "model"])]
        by: String,
        /// The window: 7d, 24h, today, a date (2026-11-01) or all.
        #[arg(long, default_value = "7d")]
        since: String,
    },
    /// Every chamber's coming wakes on one time line (local time, zone and
    /// UTC offset, recurrence, gate, daylight-saving notes, what holds one).
    Schedule {
        /// How many wakes.
        #[arg(long, short = 'n', default_value_t = 20)]
        count: u32,
    },
    /// Tool calls that chambers' approvals policies sent to a person:
    /// list them (pending ones; `--all` for the decided too), approve or deny.
    #[command(args_conflicts_with_subcommands = true)]
    Approvals {
        /// One chamber (a name or a path).
        chamber: Option<String>,
        /// The decided ones too.
        #[arg(long)]
        all: bool,
        /// How many.
        #[arg(long, short = 'n', default_value_t = 50)]
        limit: u32,
        #[command(subcommand)]
        cmd: Option<ApprovalsCmd>,
    },
    /// The ledger's history: prune it now (cryod also does daily, as
    /// `[history] keep_sessions` says).
    #[command(subcommand)]
    History(HistoryCmd),
    /// The notifiers of cryod.toml (its notify tables): try them, read what they did.
    #[command(subcommand)]
    Notify(NotifyCmd),
    /// A fleet of cryod nodes on one PostgreSQL.
    #[command(subcommand)]
    Fleet(FleetCmd),
    /// Print the completion script for a shell (bash, zsh, fish); it asks
    /// cryod for chamber names as you type. `install` writes bash's, zsh's
    /// and fish's where each looks, and the man pages (no service needed).
    Completions {
        /// The shell, or `install`.
        #[arg(value_parser = ["bash", "zsh", "fish", "elvish", "powershell", "install"])]
        shell: String,
    },
    /// Write cryoctl's man pages (one per command) into a folder; `install`
    /// puts them under ~/.local/share/man (and the completions where the
    /// shells look), as `daemon install` does.
    Man {
        /// The folder (made if missing), or `install`.
        dir: PathBuf,
    },
    /// Run a private daemon with a demo chamber whose agent talks back, until Ctrl-C.
    Demo {
        /// Use a real agent CLI instead of the demo script (claude, codex, opencode).
        #[arg(long)]
        agent: Option<String>,
    },
}

#[derive(Subcommand)]
enum ApprovalsCmd {
    /// The requests, newest first (pending ones unless --all).
    List {
        /// One chamber (a name or a path).
        chamber: Option<String>,
        /// The decided ones too.
        #[arg(long)]
        all: bool,
        /// How many.
        #[arg(long, short = 'n', default_value_t = 50)]
        limit: u32,
    },
    /// Let the call run: the agent's session (or its next) runs exactly it.
    Approve {
        /// The request's id (from the list).
        id: String,
    },
    /// Refuse the call; the agent is told, with your reason.
    Deny {
        /// The request's id (from the list).
        id: String,
        /// Why, for the agent.
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Subcommand)]
enum HistoryCmd {
    /// Delete ended sessions, passed slots and answered claims older than
    /// `--keep` (their usage stays counted); each chamber keeps its newest
    /// session.
    Prune {
        /// How much to keep: 2y, 26w, 90d (default: cryod.toml's
        /// `[history] keep_sessions`, itself 2y by default).
        #[arg(long, default_value = "")]
        keep: String,
    },
}

#[derive(Subcommand)]
enum NotifyCmd {
    /// Send a test event through one notifier (by name) or all, and print
    /// each result (exit 1 if one failed).
    Test {
        /// The notifier's `name` in cryod.toml (left out: every notifier).
        name: Option<String>,
    },
    /// Recent deliveries, newest first, with their outcome.
    Log {
        /// How many.
        #[arg(long, short = 'n', default_value_t = 50)]
        limit: u32,
    },
}

#[derive(Subcommand)]
enum FleetCmd {
    /// The nodes, their leases (on the database's clock) and their chambers.
    Status,
    /// Drain a node: it takes no chambers, hands its own over as their
    /// sessions end, then leaves the fleet and exits. Waits until it has.
    Drain {
        /// The node's name or id.
        node: String,
        /// Return once the node was asked.
        #[arg(long)]
        no_wait: bool,
    },
}

#[derive(Subcommand)]
enum DaemonCmd {
    /// Run cryod in the foreground (as the `cryod` binary does).
    Run {
        /// Config file (default: $XDG_CONFIG_HOME/cryo/cryod.toml).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The store: a PostgreSQL connection string makes this cryod a
        /// node of a fleet (overrides `[store] url`).
        #[arg(long, value_name = "URL")]
        store: Option<String>,
        /// More log output (-v info, -vv debug); RUST_LOG overrides.
        #[arg(short, long, action = clap::ArgAction::Count)]
        verbose: u8,
        /// Start cryod in the background, its log in
        /// $XDG_STATE_HOME/cryo/cryod.log; returns once it answers
        /// (`cryoctl daemon stop` ends it).
        #[arg(long)]
        detach: bool,
    },
    /// Install cryod as a user service (systemd user unit / LaunchAgent) and start it.
    Install,
    /// Stop and remove the service; chambers and their files stay.
    Uninstall,
    /// The service: installed, enabled, active, main pid, cryod's status line.
    Status,
    /// Restart the service.
    Restart,
    /// Stop cryod, however it runs (the service, `daemon run`, by hand);
    /// returns once it has gone. Its sessions' work runs again at its next start.
    Stop,
}

pub struct Ctx {
    pub socket: Option<PathBuf>,
    pub json: bool,
}

/// `cryoctl completions install` / `cryoctl man install`: the man pages and
/// the shells' completions in the user's folders, without a service.
fn install_extras() -> ExitCode {
    let line = extras::install(Cli::command());
    if line.starts_with("could not") {
        return client::Failure::refused(line).exit();
    }
    outln!("wrote {line}");
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    // `COMPLETE=SHELL cryoctl ...` is a completion request from the shell.
    clap_complete::CompleteEnv::with_factory(Cli::command).complete();
    // The commonest reads skip clap's command tree (see `quick`).
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(q) = quick::parse(&args, std::env::var_os(cryo_proto::SOCKET_ENV)) {
        return run(cmd::chamber::run(Ctx { socket: q.socket, json: q.json }, q.cmd));
    }
    let cli = Cli::parse();
    let ctx = Ctx { socket: cli.socket, json: cli.json };
    match cli.command {
        Command::Daemon(DaemonCmd::Run { config, store, verbose, detach: false }) => {
            cmd::daemon::run(ctx, config, store, verbose)
        }
        Command::Daemon(DaemonCmd::Run { config, store, verbose, detach: true }) => {
            run(cmd::daemon::detach(ctx, config, store, verbose))
        }
        Command::Daemon(DaemonCmd::Install) => run(cmd::daemon::install(ctx)),
        Command::Daemon(DaemonCmd::Uninstall) => run(cmd::daemon::uninstall(ctx)),
        Command::Daemon(DaemonCmd::Status) => run(cmd::daemon::status(ctx)),
        Command::Daemon(DaemonCmd::Restart) => run(cmd::daemon::restart(ctx)),
        Command::Daemon(DaemonCmd::Stop) => run(cmd::daemon::stop(ctx)),
        Command::Chamber(c) => run(cmd::chamber::run(ctx, c)),
        Command::Demo { agent } => run(cmd::demo::run(ctx, agent)),
        Command::Completions { shell } if shell == "install" => install_extras(),
        Command::Completions { shell } => complete::script(&shell),
        Command::Man { dir } if dir.as_os_str() == "install" => install_extras(),
        Command::Man { dir } => match extras::man_pages(Cli::command(), &dir) {
            Ok(written) => {
                outln!("{} man pages in {}", written.len(), dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => client::Failure::refused(format!("cannot write the man pages in {}: {e}", dir.display())).exit(),
        },
        Command::Doctor => run(cmd::doctor::run(ctx)),
        Command::Hub => run(cmd::hub(ctx)),
        Command::Metrics { raw } => run(cmd::metrics::run(ctx, raw)),
        Command::Mcp { read_only } => run(cmd::mcp(ctx, read_only)),
        Command::Usage { by, since } => run(cmd::usage::run(ctx, by, since)),
        Command::Schedule { count } => run(async move { cmd::schedule::run(&ctx, None, count).await }),
        Command::History(HistoryCmd::Prune { keep }) => run(cmd::history_prune(ctx, keep)),
        Command::Approvals { chamber, all, limit, cmd } => {
            run(match cmd.unwrap_or(ApprovalsCmd::List { chamber, all, limit }) {
                ApprovalsCmd::List { chamber, all, limit } => Box::pin(cmd::approvals::list(ctx, chamber, all, limit))
                    as std::pin::Pin<Box<dyn std::future::Future<Output = client::Result<()>>>>,
                ApprovalsCmd::Approve { id } => Box::pin(cmd::approvals::decide(ctx, id, true, None)),
                ApprovalsCmd::Deny { id, reason } => Box::pin(cmd::approvals::decide(ctx, id, false, reason)),
            })
        }
        Command::Notify(NotifyCmd::Test { name }) => run(cmd::notify::test(ctx, name)),
        Command::Notify(NotifyCmd::Log { limit }) => run(cmd::notify::log(ctx, limit)),
        Command::Fleet(FleetCmd::Status) => run(cmd::fleet_status(ctx)),
        Command::Fleet(FleetCmd::Drain { node, no_wait }) => run(cmd::fleet_drain(ctx, node, no_wait)),
    }
}

fn run(fut: impl std::future::Future<Output = client::Result<()>>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return client::Failure::refused(format!("cannot start: {e}")).exit(),
    };
    match rt.block_on(fut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.exit(),
    }
}
