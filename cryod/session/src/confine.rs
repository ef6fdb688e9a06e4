//! What confines whatever runs for a chamber (a session's agent, a
//! pre-check, a jailed git command): its sandbox (Landlock or bubblewrap,
//! with the folders it may write and read, and those hidden), its network
//! when held to the gateway (bubblewrap's own network and
//! `forward`), its systemd scope's limits, and always the
//! launchers: the keeper of its tree ([`super::tree`], in its own cgroup
//! where cryod can make one) and the last step that takes every capability
//! and installs the seccomp filter ([`super::harden`]).
//!
//! The chain, outermost first (`[…]` where it applies):
//! - off, landlock: `[systemd-run] cryod-launch __sandbox -- cryod-launch __confine -- PROGRAM`
//! - bwrap: `[systemd-run] [cryod-launch __sandbox --exec] bwrap … -- [cryod __forward …] cryod-launch __confine -- PROGRAM`
//!
//! `cryod-launch` is the small binary installed beside cryod
//! ([`crate::LAUNCHER`]); cryod's own binary runs the launchers where it
//! is not there. Where the keeper forks its child into the session's
//! cgroup, the child runs `__confine` in place rather than exec the same
//! binary again (`tree::LastStep`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::Error;
use super::harden::{self, Plan};
use super::kinds;
use super::sandbox;
use crate::precheck::Prepared;
use crate::setup::{Network, Sandbox, Setup};
use cryo_files::Dir;

/// Where cryod's own things are: what a confined session must not reach,
/// and what it must.
#[derive(Debug, Clone)]
pub struct Places {
    /// cryod's state folder (its database, the hub's tokens).
    pub state_dir: PathBuf,
    /// cryod's config folder.
    pub config_dir: PathBuf,
    /// The operator's socket.
    pub socket: PathBuf,
    /// The folder holding `cryo-agent`, put first on the agent's `PATH`.
    pub agent_bin: Option<PathBuf>,
    /// Where each run gets a cgroup of its own, if cryod can make one.
    pub cgroups: super::tree::Cgroups,
    /// How long a stopped session's agent has between SIGTERM and SIGKILL
    /// (`stop_grace_seconds`).
    pub grace: std::time::Duration,
}

/// What confines whatever runs for a chamber (its agent, its pre-checks).
pub struct Jail<'a> {
    pub chamber: &'a str,
    pub root: &'a Path,
    /// What its chamber's `cryo.toml` says.
    pub setup: Setup,
    /// The sandbox it runs under.
    pub mode: Sandbox,
    /// Every other chamber's folder (hidden from a confined process).
    pub others: Vec<PathBuf>,
    /// The provider gateway's port, once it listens (`network = "gateway"`).
    pub gateway_port: Option<u16>,
    /// Its Unix socket, the way out of a bubblewrap session's network.
    pub gateway_socket: Option<PathBuf>,
    pub places: &'a Places,
}

/// A command made to run confined: the program cryod starts (the keeper
/// of the tree, bubblewrap or `systemd-run`), its arguments, the private
/// TMPDIR of a sandboxed one, what its launchers are told, and its cgroup.
pub(crate) struct Confined {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub tmp: Option<PathBuf>,
    /// What the launchers are told, to add to the command's environment
    /// (the plan, and the program's standard input).
    pub env: Vec<(String, String)>,
    /// Its own cgroup, if cryod made one: end it with the run.
    pub tree: Option<super::tree::Tree>,
}

/// What runs for a chamber: a session's agent or a pre-check.
pub struct Run<'a> {
    /// Its name for itself (`claude`, `sh`).
    pub arg0: &'a str,
    /// The file it names, found on `path`.
    pub program: PathBuf,
    pub args: &'a [String],
    pub path: &'a str,
    /// The session's door, reachable inside (a pre-check has none).
    pub door: Option<&'a Path>,
    /// What it is, for its systemd scope's description.
    pub what: &'a str,
    /// Folders it may also read (cryod's copy of a `[git]` chamber's
    /// repository, which its worktree fetches from).
    pub readable: &'a [PathBuf],
    /// What it reads on its standard input (an agent's prompt).
    pub stdin: Option<&'a str>,
}

/// Whether the chamber's sandbox works here and holds its `network`: a
/// session that cannot be held as its chamber says does not start.
fn can_hold(jail: &Jail<'_>) -> super::Result<()> {
    // Asking may run bubblewrap once: off the worker (an unconfined
    // process asks nothing, and keeps its worker).
    let unavailable = match jail.mode {
        Sandbox::Off => None,
        confined => tokio::task::block_in_place(|| confined.unavailable()),
    };
    if let Some(why) = unavailable {
        return Err(Error::Unavailable(why));
    }
    if jail.setup.network == Network::Gateway {
        match jail.mode {
            Sandbox::Off => {
                return Err(Error::Setting(
                    "cryo.toml: network = \"gateway\" needs a sandbox: say sandbox = \"bwrap\"".into(),
                ));
            }
            Sandbox::Landlock => return Err(Error::Setting(crate::setup::NETWORK_LANDLOCK.into())),
            Sandbox::Bwrap if jail.gateway_port.is_none() || jail.gateway_socket.is_none() => {
                return Err(Error::Unavailable(
                    "cryo's provider gateway is not listening on its port and its Unix socket (see cryod's log)".into(),
                ));
            }
            Sandbox::Bwrap => {}
        }
    }
    Ok(())
}

impl Jail<'_> {
    /// `run` made ready as a short command (a pre-check, a jailed git
    /// command), wrapped as the chamber's agent is (its sandbox, limits
    /// and launchers), with its whole environment: cryod's own when
    /// unconfined, else the allowlist and a private TMPDIR; then `env`
    /// (also what the sandbox lets it read); then what its launchers are
    /// told. What could not be applied (limits outside systemd) the
    /// agent's own start tells.
    pub fn prepare(&self, env: BTreeMap<String, String>, run: Run<'_>) -> super::Result<Prepared> {
        let mut notes = Vec::new();
        let confined = confine(self, &env, run, &mut notes)?;
        let mut all: BTreeMap<String, String> = match &confined.tmp {
            // Unconfined: cryod's own environment, as for its agent.
            None => std::env::vars().collect(),
            Some(tmp) => sandbox::confined_env(tmp),
        };
        all.extend(env);
        all.extend(confined.env);
        Ok(Prepared { program: confined.program, args: confined.args, env: all })
    }
}

/// Wraps `run` for the chamber's sandbox and limits; what could not be
/// applied (limits outside systemd) goes into `notes`.
pub(crate) fn confine(
    jail: &Jail<'_>,
    provider_env: &BTreeMap<String, String>,
    run: Run<'_>,
    notes: &mut Vec<String>,
) -> super::Result<Confined> {
    let config = &jail.setup;
    can_hold(jail)?;
    let own_exe = sandbox::canonical(&crate::paths::own_exe()?);
    // The small binary that runs the keeper of the tree and the last step
    // (cryod's own where it is not installed).
    let launcher = sandbox::canonical(&crate::paths::launcher()?);
    let ours = [own_exe.clone(), launcher.clone()];
    // Limits through a systemd scope put the run in the scope's cgroup,
    // which a cgroup of cryod's own would take it out of.
    let scope = match (config.limits.is_empty(), sandbox::systemd_run()) {
        (true, _) => None,
        (false, Ok(systemd_run)) => Some(systemd_run),
        (false, Err(why)) => {
            notes.push(format!("memory_max and cpu_weight are not applied: {why}"));
            None
        }
    };
    // A session's tree gets a cgroup of its own; a pre-check's or a git
    // command's, short and ended by its keeper, does not. A session's
    // agent has most of cryod's grace; a short command little.
    let session = run.door.is_some();
    let tree = if scope.is_some() || !session { None } else { jail.places.cgroups.make(&tree_name(jail.chamber)) };
    let grace = if session { jail.places.grace.mul_f64(0.7) } else { SHORT_GRACE };
    let mut plan = Plan {
        build: crate::paths::BUILD.to_string(),
        arg0: run.arg0.to_string(),
        landlock: None,
        cgroup: tree.as_ref().map(|t| t.path().to_path_buf()),
        own_pids: jail.mode == Sandbox::Bwrap,
        grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
        // Landlock alone shares the machine's processes, whose
        // `/proc/PID/cmdline` anyone reads: the session gets a process
        // namespace (and a `/proc`) of its own where the machine allows it.
        pid_namespace: jail.mode == Sandbox::Landlock,
    };
    let confine_args = |program: &Path, args: &[String]| -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![harden::ARG.into(), "--".into(), program.into()];
        out.extend(args.iter().map(OsString::from));
        out
    };
    let keeper = |exec: bool, rest: Vec<OsString>| -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![super::tree::ARG.into()];
        if exec {
            out.push(super::tree::EXEC.into());
        }
        out.push("--".into());
        out.extend(rest);
        out
    };
    let mut tmp = None;
    let (program, args): (PathBuf, Vec<OsString>) = match jail.mode {
        // The keeper of the tree, then the last step, then the program
        // (under Landlock's rules, which the last step applies).
        Sandbox::Off | Sandbox::Landlock => {
            if jail.mode == Sandbox::Landlock {
                let (policy, dir) = policy(jail, provider_env, &run, &ours)?;
                tmp = Some(dir);
                plan.landlock = Some(policy);
            }
            let mut rest: Vec<OsString> = vec![launcher.clone().into()];
            rest.extend(confine_args(&run.program, run.args));
            (launcher.clone(), keeper(false, rest))
        }
        Sandbox::Bwrap => {
            let (policy, dir) = policy(jail, provider_env, &run, &ours)?;
            tmp = Some(dir);
            // The resolved file: a link to it may lie in a hidden root.
            let real = std::fs::canonicalize(&run.program).unwrap_or(run.program);
            let inner: Vec<String> =
                confine_args(&real, run.args).iter().map(|a| a.to_string_lossy().into_owned()).collect();
            let bwrap = sandbox::bwrap()?;
            let bwrap_args = match netted(jail) {
                // Its own network, whose way out is the forwarder.
                Some((port, socket)) => {
                    let args = super::forward::args(port, &socket, &launcher, &inner);
                    sandbox::bwrap_args(&policy, &own_exe, &args)
                }
                None => sandbox::bwrap_args(&policy, &launcher, &inner),
            };
            if tree.is_some() {
                let mut rest: Vec<OsString> = vec![bwrap.into()];
                rest.extend(bwrap_args);
                (launcher.clone(), keeper(true, rest))
            } else {
                (bwrap, bwrap_args)
            }
        }
    };
    // Resource limits: a transient systemd scope around the whole tree.
    let (program, args) = match scope {
        None => (program, args),
        Some(systemd_run) => (systemd_run, sandbox::scope_args(&config.limits, run.what, &program, &args)),
    };
    let mut env = vec![(harden::PLAN_VAR.to_string(), plan.to_env())];
    env.extend(run.stdin.map(|text| (harden::STDIN_VAR.to_string(), text.to_string())));
    Ok(Confined { program, args, tmp, env, tree })
}

/// What a pre-check or a git command has after its time is up.
const SHORT_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

/// A cgroup's name for one run of `chamber`: unique on this machine while
/// it runs.
fn tree_name(chamber: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name: String = chamber.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    format!("{name}-{}-{n}", std::process::id())
}

/// The gateway's port and Unix socket, for a bubblewrap session whose
/// network is held to the gateway.
fn netted(jail: &Jail<'_>) -> Option<(u16, PathBuf)> {
    if jail.setup.network != Network::Gateway || jail.mode != Sandbox::Bwrap {
        return None;
    }
    Some((jail.gateway_port?, jail.gateway_socket.clone()?))
}

/// What a sandboxed process may reach (see [`sandbox`]), and its private
/// temporary folder.
fn policy(
    jail: &Jail<'_>,
    provider_env: &BTreeMap<String, String>,
    run: &Run<'_>,
    ours: &[PathBuf],
) -> super::Result<(sandbox::Policy, PathBuf)> {
    let (config, root, places) = (&jail.setup, jail.root, jail.places);
    for (key, dirs) in [("writable", &config.writable), ("readable", &config.readable)] {
        if let Some(missing) = dirs.iter().find(|d| !d.is_dir()) {
            return Err(Error::Setting(format!("cryo.toml: {key} names {}, which is not a folder", missing.display())));
        }
    }
    let tmp = root.join(".cryo/tmp");
    Dir::open(root)
        .and_then(|d| d.make_dirs(Path::new(".cryo/tmp")))
        .map_err(|e| Error::File(format!("cannot create {e}")))?;
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let (state, config_dir) = (&places.state_dir, &places.config_dir);
    let mut hidden = vec![state.clone(), config_dir.clone(), PathBuf::from("/tmp")];
    hidden.extend(home.clone());
    // cryod's TMPDIR, and the user's runtime folder: its sockets (the
    // session bus, the systemd user manager) would run anything outside.
    for var in ["TMPDIR", "XDG_RUNTIME_DIR"] {
        hidden.extend(std::env::var_os(var).filter(|t| !t.is_empty() && t != "/").map(PathBuf::from));
    }
    // Every other chamber (of every node).
    hidden.extend(jail.others.iter().cloned());
    // What the agent may write: its chamber, the devices a program uses
    // (not the disks: as root, a disk's device reads every file), what
    // `cryo.toml` names (resolved now; those the agent could have moved
    // were checked a moment ago, see `Reach`).
    let mut writable = vec![sandbox::canonical(root)];
    writable.extend(sandbox::DEVICES.iter().map(PathBuf::from).filter(|d| d.exists()).map(|d| sandbox::canonical(&d)));
    writable.extend(config.writable.iter().map(|p| sandbox::canonical(p)));
    // The CLI's own state, made if missing (the CLI would make it, but
    // cannot inside), and its setup file.
    let kind = kinds::Kind::of(run.arg0);
    let var = |name: &str| provider_env.get(name).cloned().or_else(|| std::env::var(name).ok());
    for dir in home.as_deref().map(|h| kind.state_dirs(h, var)).unwrap_or_default() {
        std::fs::create_dir_all(&dir).map_err(|e| Error::File(format!("cannot create {}: {e}", dir.display())))?;
        writable.push(sandbox::canonical(&dir));
    }
    let mut readable: Vec<PathBuf> =
        config.readable.iter().chain(run.readable).map(|p| sandbox::canonical(p)).collect();
    readable.extend(kind.config_files(var).into_iter().filter(|f| f.exists()).map(|f| sandbox::canonical(&f)));
    readable.extend(
        sandbox::program_install(&run.program, run.path, &hidden, &writable).iter().map(|p| sandbox::canonical(p)),
    );
    // cryo-agent, wherever it is installed (`~/.cargo/bin`, under a hidden
    // home): the file itself.
    if let Some(bin) = &places.agent_bin
        && let Some(agent) = Some(bin.join("cryo-agent")).filter(|a| a.is_file())
    {
        readable.push(sandbox::canonical(&agent));
    }
    // The operator's socket and its key: hidden with their folder (a
    // system folder aside). The session's own door alone is reachable.
    if let Some(dir) = places.socket.parent().filter(|d| !sandbox::system_folder(d)) {
        hidden.push(dir.to_path_buf());
    }
    hidden.push(cryo_proto::operator_key_path(&places.socket));
    let mut reachable: Vec<PathBuf> = run.door.map(Path::to_path_buf).into_iter().collect();
    // cryod's own binaries: the launcher that confines the program runs
    // inside (and under bubblewrap, the forwarder, cryod's own).
    for exe in ours {
        if !readable.contains(exe) {
            readable.push(exe.clone());
        }
    }
    // Under bubblewrap, the gateway's socket the forwarder relays to.
    if let Some((_, socket)) = netted(jail) {
        // The system's sockets too (a resolver's, the system bus's, a
        // database's): a way out that is not the network.
        for run in ["/run", "/var/run"] {
            let run = sandbox::canonical(Path::new(run));
            if run.is_dir() && !hidden.contains(&run) {
                hidden.push(run);
            }
        }
        reachable.push(socket);
    }
    let connect_tcp = match config.network {
        Network::Open => None,
        Network::Gateway => Some(jail.gateway_port.into_iter().collect()),
    };
    Ok((sandbox::Policy { writable, readable, hidden, reachable, arg0: run.arg0.to_string(), connect_tcp }, tmp))
}
