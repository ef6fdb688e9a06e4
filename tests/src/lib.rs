//! The end-to-end harness: real `cryod`, `cryoctl` and `cryo-agent` binaries
//! in a private, short-pathed temporary HOME.
//!
//! Each [`Env`] is a world of its own (HOME, XDG folders, socket), so tests
//! run in parallel. Nothing here sleeps for a fixed time: [`wait_until`] polls
//! a condition against a deadline.

pub mod examples;
pub mod fake_github;
pub mod fake_zulip;
pub mod mcp;
pub mod model;
pub mod pg;
pub mod receiver;
pub mod smtp;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long any condition may take before a test fails. Generous: CI machines
/// are shared and slow; a passing test never waits this long.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// The folder holding the workspace's binaries (`target/PROFILE`), found from
/// the running executable. The first call builds the binaries with the cargo
/// that runs the tests (a no-op when they are fresh): `cargo test` alone
/// builds only what the test targets link, not the other packages' binaries.
pub fn bin_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // A test runs from target/PROFILE/deps/, a binary (the bench) from target/PROFILE/.
        let parent = exe.parent().expect("executable folder");
        let dir = if parent.file_name().is_some_and(|n| n == "deps") {
            parent.parent().expect("target/PROFILE").to_path_buf()
        } else {
            parent.to_path_buf()
        };
        build_binaries(&dir);
        for b in ["cryod", "cryod-launch", "cryoctl", "cryo-agent"] {
            assert!(dir.join(b).exists(), "{} is missing after building", dir.join(b).display());
        }
        dir
    })
    .clone()
}

fn build_binaries(dir: &Path) {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    // The build the binaries already came from, so nothing is built again:
    // in a test run, `cargo test --workspace`'s (every target, the same
    // features: its libraries are reused, only the three binaries linked);
    // for the bench, the README's `cargo build --release` (the default
    // members, the three programs). Another selection resolves other
    // features and rebuilds most of the tree, replacing binaries a running
    // test or bench uses.
    cmd.current_dir(workspace).args(["build", "--quiet"]);
    if dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    } else {
        cmd.args(["--workspace", "--all-targets"]);
    }
    if let Some(target) = dir.parent() {
        cmd.arg("--target-dir").arg(target);
    }
    match cmd.status() {
        Ok(s) if s.success() => {}
        // Without cargo (binaries copied elsewhere), use what is there.
        other => eprintln!("note: building the binaries did not succeed ({other:?}); using those in {}", dir.display()),
    }
}

/// Where tests and the bench make their folders: `TMPDIR` when it is short
/// (a socket's path inside must stay under about 100 bytes), else `/tmp`.
pub fn scratch() -> PathBuf {
    let t = std::env::temp_dir();
    if t.as_os_str().len() <= 40 { t } else { PathBuf::from("/tmp") }
}

pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// Polls `cond` until it holds or [`DEADLINE`] passes (then panics with `what`).
pub fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    wait_until_within(DEADLINE, what, cond)
}

/// [`wait_until`] with its own deadline, for what is slow by nature (a real
/// agent CLI starting up).
pub fn wait_until_within(deadline: Duration, what: &str, cond: impl FnMut() -> bool) {
    wait_until_telling(deadline, what, cond, String::new)
}

/// [`wait_until_within`] that adds what `tell` says (logs, traces) to its
/// panic, for a wait whose failure would otherwise say only that it failed.
pub fn wait_until_telling(deadline: Duration, what: &str, mut cond: impl FnMut() -> bool, tell: impl Fn() -> String) {
    let start = Instant::now();
    let mut pause = Duration::from_millis(2);
    while !cond() {
        assert!(start.elapsed() < deadline, "timed out after {deadline:?} waiting for {what}\n{}", tell());
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// An agent script that answers every message with `got: BODY` (and checks
/// in on its first session), keeps answering while mail arrives (hibernate
/// is refused while mail is unread), and keeps a TODO an hour out so it
/// always has a next wake.
pub const ANSWERING_AGENT: &str = r#"
cryo-agent todo list | grep -q later || cryo-agent todo add later --at +1h >/dev/null
i=0
while [ $i -lt 50 ]; do
  i=$((i + 1))
  body=$(cryo-agent receive | grep -v -e '^--- message' -e '^subject:' -e '^(received' -e '^no new messages' -e '^$')
  if [ -n "$body" ]; then cryo-agent send "got: $body" >/dev/null; elif [ $i = 1 ]; then cryo-agent send "checked in" >/dev/null; fi
  cryo-agent hibernate >/dev/null 2>&1 && exit 0
done
exit 1
"#;

/// A private world: HOME, XDG folders and a socket under one temporary folder.
pub struct Env {
    dir: tempfile::TempDir,
    /// The user (uid, gid) every command runs as, when not this process's.
    user: Option<(u32, u32)>,
}

impl Default for Env {
    fn default() -> Self {
        Self::new()
    }
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::Builder::new().prefix("cy").tempdir_in(scratch()).expect("temp dir");
        for d in ["home", "run", "state", "config"] {
            std::fs::create_dir_all(dir.path().join(d)).expect("env folder");
        }
        std::fs::set_permissions(dir.path().join("run"), std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("run folder mode");
        let env = Env { dir, user: None };
        env.daemon_config("");
        env
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn home(&self) -> PathBuf {
        self.root().join("home")
    }

    /// Writes a credentials file `name` in HOME with permissions `mode`.
    pub fn write_secret(&self, name: &str, text: &str, mode: u32) {
        let p = self.home().join(name);
        std::fs::write(&p, text).expect("secret file");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode)).expect("secret mode");
    }

    pub fn socket(&self) -> PathBuf {
        self.root().join("run/cryo/cryod.sock")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.root().join("state/cryo")
    }

    pub fn config_file(&self) -> PathBuf {
        self.root().join("config/cryo/cryod.toml")
    }

    /// A path inside the world.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    /// From now on, runs every command as the user `uid`:`gid` (with
    /// `setpriv`), and gives the world's files to that user. Only root can;
    /// returns why not otherwise, or when that user cannot reach `needs`
    /// (a checkout under a private home, say).
    pub fn run_as(&mut self, uid: u32, gid: u32, needs: &[&Path]) -> Result<(), String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("only root can run a test as another user".into());
        }
        for p in needs.iter().copied().chain([bin_dir().join("cryod").as_path()]) {
            let ok = Command::new("setpriv")
                .args([format!("--reuid={uid}"), format!("--regid={gid}"), "--clear-groups".into()])
                .args(["test", "-x"])
                .arg(p)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                return Err(format!("user {uid} cannot reach {} (or setpriv is missing)", p.display()));
            }
        }
        self.user = Some((uid, gid));
        self.give_to_user();
        Ok(())
    }

    /// Gives every file of the world to the user set by [`Env::run_as`]
    /// (after the test wrote some as itself).
    pub fn give_to_user(&self) {
        let Some((uid, gid)) = self.user else { return };
        let status = Command::new("chown").arg("-R").arg(format!("{uid}:{gid}")).arg(self.root()).status();
        assert!(status.is_ok_and(|s| s.success()), "chown of {} failed", self.root().display());
    }

    /// A command with a clean environment pointing into this world.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = match self.user {
            None => Command::new(program),
            Some((uid, gid)) => {
                let mut c = Command::new("setpriv");
                c.args([format!("--reuid={uid}"), format!("--regid={gid}"), "--clear-groups".into(), "--".into()]);
                c.arg(program);
                c
            }
        };
        c.env_clear()
            .env("HOME", self.home())
            .env("XDG_RUNTIME_DIR", self.root().join("run"))
            .env("XDG_STATE_HOME", self.root().join("state"))
            .env("XDG_CONFIG_HOME", self.root().join("config"))
            .env("TMPDIR", self.root())
            .env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir().display()))
            .env("TZ", "UTC")
            .env("RUST_LOG", "cryod=debug,cryo_session=debug,cryo_sync=debug")
            .env("RUST_BACKTRACE", "1")
            .current_dir(self.root())
            .stdin(Stdio::null());
        // The allocator's tunables pass through, for measuring their effect
        // (`GLIBC_TUNABLES=glibc.malloc.arena_max=1 cryo-bench scale ...`).
        if let Some(t) = std::env::var_os("GLIBC_TUNABLES") {
            c.env("GLIBC_TUNABLES", t);
        }
        c
    }

    /// Runs `cryoctl ARGS` in `cwd` (the world's root if `None`).
    pub fn cryoctl_in(&self, cwd: Option<&Path>, args: &[&str]) -> Run {
        let mut c = self.command(bin("cryoctl"));
        c.args(args);
        if let Some(d) = cwd {
            c.current_dir(d);
        }
        Run::of(&format!("cryoctl {}", args.join(" ")), c.output().expect("running cryoctl"))
    }

    pub fn cryoctl(&self, args: &[&str]) -> Run {
        self.cryoctl_in(None, args)
    }

    /// Starts `cryod` and waits until it answers on its socket.
    pub fn start_daemon(&self) -> Daemon {
        let d = self.spawn_daemon(&[]);
        d.wait_ready(self);
        d
    }

    /// Spawns `cryod ARGS` without waiting; its stderr goes to `cryod.log`.
    pub fn spawn_daemon(&self, args: &[&str]) -> Daemon {
        self.spawn_daemon_with(args, &[])
    }

    /// [`Env::spawn_daemon`] with extra environment.
    pub fn spawn_daemon_with(&self, args: &[&str], vars: &[(&str, &str)]) -> Daemon {
        self.spawn_program(&bin("cryod"), args, vars)
    }

    /// [`Env::start_daemon`] of the cryod binary at `program` (a copy).
    pub fn start_daemon_from(&self, program: &Path) -> Daemon {
        let d = self.spawn_program(program, &[], &[]);
        d.wait_ready(self);
        d
    }

    fn spawn_program(&self, program: &Path, args: &[&str], vars: &[(&str, &str)]) -> Daemon {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.path("cryod.log")).expect("daemon log");
        let child = self
            .command(program)
            .args(args)
            .envs(vars.iter().copied())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("spawning cryod");
        Daemon { child: Some(child), log: self.path("cryod.log") }
    }

    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.path("cryod.log")).unwrap_or_default()
    }

    /// Whether this world's cryod gives each session a cgroup of its own
    /// (root, or a service with `Delegate=yes`), as its log says at start.
    pub fn cryod_makes_cgroups(&self) -> bool {
        self.daemon_log().contains("tree=its own cgroup")
    }
}

/// A running cryod; killed on drop.
pub struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon running").id()
    }

    /// Waits until the socket accepts a connection (or the daemon exits).
    pub fn wait_ready(&self, env: &Env) {
        let socket = env.socket();
        wait_until("cryod to accept connections", || std::os::unix::net::UnixStream::connect(&socket).is_ok());
    }

    /// Sends `signal` and waits for the process to exit; returns its status.
    pub fn signal_and_wait(&mut self, signal: nix::sys::signal::Signal) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("daemon running");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).expect("signal cryod");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait cryod") {
                return status;
            }
            assert!(start.elapsed() < DEADLINE, "cryod did not exit after {signal:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for a daemon that should exit by itself.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("daemon running");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait cryod") {
                return status;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "cryod did not exit; log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The outcome of a command, with helpers that explain failures.
#[derive(Debug)]
pub struct Run {
    pub what: String,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn of(what: &str, o: Output) -> Run {
        Run {
            what: what.to_string(),
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Asserts success; returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, Some(0), "{} failed:\nstdout: {}\nstderr: {}", self.what, self.stdout, self.stderr);
        &self.stdout
    }

    /// Asserts failure with `code` and a one-line error; returns that line.
    #[track_caller]
    pub fn fails(&self, code: i32) -> &str {
        assert_eq!(
            self.code,
            Some(code),
            "{}: expected exit {code}:\nstdout: {}\nstderr: {}",
            self.what,
            self.stdout,
            self.stderr
        );
        let line = self.stderr.trim_end();
        assert_eq!(line.lines().count(), 1, "{}: expected one error line, got:\n{line}", self.what);
        line
    }

    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| panic!("{}: not JSON ({e}):\n{}", self.what, self.stdout))
    }
}

/// A chamber in an [`Env`] whose agent is a shell script (`sh agent.sh`).
pub struct Chamber {
    pub name: String,
    pub dir: PathBuf,
}

impl Env {
    /// Scaffolds a chamber `name` whose agent runs `script` with `sh`, adds
    /// `toml_extra` to its cryo.toml, and registers it (not started).
    /// `name` may be a path under the world's root (`a/b/c`); the chamber is
    /// registered under its last part.
    pub fn chamber(&self, name: &str, script: &str, toml_extra: &str) -> Chamber {
        let dir = self.path(name);
        let name = name.rsplit('/').next().unwrap_or(name);
        // Unconfined unless `toml_extra` says (the sandbox tests do): new
        // chambers get the strongest sandbox, which hides the test's world.
        self.cryoctl(&["chamber", "init", dir.to_str().unwrap(), "--agent", "sh agent.sh", "--sandbox", "off"]).ok();
        std::fs::write(dir.join("agent.sh"), script).expect("agent script");
        if !toml_extra.is_empty() {
            let toml = dir.join("cryo.toml");
            let text = std::fs::read_to_string(&toml).expect("cryo.toml");
            // The template has no active table, so keys appended at the end
            // are top-level; a key given here replaces the template's.
            let keys: Vec<&str> = toml_extra
                .lines()
                .take_while(|l| !l.trim_start().starts_with('['))
                .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
                .collect();
            let kept: Vec<&str> = text
                .lines()
                .filter(|l| !keys.iter().any(|k| l.split_once('=').is_some_and(|(lk, _)| lk.trim() == *k)))
                .collect();
            std::fs::write(&toml, format!("{}\n{toml_extra}\n", kept.join("\n"))).expect("cryo.toml");
        }
        self.cryoctl(&["chamber", "add", dir.to_str().unwrap(), "--name", name]).ok();
        Chamber { name: name.to_string(), dir }
    }

    /// Writes `cryod.toml`. Unless `text` configures the hub, the hub listens
    /// on a free loopback port (tests run many daemons at once).
    pub fn daemon_config(&self, text: &str) {
        std::fs::create_dir_all(self.config_file().parent().unwrap()).unwrap();
        let text =
            if text.contains("[hub]") { text.to_string() } else { format!("{text}\n[hub]\nbind = \"127.0.0.1:0\"\n") };
        std::fs::write(self.config_file(), text).unwrap();
    }
}

impl Chamber {
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.dir.join(rel)).unwrap_or_default()
    }

    pub fn cryo_log(&self) -> String {
        self.read("cryo.log")
    }

    /// Sessions that have ended (closed blocks in cryo.log).
    pub fn ended(&self) -> usize {
        self.cryo_log().matches("--- CRYO END ---").count()
    }

    /// Sessions that have begun.
    pub fn begun(&self) -> usize {
        self.cryo_log().matches("--- CRYO SESSION ").count()
    }

    /// Waits until `n` sessions have ended.
    pub fn wait_ended(&self, n: usize) {
        wait_until(&format!("{}: {n} sessions to end; cryo.log:\n{}", self.name, self.cryo_log()), || {
            self.ended() >= n
        });
    }

    /// Messages in a folder (`messages/outbox` etc.): (file name, text), in order.
    pub fn messages(&self, folder: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = std::fs::read_dir(self.dir.join(folder))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| n.ends_with(".md") && !n.starts_with('.'))
                    .map(|n| {
                        let text = std::fs::read_to_string(self.dir.join(folder).join(&n)).unwrap_or_default();
                        (n, text)
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    pub fn outbox(&self) -> Vec<String> {
        self.messages("messages/outbox").into_iter().map(|(_, t)| t).collect()
    }

    /// Outbox messages written by cryod itself.
    pub fn fallbacks(&self) -> Vec<String> {
        self.outbox().into_iter().filter(|t| t.contains("from: cryochamber\n")).collect()
    }

    /// Writes an inbox message the way a writer should: a dot file, renamed.
    pub fn write_inbox(&self, n: usize, body: &str) -> String {
        let inbox = self.dir.join("messages/inbox");
        let name = format!("2026-01-01T00-00-{n:02}.000Z_test_{n:04}.md");
        let tmp = inbox.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, format!("---\nfrom: tester\nsubject: test {n}\n---\n\n{body}\n")).unwrap();
        std::fs::rename(&tmp, inbox.join(&name)).unwrap();
        name
    }

    /// Writes a `cryo.log` with one finished session, so starting the chamber
    /// runs no bootstrap session: only what a test arranges wakes it.
    pub fn seed_history(&self) {
        std::fs::write(self.dir.join("cryo.log"), "--- CRYO SESSION 1 | earlier ---\n--- CRYO END ---\n").unwrap();
    }

    /// Writes `todo.json` as a person would (in place).
    pub fn write_todos(&self, json: &str) {
        std::fs::write(self.dir.join("todo.json"), json).unwrap();
    }

    pub fn todos(&self) -> serde_json::Value {
        serde_json::from_str(&self.read("todo.json")).unwrap_or(serde_json::Value::Array(vec![]))
    }

    /// Makes every pending TODO due now, by editing todo.json as a person would.
    pub fn make_due_now(&self) {
        let mut todos = self.todos();
        for t in todos.as_array_mut().unwrap() {
            if !t["done"].as_bool().unwrap_or(false) {
                t["at"] = "2000-01-01T00:00:00Z".into();
            }
        }
        let tmp = self.dir.join(".todo.json.edit");
        std::fs::write(&tmp, serde_json::to_string_pretty(&todos).unwrap()).unwrap();
        std::fs::rename(tmp, self.dir.join("todo.json")).unwrap();
    }
}

/// A long-running `cryoctl` (a follow stream) whose output lines are
/// collected as they come.
pub struct Follow {
    child: Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Env {
    pub fn follow(&self, args: &[&str]) -> Follow {
        let mut c = self.command(bin("cryoctl"));
        c.args(args).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = c.spawn().expect("spawning cryoctl");
        let out = child.stdout.take().expect("stdout");
        let lines: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let sink = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                sink.lock().unwrap().push(l);
            }
        });
        Follow { child, lines }
    }
}

impl Follow {
    pub fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits until the output contains `s`.
    pub fn wait_for(&self, s: &str) {
        wait_until(&format!("follow output to contain {s:?}; have:\n{}", self.text()), || self.text().contains(s));
    }

    /// Waits for the process to end by itself; returns its exit code.
    pub fn wait_end(&mut self) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                return s.code();
            }
            assert!(start.elapsed() < DEADLINE, "the follow stream did not end");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Ctrl-C, as a person would; returns the exit code.
    pub fn interrupt(&mut self) -> Option<i32> {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
        self.wait_end()
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A UTC time `offset` from now (`date -d` syntax: "-10 minutes", "+30 seconds"),
/// as RFC 3339 to the second.
pub fn date_utc(offset: &str) -> String {
    let out = Command::new("date").args(["-u", "-d", offset, "+%Y-%m-%dT%H:%M:%SZ"]).output().expect("date");
    String::from_utf8(out.stdout).expect("date prints ASCII").trim().to_string()
}
