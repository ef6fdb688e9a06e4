//! The keeper: a small parent of one agent (fleet nodes only) that kills
//! the agent's process group when cryod stops vouching for it.
//!
//! A fleet node must never leave an agent running once another node may
//! have taken its chamber, even if cryod itself is frozen (SIGSTOP, a
//! stalled VM) or killed. So the agent is not cryod's child but the
//! keeper's: cryod runs `cryod __keep UNTIL PROGRAM ARGS…` (its own binary,
//! or the one that embeds it), where UNTIL is the end of the trust cryod
//! had when it decided to spawn, in milliseconds of the machine's monotonic
//! clock (so a cryod frozen between deciding and spawning, then thawed,
//! hands on a deadline already past, not a fresh one). The keeper runs
//! nothing past it; else it starts the agent in a process group of its own
//! and then:
//! - reads deadline extensions from stdin, one line each: a new UNTIL on
//!   the same clock (cryod writes one after every lease renewal: the end of
//!   its trust). An absolute end, not the trust left: a keeper that reads
//!   the line late (starved of CPU, its pages read back from disk) must not
//!   push the deadline past cryod's trust by its own delay;
//! - kills the agent's group with SIGKILL when the deadline passes, and
//!   then every process below it: the keeper is their subreaper, so a
//!   process that left the group (`setsid`, a session's own launchers, a
//!   process namespace's init) comes to it when its parent dies, never to
//!   the machine's init, and is found and killed too;
//! - on EOF (cryod died) sends SIGTERM, and SIGKILL a second later;
//! - reports on stdout `pid N` once the agent runs, then `exit N` or
//!   `signal N` when it ends, and exits;
//! - with `--relay` before the program, passes the agent's output on in
//!   between, a line at a time: `out LINE` (its stdout) and `err LINE` (its
//!   stderr), so cryod reads a known kind's events as from its own child.
//!   Without it the agent writes to the keeper's stderr (cryod's log file).
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
/// Now on the machine's monotonic clock, in milliseconds (the same for
/// cryod and its keepers; it runs on while a process is stopped).
pub(crate) fn monotonic_ms() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
        .unwrap_or(0)
}

/// The keeper's `UNTIL` for trust that lasts `left` from now.
pub fn until(left: Duration) -> u64 {
    monotonic_ms().saturating_add(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
}

pub(crate) const ARG: &str = "__keep";

/// Before the program: relay the agent's output on stdout.
pub(crate) const RELAY: &str = "--relay";

/// How long the keeper reads what the agent wrote after it exited (a
/// process it left behind may hold its output open).
const DRAIN: Duration = Duration::from_secs(2);

/// The keeper's stdout: whole lines, and nothing more once cryod has gone.
struct Out {
    open: bool,
}

impl Out {
    fn line(&mut self, parts: &[&[u8]]) {
        use std::io::Write;
        if !self.open {
            return;
        }
        let mut out = std::io::stdout().lock();
        let written = parts.iter().try_for_each(|p| out.write_all(p)).and_then(|()| out.write_all(b"\n"));
        self.open = written.and_then(|()| out.flush()).is_ok();
    }

    fn say(&mut self, text: &str) {
        self.line(&[text.as_bytes()]);
    }
}

/// When the first argument is [`ARG`], runs the keeper and exits; returns
/// otherwise. Call it first in every binary that embeds cryod (`cryod`,
/// `cryoctl`).
pub(crate) fn intercept() {
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
    let mut args = args.into_iter().peekable();
    let millis = args.next();
    let relay = args.next_if(|a| a == RELAY).is_some();
    let (Some(millis), Some(program)) = (millis, args.next()) else {
        eprintln!("cryo keeper: usage: {ARG} UNTIL [{RELAY}] PROGRAM [ARGS...]");
        return 2;
    };
    let Some(until) = millis.to_str().and_then(|m| m.parse::<u64>().ok()) else {
        eprintln!("cryo keeper: {millis:?} is not a number of milliseconds");
        return 2;
    };
    // Whatever the agent's tree leaves behind comes here, not to init.
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("cryo keeper: cannot become the agent's subreaper ({e}): not started");
        println!("exit 125");
        return 125;
    }
    let millis = until.saturating_sub(monotonic_ms());
    if millis == 0 {
        eprintln!("cryo keeper: cryod's trust ran out before the agent started: not started");
        println!("exit 125");
        return 125;
    }
    let mut out = Out { open: true };
    let (stdout, stderr) = if relay {
        (Stdio::piped(), Stdio::piped())
    } else {
        let to_log = match std::io::stderr().as_fd().try_clone_to_owned() {
            Ok(fd) => Stdio::from(fd),
            Err(_) => Stdio::inherit(),
        };
        (to_log, Stdio::inherit())
    };
    let mut child = match tokio::process::Command::new(&program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cryo keeper: cannot run {program:?}: {e}");
            out.say("exit 127");
            return 127;
        }
    };
    let Some(pid) = child.id() else {
        out.say("exit 127");
        return 127;
    };
    out.say(&format!("pid {pid}"));
    let mut agent_out = child.stdout.take().map(|o| BufReader::new(o).split(b'\n'));
    let mut agent_err = child.stderr.take().map(|e| BufReader::new(e).split(b'\n'));
    let pgid = pid as i32;
    let mut deadline = Instant::now() + Duration::from_millis(millis);
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut cryod_gone = false;
    let mut ended: Option<(ExitStatus, Instant)> = None;
    loop {
        if let Some((status, by)) = ended
            && ((agent_out.is_none() && agent_err.is_none()) || Instant::now() >= by)
        {
            out.say(&report(status));
            return 0;
        }
        let drain_by = ended.map_or(deadline, |(_, by)| by);
        tokio::select! {
            status = child.wait(), if ended.is_none() => {
                let status = status.unwrap_or_else(|_| ExitStatus::from_raw(Signal::SIGKILL as i32));
                ended = Some((status, Instant::now() + DRAIN));
            }
            line = next(&mut agent_out) => match line {
                Some(l) => out.line(&[b"out ", &l]),
                None => agent_out = None,
            },
            line = next(&mut agent_err) => match line {
                Some(l) => out.line(&[b"err ", &l]),
                None => agent_err = None,
            },
            line = lines.next_line(), if !cryod_gone => match line {
                Ok(Some(l)) => match l.trim().parse::<u64>() {
                    Ok(until) => deadline = Instant::now() + Duration::from_millis(until.saturating_sub(monotonic_ms())),
                    Err(_) => eprintln!("cryo keeper: ignoring {l:?}"),
                },
                _ => {
                    cryod_gone = true;
                    out.open = false;
                    eprintln!("cryo keeper: cryod has gone; ending the agent");
                    crate::group::signal_group(pgid, Signal::SIGTERM);
                    deadline = deadline.min(Instant::now() + Duration::from_secs(1));
                }
            },
            _ = tokio::time::sleep_until(drain_by) => {
                if ended.is_none() {
                    // How late this keeper acts shows a starved machine.
                    let late = Instant::now().saturating_duration_since(deadline).as_millis();
                    eprintln!(
                        "cryo keeper: cryod stopped vouching for this session (its lease may be lost); killing the agent \
                         ({late} ms past the deadline, at {:.3} s of the monotonic clock)",
                        monotonic_ms() as f64 / 1000.0
                    );
                    crate::group::signal_group(pgid, Signal::SIGKILL);
                    let left = end_tree();
                    if left > 0 {
                        eprintln!("cryo keeper: {left} process(es) of the session outlived 5 s of SIGKILL");
                    }
                    deadline = Instant::now() + Duration::from_secs(3600);
                }
            }
        }
    }
}

/// The longest [`end_tree`] keeps killing.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Kills every live process below this keeper until none is left (a
/// process forking meanwhile is caught on the next round), for at most
/// [`KILL_WAIT`]; returns how many were still alive then. The dead stay
/// unreaped (zombies of this keeper, gone when it exits): the agent's own
/// end is read by its `wait`.
fn end_tree() -> usize {
    let me = std::process::id() as i32;
    let until = std::time::Instant::now() + KILL_WAIT;
    loop {
        let live: Vec<i32> = descendants(me).into_iter().filter(|p| crate::group::pid_running(*p)).collect();
        if live.is_empty() || std::time::Instant::now() >= until {
            return live.len();
        }
        for p in live {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Every process below `pid`, from `/proc` (children first found first).
fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        for c in crate::tree::children_of(p) {
            if !out.contains(&c) && out.len() < 100_000 {
                out.push(c);
                next.push(c);
            }
        }
    }
    out
}

/// The next line of an agent's output being relayed; pending forever when
/// there is none (so `select!` waits on the others).
async fn next<R: tokio::io::AsyncBufRead + Unpin>(lines: &mut Option<tokio::io::Split<R>>) -> Option<Vec<u8>> {
    match lines {
        Some(l) => l.next_segment().await.ok().flatten(),
        None => std::future::pending().await,
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
pub(crate) fn status_from_report(line: &str) -> Option<ExitStatus> {
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
