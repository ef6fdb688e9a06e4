//! The `cryod` binary: parse arguments, then [`cryod::main_with`].

use clap::Parser;

/// cryo's per-user daemon: runs every registered chamber.
#[derive(Parser)]
#[command(name = "cryod", version)]
struct Cli {
    #[command(flatten)]
    args: cryod::DaemonArgs,
}

fn main() -> std::process::ExitCode {
    // `cryod __keep …`: a session's keeper (see `cryod::agent::keeper`).
    cryod::agent::keeper::intercept();
    // `cryod __sandbox …`: the keeper of a session's tree (see `cryod::agent::tree`).
    cryod::agent::tree::intercept();
    // `cryod __confine …`: the last step before a session's program runs (see `cryod::agent::harden`).
    cryod::agent::harden::intercept();
    // `cryod __forward …`: the way out of a bubblewrap session's network (see `cryod::agent::forward`).
    cryod::agent::forward::intercept();
    // `cryod __acp …`: the client of an Agent Client Protocol agent (see `cryod::agent::acp`).
    cryod::agent::acp::intercept();
    cryod::main_with(Cli::parse().args)
}
