//! A session's whole process tree, and its end: every process a session
//! started, daemonised or not (`setsid`, a double fork, `nohup`), is gone
//! when the session ends, is stopped, or its chamber is removed.
//!
//! Two holds, the first where the machine gives one:
//! - **a cgroup of its own** (cgroup v2, under cryod's own cgroup where
//!   cryod may make one: root, or a systemd service with `Delegate=yes`).
//!   The launcher starts its child in it (or joins it first where the
//!   kernel cannot fork into a cgroup); cryod ends the session by
//!   writing `cgroup.kill`, which no process inside can escape, and a
//!   restarted cryod ends what a killed one left. [`Trees`] keeps them.
//! - **the keeper of the tree** (`cryod-launch __sandbox -- …`, this module's
//!   [`intercept`]): the session's first process, outside its
//!   confinement, a child subreaper (`PR_SET_CHILD_SUBREAPER`), so that
//!   whatever its agent leaves behind becomes its child. When the agent
//!   ends it kills every process left; on a SIGTERM from outside (cryod's
//!   stop, a timeout) it waits the grace it was given, then does the same.
//!   A signal from inside the session (`kill 0`) does not stop it; the
//!   filter ([`super::harden`]) refuses the session SIGKILL and SIGSTOP to
//!   it, and Landlock's signal scope (ABI 6) every signal.
//!
//! Under bubblewrap, its process namespace ends the tree with its first
//! process; the keeper only joins the cgroup there (`--exec`).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::sandbox::Plan;
use crate::paths::{cannot_run, program_after_dashes};
use crate::{Error, Result};

/// `cryod-launch __sandbox [--exec] -- PROGRAM ARGS` (or cryod's own binary: `LAUNCHER`).
pub(crate) const ARG: &str = "__sandbox";

/// Before `--`: join the cgroup and become the program (bubblewrap).
pub(crate) const EXEC: &str = "--exec";

/// The longest a keeper waits for its tree to go after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// The chain's last step, run in the keeper's child rather than exec'd
/// when the child would only exec this same binary for it (see
/// [`spawn_in`]): its argument (`__confine`), and what runs it with the
/// arguments after that. The crate's root hands in `harden`'s.
#[derive(Clone, Copy)]
pub(crate) struct LastStep {
    pub arg: &'static str,
    pub run: fn(Vec<OsString>) -> !,
}

/// `cryod-launch __sandbox …`: keeps a session's tree, and exits as its agent
/// did; returns only if this process is not the keeper.
pub(crate) fn intercept(last: LastStep) {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|a| a != ARG) {
        return;
    }
    match keep(args.collect(), last) {
        Ok(end) => end.exit(),
        Err(why) => {
            eprintln!("cryo sandbox: {why}");
            std::process::exit(126)
        }
    }
}

/// How the agent ended.
pub(crate) enum End {
    Code(i32),
    Signal(Signal),
}

impl End {
    /// Ends this process as the agent ended.
    pub(crate) fn exit(self) -> ! {
        match self {
            End::Code(c) => std::process::exit(c),
            End::Signal(s) => {
                let mut set = SigSet::empty();
                set.add(s);
                let _ = set.thread_unblock();
                let _ = nix::sys::signal::raise(s);
                std::process::exit(128 + s as i32)
            }
        }
    }
}

fn keep(args: Vec<OsString>, last: LastStep) -> Result<End> {
    use std::os::unix::process::CommandExt;
    let mut args = args.into_iter().peekable();
    let exec = args.next_if(|a| a == EXEC).is_some();
    let program = program_after_dashes(&mut args)?;
    let plan = Plan::from_env()?;
    let mut command = std::process::Command::new(&program);
    command.args(args);
    if exec {
        if let Some(cgroup) = &plan.cgroup {
            join(cgroup)?;
        }
        return Err(cannot_run(&program, command.exec()));
    }
    if plan.pid_namespace
        && let Err(why) = own_namespaces()
    {
        eprintln!("cryo sandbox: no process namespace of its own ({why}): other processes stay in sight");
    }
    supervise(command, Duration::from_millis(plan.grace_ms), false, plan.cgroup.as_deref(), Some(last))
}

/// Makes this process's children the first processes of a new process
/// namespace (each makes a mount namespace of its own). Root may; a normal user
/// first makes a user namespace of its own (mapped to itself alone) and
/// hands `CAP_SYS_ADMIN` and `CAP_SETPCAP` in it to the child, which
/// mounts its `/proc` and clears its bounding set with them (then drops
/// them, and every other, before the program runs).
fn own_namespaces() -> Result<()> {
    use caps::{CapSet, Capability};
    use nix::sched::{CloneFlags, unshare};
    if !nix::unistd::geteuid().is_root() {
        let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
        unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| Error::Refused(format!("no user namespace: {e}")))?;
        std::fs::write("/proc/self/setgroups", "deny")
            .and_then(|()| std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")))
            .and_then(|()| std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")))
            .map_err(|e| Error::Refused(format!("cannot map the user namespace: {e}")))?;
        // The init mounts its `/proc` (CAP_SYS_ADMIN) and clears its
        // bounding set (CAP_SETPCAP), then drops both.
        for cap in [Capability::CAP_SYS_ADMIN, Capability::CAP_SETPCAP] {
            caps::raise(None, CapSet::Inheritable, cap)
                .and_then(|()| caps::raise(None, CapSet::Ambient, cap))
                .map_err(|e| Error::Refused(format!("cannot hand on {cap}: {e}")))?;
        }
    }
    // The mount namespace is the child's own to make (`harden`): this
    // keeper stays in the machine's, where its `/proc` shows the host's
    // pids it must end.
    unshare(CloneFlags::CLONE_NEWPID).map_err(|e| Error::Refused(e.to_string()))
}

/// Runs `command` as this process's child and keeps its tree: whatever it
/// leaves behind becomes this process's child (a subreaper, or a process
/// namespace's `init`), is reaped as it ends, and is killed once the child
/// has ended; a SIGTERM (SIGINT, SIGHUP, SIGQUIT) from outside the tree is
/// passed on to the child, which has `grace` before the whole tree is
/// killed. One from inside the tree changes nothing. With `cgroup`, the
/// child starts in it ([`spawn_in`]). Returns how the child ended.
pub(crate) fn supervise(
    command: std::process::Command,
    grace: Duration,
    init: bool,
    cgroup: Option<&Path>,
    last: Option<LastStep>,
) -> Result<End> {
    let refused = |what: &str, e: nix::Error| Error::Refused(format!("{what}: {e}"));
    if !init {
        nix::sys::prctl::set_child_subreaper(true).map_err(|e| refused("cannot become the tree's subreaper", e))?;
    }
    // Neither ptrace nor `/proc/PID/mem` of this process for anything the
    // session runs as the same user.
    nix::sys::prctl::set_dumpable(false).map_err(|e| refused("cannot make the keeper undumpable", e))?;
    let mut handled = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGQUIT, Signal::SIGCHLD] {
        handled.add(s);
    }
    if init {
        // A namespace's init is sent only the signals it handles: a
        // handler each (never run: they wait, blocked, to be read).
        for s in handled.iter() {
            let _ = signal_hook_registry_handler(s);
        }
    }
    // Every signal waits for this process to read it; the child starts
    // with none blocked (std resets the mask before its exec).
    SigSet::all().thread_block().map_err(|e| refused("cannot block signals", e))?;
    let flags = nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK;
    let signals =
        nix::sys::signalfd::SignalFd::with_flags(&handled, flags).map_err(|e| refused("cannot read signals", e))?;
    let agent = spawn_in(command, cgroup, last)?;
    let mut deadline: Option<Instant> = None;
    let end = loop {
        if let Some(end) = reap(agent) {
            break end;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            // The agent had its grace: everything goes, the agent too.
            break kill_children(agent).unwrap_or(End::Signal(Signal::SIGKILL));
        }
        let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let timeout = match wait {
            Some(w) => nix::poll::PollTimeout::try_from(w).unwrap_or(nix::poll::PollTimeout::MAX),
            None => nix::poll::PollTimeout::NONE,
        };
        {
            use std::os::fd::AsFd;
            let mut fds = [nix::poll::PollFd::new(signals.as_fd(), nix::poll::PollFlags::POLLIN)];
            let _ = nix::poll::poll(&mut fds, timeout);
        }
        while let Ok(Some(info)) = signals.read_signal() {
            let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else { continue };
            if sig == Signal::SIGCHLD || descends_from_me(info.ssi_pid as i32) {
                continue;
            }
            // From outside (cryod's stop, a keeper, a timeout): the agent's
            // group is told (it leads one of its own: `harden` made it a
            // session), and has its grace.
            let _ = nix::sys::signal::killpg(agent, sig);
            deadline.get_or_insert_with(|| Instant::now() + grace);
        }
    };
    kill_children(agent);
    Ok(end)
}

/// Gives `signal` a handler (tokio's, through signal-hook's registry): a
/// namespace's init is never sent a signal left to its default action.
fn signal_hook_registry_handler(signal: Signal) -> std::io::Result<()> {
    static RUNTIME: std::sync::OnceLock<Option<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    let rt = RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_io().build().ok());
    let Some(rt) = rt else { return Err(std::io::Error::other("no runtime")) };
    let _guard = rt.enter();
    // The stream is dropped; the handler stays for the process's life.
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(signal as i32)).map(drop)
}

/// Reaps every child that ended; how the agent ended, once it has.
fn reap(agent: Pid) -> Option<End> {
    let mut end = None;
    loop {
        match nix::sys::wait::waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == agent => end = Some(End::Code(code)),
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == agent => end = Some(End::Signal(sig)),
            Ok(WaitStatus::StillAlive) | Err(_) => return end,
            Ok(_) => {}
        }
    }
}

/// Kills every child of this process and reaps it, until none is left:
/// the grandchildren of a killed one become this subreaper's children in
/// turn. A child is unreaped while it is signalled, so its pid cannot have
/// gone to another process. How `agent` ended, if it was among them.
fn kill_children(agent: Pid) -> Option<End> {
    let me = std::process::id() as i32;
    let until = Instant::now() + KILL_WAIT;
    let mut end = None;
    // No child left means no process of the tree left: an orphan becomes
    // this subreaper's child the moment its parent dies.
    while Instant::now() < until {
        for c in children_of(me) {
            let _ = nix::sys::signal::kill(Pid::from_raw(c), Signal::SIGKILL);
        }
        match nix::sys::wait::waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Err(_) => break,
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(1)),
            Ok(WaitStatus::Exited(pid, code)) if pid == agent => end = Some(End::Code(code)),
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == agent => end = Some(End::Signal(sig)),
            Ok(_) => {}
        }
    }
    end
}

/// The children of `pid`, from `/proc` (`/proc/PID/task/*/children`).
pub(crate) fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for t in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    out
}

/// Whether `pid` is a process of this keeper's tree (its parents lead here).
fn descends_from_me(pid: i32) -> bool {
    let me = std::process::id() as i32;
    let mut p = pid;
    for _ in 0..256 {
        if p == me {
            return true;
        }
        let Some(parent) = parent_of(p) else { return false };
        if parent <= 1 {
            return false;
        }
        p = parent;
    }
    false
}

fn parent_of(pid: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()
}

/// Starts `command` as this process's child, inside `cgroup` from its
/// first instruction when one is given.
///
/// The child is forked straight into the cgroup (clone3's
/// `CLONE_INTO_CGROUP`, Linux 5.7) rather than this process moving there
/// first: a move (a write of `cgroup.procs`) waits for an RCU grace period
/// when moves are rare, 15 ms measured here, and so did every session a
/// message woke. This keeper then stays outside the cgroup, as it stays
/// outside the confinement: `cgroup.kill` ends its child's whole tree, and
/// it exits as its child did. Where clone3 is refused (an older kernel, a
/// container's filter), it joins the cgroup and forks as before.
fn spawn_in(mut command: std::process::Command, cgroup: Option<&Path>, last: Option<LastStep>) -> Result<Pid> {
    use std::os::unix::process::CommandExt;
    let spawn = |mut command: std::process::Command| {
        let child =
            command.spawn().map_err(|e| Error::Spawn(format!("cannot run {:?}: {e}", command.get_program())))?;
        Ok(Pid::from_raw(child.id() as i32))
    };
    let Some(cgroup) = cgroup else { return spawn(command) };
    match fork_into(cgroup) {
        Ok(Some(pid)) => Ok(pid),
        Ok(None) => {
            // The child. The last step, when the command is only this
            // binary's own, runs here: one start of the binary fewer a
            // session (about 1 ms of CPU). It unblocks the signals itself.
            if let Some(last) = last
                && let Some(rest) = in_place(&command, last.arg)
            {
                (last.run)(rest);
            }
            // The program starts with no signal blocked (`exec` resets the
            // mask, as `spawn` does).
            let e = command.exec();
            eprintln!("cryo sandbox: {}", cannot_run(command.get_program(), e));
            std::process::exit(127)
        }
        Err(e) => {
            // Said in the session's log: each start here waits for the move.
            eprintln!("cryo sandbox: cannot fork into the session's cgroup ({e}): joining it instead");
            join(cgroup)?;
            spawn(command)
        }
    }
}

/// The arguments after `arg` when `command` runs this very binary with
/// `arg` first, in this process's environment and folder: what the child
/// may run in place of the exec. Only the program, its arguments, its
/// environment's changes and its folder are looked at: `keep` sets nothing
/// else on it (an `arg0`, `env_clear`, a `pre_exec`, another user would be
/// lost in place, so a command given any must not come here). In place,
/// a namespace's init keeps the keeper's signalfd (close-on-exec; it reads
/// only the init's own signals) and its memory, which nothing in the
/// session may read: the init is undumpable and the filter refuses ptrace.
fn in_place(command: &std::process::Command, arg: &str) -> Option<Vec<OsString>> {
    use std::os::unix::fs::MetadataExt;
    let mut args = command.get_args();
    if args.next()? != arg || command.get_envs().next().is_some() || command.get_current_dir().is_some() {
        return None;
    }
    let program = Path::new(command.get_program()).metadata().ok()?;
    let me = std::env::current_exe().ok()?.metadata().ok()?;
    (program.dev() == me.dev() && program.ino() == me.ino()).then(|| args.map(OsString::from).collect())
}

/// Forks this process into `cgroup`: the child's pid in the parent, `None`
/// in the child.
#[allow(unsafe_code)]
fn fork_into(cgroup: &Path) -> std::io::Result<Option<Pid>> {
    use nix::libc;
    use std::os::fd::AsRawFd;
    /// `struct clone_args` as of Linux 5.7 (`CLONE_ARGS_SIZE_VER2`).
    #[repr(C)]
    #[derive(Default)]
    struct CloneArgs {
        flags: u64,
        pidfd: u64,
        child_tid: u64,
        parent_tid: u64,
        exit_signal: u64,
        stack: u64,
        stack_size: u64,
        tls: u64,
        set_tid: u64,
        set_tid_size: u64,
        cgroup: u64,
    }
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
    let dir = std::fs::File::open(cgroup)?;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: dir.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: a plain fork (no shared memory, no stack of ours, no thread
    // flags): the child is a copy of this process, which runs no other
    // thread here (the keeper starts none before its child), so it may run
    // any code until it execs. The arguments outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_clone3, &args as *const CloneArgs, std::mem::size_of::<CloneArgs>()) };
    match r {
        -1 => Err(std::io::Error::last_os_error()),
        0 => Ok(None),
        pid => Ok(Some(Pid::from_raw(pid as i32))),
    }
}

/// Moves this process into `cgroup` (its children follow).
fn join(cgroup: &Path) -> Result<()> {
    std::fs::write(cgroup.join("cgroup.procs"), "0")
        .map_err(|e| Error::Refused(format!("cannot join the session's cgroup {}: {e}", cgroup.display())))
}

// ---------------------------------------------------------------------------
// cryod's side: the sessions' cgroups.

/// Where cryod makes its sessions' cgroups, or why it cannot.
#[derive(Debug, Clone)]
pub struct Cgroups(Result<PathBuf>);

impl Cgroups {
    /// Finds cryod's own cgroup (v2) and makes a folder for its sessions
    /// under it, named after cryod's state folder (several cryods may share
    /// a cgroup: tests, users of one container).
    pub fn find(state_dir: &Path) -> Cgroups {
        Cgroups(Self::base(state_dir))
    }

    /// None: sessions' trees are kept by their keepers alone.
    pub fn none(why: &str) -> Cgroups {
        Cgroups(Err(Error::Unavailable(why.to_string())))
    }

    fn base(state_dir: &Path) -> Result<PathBuf> {
        let no = |why: String| Error::Unavailable(why);
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| no(format!("no /proc/self/cgroup: {e}")))?;
        let own = own.lines().find_map(|l| l.strip_prefix("0::")).ok_or_else(|| no("no cgroup v2 hierarchy".into()))?;
        let own = own.trim().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| no(format!("no mountinfo: {e}")))?;
        let mount = mounts
            .lines()
            .find_map(|l| {
                let (left, right) = l.split_once(" - ")?;
                (right.split(' ').next()? == "cgroup2").then(|| left.split(' ').nth(4).map(PathBuf::from))?
            })
            .ok_or_else(|| no("cgroup v2 is not mounted".into()))?;
        let mut hash: u32 = 2166136261;
        for b in state_dir.as_os_str().as_encoded_bytes() {
            hash = (hash ^ u32::from(*b)).wrapping_mul(16777619);
        }
        let base = mount.join(own.trim_start_matches('/')).join(format!("cryo-{hash:08x}"));
        match std::fs::create_dir(&base) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                let under = base.parent().unwrap_or(&base).display();
                return Err(no(format!("cannot make a cgroup under {under}: {e}")));
            }
        }
        if !base.join("cgroup.procs").exists() {
            return Err(no(format!("{} is not a cgroup", base.display())));
        }
        Ok(base)
    }

    /// The folder sessions' cgroups go in, if any.
    pub fn base_dir(&self) -> Option<&Path> {
        self.0.as_ref().ok().map(PathBuf::as_path)
    }

    /// How a session's tree ends here, in words.
    pub fn describe(&self) -> String {
        match &self.0 {
            Ok(_) => "its own cgroup".into(),
            Err(why) => format!("its keeper (a subreaper; no cgroup: {why})"),
        }
    }

    /// A new cgroup named `name` (unique among running sessions), if cryod
    /// can make one.
    pub fn make(&self, name: &str) -> Option<Tree> {
        let path = self.base_dir()?.join(name);
        match std::fs::create_dir(&path) {
            Ok(()) => Some(Tree { path }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Some(Tree { path }),
            Err(e) => {
                tracing::warn!(cgroup = %path.display(), error = %e, "cannot make the session's cgroup");
                None
            }
        }
    }

    /// Ends every tree a killed cryod left (at start-up: none of them is
    /// running any more as cryod's).
    pub fn end_all(&self) -> usize {
        let Some(base) = self.base_dir() else { return 0 };
        let Ok(entries) = std::fs::read_dir(base) else { return 0 };
        let mut n = 0;
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                Tree { path: e.path() }.end();
                n += 1;
            }
        }
        n
    }

    /// Ends what is left and removes the sessions' folder (cryod stops).
    pub fn close(&self) {
        self.end_all();
        if let Some(base) = self.base_dir() {
            let _ = std::fs::remove_dir(base);
        }
    }
}

/// One session's (or pre-check's) cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    path: PathBuf,
}

impl Tree {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Kills every process in it, waits until none is left (briefly), and
    /// removes it. Blocking: a few milliseconds.
    pub fn end(&self) {
        kill_cgroup(&self.path);
        let until = Instant::now() + KILL_WAIT;
        while populated(&self.path) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Err(e) = std::fs::remove_dir(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(cgroup = %self.path.display(), error = %e, "cannot remove a session's cgroup");
        }
    }
}

/// SIGKILL to every process in `cgroup`: `cgroup.kill` (Linux 5.14), else
/// each listed process until none is.
pub(crate) fn kill_cgroup(cgroup: &Path) {
    if std::fs::write(cgroup.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    for _ in 0..100 {
        let procs = std::fs::read_to_string(cgroup.join("cgroup.procs")).unwrap_or_default();
        let pids: Vec<i32> = procs.split_whitespace().filter_map(|p| p.parse().ok()).collect();
        if pids.is_empty() {
            return;
        }
        for p in pids {
            let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
}

fn populated(cgroup: &Path) -> bool {
    std::fs::read_to_string(cgroup.join("cgroup.events"))
        .map(|e| e.lines().any(|l| l == "populated 1"))
        .unwrap_or(false)
}

/// The running sessions' cgroups, by chamber and process group (a group's
/// number may be another chamber's soon after its session ends): ended
/// with the session's leftovers.
#[derive(Debug, Default)]
pub struct Trees(Mutex<HashMap<(i64, i32), Tree>>);

impl Trees {
    pub fn add(&self, chamber: i64, pgid: i32, tree: Tree) {
        self.0.lock().expect("trees lock").insert((chamber, pgid), tree);
    }

    /// Ends the tree of `chamber`'s session whose group is `pgid`, if it
    /// has one (off the caller's thread).
    pub fn end(&self, chamber: i64, pgid: i32) {
        let tree = self.0.lock().expect("trees lock").remove(&(chamber, pgid));
        if let Some(tree) = tree {
            end_apart(tree);
        }
    }

    /// Ends every session tree of `chamber` (its supervisor is gone and
    /// cannot say which): their process groups.
    pub fn end_chamber(&self, chamber: i64) -> Vec<i32> {
        let mut trees = self.0.lock().expect("trees lock");
        let keys: Vec<(i64, i32)> = trees.keys().filter(|(c, _)| *c == chamber).copied().collect();
        for key in &keys {
            if let Some(tree) = trees.remove(key) {
                end_apart(tree);
            }
        }
        keys.into_iter().map(|(_, pgid)| pgid).collect()
    }
}

/// Ends `tree` off the caller's thread (it waits for the cgroup to empty).
fn end_apart(tree: Tree) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn_blocking(move || tree.end());
        }
        Err(_) => tree.end(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_of_its_own_tree_is_told_from_one_outside() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        // This test is "the keeper": its child descends from it, its
        // parent does not.
        assert!(descends_from_me(child.id() as i32));
        assert!(!descends_from_me(nix::unistd::getppid().as_raw()));
        assert!(!descends_from_me(1));
        assert!(children_of(std::process::id() as i32).contains(&(child.id() as i32)));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
