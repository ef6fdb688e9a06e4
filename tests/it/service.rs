//! Issue 8: what cryod tells a service manager (sd_notify).

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use cryo_tests::Env;
use nix::sys::signal::Signal;

/// Reads notify datagrams until one contains `want` (or the deadline).
fn wait_for(sock: &UnixDatagram, want: &str, seen: &mut Vec<String>) -> String {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        assert!(start.elapsed() < Duration::from_secs(20), "no {want:?} in {seen:?}");
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            seen.push(msg.clone());
            if msg.contains(want) {
                return msg;
            }
        }
    }
}

#[test]
fn cryod_reports_ready_status_watchdog_and_stopping() {
    let env = Env::new();
    let path = env.path("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut d = env.spawn_daemon_with(&[], &[("NOTIFY_SOCKET", path.to_str().unwrap()), ("WATCHDOG_USEC", "300000")]);
    let mut seen = Vec::new();
    let ready = wait_for(&sock, "READY=1", &mut seen);
    assert!(ready.contains("STATUS=0 chamber(s), 0 session(s) running, no wake planned"), "{ready}");
    // Ready means serving.
    env.cryoctl(&["chamber", "list"]).ok();
    wait_for(&sock, "WATCHDOG=1", &mut seen);
    let c = env.chamber(
        "c",
        "cryo-agent send hi >/dev/null\ncryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n",
        "",
    );
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let status = wait_for(&sock, "STATUS=1 chamber(s), 0 session(s) running, next wake", &mut seen);
    assert!(status.starts_with("STATUS="), "{status}");
    d.signal_and_wait(Signal::SIGTERM);
    wait_for(&sock, "STOPPING=1", &mut seen);
}

#[test]
fn without_notify_socket_cryod_runs_normally() {
    let env = Env::new();
    let _d = env.start_daemon();
    env.cryoctl(&["chamber", "list"]).ok();
}

/// A throwaway `systemd --user` manager in a private runtime folder, torn
/// down on drop (see `../shared/notes/toolchain.md`).
struct UserManager {
    child: std::process::Child,
    run: std::path::PathBuf,
}

impl UserManager {
    fn start(env: &Env) -> Option<UserManager> {
        if !nix::unistd::geteuid().is_root() || !std::path::Path::new("/lib/systemd/systemd").exists() {
            return None;
        }
        let run = env.path("sdrun");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        // systemd --user starts only if it believes systemd is PID 1; the
        // marker folder exists just while it starts.
        let marker = std::path::Path::new("/run/systemd/system");
        let made = !marker.exists() && std::fs::create_dir_all(marker).is_ok();
        let child = std::process::Command::new("setsid")
            .arg("/lib/systemd/systemd")
            .arg("--user")
            .env_clear()
            .env("HOME", env.home())
            .env("XDG_RUNTIME_DIR", &run)
            .env("XDG_CONFIG_HOME", env.root().join("config"))
            .env("XDG_STATE_HOME", env.root().join("state"))
            .env("PATH", "/usr/bin:/bin")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let mut m = UserManager { child, run };
        let up = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(25));
            m.systemctl(&["is-system-running"]).trim() == "running"
        });
        if made {
            let _ = std::fs::remove_dir(marker);
        }
        if up {
            Some(m)
        } else {
            let _ = m.child.kill();
            None
        }
    }

    fn systemctl(&self, args: &[&str]) -> String {
        std::process::Command::new("systemctl")
            .arg("--user")
            .args(args)
            .env("XDG_RUNTIME_DIR", &self.run)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    fn show(&self, prop: &str) -> String {
        self.systemctl(&["show", "-p", prop, "--value", "cryod.service"]).trim().to_string()
    }
}

impl Drop for UserManager {
    fn drop(&mut self) {
        let _ = self.systemctl(&["exit"]);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn install_under_a_real_systemd_user_manager() {
    let env = Env::new();
    let Some(sd) = UserManager::start(&env) else {
        eprintln!(
            "SKIPPED install_under_a_real_systemd_user_manager: needs root and /lib/systemd/systemd to start a throwaway user manager"
        );
        return;
    };
    let cryoctl = |args: &[&str]| {
        let mut c = env.command(cryo_tests::bin("cryoctl"));
        c.args(args)
            .env("XDG_RUNTIME_DIR", &sd.run)
            .env("DBUS_SESSION_BUS_ADDRESS", format!("unix:path={}", sd.run.join("bus").display()));
        let out = c.output().unwrap();
        assert!(out.status.success(), "cryoctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = cryoctl(&["daemon", "install"]);
    assert!(out.contains("installed, enabled and started"), "{out}");
    // Beside the service: man pages and completions where each looks.
    let extras = [
        env.home().join(".local/share/man/man1/cryoctl.1"),
        env.home().join(".local/share/man/man1/cryoctl-chamber-add.1"),
        env.home().join(".local/share/bash-completion/completions/cryoctl"),
        env.home().join(".local/share/zsh/site-functions/_cryoctl"),
        env.root().join("config/fish/completions/cryoctl.fish"),
    ];
    for f in &extras {
        assert!(f.is_file(), "{} was not written: {out}", f.display());
    }
    let unit = env.root().join("config/systemd/user/cryod.service");
    assert!(std::fs::read_to_string(&unit).unwrap().contains("Type=notify"));
    cryo_tests::wait_until("the unit to be active", || sd.show("ActiveState") == "active");
    // Active means cryod said READY=1, after loading: it serves.
    cryoctl(&["chamber", "add", env.path("c1").to_str().unwrap(), "--init"]);
    cryo_tests::wait_until("the status text", || sd.show("StatusText").starts_with("1 chamber(s)"));
    let status: serde_json::Value = serde_json::from_str(&cryoctl(&["daemon", "status", "--json"])).unwrap();
    assert_eq!(status["enabled"], "enabled");
    assert_eq!(status["active"], "active");
    assert!(status["status"].as_str().unwrap().starts_with("1 chamber(s), 0 session(s) running"), "{status}");
    let pid: i32 = sd.show("MainPID").parse().unwrap();
    assert_eq!(status["main_pid"], pid);
    // Installing again changes nothing.
    assert!(cryoctl(&["daemon", "install"]).contains("nothing changed"));
    session_limits_apply_through_a_scope(&env, &sd, &cryoctl);
    // SIGKILL: systemd restarts cryod, and the chambers come back.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    cryo_tests::wait_until("a restarted cryod", || {
        sd.show("ActiveState") == "active" && sd.show("MainPID").parse::<i32>().is_ok_and(|p| p != pid && p != 0)
    });
    assert_eq!(sd.show("NRestarts"), "1");
    cryo_tests::wait_until("the chambers back", || {
        let mut c = env.command(cryo_tests::bin("cryoctl"));
        c.args(["chamber", "list", "--json"]).env("XDG_RUNTIME_DIR", &sd.run);
        c.output().map(|o| String::from_utf8_lossy(&o.stdout).contains("\"c1\"")).unwrap_or(false)
    });
    // Uninstall removes the unit; the chamber's files stay.
    assert!(cryoctl(&["daemon", "uninstall"]).contains("removed"));
    assert!(!unit.exists());
    assert!(extras.iter().all(|f| !f.exists()), "uninstall left man pages or completions");
    assert_eq!(sd.show("LoadState"), "not-found");
    assert!(env.path("c1/plan.md").exists());
}

/// Under systemd, a chamber's `memory_max` and `cpu_weight` put its agent in
/// a transient scope with those limits (seen while the agent waits).
fn session_limits_apply_through_a_scope(env: &Env, sd: &UserManager, cryoctl: &dyn Fn(&[&str]) -> String) {
    let dir = env.path("limited");
    cryoctl(&["chamber", "add", dir.to_str().unwrap(), "--init", "--agent", "sh agent.sh", "--sandbox", "off"]);
    let toml = std::fs::read_to_string(dir.join("cryo.toml")).unwrap();
    std::fs::write(dir.join("cryo.toml"), format!("{toml}\nmemory_max = \"64M\"\ncpu_weight = 50\n")).unwrap();
    // Limits are the operator's to accept.
    cryoctl(&["chamber", "trust", "limited"]);
    let agent = "cat /proc/self/cgroup > cgroup.txt\n\
                 i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n\
                 cryo-agent hibernate --complete\n";
    std::fs::write(dir.join("agent.sh"), agent).unwrap();
    cryoctl(&["chamber", "start", "limited"]);
    let cgroup = || std::fs::read_to_string(dir.join("cgroup.txt")).unwrap_or_default();
    cryo_tests::wait_until("the agent's cgroup", || cgroup().contains(".scope"));
    let cgroup = cgroup();
    let scope = cgroup
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .find(|unit| unit.ends_with(".scope"))
        .unwrap_or_else(|| panic!("no scope in {cgroup}"))
        .to_string();
    let shown = sd.systemctl(&["show", &scope, "-p", "MemoryMax", "-p", "CPUWeight", "-p", "Description"]);
    assert!(shown.contains("MemoryMax=67108864"), "{scope}: {shown}");
    assert!(shown.contains("CPUWeight=50"), "{scope}: {shown}");
    assert!(shown.contains("Description=cryo limited session 1"), "{scope}: {shown}");
    std::fs::write(dir.join("go"), "").unwrap();
    let log = || std::fs::read_to_string(dir.join("cryo.log")).unwrap_or_default();
    cryo_tests::wait_until("the session's end", || log().contains("hibernate --complete accepted"));
    assert!(!log().contains("not applied"), "{}", log());
}

mod fake_logind {
    //! A stand-in for `org.freedesktop.login1.Manager`: it hands out
    //! inhibitor locks (one end of a pipe; the lock is held while the other
    //! end is open) and emits `PrepareForSleep` when told.

    use std::os::fd::OwnedFd;
    use std::sync::{Arc, Mutex};

    #[derive(Default, Clone)]
    pub struct Locks(pub Arc<Mutex<Vec<OwnedFd>>>);

    pub struct Manager {
        pub locks: Locks,
    }

    #[zbus::interface(name = "org.freedesktop.login1.Manager")]
    impl Manager {
        fn inhibit(&self, what: &str, _who: &str, _why: &str, mode: &str) -> zbus::fdo::Result<zbus::OwnedFd> {
            assert_eq!((what, mode), ("sleep", "delay"));
            let (read, write) = nix::unistd::pipe().map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
            // We keep the read end: it sees EOF when cryod closes its end.
            self.locks.0.lock().unwrap().push(read);
            Ok(zbus::OwnedFd::from(write))
        }

        #[zbus(signal)]
        pub async fn prepare_for_sleep(
            emitter: &zbus::object_server::SignalEmitter<'_>,
            start: bool,
        ) -> zbus::Result<()>;
    }
}

/// Whether the newest inhibitor lock handed out is still held by cryod.
fn lock_held(locks: &fake_logind::Locks) -> Option<bool> {
    use std::os::fd::AsFd;
    let guard = locks.0.lock().unwrap();
    let fd = guard.last()?;
    let mut poll = [nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN)];
    let ready = nix::poll::poll(&mut poll, nix::poll::PollTimeout::ZERO).unwrap_or(0);
    // Readable means EOF (nothing is ever written): the lock was released.
    Some(ready == 0)
}

#[test]
fn sleep_and_resume_through_a_fake_logind() {
    if std::process::Command::new("dbus-daemon").arg("--version").output().is_err() {
        eprintln!("SKIPPED sleep_and_resume_through_a_fake_logind: dbus-daemon is not installed");
        return;
    }
    let env = Env::new();
    let bus = std::process::Command::new("dbus-daemon")
        .args(["--session", "--fork", "--print-address=1", "--print-pid=1"])
        .output()
        .unwrap();
    let text = String::from_utf8(bus.stdout).unwrap();
    let mut lines = text.lines();
    let address = lines.next().unwrap().to_string();
    let bus_pid: i32 = lines.next().unwrap().trim().parse().unwrap();
    struct KillBus(i32);
    impl Drop for KillBus {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), Signal::SIGTERM);
        }
    }
    let _bus = KillBus(bus_pid);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let locks = fake_logind::Locks::default();
    let conn = rt.block_on(async {
        zbus::connection::Builder::address(address.as_str())
            .name("org.freedesktop.login1")
            .serve_at("/org/freedesktop/login1", fake_logind::Manager { locks: locks.clone() })
            .build()
            .await
            .unwrap()
    });
    let emit = |start: bool| {
        rt.block_on(async {
            let iface =
                conn.object_server().interface::<_, fake_logind::Manager>("/org/freedesktop/login1").await.unwrap();
            fake_logind::Manager::prepare_for_sleep(iface.signal_emitter(), start).await.unwrap();
        })
    };
    let _d = {
        let d = env.spawn_daemon_with(&[], &[("DBUS_SYSTEM_BUS_ADDRESS", &address)]);
        d.wait_ready(&env);
        d
    };
    // An agent that works until told to stop.
    let c = env.chamber(
        "c",
        "cryo-agent send working >/dev/null\nwhile [ ! -e done ]; do sleep 0.05; done\ncryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n",
        "",
    );
    cryo_tests::wait_until("cryod to follow logind", || {
        env.daemon_log().contains("following sleep and resume through logind")
    });
    assert!(locks.0.lock().unwrap().is_empty(), "no lock while no session runs");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    cryo_tests::wait_until("the inhibitor lock while the session runs", || lock_held(&locks) == Some(true));
    emit(true);
    cryo_tests::wait_until("the session log to record the sleep", || {
        c.cryo_log().contains("the machine is going to sleep")
    });
    cryo_tests::wait_until("the lock to be released for sleep", || lock_held(&locks) == Some(false));
    emit(false);
    cryo_tests::wait_until("the resume", || c.cryo_log().contains("the machine woke up"));
    // cryod's own log is written off its workers: it may follow a moment later.
    cryo_tests::wait_until("cryod's log of the resume", || {
        env.daemon_log().contains("the machine woke up: re-planning every chamber")
    });
    cryo_tests::wait_until("the lock to be taken again", || lock_held(&locks) == Some(true));
    std::fs::write(c.dir.join("done"), "").unwrap();
    c.wait_ended(1);
    cryo_tests::wait_until("the lock to be released after the session", || lock_held(&locks) == Some(false));
    drop(conn);
}

#[test]
fn without_a_system_bus_cryod_says_so_once() {
    let env = Env::new();
    let _d = env.spawn_daemon_with(&[], &[("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/bus")]);
    _d.wait_ready(&env);
    cryo_tests::wait_until("the notice", || {
        env.daemon_log().contains("sleep and resume are seen from the wall clock only")
    });
    assert_eq!(env.daemon_log().matches("wall clock only").count(), 1);
    env.cryoctl(&["chamber", "list"]).ok();
}

#[test]
fn install_without_a_user_manager_says_what_to_do() {
    let env = Env::new();
    let mut c = env.command(cryo_tests::bin("cryoctl"));
    c.args(["daemon", "install"]).env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus");
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no systemd user manager is reachable") && err.contains("cryoctl daemon run"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Without a service manager: `cryoctl daemon stop` ends a cryod started by
/// hand, its running session's work re-queued, and returns once it has gone;
/// asked again, it says there is nothing to stop.
#[test]
fn daemon_stop_ends_a_cryod_started_by_hand() {
    let env = Env::new();
    let mut d = env.start_daemon();
    let pid = d.pid();
    let c = env.chamber("c", "touch up\nsleep 60\n", "");
    env.cryoctl(&["chamber", "start", "c", "--no-wait"]).ok();
    cryo_tests::wait_until("the session to run", || c.dir.join("up").exists());
    let out = env.cryoctl(&["daemon", "stop"]).ok().to_string();
    assert!(out.contains(&format!("stopped cryod (pid {pid}, by SIGTERM)")), "{out}");
    let status = d.wait_exit();
    assert!(status.success(), "cryod ended cleanly: {status:?}");
    assert!(c.cryo_log().contains("session ended: interrupted: the daemon stopped"), "{}", c.cryo_log());
    let again = env.cryoctl(&["daemon", "stop"]).ok().to_string();
    assert!(again.contains("nothing to stop"), "{again}");
    // `daemon status` says so in one line, not twice.
    let st = env.cryoctl(&["daemon", "status"]);
    let text = format!("{}{}", st.stdout, st.stderr);
    assert_eq!(text.matches("cryod is not running").count(), 1, "{text}");
}

/// `cryoctl daemon run --detach`: cryod in the background with its log in
/// the state folder, not the terminal; a second start is refused while it
/// runs; `daemon stop` ends it.
#[test]
fn daemon_run_detach_starts_cryod_in_the_background() {
    struct Kill(i32);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), Signal::SIGKILL);
        }
    }
    let env = Env::new();
    env.daemon_config("");
    // A log grown past 8 MiB by earlier runs is moved aside at the start.
    std::fs::create_dir_all(env.state_dir()).unwrap();
    let old = vec![b'x'; 9 * 1024 * 1024];
    std::fs::write(env.state_dir().join("cryod.log"), &old).unwrap();
    let r = env.cryoctl(&["daemon", "run", "--detach"]);
    let out = r.ok().to_string();
    assert!(out.starts_with("cryod started (pid "), "{out}");
    let pid: i32 = out["cryod started (pid ".len()..].split(')').next().unwrap().parse().unwrap();
    let _guard = Kill(pid);
    let log = env.state_dir().join("cryod.log");
    assert!(out.contains(&log.display().to_string()), "{out}");
    assert!(r.stderr.is_empty(), "nothing of cryod's on the terminal: {}", r.stderr);
    cryo_tests::wait_until("cryod's log", || std::fs::read_to_string(&log).is_ok_and(|l| !l.is_empty()));
    assert_eq!(std::fs::read(env.state_dir().join("cryod.log.1")).unwrap(), old, "the long log, moved aside");
    assert!(std::fs::metadata(&log).unwrap().len() < 1024 * 1024, "a new log");
    env.cryoctl(&["chamber", "list"]).ok();
    let again = env.cryoctl(&["daemon", "run", "--detach"]).fails(1).to_string();
    assert!(again.contains(&format!("cryod is already running (pid {pid})")), "{again}");
    let stopped = env.cryoctl(&["daemon", "stop"]).ok().to_string();
    assert!(stopped.contains(&format!("stopped cryod (pid {pid}, by SIGTERM)")), "{stopped}");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(stat.is_empty() || stat.contains(") Z "), "cryod is gone: {stat}");
}

/// Without systemd: `cryoctl completions install` (or `man install`) writes
/// the man pages and the three shells' completions where each looks.
#[test]
fn completions_and_man_pages_install_without_a_service() {
    let env = Env::new();
    let out = env.cryoctl(&["completions", "install"]).ok().to_string();
    assert!(out.starts_with("wrote man pages in "), "{out}");
    let data = env.home().join(".local/share");
    assert!(data.join("man/man1/cryoctl.1").is_file(), "{out}");
    assert!(data.join("man/man1/cryoctl-chamber.1").is_file(), "{out}");
    assert!(data.join("bash-completion/completions/cryoctl").is_file(), "{out}");
    assert!(data.join("zsh/site-functions/_cryoctl").is_file(), "{out}");
    assert!(env.root().join("config/fish/completions/cryoctl.fish").is_file(), "{out}");
    assert!(env.cryoctl(&["man", "install"]).ok().starts_with("wrote man pages in "));
}
