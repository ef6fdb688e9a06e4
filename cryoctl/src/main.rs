//! `cryoctl`: the operator's CLI. Everything but `daemon run` talks to cryod
//! over gRPC; `daemon run` runs cryod itself, through the same function as the
//! `cryod` binary.

mod client;
mod cmd;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Run a private daemon with a demo chamber whose agent talks back, until Ctrl-C.
    Demo {
        /// Use a real agent CLI instead of the demo script (claude, codex, opencode).
        #[arg(long)]
        agent: Option<String>,
    },
}

#[derive(Subcommand)]
enum DaemonCmd {
    /// Run cryod in the foreground (as the `cryod` binary does).
    Run {
        /// Config file (default: $XDG_CONFIG_HOME/cryo/cryod.toml).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// More log output (-v info, -vv debug); RUST_LOG overrides.
        #[arg(short, long, action = clap::ArgAction::Count)]
        verbose: u8,
    },
}

pub struct Ctx {
    pub socket: Option<PathBuf>,
    pub json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ctx = Ctx { socket: cli.socket, json: cli.json };
    match cli.command {
        Command::Daemon(DaemonCmd::Run { config, verbose }) => {
            cryod::main_with(cryod::DaemonArgs { socket: ctx.socket, config, verbose })
        }
        Command::Chamber(c) => run(cmd::chamber::run(ctx, c)),
        Command::Demo { agent } => run(cmd::demo::run(ctx, agent)),
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
