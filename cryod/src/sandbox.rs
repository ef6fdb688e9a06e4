//! Confining an agent to its chamber (`sandbox = "landlock"` in
//! `cryo.toml`): Linux's unprivileged filesystem sandbox, applied to the
//! agent's whole process tree by a launcher (`cryod __sandbox POLICY --
//! PROGRAM ARGS`) that restricts itself, then runs the agent in its place.
//!
//! What the agent may reach:
//! - read and write: its chamber, the folders in `writable`, a private
//!   temporary folder (`.cryo/tmp`, its `TMPDIR`), `/dev`, and the agent
//!   CLI's own state folder (`~/.claude`, `$CODEX_HOME`, OpenCode's);
//! - read only: the folders in `readable`, and everything else outside the
//!   hidden roots;
//! - nothing of the hidden roots: the user's home, cryod's state folder
//!   (its database, the hub's tokens) and config folder, every other
//!   chamber, `/tmp` and cryod's own `TMPDIR`.
//!
//! The network stays open and cryod's socket reachable (Landlock does not
//! govern `connect`). Landlock's ptrace rule keeps an agent run as a normal
//! user out of `/proc/<pid>/environ` and `mem` of any process outside its
//! domain, cryod's among them; one run as root still reads them (found by
//! the tests; not yet closed). A kernel without Landlock refuses the session (fail
//! closed): cryod asks the kernel before the spawn, and the launcher runs
//! nothing unless the kernel enforced every rule.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus,
};
use serde::{Deserialize, Serialize};

/// `cryod __sandbox POLICY -- PROGRAM ARGS`: the launcher.
pub const ARG: &str = "__sandbox";

/// Set to `0` in cryod's environment, says the kernel has no Landlock
/// whatever it has (a test's kernel without the feature).
pub const PROBE_OVERRIDE: &str = "CRYO_LANDLOCK";

/// The access rights cryo asks for: those of Landlock's fifth version
/// (truncate and device ioctls); an older kernel enforces what it knows.
const ABI_WANTED: ABI = ABI::V5;

/// Whether the kernel enforces Landlock (it makes a ruleset of the first
/// version's rights).
pub fn kernel_has_landlock() -> bool {
    if std::env::var(PROBE_OVERRIDE).is_ok_and(|v| v == "0") {
        return false;
    }
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|r| r.create())
        .is_ok()
}

/// What one session may reach.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Policy {
    /// Read and write.
    pub writable: Vec<PathBuf>,
    /// Read only (within the hidden roots; everything else outside them is
    /// readable anyway).
    pub readable: Vec<PathBuf>,
    /// Unreadable, but for what `writable` and `readable` name inside them.
    pub hidden: Vec<PathBuf>,
    /// The agent's `argv[0]`.
    pub arg0: String,
}

/// Why a confined session cannot start on this kernel, if it cannot.
pub fn unavailable() -> Option<String> {
    (!kernel_has_landlock()).then(|| {
        "sandbox = \"landlock\", but this kernel has no Landlock (Linux 5.13 or later, with landlock among its \
         LSMs): the session is not started (sandbox = \"off\" runs it unconfined)"
            .to_string()
    })
}

/// The launcher's arguments for `program ARGS` under `policy` (the program
/// is cryod's own binary).
pub fn wrap(policy: &Policy, program: &Path, args: &[String]) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec![ARG.into(), serde_json::to_string(policy).expect("a policy serializes").into()];
    out.push("--".into());
    out.push(program.into());
    out.extend(args.iter().map(OsString::from));
    out
}

/// `cryod __sandbox …`: restricts this process, then becomes the agent;
/// returns only if that fails (after saying why on stderr).
pub fn intercept() {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|a| a != ARG) {
        return;
    }
    let rest: Vec<OsString> = args.collect();
    let why = match launch(rest) {
        Ok(never) => match never {},
        Err(why) => why,
    };
    eprintln!("cryo sandbox: {why}");
    std::process::exit(126)
}

fn launch(args: Vec<OsString>) -> Result<std::convert::Infallible, String> {
    use std::os::unix::process::CommandExt;
    let mut args = args.into_iter();
    let policy = args.next().ok_or("no policy")?;
    let policy: Policy = serde_json::from_str(&policy.to_string_lossy()).map_err(|e| format!("a bad policy: {e}"))?;
    if args.next().is_none_or(|a| a != "--") {
        return Err("no `--` before the program".into());
    }
    let program = args.next().ok_or("no program")?;
    restrict(&policy)?;
    let e = std::process::Command::new(&program).arg0(&policy.arg0).args(args).exec();
    Err(format!("cannot run {}: {e}", Path::new(&program).display()))
}

/// Restricts this process (and what it runs) to `policy`; fails unless the
/// kernel enforced every rule.
fn restrict(policy: &Policy) -> Result<(), String> {
    if let Some(why) = unavailable() {
        return Err(why);
    }
    let abi = ABI_WANTED;
    let fail = |e: &dyn std::fmt::Display| format!("cannot set up the Landlock sandbox: {e}");
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    // A relative or empty root would hide everything (every path starts
    // with the empty one): only absolute ones count.
    let hidden: Vec<PathBuf> = policy.hidden.iter().filter(|h| h.is_absolute()).map(|h| canonical(h)).collect();
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|e| fail(&e))?
        .create()
        .map_err(|e| fail(&e))?;
    for p in visible(Path::new("/"), &hidden) {
        if let Ok(fd) = PathFd::new(&p) {
            ruleset = ruleset.add_rule(PathBeneath::new(fd, read)).map_err(|e| fail(&e))?;
        }
    }
    for (paths, access) in [(&policy.readable, read), (&policy.writable, all)] {
        for p in paths {
            let fd = PathFd::new(p).map_err(|e| fail(&format!("{}: {e}", p.display())))?;
            ruleset = ruleset.add_rule(PathBeneath::new(fd, access)).map_err(|e| fail(&e))?;
        }
    }
    let status = ruleset.restrict_self().map_err(|e| fail(&e))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => Ok(()),
        RulesetStatus::NotEnforced => Err(fail(&"the kernel did not enforce the ruleset")),
    }
}

fn canonical(p: &Path) -> PathBuf {
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

/// The agent CLIs' own state, under the home folder, that they need to
/// write (those that exist).
pub fn cli_state(home: &Path, provider_env: &std::collections::BTreeMap<String, String>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [".claude", ".codex", ".config/opencode", ".local/share/opencode", ".cache/opencode"]
        .iter()
        .map(|d| home.join(d))
        .collect();
    if let Some(c) = provider_env.get("CODEX_HOME").or(std::env::var("CODEX_HOME").ok().as_ref()) {
        dirs.push(PathBuf::from(c));
    }
    dirs.into_iter().filter(|d| d.is_dir()).collect()
}

/// What of cryod's environment a sandboxed agent keeps (beside `CRYO_*`,
/// `[provider].env` and what the launch sets).
pub const ENV_KEPT: &[&str] = &[
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
pub fn env_kept(name: &str) -> bool {
    ENV_KEPT.contains(&name) || name.starts_with("LC_")
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
}
