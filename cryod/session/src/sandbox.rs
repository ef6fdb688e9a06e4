//! Confining an agent to its chamber (`sandbox = "landlock" | "bwrap"` in
//! `cryo.toml`), for its whole process tree.
//!
//! What the agent may reach, in either mode:
//! - read and write: its chamber, the folders in `writable`, a private
//!   temporary folder (`.cryo/tmp`, its `TMPDIR`), and the agent CLI's own
//!   state folder (`~/.claude`, `$CODEX_HOME`, OpenCode's);
//! - read only: the folders in `readable`, the agent program's own install
//!   (and its `#!` interpreter's), cryod's socket, and everything else
//!   outside the hidden roots;
//! - nothing of the hidden roots: the user's home, cryod's state folder
//!   (its database, the hub's tokens) and config folder, every other
//!   chamber, `/tmp` and cryod's own `TMPDIR`.
//!
//! The network stays open and cryod's socket reachable.
//!
//! `landlock`: Linux's unprivileged filesystem sandbox, applied by the
//! launcher (`cryod-launch __confine`, [`super::harden`]) to itself before it
//! becomes the agent. Landlock's ptrace rule keeps the agent out of
//! `/proc/<pid>/environ` and `mem` of any process outside its domain
//! (cryod's among them) once it holds no capability, which the launcher
//! sees to, root included; its signal scope (ABI 6) keeps its signals in.
//! It cannot hold `network = "gateway"` (ports, not addresses: refused).
//!
//! `bwrap`: bubblewrap (Debian's `bubblewrap`) builds a private mount
//! namespace: the system read-only, an empty tmpfs over each hidden root,
//! the allowed folders bound back, a fresh `/dev`, a private `/tmp`, and a
//! process namespace of its own (so `/proc` shows only the session).
//!
//! Either refuses the session (fail closed) if the kernel or the tool cannot
//! provide it: cryod asks before the spawn, the Landlock launcher runs
//! nothing unless the kernel enforced every rule, and bwrap runs nothing if
//! a mount fails.

use super::Error;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};
use serde::{Deserialize, Serialize};

use crate::setup::{Limits, Sandbox};

/// Set to `0` in cryod's environment, says the kernel has no Landlock
/// whatever it has (a test's kernel without the feature).
pub(crate) const PROBE_OVERRIDE: &str = "CRYO_LANDLOCK";

/// The access rights cryo asks for: those of Landlock's fifth version
/// (truncate and device ioctls); an older kernel enforces what it knows.
const ABI_WANTED: ABI = ABI::V5;

/// The devices a confined agent may open (read and write) under Landlock:
/// those programs use. The rest of `/dev` is out of its reach: a disk's
/// device (readable by root) holds every file, the user's terminals
/// (`/dev/pts/N`) what the operator types, `/dev/shm` what every process
/// of the user shares. A `writable` entry adds one (`/dev/dri`, `/dev/shm`).
/// bubblewrap makes a fresh `/dev`, with terminals of its own.
pub(crate) const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"];

/// Whether the kernel enforces Landlock (it makes a ruleset of the first
/// version's rights).
pub(crate) fn kernel_has_landlock() -> bool {
    if std::env::var(PROBE_OVERRIDE).is_ok_and(|v| v == "0") {
        return false;
    }
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|r| r.create())
        .is_ok()
}

/// The kernel's Landlock ABI, as far as cryo can tell (0: none): each
/// version is probed by a ruleset that needs what it added. Asked once.
pub(crate) fn landlock_abi() -> u32 {
    static ABI_FOUND: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ABI_FOUND.get_or_init(|| {
        if !kernel_has_landlock() {
            return 0;
        }
        let hard = || Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
        let fs = |abi| hard().handle_access(AccessFs::from_all(abi)).and_then(|r| r.create()).is_ok();
        if fs(ABI::V9) {
            9
        } else if hard().scope(Scope::Signal).and_then(|r| r.create()).is_ok() {
            6
        } else if fs(ABI::V5) {
            5
        } else if hard().handle_access(AccessNet::from_all(ABI::V4)).and_then(|r| r.create()).is_ok() {
            4
        } else if fs(ABI::V3) {
            3
        } else if fs(ABI::V2) {
            2
        } else {
            1
        }
    })
}

/// What a Landlock sandbox confines at `abi` beyond files, in words.
pub(crate) fn landlock_adds(abi: u32) -> String {
    match abi {
        0 => "none: this kernel has no Landlock".into(),
        6.. => "files; an agent cannot signal processes outside its sandbox (cryod among them) nor reach abstract \
                sockets made outside it (ABI 6 and later)"
            .into(),
        _ => format!(
            "files only at ABI {abi}: an agent can still signal cryod and reach abstract sockets (Linux 6.12, \
             Landlock ABI 6, scopes both)"
        ),
    }
}

/// What the launchers of a session are told (see `tree` and `harden`).
/// The variable that carries the `Plan` to the launchers.
pub const PLAN_VAR: &str = "CRYO_SANDBOX";

/// The variable that carries what the program reads on its standard input
/// (an agent's prompt): the launcher puts it in a memory file that becomes
/// the program's stdin. Never an argument: any process of the machine may
/// read another's in `/proc/PID/cmdline`.
pub(crate) const STDIN_VAR: &str = "CRYO_SANDBOX_STDIN";

/// What a session's launchers are told ([`super::tree`]'s keeper of the
/// tree, then this one).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Plan {
    /// The build of the launchers that made it ([`crate::paths::BUILD`]):
    /// a launcher of another build refuses it.
    #[serde(default)]
    pub build: String,
    /// The program's name for itself.
    pub arg0: String,
    /// Landlock's rules (`sandbox = "landlock"`); `None` under bubblewrap,
    /// whose mounts confine it, or with no sandbox.
    #[serde(default)]
    pub landlock: Option<Policy>,
    /// The session's own cgroup, joined before anything else runs.
    #[serde(default)]
    pub cgroup: Option<PathBuf>,
    /// It runs in bubblewrap's process namespace: nothing outside can be
    /// named, so the kernel itself scopes signals and `ptrace`.
    #[serde(default)]
    pub own_pids: bool,
    /// After a SIGTERM from outside, the keeper of the tree waits this long
    /// for the agent, then ends the whole tree.
    #[serde(default)]
    pub grace_ms: u64,
    /// Make a process namespace (and a mount namespace with its own
    /// `/proc`) for the session (Landlock's). The keeper of the tree makes
    /// them (a normal user in a user namespace of its own); this launcher,
    /// the first process inside, mounts the `/proc` that shows only the
    /// session, and stays as its init.
    #[serde(default)]
    pub pid_namespace: bool,
}

impl Plan {
    /// The plan as its variable's value.
    pub(crate) fn to_env(&self) -> String {
        serde_json::to_string(self).expect("a plan serializes")
    }

    /// The plan this launcher was given.
    pub(crate) fn from_env() -> super::Result<Plan> {
        let raw = std::env::var(PLAN_VAR).map_err(|_| Error::Launcher(format!("no {PLAN_VAR} in the environment")))?;
        let plan: Plan = serde_json::from_str(&raw).map_err(|e| Error::Launcher(format!("a bad {PLAN_VAR}: {e}")))?;
        if plan.build != crate::paths::BUILD {
            let me = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default();
            return Err(Error::Launcher(format!(
                "this launcher ({me}) is from another build than the cryod that started it: install both again \
                 (packaging/install.sh), then restart cryod"
            )));
        }
        Ok(plan)
    }

    /// Whether Landlock scopes this session's signals (ABI 6: none leaves
    /// its domain).
    pub(crate) fn signals_scoped(&self) -> bool {
        self.landlock.is_some() && landlock_abi() >= 6
    }
}

/// What one session may reach.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Policy {
    /// Read and write.
    pub writable: Vec<PathBuf>,
    /// Read only (within the hidden roots; everything else outside them is
    /// readable anyway).
    pub readable: Vec<PathBuf>,
    /// Unreadable, but for what `writable` and `readable` name inside them.
    pub hidden: Vec<PathBuf>,
    /// Reached but not listed: cryod's socket (its folder, bound read-only
    /// by bwrap; Landlock does not govern `connect`).
    pub reachable: Vec<PathBuf>,
    /// The agent's `argv[0]`.
    pub arg0: String,
    /// TCP connections are allowed to these loopback ports only (the
    /// provider gateway's), when set: `network = "gateway"`.
    #[serde(default)]
    pub connect_tcp: Option<Vec<u16>>,
}

/// A folder no sandbox hides whole (the system's own): `/` and the
/// top-level folders of the system.
pub(crate) fn system_folder(p: &Path) -> bool {
    let p = canonical(p);
    p.components().count() <= 2
        && ["/", "/tmp", "/run", "/var", "/usr", "/etc", "/dev", "/proc", "/sys", "/home", "/root"]
            .iter()
            .any(|s| p == Path::new(s))
}

impl Sandbox {
    /// Why a session confined by this mode cannot start here, if it cannot.
    pub fn unavailable(self) -> Option<String> {
        match self {
            Sandbox::Off => None,
            Sandbox::Landlock => (!kernel_has_landlock()).then(|| {
                "sandbox = \"landlock\", but this kernel has no Landlock (Linux 5.13 or later, with landlock among \
                 its LSMs): the session is not started (sandbox = \"off\" runs it unconfined)"
                    .to_string()
            }),
            Sandbox::Bwrap => bwrap().err().map(|why| {
                format!(
                    "sandbox = \"bwrap\", but {why}: the session is not started (sandbox = \"off\" runs it unconfined)"
                )
            }),
        }
    }

    /// The strongest mode this machine provides: `bwrap` (namespaces hide the
    /// other processes too), then `landlock`, then `off`. Asked once per
    /// process: new chambers get it, and `cryoctl doctor` shows it.
    pub fn strongest() -> Sandbox {
        static STRONGEST: std::sync::OnceLock<Sandbox> = std::sync::OnceLock::new();
        *STRONGEST.get_or_init(|| {
            [Sandbox::Bwrap, Sandbox::Landlock].into_iter().find(|m| m.unavailable().is_none()).unwrap_or(Sandbox::Off)
        })
    }
}

/// Set in cryod's environment, names the bubblewrap program instead of
/// `bwrap` on its `PATH` (packaging; tests name a missing one).
pub(crate) const BWRAP_OVERRIDE: &str = "CRYO_BWRAP";

/// bubblewrap's program, once it has made a sandbox on this machine (a
/// success is remembered; a failure is asked again next time, so that
/// installing the package is enough).
pub(crate) fn bwrap() -> super::Result<PathBuf> {
    static WORKS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(p) = WORKS.get() {
        return Ok(p.clone());
    }
    let program = match std::env::var_os(BWRAP_OVERRIDE).filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => crate::paths::on_path("bwrap")
            .ok_or_else(|| Error::Unavailable("bubblewrap is not installed (`apt-get install bubblewrap`)".into()))?,
    };
    let out = std::process::Command::new(&program)
        .args(["--ro-bind", "/", "/", "--unshare-pid", "--unshare-ipc", "--proc", "/proc", "--dev", "/dev"])
        .args(["--tmpfs", "/tmp", "--", "/bin/sh", "-c", "exit 0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::Unavailable(format!("cannot run {}: {e}", program.display())))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.lines().next().unwrap_or("no reason given");
        return Err(Error::Unavailable(format!("{} cannot make a sandbox here ({said})", program.display())));
    }
    Ok(WORKS.get_or_init(|| program).clone())
}

/// The arguments of bubblewrap running `program ARGS` under `policy`. Its
/// `/tmp` is a private tmpfs; `TMPDIR` (the chamber's `.cryo/tmp`) is where
/// files too big for memory go.
pub(crate) fn bwrap_args(policy: &Policy, program: &Path, args: &[String]) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    let mut push = |a: &[&std::ffi::OsStr]| out.extend(a.iter().map(|s| s.to_os_string()));
    push(&["--ro-bind".as_ref(), "/".as_ref(), "/".as_ref()]);
    push(&["--dev".as_ref(), "/dev".as_ref(), "--proc".as_ref(), "/proc".as_ref()]);
    // The kernel's knobs stay read-only: root's uid (even without a
    // capability) may write `/proc/sys/kernel/core_pattern`, a program the
    // kernel would run as root outside every sandbox.
    for knob in ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"] {
        push(&["--ro-bind-try".as_ref(), knob.as_ref(), knob.as_ref()]);
    }
    push(&["--unshare-pid".as_ref(), "--unshare-ipc".as_ref()]);
    // `network = "gateway"`: a network of its own (its loopback only),
    // whose way out is the forwarder to the gateway (`forward`).
    if policy.connect_tcp.is_some() {
        push(&["--unshare-net".as_ref()]);
    }
    // Each mount after those of the folders holding it: an allowed folder
    // inside a hidden root is bound back over its tmpfs; a hidden root
    // inside an allowed folder is covered after the bind.
    let mut mounts: Vec<(PathBuf, &str)> = vec![(PathBuf::from("/tmp"), "--tmpfs")];
    let system = |p: &Path| p == Path::new("/") || p.starts_with("/dev") || p.starts_with("/proc");
    for h in policy.hidden.iter().filter(|h| h.is_absolute()) {
        let h = canonical(h);
        if h.is_dir() && !system(&h) {
            mounts.push((h, "--tmpfs"));
        }
    }
    for (paths, how) in
        [(&policy.reachable, "--ro-bind"), (&policy.readable, "--ro-bind"), (&policy.writable, "--bind")]
    {
        for p in paths.iter().filter(|p| p.is_absolute()) {
            let p = canonical(p);
            if !system(&p) {
                mounts.push((p, how));
            }
        }
    }
    // A folder named twice keeps its widest access (what the user listed
    // beats a hidden root).
    let rank = |how: &str| ["--bind", "--ro-bind", "--tmpfs"].iter().position(|h| *h == how);
    mounts
        .sort_by(|a, b| (a.0.components().count(), &a.0, rank(a.1)).cmp(&(b.0.components().count(), &b.0, rank(b.1))));
    mounts.dedup_by(|later, first| later.0 == first.0);
    for (p, how) in &mounts {
        match *how {
            "--tmpfs" => push(&[how.as_ref(), p.as_os_str()]),
            _ => push(&[how.as_ref(), p.as_os_str(), p.as_os_str()]),
        }
    }
    // A hidden root is empty and read-only (a write fails, as under
    // Landlock, rather than vanish with the session); /tmp stays writable.
    for (p, how) in &mounts {
        if *how == "--tmpfs" && p != Path::new("/tmp") {
            push(&["--remount-ro".as_ref(), p.as_os_str()]);
        }
    }
    push(&["--".as_ref(), program.as_os_str()]);
    out.extend(args.iter().map(OsString::from));
    out
}

/// Restricts this process (and what it runs) to `policy`; fails unless the
/// kernel enforced every rule.
pub(crate) fn restrict(policy: &Policy) -> super::Result<()> {
    if let Some(why) = Sandbox::Landlock.unavailable() {
        return Err(Error::Unavailable(why));
    }
    let abi = ABI_WANTED;
    let fail = |e: &dyn std::fmt::Display| Error::Refused(format!("cannot set up the Landlock sandbox: {e}"));
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    // A relative or empty root would hide everything (every path starts
    // with the empty one): only absolute ones count.
    let mut hidden: Vec<PathBuf> = policy.hidden.iter().filter(|h| h.is_absolute()).map(|h| canonical(h)).collect();
    // Devices only as the policy names them (see DEVICES).
    hidden.push(PathBuf::from("/dev"));
    // Scoped where the kernel can (ABI 6): no signal to a process outside
    // the sandbox (cryod's SIGSTOP), no abstract socket made outside it.
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|e| fail(&e))?
        .scope(Scope::Signal | Scope::AbstractUnixSocket)
        .map_err(|e| fail(&e))?;
    // `network = "gateway"` is never held by Landlock's port rules (see
    // NETWORK_LANDLOCK): such a policy is refused, never run open.
    if policy.connect_tcp.is_some() {
        return Err(Error::Setting(crate::setup::NETWORK_LANDLOCK.into()));
    }
    let mut ruleset = ruleset.create().map_err(|e| fail(&e))?;
    for p in visible(Path::new("/"), &hidden) {
        if let Ok(fd) = PathFd::new(&p) {
            ruleset = ruleset.add_rule(PathBeneath::new(fd, read)).map_err(|e| fail(&e))?;
        }
    }
    for (paths, access) in [(&policy.readable, read), (&policy.writable, all)] {
        for p in paths {
            // Given resolved: a link planted on the way since is refused,
            // never followed to wherever it leads.
            let (fd, kind) = cryo_files::open_resolved(p).map_err(|e| fail(&e))?;
            // A single file (a program bound alone, a device) takes a
            // file's rights.
            let access = if kind == cryo_files::Kind::Folder { access } else { access & AccessFs::from_file(abi) };
            ruleset = ruleset.add_rule(PathBeneath::new(fd, access)).map_err(|e| fail(&e))?;
        }
    }
    let status = ruleset.restrict_self().map_err(|e| fail(&e))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => Ok(()),
        RulesetStatus::NotEnforced => Err(fail(&"the kernel did not enforce the ruleset")),
    }
}

/// Where `p` leads (itself if it does not exist): the Landlock launcher
/// reaches each path of its policy without following a link, so each is
/// given resolved.
pub(crate) fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Everything readable under `dir` but the hidden roots: the entries that
/// hold none, whole; those that hold one, entry by entry. A link is followed
/// and kept only if it leads outside every hidden root.
fn visible(dir: &Path, hidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let p = entry.path();
        let real = canonical(&p);
        if hidden.iter().any(|h| real.starts_with(h)) {
            continue;
        }
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && hidden.iter().any(|h| h.starts_with(&real)) {
            out.extend(visible(&p, hidden));
        } else {
            out.push(real);
        }
    }
    out
}

/// `systemd-run`'s arguments running `program ARGS` in a transient scope
/// with `limits`, described as `what`. The scope runs the agent in its place
/// (the pid stays the agent's).
pub(crate) fn scope_args(limits: &Limits, what: &str, program: &Path, args: &[OsString]) -> Vec<OsString> {
    let mut out: Vec<OsString> = ["--user", "--scope", "--quiet", "--collect"].map(OsString::from).to_vec();
    out.push(format!("--description={what}").into());
    if let Some(m) = &limits.memory_max {
        out.push(format!("--property=MemoryMax={m}").into());
    }
    if let Some(w) = limits.cpu_weight {
        out.push(format!("--property=CPUWeight={w}").into());
    }
    out.push("--".into());
    out.push(program.into());
    out.extend(args.iter().cloned());
    out
}

/// `systemd-run`, when cryod runs as a systemd service (whose manager can
/// make scopes), or why the limits cannot be applied.
pub(crate) fn systemd_run() -> super::Result<PathBuf> {
    let manager = std::env::var_os("XDG_RUNTIME_DIR").map(|d| PathBuf::from(d).join("systemd/private"));
    if std::env::var_os("INVOCATION_ID").is_none_or(|v| v.is_empty()) || !manager.is_some_and(|m| m.exists()) {
        return Err(Error::Unavailable(
            "cryod does not run under a systemd user manager (`cryoctl daemon install` installs it as a user \
             service)"
                .into(),
        ));
    }
    crate::paths::on_path("systemd-run").ok_or_else(|| Error::Unavailable("systemd-run is not on cryod's PATH".into()))
}

/// The folders `program` needs to run, read-only: its install (the
/// `node_modules` holding its resolved file, or that file's folder) and its
/// `#!` interpreter's (`#!/usr/bin/env node` looked up on `path`).
pub(crate) fn program_install(program: &Path, path: &str, hidden: &[PathBuf], writable: &[PathBuf]) -> Vec<PathBuf> {
    // The install's folder, unless it holds a hidden root (a program kept
    // right in `/home`, say): then the file alone.
    let install = |p: &Path| {
        let real = canonical(p);
        let modules = real.ancestors().find(|a| a.file_name().is_some_and(|n| n == "node_modules"));
        let folder = modules.or(real.parent())?;
        let uncovers = hidden.iter().filter(|h| h.is_absolute()).any(|h| canonical(h).starts_with(folder));
        Some(if uncovers { real.clone() } else { folder.to_path_buf() })
    };
    let mut out: Vec<PathBuf> = install(program).into_iter().collect();
    // A program the agent can write (kept in its chamber, or in a
    // `writable` folder) names no interpreter to uncover: its `#!` line is
    // the agent's to write, and would open any folder to it.
    // Nor does a link there uncover where it leads.
    let agents = |p: &Path| writable.iter().any(|w| p.starts_with(w) || p.starts_with(canonical(w)));
    if agents(program) || agents(&canonical(program)) {
        out.retain(|p| agents(p));
        return out;
    }
    // Its first line, read without blocking on whatever stands there.
    let head = {
        use std::os::unix::fs::OpenOptionsExt;
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits() | nix::fcntl::OFlag::O_NOCTTY.bits())
            .open(program);
        opened
            .ok()
            .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))
            .and_then(|f| {
                let mut buf = Vec::with_capacity(256);
                std::io::Read::read_to_end(&mut std::io::Read::take(f, 256), &mut buf).ok().map(|_| buf)
            })
            .unwrap_or_default()
    };
    let line = String::from_utf8_lossy(&head);
    let Some(line) = line.strip_prefix("#!").and_then(|l| l.lines().next()) else { return out };
    // As the kernel reads it: the interpreter up to the first space or
    // tab, the rest one argument.
    let mut words = line.trim_end_matches('\r').split([' ', '\t']).filter(|w| !w.is_empty());
    let Some(first) = words.next() else { return out };
    let interpreter = if first.ends_with("/env") {
        let Some(name) = words.find(|w| !w.starts_with('-')) else { return out };
        crate::paths::find_program(name, Path::new("/"), path)
    } else {
        Some(PathBuf::from(first))
    };
    // An interpreter found on a folder of PATH the agent can write is its
    // own (already in its reach): nothing to uncover.
    out.extend(interpreter.filter(|i| !agents(i) && !agents(&canonical(i))).as_deref().and_then(install));
    out.dedup();
    out
}

/// What of cryod's environment a sandboxed agent keeps (beside `CRYO_*`,
/// `[provider].env` and what the launch sets).
pub(crate) const ENV_KEPT: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "PATH",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "CODEX_HOME",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// Whether cryod's variable `name` reaches a sandboxed agent.
fn env_kept(name: &str) -> bool {
    ENV_KEPT.contains(&name) || name.starts_with("LC_")
}

/// What of cryod's environment a sandboxed run starts from: the allowlist
/// ([`ENV_KEPT`], `LC_*`), and `tmp`, its private folder, as `TMPDIR`.
pub(crate) fn confined_env(tmp: &Path) -> BTreeMap<String, String> {
    let mut kept: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| env_kept(k)).collect();
    kept.insert("TMPDIR".into(), tmp.to_string_lossy().into_owned());
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_visible_set_leaves_out_the_hidden_roots_and_keeps_their_siblings() {
        let dir = tempfile::tempdir().unwrap();
        let root = canonical(dir.path());
        for d in ["home/me/.ssh", "home/other", "srv/chamber", "srv/peer", "usr/lib"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::os::unix::fs::symlink(root.join("home/me"), root.join("srv/link-to-home")).unwrap();
        let hidden = vec![root.join("home/me"), root.join("srv/peer")];
        let mut seen = visible(&root, &hidden);
        seen.sort();
        let want: Vec<PathBuf> = ["home/other", "srv/chamber", "usr"].iter().map(|d| root.join(d)).collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn an_agent_keeps_only_an_allowlist_of_cryods_environment() {
        for kept in ["HOME", "PATH", "LC_ALL", "https_proxy"] {
            assert!(env_kept(kept), "{kept}");
        }
        for dropped in ["AWS_SECRET_ACCESS_KEY", "CRYO_HUB_TOKEN", "DATABASE_URL", "SSH_AUTH_SOCK"] {
            assert!(!env_kept(dropped), "{dropped}");
        }
    }

    #[test]
    fn bwrap_mounts_each_folder_after_those_holding_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = canonical(dir.path());
        for d in ["home/.ssh", "home/chambers/c", "home/chambers/peer", "home/.claude", "srv/project/private", "run"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let at = |d: &str| root.join(d);
        let policy = Policy {
            writable: vec![at("home/chambers/c"), at("srv/project"), at("home/.claude"), PathBuf::from("/dev")],
            readable: vec![at("home/chambers/c")],
            hidden: vec![at("home"), at("home/chambers/peer"), at("srv/project/private"), at("missing"), "rel".into()],
            reachable: vec![at("run")],
            arg0: "agent".into(),
            connect_tcp: None,
        };
        let args: Vec<String> = bwrap_args(&policy, Path::new("/usr/bin/agent"), &["a prompt".into()])
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = args.join(" ");
        let pos = |needle: &str| line.find(needle).unwrap_or_else(|| panic!("{needle:?} in {line}"));
        let r = root.display();
        // The system first, read-only, with its own /dev, /proc and /tmp.
        assert!(line.starts_with("--ro-bind / / --dev /dev --proc /proc --ro-bind-try /proc/sys /proc/sys "), "{line}");
        // The kernel's knobs stay read-only under the fresh /proc.
        for knob in ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"] {
            assert!(line.contains(&format!("--ro-bind-try {knob} {knob} ")), "{knob}: {line}");
        }
        assert!(line.contains(" --unshare-pid --unshare-ipc "), "{line}");
        assert!(line.contains("--tmpfs /tmp"), "{line}");
        // Home hidden, then the chamber and the CLI's state bound back into it
        // (the chamber read-write although also listed readable).
        assert!(pos(&format!("--tmpfs {r}/home ")) < pos(&format!("--bind {r}/home/chambers/c ")), "{line}");
        assert!(pos(&format!("--tmpfs {r}/home ")) < pos(&format!("--bind {r}/home/.claude ")), "{line}");
        assert!(!line.contains(&format!("--ro-bind {r}/home/chambers/c ")), "{line}");
        // The project bound, then its hidden part covered, and each hidden
        // root made read-only once everything is mounted.
        assert!(pos(&format!("--bind {r}/srv/project ")) < pos(&format!("--tmpfs {r}/srv/project/private")), "{line}");
        assert!(pos(&format!("--remount-ro {r}/home ")) > pos(&format!("--bind {r}/home/chambers/c ")), "{line}");
        assert!(!line.contains("--remount-ro /tmp "), "{line}");
        assert!(line.contains(&format!("--ro-bind {r}/run {r}/run")), "{line}");
        // Neither the host's /dev, nor a missing or relative root.
        assert!(!line.contains("--bind /dev") && !line.contains("missing") && !line.contains(" rel"), "{line}");
        assert!(line.ends_with("-- /usr/bin/agent a prompt"), "{line}");
    }

    #[test]
    fn a_programs_install_is_its_node_modules_and_its_interpreters_folder() {
        let dir = tempfile::tempdir().unwrap();
        let root = canonical(dir.path());
        let pkg = root.join("lib/node_modules/@acme/agent");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(root.join("node/bin")).unwrap();
        std::fs::write(pkg.join("cli.js"), "#!/usr/bin/env -S node --no-warnings\n").unwrap();
        std::fs::write(root.join("node/bin/node"), "").unwrap();
        let exec = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(root.join("node/bin/node"), exec).unwrap();
        std::os::unix::fs::symlink(pkg.join("cli.js"), root.join("bin/agent")).unwrap();
        let path = format!("{}:{}", root.join("bin").display(), root.join("node/bin").display());
        assert_eq!(
            program_install(&root.join("bin/agent"), &path, &[], &[]),
            vec![root.join("lib/node_modules"), root.join("node/bin")]
        );
        std::fs::write(root.join("bin/tool"), "#!/bin/sh\n").unwrap();
        let sh = canonical(Path::new("/bin/sh"));
        assert_eq!(
            program_install(&root.join("bin/tool"), &path, &[], &[]),
            vec![root.join("bin"), sh.parent().unwrap().into()]
        );
        // A program kept in a folder that holds a hidden root (a home under
        // it): the file alone, never the folder.
        std::fs::create_dir_all(root.join("bin/me")).unwrap();
        assert_eq!(
            program_install(&root.join("bin/tool"), &path, &[root.join("bin/me")], &[]),
            vec![root.join("bin/tool"), sh.parent().unwrap().into()]
        );
        // A program the agent can write names no interpreter's folder: its
        // `#!` line would open any folder (a home's `.ssh`) to it.
        std::fs::create_dir_all(root.join("chamber")).unwrap();
        std::fs::create_dir_all(root.join("secret")).unwrap();
        std::fs::write(root.join("chamber/run"), format!("#!{}/secret/x\n", root.display())).unwrap();
        assert_eq!(
            program_install(&root.join("chamber/run"), &path, &[], &[root.join("chamber")]),
            vec![root.join("chamber")]
        );
        // Nor does a link there uncover where it leads.
        std::os::unix::fs::symlink(root.join("secret/x"), root.join("chamber/link")).unwrap();
        std::fs::write(root.join("secret/x"), "#!/bin/sh\n").unwrap();
        assert!(program_install(&root.join("chamber/link"), &path, &[], &[root.join("chamber")]).is_empty());
        // The interpreter ends at a tab as at a space, as the kernel reads it.
        std::fs::write(root.join("bin/tabbed"), "#!/bin/sh\t-e\n").unwrap();
        assert_eq!(
            program_install(&root.join("bin/tabbed"), &path, &[], &[]),
            vec![root.join("bin"), sh.parent().unwrap().into()]
        );
    }
}
