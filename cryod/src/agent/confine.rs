//! What confines whatever runs for a chamber (a session's agent, a
//! pre-check): its sandbox (the Landlock launcher or bubblewrap, with the
//! folders it may write and read, and those hidden), its network when held
//! to the gateway (Landlock's TCP rule, or bubblewrap's own network and
//! `agent::forward`), and its systemd scope's limits.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::Error;
use super::kinds;
use super::sandbox;
use crate::chamber::Dir;
use crate::chamber::config::ChamberConfig;
use crate::config::Sandbox;

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
}

/// What confines whatever runs for a chamber (its agent, its pre-checks).
pub struct Jail<'a> {
    pub chamber: &'a str,
    pub root: &'a Path,
    pub config: &'a ChamberConfig,
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

/// A command made to run confined: the program cryod starts (the agent's,
/// the Landlock launcher, bubblewrap or `systemd-run`), its arguments, and
/// the private TMPDIR of a confined one.
pub struct Confined {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub tmp: Option<PathBuf>,
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
}

/// Wraps `run` for the chamber's sandbox and limits; what could not be
/// applied (limits outside systemd) goes into `notes`.
pub fn confine(
    jail: &Jail<'_>,
    provider_env: &BTreeMap<String, String>,
    run: Run<'_>,
    notes: &mut Vec<String>,
) -> super::Result<Confined> {
    let config = jail.config;
    // Asking may run bubblewrap once: off the worker (an unconfined
    // process asks nothing, and keeps its worker).
    let unavailable = match jail.mode {
        Sandbox::Off => None,
        confined => tokio::task::block_in_place(|| sandbox::unavailable(confined)),
    };
    if let Some(why) = unavailable {
        return Err(Error::Unavailable(why));
    }
    if config.network == crate::config::Network::Gateway {
        match jail.mode {
            Sandbox::Off => {
                return Err(Error::Setting(
                    "cryo.toml: network = \"gateway\" needs a sandbox: say sandbox = \"landlock\"".into(),
                ));
            }
            Sandbox::Bwrap if jail.gateway_port.is_none() || jail.gateway_socket.is_none() => {
                return Err(Error::Unavailable(
                    "cryo's provider gateway is not listening on its port and its Unix socket (see cryod's log)".into(),
                ));
            }
            Sandbox::Bwrap => {}
            Sandbox::Landlock if sandbox::landlock_abi() < 4 => {
                return Err(Error::Unavailable(sandbox::NETWORK_RULES.into()));
            }
            Sandbox::Landlock if jail.gateway_port.is_none() => {
                return Err(Error::Unavailable("cryo's provider gateway is not listening (see cryod's log)".into()));
            }
            Sandbox::Landlock => {}
        }
    }
    let own_exe = || std::env::current_exe().map_err(|e| Error::Spawn(format!("cannot find cryod's own binary: {e}")));
    let mut tmp = None;
    let (program, args): (PathBuf, Vec<OsString>) = match jail.mode {
        Sandbox::Off => (run.program, run.args.iter().map(Into::into).collect()),
        confined => {
            let (policy, dir) = policy(jail, provider_env, &run)?;
            tmp = Some(dir);
            if confined == Sandbox::Landlock {
                (own_exe()?, sandbox::wrap(&policy, &run.program, run.args))
            } else {
                // The resolved file: a link to it may lie in a hidden root.
                let real = std::fs::canonicalize(&run.program).unwrap_or(run.program);
                match netted(jail) {
                    // Its own network, whose way out is the forwarder.
                    Some((port, socket)) => {
                        let args = super::forward::args(port, &socket, &real, run.args);
                        (sandbox::bwrap()?, sandbox::bwrap_args(&policy, &own_exe()?, &args))
                    }
                    None => (sandbox::bwrap()?, sandbox::bwrap_args(&policy, &real, run.args)),
                }
            }
        }
    };
    // Resource limits: a transient systemd scope around the whole tree.
    let (program, args) = match (config.limits.is_empty(), sandbox::systemd_run()) {
        (true, _) => (program, args),
        (false, Ok(systemd_run)) => {
            let args = sandbox::scope_args(&config.limits, run.what, &program, &args);
            (systemd_run, args)
        }
        (false, Err(why)) => {
            notes.push(format!("memory_max and cpu_weight are not applied: {why}"));
            (program, args)
        }
    };
    Ok(Confined { program, args, tmp })
}

/// The gateway's port and Unix socket, for a bubblewrap session whose
/// network is held to the gateway.
fn netted(jail: &Jail<'_>) -> Option<(u16, PathBuf)> {
    if jail.config.network != crate::config::Network::Gateway || jail.mode != Sandbox::Bwrap {
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
) -> super::Result<(sandbox::Policy, PathBuf)> {
    let (config, root, places) = (jail.config, jail.root, jail.places);
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
    // Under bubblewrap, the forwarder (cryod's own binary) and the
    // gateway's socket it relays to.
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
        if let Ok(exe) = std::env::current_exe() {
            readable.push(sandbox::canonical(&exe));
        }
    }
    let connect_tcp = match config.network {
        crate::config::Network::Open => None,
        crate::config::Network::Gateway => Some(jail.gateway_port.into_iter().collect()),
    };
    Ok((sandbox::Policy { writable, readable, hidden, reachable, arg0: run.arg0.to_string(), connect_tcp }, tmp))
}
