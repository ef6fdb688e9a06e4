//! The keeper: a small parent of one agent (fleet nodes only) that kills
//! the agent's process group when cryod stops vouching for it.
//!
//! A fleet node must never leave an agent running once another node may
//! have taken its chamber, even if cryod itself is frozen (SIGSTOP, a
//! stalled VM) or killed. So the agent is not cryod's child but the
//! keeper's: cryod runs `cryod __keep MILLIS PROGRAM ARGS…` (its own binary,
//! or the one that embeds it), and the keeper starts the agent in a process
//! group of its own and then:
//! - reads deadline extensions from stdin, one line of milliseconds each
//!   (cryod writes one after every lease renewal: the trust left);
//! - kills the agent's group with SIGKILL when the deadline passes;
//! - on EOF (cryod died) sends SIGTERM, and SIGKILL a second later;
//! - reports on stdout `pid N` once the agent runs, then `exit N` or
//!   `signal N` when it ends, and exits.
//!
//! cryod signals the agent's group directly (stop, freeze, thaw); the keeper
//! is in a group of its own so those signals do not reach it.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

/// The first argument that makes a cryod binary a keeper.
pub const ARG: &str = "__keep";

/// When the first argument is [`ARG`], runs the keeper and exits; returns
/// otherwise. Call it first in every binary that embeds cryod (`cryod`,
/// `cryoctl`).
pub fn intercept() {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|a| a != ARG) {
        return;
    }
    let rest: Vec<OsString> = args.collect();
    let code = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => {
            let code = runtime.block_on(keep(rest));
            // Dropping the runtime would wait for the stdin reader's blocking
            // read, until cryod's next deadline line: the agent's end would
            // be seen up to a heartbeat late.
            runtime.shutdown_background();
            code
        }
        Err(e) => {
            eprintln!("cryo keeper: cannot start: {e}");
            1
        }
    };
    std::process::exit(code)
}

async fn keep(args: Vec<OsString>) -> i32 {
    let mut args = args.into_iter();
    let (Some(millis), Some(program)) = (args.next(), args.next()) else {
        eprintln!("cryo keeper: usage: {ARG} MILLIS PROGRAM [ARGS...]");
        return 2;
    };
    let Some(millis) = millis.to_str().and_then(|m| m.parse::<u64>().ok()) else {
        eprintln!("cryo keeper: {millis:?} is not a number of milliseconds");
        return 2;
    };
    let out = match std::io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => Stdio::from(fd),
        Err(_) => Stdio::inherit(),
    };
    let mut child = match tokio::process::Command::new(&program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cryo keeper: cannot run {program:?}: {e}");
            println!("exit 127");
            return 127;
        }
    };
    let Some(pid) = child.id() else {
        println!("exit 127");
        return 127;
    };
    println!("pid {pid}");
    let pgid = pid as i32;
    let mut deadline = Instant::now() + Duration::from_millis(millis);
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut cryod_gone = false;
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.unwrap_or_else(|_| ExitStatus::from_raw(Signal::SIGKILL as i32));
                println!("{}", report(status));
                return 0;
            }
            line = lines.next_line(), if !cryod_gone => match line {
                Ok(Some(l)) => match l.trim().parse::<u64>() {
                    Ok(ms) => deadline = Instant::now() + Duration::from_millis(ms),
                    Err(_) => eprintln!("cryo keeper: ignoring {l:?}"),
                },
                _ => {
                    cryod_gone = true;
                    eprintln!("cryo keeper: cryod has gone; ending the agent");
                    crate::spawn::signal_group(pgid, Signal::SIGTERM);
                    deadline = deadline.min(Instant::now() + Duration::from_secs(1));
                }
            },
            _ = tokio::time::sleep_until(deadline) => {
                eprintln!("cryo keeper: cryod stopped vouching for this session (its lease may be lost); killing the agent");
                crate::spawn::signal_group(pgid, Signal::SIGKILL);
                deadline = Instant::now() + Duration::from_secs(3600);
            }
        }
    }
}

/// `exit N` or `signal N`.
fn report(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "signal 9".into(),
    }
}

/// The agent's status from the keeper's report (what `wait` would have
/// said had the agent been cryod's child).
pub fn status_from_report(line: &str) -> Option<ExitStatus> {
    let (kind, n) = line.trim().split_once(' ')?;
    let n: i32 = n.parse().ok()?;
    match kind {
        "exit" => Some(ExitStatus::from_raw((n & 0xff) << 8)),
        "signal" => Some(ExitStatus::from_raw(n & 0x7f)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip() {
        for raw in [0, 3 << 8, 255 << 8, 9, 15] {
            let s = ExitStatus::from_raw(raw);
            assert_eq!(status_from_report(&report(s)), Some(s), "{raw}");
        }
        assert_eq!(status_from_report("pid 12"), None);
        assert_eq!(status_from_report("exit x"), None);
    }
}
