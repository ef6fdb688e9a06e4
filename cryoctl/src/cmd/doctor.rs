//! `cryoctl doctor`: checks the environment cryo runs in and says, one line
//! each, what is fine and what to do about what is not.

use std::path::{Path, PathBuf};

use cryo_proto::v1 as pb;
use serde_json::json;

use crate::Ctx;
use crate::client::Result;
use crate::output;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

pub struct Check {
    pub name: &'static str,
    pub level: Level,
    pub detail: String,
}

fn check(name: &'static str, level: Level, detail: impl Into<String>) -> Check {
    Check { name, level, detail: detail.into() }
}

pub async fn run(ctx: Ctx) -> Result<()> {
    let socket = ctx.socket.clone().unwrap_or_else(cryo_proto::socket_path);
    let mut checks = Vec::new();
    let (chambers, daemon_path) = daemon_checks(&socket, &mut checks).await;
    // Agents run with cryod's PATH, which may differ from this shell's.
    let service_path = daemon_path.unwrap_or_else(|| std::env::var("PATH").unwrap_or_default());
    checks.push(socket_check(&socket));
    checks.push(service_check());
    checks.push(linger_check());
    checks.push(zone_check());
    checks.push(clock_check());
    checks.push(kinds_check(&service_path));
    for c in &chambers {
        checks.push(agent_check(c, &service_path));
    }
    checks.push(disk_check(&socket));
    let failed = checks.iter().any(|c| c.level == Level::Fail);
    if ctx.json {
        let v: Vec<serde_json::Value> = checks
            .iter()
            .map(|c| {
                let level = match c.level {
                    Level::Ok => "ok",
                    Level::Warn => "warn",
                    Level::Fail => "fail",
                };
                json!({ "check": c.name, "level": level, "detail": c.detail })
            })
            .collect();
        output::json(&serde_json::Value::Array(v));
    } else {
        let paint = output::color();
        for c in &checks {
            let (mark, col) = match c.level {
                Level::Ok => ("ok  ", "32"),
                Level::Warn => ("warn", "33"),
                Level::Fail => ("FAIL", "31"),
            };
            let mark = if paint { format!("\x1b[{col}m{mark}\x1b[0m") } else { mark.to_string() };
            let detail = if paint { cryo_proto::escape_controls(&c.detail) } else { c.detail.clone() };
            cryo_proto::exit::print_styled("cryoctl", &format!("{mark}  {:<14} {detail}", c.name));
        }
    }
    if failed { Err(crate::client::Failure::refused("some checks failed (see above)")) } else { Ok(()) }
}

async fn daemon_checks(socket: &Path, checks: &mut Vec<Check>) -> (Vec<pb::Chamber>, Option<String>) {
    let (mut c, path) = match cryo_proto::control_hello(socket, "cryoctl").await {
        Ok((c, h)) => {
            checks.push(check(
                "daemon",
                Level::Ok,
                format!(
                    "cryod {} (protocol {}, pid {}) serves {} chamber(s){}",
                    h.version,
                    h.protocol,
                    h.pid,
                    h.chambers,
                    match h.loading {
                        0 => String::new(),
                        n => format!(", {n} of them still loading"),
                    }
                ),
            ));
            checks.push(sandbox_check(&h));
            checks.push(watcher_check(&h));
            (c, Some(h.agent_path).filter(|p| !p.is_empty()))
        }
        Err(e) => {
            checks.push(check("daemon", Level::Fail, e.to_string()));
            return (Vec::new(), None);
        }
    };
    if let Ok(hub) = c.hub(pb::HubRequest {}).await.map(|r| r.into_inner()) {
        checks.push(hub_check(&hub));
    }
    let reply =
        c.chamber_list(pb::ChamberListRequest { archived: false }).await.map(|r| r.into_inner()).unwrap_or_default();
    // What a chamber's cryo.toml asks a person to look at (a key the agent
    // can read, a key of the seed system).
    for ch in &reply.chambers {
        for w in &ch.warnings {
            checks.push(check("chamber", Level::Warn, format!("{}: {w}", ch.name)));
        }
    }
    // A provider's limit holds its chambers' wakes: worth knowing, nothing to fix.
    for h in &reply.holds {
        checks.push(check("provider", Level::Warn, super::chamber::hold_line(h)));
    }
    if let Some(a) = &reply.admission {
        checks.push(match super::chamber::admission_line(a) {
            Some(line) => check("sessions", Level::Warn, line),
            None if a.derived => check(
                "sessions",
                Level::Ok,
                format!("{} at once, derived from this machine's memory (set max_concurrent_sessions in cryod.toml to choose)", a.limit),
            ),
            None => check("sessions", Level::Ok, format!("{} at once (max_concurrent_sessions)", a.limit)),
        });
    }
    (reply.chambers, path)
}

/// Whether the hub listens, where, and what to set if it cannot.
fn hub_check(h: &pb::HubReply) -> Check {
    match (h.up, h.note.is_empty()) {
        (true, true) => check("hub", Level::Ok, format!("listening at {} (`cryoctl hub` gives its link)", h.url)),
        (true, false) => check("hub", Level::Warn, h.note.clone()),
        (false, _) if h.error.contains("disabled") => check("hub", Level::Ok, h.error.clone()),
        (false, _) => check("hub", Level::Fail, h.error.clone()),
    }
}

/// Which sandbox new chambers get, and what the others run under.
fn watcher_check(h: &pb::HelloReply) -> Check {
    if h.watcher.is_empty() {
        return check("watcher", Level::Ok, "inotify watches the chambers' folders: new mail wakes an agent at once");
    }
    check(
        "watcher",
        Level::Warn,
        format!(
            "{}: chamber folders are polled every {}s instead, so new mail is seen that late; raise \
             fs.inotify.max_user_instances or max_user_watches (sysctl), or end what uses them, and restart cryod",
            h.watcher,
            cryo_proto::WATCH_POLL.as_secs()
        ),
    )
}

fn sandbox_check(h: &pb::HelloReply) -> Check {
    let default = if h.sandbox_default.is_empty() { "off" } else { h.sandbox_default.as_str() };
    match h.sandbox.as_str() {
        "" | "off" => check(
            "sandbox",
            Level::Warn,
            format!(
                "neither bubblewrap nor Landlock works here: agents run unconfined (`apt-get install bubblewrap`); \
                 a session holds: {}",
                h.session_holds
            ),
        ),
        strongest => check(
            "sandbox",
            Level::Ok,
            format!(
                "new chambers get {strongest} (the strongest here); a cryo.toml naming none: {default}; Landlock \
                 confines {}; a session holds: {}",
                h.landlock, h.session_holds
            ),
        ),
    }
}

fn socket_check(socket: &Path) -> Check {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(socket) else {
        return check("socket", Level::Warn, format!("{} does not exist (cryod is not running)", socket.display()));
    };
    let mode = meta.permissions().mode() & 0o777;
    let dir_mode = socket.parent().and_then(|d| std::fs::metadata(d).ok()).map(|m| m.permissions().mode() & 0o777);
    if mode & 0o077 != 0 {
        return check(
            "socket",
            Level::Fail,
            format!("{} has mode {mode:o}: others can reach cryod; restart cryod", socket.display()),
        );
    }
    match dir_mode {
        Some(d) if d & 0o077 != 0 && socket.parent().is_some_and(|p| p.ends_with("cryo")) => check(
            "socket",
            Level::Warn,
            format!("its folder has mode {d:o}; `chmod 700 {}`", socket.parent().unwrap().display()),
        ),
        _ => check("socket", Level::Ok, format!("{} is private (mode {mode:o})", socket.display())),
    }
}

fn service_check() -> Check {
    if cfg!(target_os = "macos") {
        let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
        let plist = home.join("Library/LaunchAgents/dev.cryo.cryod.plist");
        return if plist.exists() {
            check("service", Level::Ok, format!("LaunchAgent installed at {}", plist.display()))
        } else {
            check("service", Level::Warn, "no LaunchAgent: cryod stops when you log out; `cryoctl daemon install`")
        };
    }
    let unit = super::daemon::config_home().join("systemd/user/cryod.service");
    if !unit.exists() {
        return check(
            "service",
            Level::Warn,
            "no systemd user unit: cryod stops with this shell; `cryoctl daemon install`",
        );
    }
    let wanted = super::daemon::config_home().join("systemd/user/default.target.wants/cryod.service");
    if wanted.exists() {
        check("service", Level::Ok, format!("unit installed and enabled ({})", unit.display()))
    } else {
        check(
            "service",
            Level::Warn,
            format!("unit {} is installed but not enabled; `cryoctl daemon install`", unit.display()),
        )
    }
}

fn linger_check() -> Check {
    if !cfg!(target_os = "linux") {
        return check("linger", Level::Ok, "not needed on this system");
    }
    // No systemd (a container, another init): no user manager, no logind.
    if !Path::new("/run/systemd/system").exists() {
        return check(
            "linger",
            Level::Ok,
            "no systemd here: keep `cryoctl daemon run` running under what starts your programs \
             (a container's init, nohup, tmux); `cryoctl daemon stop` ends it",
        );
    }
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.name))
        .unwrap_or_default();
    if user.is_empty() {
        return check("linger", Level::Warn, "cannot tell the user name (USER is unset)");
    }
    if Path::new("/var/lib/systemd/linger").join(&user).exists() {
        check("linger", Level::Ok, format!("user services of {user} survive logout"))
    } else {
        check(
            "linger",
            Level::Warn,
            format!("user services stop at logout; `loginctl enable-linger {user}` keeps cryod running"),
        )
    }
}

fn zone_check() -> Check {
    let zoneinfo = ["/usr/share/zoneinfo/UTC", "/usr/share/zoneinfo/Etc/UTC"].iter().any(|p| Path::new(p).exists());
    let zone = std::env::var("TZ").ok().filter(|t| !t.is_empty()).or_else(|| {
        std::fs::read_link("/etc/localtime")
            .ok()
            .and_then(|p| p.to_string_lossy().split("zoneinfo/").nth(1).map(str::to_string))
    });
    let known = |z: &str| z.trim_start_matches(':').parse::<chrono_tz::Tz>().is_ok();
    match (zoneinfo, zone) {
        (_, Some(z)) if !known(&z) => check(
            "time zone",
            Level::Warn,
            format!("{z:?} is not an IANA zone: chambers fall back to UTC; fix TZ or /etc/localtime"),
        ),
        (true, Some(z)) => check("time zone", Level::Ok, format!("{z}; zone data present")),
        (true, None) => check(
            "time zone",
            Level::Warn,
            "the system's zone is not set; chambers default to UTC (set `timezone` in cryo.toml)",
        ),
        (false, _) => check(
            "time zone",
            Level::Warn,
            "no /usr/share/zoneinfo; cryo carries its own zone data, but other tools will see UTC (install tzdata)",
        ),
    }
}

fn clock_check() -> Check {
    // systemd-timesyncd and chrony leave a mark when the clock is synchronized.
    let synced = ["/run/systemd/timesync/synchronized", "/var/lib/chrony/drift"].iter().any(|p| Path::new(p).exists());
    if synced {
        check("clock", Level::Ok, "synchronized")
    } else {
        check(
            "clock",
            Level::Warn,
            "cannot tell whether the clock is synchronized (no timesyncd or chrony seen); wakes follow the wall clock",
        )
    }
}

/// The agent CLIs cryo knows, and the version its end-to-end tests run.
const TESTED: &[(&str, &str)] = &[
    ("claude", "2.1.330"),
    ("codex", "0.169.0"),
    ("opencode", "1.18.33"),
    ("qwen", "0.24.4"),
    ("gemini", "0.61.0"),
    ("pi", "0.73.1"),
];

/// Every known kind found on cryod's `PATH`, with its version (asked of
/// each at once: a JavaScript CLI takes a second to start).
fn kinds_check(path: &str) -> Check {
    let found: Vec<(&str, &str, PathBuf)> = TESTED
        .iter()
        .filter_map(|(name, tested)| {
            let p = path.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(name)).find(|p| p.is_file())?;
            Some((*name, *tested, p))
        })
        .collect();
    let versions: Vec<std::result::Result<String, &str>> = std::thread::scope(|s| {
        let asked: Vec<_> = found.iter().map(|(_, _, p)| s.spawn(move || cli_version(p))).collect();
        asked.into_iter().map(|h| h.join().unwrap_or(Err(FAILED))).collect()
    });
    let mut level = Level::Ok;
    let mut said: Vec<String> = found
        .iter()
        .zip(versions)
        .map(|((name, tested, _), v)| match v {
            Ok(v) if v.contains(tested) => format!("{name} {v}"),
            Ok(v) => format!("{name} {v} (tested with {tested})"),
            Err(why) => {
                level = Level::Warn;
                format!("{name} (its --version {why})")
            }
        })
        .collect();
    let missing: Vec<&str> = TESTED.iter().map(|t| t.0).filter(|n| !found.iter().any(|f| f.0 == *n)).collect();
    if said.is_empty() {
        said.push("none".into());
    }
    let mut detail = format!("on cryod's PATH: {}", said.join(", "));
    if !missing.is_empty() {
        detail.push_str(&format!("; not found: {}", missing.join(", ")));
    }
    check("kinds", level, detail)
}

/// `--version` exited with an error, or could not be run.
const FAILED: &str = "failed";

/// `--version` gave no answer within [`VERSION_DEADLINE`].
const SLOW: &str = "did not answer within 30 s";

/// How long a CLI's `--version` may take: a JavaScript CLI takes 2–3 s to
/// start on an idle machine, and over 10 s on a busy one with a cold cache.
const VERSION_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// The first line `PROGRAM --version` prints (on stdout, or on stderr where
/// Pi prints it), or why there is none ([`FAILED`], [`SLOW`]).
fn cli_version(program: &Path) -> std::result::Result<String, &'static str> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        // Its own group, ended whole: a helper it leaves cannot hold us.
        .process_group(0)
        .spawn()
        .map_err(|_| FAILED)?;
    // Each pipe read aside (a few KiB of it), so that neither fills up
    // and nothing waits past the deadline.
    let (tx, rx) = std::sync::mpsc::channel();
    let pipes = [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        child.stderr.take().map(|p| Box::new(p) as _),
    ];
    for (n, pipe) in pipes.into_iter().enumerate() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(p) = pipe {
                let _ = p.take(4096).read_to_string(&mut text);
            }
            let _ = tx.send((n, text));
        });
    }
    let deadline = std::time::Instant::now() + VERSION_DEADLINE;
    let end = |child: &mut std::process::Child| {
        let _ =
            nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL);
        let _ = child.wait();
    };
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) | Err(_) => return Err(FAILED),
            Ok(None) if std::time::Instant::now() > deadline => {
                end(&mut child);
                return Err(SLOW);
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
    let first = |s: &str| s.lines().next().map(|l| l.trim().to_string()).filter(|l| !l.is_empty());
    let mut said = [String::new(), String::new()];
    for _ in 0..2 {
        match rx.recv_timeout(std::time::Duration::from_secs(1)) {
            Ok((n, text)) => said[n] = text,
            Err(_) => break,
        }
    }
    end(&mut child);
    // Stdout's first line, else stderr's (where Pi prints it).
    first(&said[0]).or_else(|| first(&said[1])).ok_or(FAILED)
}

fn agent_check(c: &pb::Chamber, path: &str) -> Check {
    let program = c.agent.trim_start().strip_prefix("acp:").unwrap_or(&c.agent).split_whitespace().next().unwrap_or("");
    if program.is_empty() {
        return check("agent", Level::Warn, format!("{}: no agent command (faulted: {})", c.name, c.fault));
    }
    let found = if program.contains('/') {
        let p = Path::new(&c.path).join(program);
        p.exists().then_some(p)
    } else {
        path.split(':').map(|d| Path::new(d).join(program)).find(|p| p.is_file())
    };
    match found {
        None => check(
            "agent",
            Level::Fail,
            format!(
                "{}: {program:?} is not on cryod's PATH ({path}): install it there or give its full path in cryo.toml",
                c.name
            ),
        ),
        Some(p) => {
            let mut detail = format!("{}: {program} found at {}", c.name, p.display());
            let mut level = Level::Ok;
            let name = Path::new(program).file_name().and_then(|n| n.to_str()).unwrap_or(program);
            if let Some(tested) = TESTED.iter().find(|t| t.0 == name).map(|t| t.1) {
                match cli_version(&p) {
                    Ok(v) if v.contains(tested) => detail.push_str(&format!(" ({v}, the version cryo is tested with)")),
                    Ok(v) => detail.push_str(&format!(" ({v}; cryo is tested with {tested})")),
                    Err(why) if why == SLOW => {
                        level = Level::Warn;
                        detail.push_str(&format!(" but `--version` {why}: is the machine busy, or the install stuck?"));
                    }
                    Err(why) => {
                        level = Level::Warn;
                        detail.push_str(&format!(" but `--version` {why}: is the install complete?"));
                    }
                }
                let args: Vec<&str> = c.agent.split_whitespace().skip(1).collect();
                if name == "claude"
                    && nix::unistd::geteuid().is_root()
                    && args.contains(&"--dangerously-skip-permissions")
                {
                    detail.push_str(
                        "; as root Claude Code refuses --dangerously-skip-permissions unless IS_SANDBOX=1, which cryod sets \
                         because the agent line asks for it (remove the flag to use cryo's --allowedTools list instead)",
                    );
                }
            }
            check("agent", level, detail)
        }
    }
}

fn disk_check(socket: &Path) -> Check {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".local/state"));
    let probe = if state.exists() { state } else { socket.parent().map(Path::to_path_buf).unwrap_or_default() };
    match nix::sys::statvfs::statvfs(&probe) {
        Ok(s) => {
            let free = s.blocks_available() * s.fragment_size();
            let mb = free / (1024 * 1024);
            if mb < 100 {
                check("disk", Level::Fail, format!("only {mb} MB free under {}: writes will fail", probe.display()))
            } else if mb < 1024 {
                check("disk", Level::Warn, format!("{mb} MB free under {}", probe.display()))
            } else {
                check("disk", Level::Ok, format!("{:.1} GB free under {}", mb as f64 / 1024.0, probe.display()))
            }
        }
        Err(e) => check("disk", Level::Warn, format!("cannot tell free space under {}: {e}", probe.display())),
    }
}
