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
    // `cryod __keep …`, `__sandbox`, `__confine`, `__forward`, `__acp`: one
    // of a session's launchers (see `cryo_session::intercept`; the first
    // two run as `cryod-launch` where it is installed beside cryod).
    cryo_session::intercept();
    cryod::main_with(Cli::parse().args)
}
