//! A session's processes: its process group, signals to it, and finding
//! the processes a killed cryod left behind.

/// Sends `signal` to the whole process group `pgid`.
pub fn signal_group(pgid: i32, signal: nix::sys::signal::Signal) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal).is_ok()
}

/// Whether `pid` runs (a zombie, dead but not yet reaped by its parent, does
/// not).
pub fn pid_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()).is_some_and(|state| state != 'Z'),
        Err(_) => nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok() && !cfg!(target_os = "linux"),
    }
}

/// Ends the processes `procs` (pid, group): SIGTERM to every group at once,
/// then SIGKILL to what still runs after `grace`. A stopped process (a
/// frozen node's agent) is continued right after its SIGTERM, as systemd
/// does, so that it acts on it now rather than sit out the whole grace: the
/// pending SIGTERM is delivered before it runs another instruction.
pub async fn end_groups(procs: &[(i32, i32)], grace: std::time::Duration) {
    if procs.is_empty() {
        return;
    }
    let mut groups: Vec<i32> = procs.iter().map(|p| p.1).collect();
    groups.sort_unstable();
    groups.dedup();
    for g in &groups {
        signal_group(*g, nix::sys::signal::Signal::SIGTERM);
        signal_group(*g, nix::sys::signal::Signal::SIGCONT);
    }
    let deadline = tokio::time::Instant::now() + grace;
    while procs.iter().any(|p| pid_running(p.0)) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for g in &groups {
        signal_group(*g, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Processes (pid, process group) that carry `CRYO_WAKE_ID`, by wake id: the
/// agents (and their children) of sessions. Used at start-up to find agents a
/// killed cryod left behind; the wake id in the environment proves a process
/// is ours even if its pid was reused.
pub fn processes_by_wake() -> std::collections::HashMap<String, Vec<(i32, i32)>> {
    let mut out: std::collections::HashMap<String, Vec<(i32, i32)>> = Default::default();
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(env) = std::fs::read(e.path().join("environ")) else { continue };
        let Some(wake) = env
            .split(|b| *b == 0)
            .find_map(|kv| kv.strip_prefix(b"CRYO_WAKE_ID="))
            .and_then(|v| std::str::from_utf8(v).ok())
        else {
            continue;
        };
        let pgid = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid))).map(|p| p.as_raw()).unwrap_or(pid);
        out.entry(wake.to_string()).or_default().push((pid, pgid));
    }
    out
}

/// The process groups of running sessions (their agents'), to tell a
/// session's process from the operator's.
#[derive(Debug, Default)]
pub struct Live(std::sync::Mutex<std::collections::HashSet<i32>>);

impl Live {
    pub fn add(&self, pgid: i32) {
        self.0.lock().expect("live groups lock").insert(pgid);
    }

    pub fn remove(&self, pgid: i32) {
        self.0.lock().expect("live groups lock").remove(&pgid);
    }

    fn contains(&self, pgid: i32) -> bool {
        self.0.lock().expect("live groups lock").contains(&pgid)
    }

    /// Whether the process `pid` belongs to a cryo session's tree, and how
    /// it shows: it runs in another process namespace than cryod
    /// (bubblewrap's), it or an ancestor is in one of these running
    /// sessions' process groups or Unix sessions, cryod itself started an
    /// ancestor of it (an agent, a pre-check, a keeper, a notifier's
    /// command), or its environment is a session's. A process that left
    /// all of these behind (double-forked, in a session of its own, its
    /// environment cleared) is not recognised here; it still lacks the
    /// operator key, which no sandbox lets it read.
    pub fn session_of(&self, pid: i32) -> Option<String> {
        let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
        if let (Some(ours), Some(theirs)) = (ns("self"), ns(&pid.to_string()))
            && ours != theirs
        {
            return Some("it runs in a sandbox's own process namespace".into());
        }
        // The process that connected has gone: its connection was handed on
        // (a fork whose parent left), and whose it is now cannot be told.
        if stat(pid).is_none() {
            return Some(format!("process {pid}, which connected, has ended: a connection is not handed on"));
        }
        let me = std::process::id() as i32;
        let mut p = pid;
        for _ in 0..64 {
            let Some((ppid, pgrp, sid)) = stat(p) else { break };
            if self.contains(pgrp) || self.contains(sid) {
                return Some(format!("it belongs to a running session's process group {pgrp}"));
            }
            if ppid == me {
                return Some(format!("cryod started process {p}, of which it is a part"));
            }
            if ppid <= 1 {
                break;
            }
            p = ppid;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let marked = environ
            .split(|b| *b == 0)
            .any(|kv| kv.starts_with(b"CRYO_SESSION_TOKEN=") || kv.starts_with(b"CRYO_WAKE_ID="));
        marked.then(|| "its environment is a cryo session's".into())
    }
}

/// A process's parent, process group and Unix session.
fn stat(pid: i32) -> Option<(i32, i32, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp session ...`; comm may hold spaces or ')'.
    let rest = text.rsplit_once(") ")?.1;
    let mut f = rest.split(' ').skip(1).map(|x| x.parse::<i32>().ok());
    Some((f.next()??, f.next()??, f.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_of_ours_is_a_sessions_and_the_rest_is_not() {
        let live = Live::default();
        // This test process is "cryod": a child it started is a session's.
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let why = live.session_of(child.id() as i32);
        assert!(why.as_deref().is_some_and(|w| w.contains("cryod started")), "{why:?}");
        // Our parent (the test runner) is not.
        assert_eq!(live.session_of(nix::unistd::getppid().as_raw()), None);
        let _ = child.kill();
        let _ = child.wait();
        // A process of a live session's group, whoever its parent.
        let own = nix::unistd::getpgrp().as_raw();
        live.add(own);
        let why = live.session_of(nix::unistd::getppid().as_raw()).or(live.session_of(std::process::id() as i32));
        assert!(why.is_some());
        live.remove(own);
    }

    /// A stopped process is ended by the SIGTERM it is sent, not by the
    /// SIGKILL at the end of the grace: it is continued to act on it.
    /// (Without that, this fails after the 20 s grace, by SIGKILL.)
    #[tokio::test]
    async fn a_stopped_process_is_ended_by_its_sigterm() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let mut child = std::process::Command::new("sleep").arg("600").process_group(0).spawn().unwrap();
        let pid = child.id() as i32;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGSTOP).unwrap();
        end_groups(&[(pid, pid)], std::time::Duration::from_secs(20)).await;
        assert_eq!(child.wait().unwrap().signal(), Some(nix::sys::signal::Signal::SIGTERM as i32));
    }
}
