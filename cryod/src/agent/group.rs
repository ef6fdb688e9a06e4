//! A session's processes: its process group, signals to it, and finding
//! the processes a killed cryod left behind.

/// Sends `signal` to the whole process group `pgid`.
pub fn signal_group(pgid: i32, signal: nix::sys::signal::Signal) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal).is_ok()
}

/// Whether any process of group `pgid` is alive.
pub fn group_alive(pgid: i32) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok()
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
/// then SIGKILL to what still runs after `grace`.
pub async fn end_groups(procs: &[(i32, i32)], grace: std::time::Duration) {
    if procs.is_empty() {
        return;
    }
    let mut groups: Vec<i32> = procs.iter().map(|p| p.1).collect();
    groups.sort_unstable();
    groups.dedup();
    for g in &groups {
        signal_group(*g, nix::sys::signal::Signal::SIGTERM);
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
