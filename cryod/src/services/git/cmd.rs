//! The git program, run two ways.
//!
//! - **Trusted**: on cryod's own copy of the chamber's repository (its
//!   state folder, out of the agent's reach), with the user's git setup
//!   (credentials, ssh) but none of the repository's hooks.
//! - **Jailed**: on the worktree, whose `.git` the agent can rewrite (its
//!   config can name a program for git to run): as the chamber's agent
//!   runs (its sandbox, its environment), so nothing there reaches further
//!   than the agent itself does.
//!
//! Data only moves from the worktree to cryod's copy by `git fetch`, whose
//! far side (`upload-pack`, the one command git runs safely in a
//! repository it does not trust, `gitsecurityboundary(7)`) runs jailed
//! too ([`Git::upload_pack`]): it reads the worktree's `.git` as the agent
//! could, so a ref made a link to a repository the agent cannot read, or
//! alternates naming one, bring nothing of it into cryod's copy.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cryo_session::{Prepared, Ran};

/// Most bytes of a command's output read (a patch is cut there).
pub const MAX_OUTPUT: u64 = 8 * 1024 * 1024;

/// How long a local command may take.
const LOCAL: Duration = Duration::from_secs(120);
/// How long a fetch, clone or push may take.
pub const NETWORK: Duration = Duration::from_secs(600);

/// Settings every command of cryod's is given, over any file's: no hooks,
/// no file-system monitor, no signing prompt, no pager.
const HARDENED: &[&str] = &[
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "tag.gpgSign=false",
    "-c",
    "core.pager=cat",
    "-c",
    "protocol.ext.allow=never",
];

/// Why git, or cryod's work around it, did not do its job: one line; the
/// kind says where to look.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failed {
    /// A git command ran and failed: `said` is its own line (a push's
    /// refusal, its first `fatal:` or `error:`), empty if it said nothing.
    #[error("git {verb}{}", exited(*.code, .said))]
    Exited { verb: String, code: i32, said: String },
    /// A git command did not run to its end (killed, timed out, not run).
    #[error("git {verb} {why}")]
    Ran { verb: String, why: String },
    /// No git on cryod's `PATH`.
    #[error("the git program is not on cryod's PATH ([git] needs it: install git)")]
    NoGit,
    /// A command on the worktree asked of a git for cryod's own copy only
    /// ([`Git::trusted_only`]): cryod's own mistake.
    #[error("{0}")]
    NoJail(&'static str),
    /// The chamber's `[git]` settings, or the repository they name, do not
    /// hold: the line says what to set or mend.
    #[error("{0}")]
    Setting(String),
    /// The worktree is not as a session can start or end in (replaced,
    /// locked, mid-merge), or a command in it failed.
    #[error("{0}")]
    Worktree(String),
    /// A push refused (the branch moved there) or failed.
    #[error("{0}")]
    Push(String),
    /// A file or folder (cryod's copy, the worktree) could not be made,
    /// written, moved or removed.
    #[error("{0}")]
    File(String),
    /// What a diff asks for is not there yet (no session's work, no branch).
    #[error("{0}")]
    Missing(String),
    /// Session `session` left nothing in cryod's copy to diff.
    #[error(
        "session {session} left no record in cryod's copy of the repository (it never started, ran without [git], \
         or before a reset or removal, whose history/STAMP/git.txt names where the work is kept)"
    )]
    Unrecorded { session: u64 },
}

/// The end of [`Failed::Exited`]'s line: what git said, else its code.
fn exited(code: i32, said: &str) -> String {
    if said.is_empty() { format!(" exited {code}") } else { format!(": {said}") }
}

/// The git program and how to run it.
#[derive(Debug, Clone)]
pub struct Git {
    /// The program, as found on cryod's `PATH`.
    pub program: PathBuf,
    /// How commands on the worktree run (the chamber's confinement, its
    /// program being `program`, its arguments those given); none for
    /// cryod's reads of its own copy alone.
    jail: Option<Prepared>,
    /// Settings for every command on cryod's copy, given through the
    /// environment (`http.extraHeader` with a token: never on a command
    /// line, which every process may read).
    settings: Vec<(String, String)>,
}

/// What a command printed.
pub struct Out {
    pub stdout: String,
}

impl Git {
    /// git as found on `PATH`, its worktree commands run as `jail` (the
    /// chamber's confinement of the git program, arguments to come).
    pub fn new(program: PathBuf, mut jail: Prepared) -> Git {
        isolate(&mut jail.env);
        Git { program, jail: Some(jail), settings: Vec::new() }
    }

    /// With `settings` on every command on cryod's copy (its fetches and
    /// pushes): the credentials `repo`'s host takes.
    pub fn with_settings(mut self, settings: Vec<(String, String)>) -> Git {
        self.settings = settings;
        self
    }

    /// git for cryod's own copy only (its worktree commands refused).
    pub fn trusted_only(program: PathBuf) -> Git {
        Git { program, jail: None, settings: Vec::new() }
    }

    /// Finds the git program on cryod's `PATH`.
    pub fn find() -> Result<PathBuf, Failed> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path).map(|d| d.join("git")).find(|p| p.is_file()).ok_or(Failed::NoGit)
    }

    /// `git ARGS` on cryod's own copy (`GIT_DIR` = `store`), local.
    pub async fn trusted(&self, store: &Path, args: &[&str], long: bool) -> Result<Out, Failed> {
        self.on_store(store, args, long, false).await
    }

    /// `git ARGS` on cryod's own copy reaching `repo` (`ls-remote`, a fetch
    /// from it, a push to it): the only commands given the credentials.
    pub async fn remote(&self, store: &Path, args: &[&str]) -> Result<Out, Failed> {
        self.on_store(store, args, true, true).await
    }

    async fn on_store(&self, store: &Path, args: &[&str], long: bool, credentials: bool) -> Result<Out, Failed> {
        let mut env: std::collections::BTreeMap<String, String> =
            std::env::vars().filter(|(k, _)| !k.starts_with("GIT_")).collect();
        let settings = if credentials { self.settings.as_slice() } else { &[] };
        env.insert("GIT_CONFIG_COUNT".into(), settings.len().to_string());
        for (i, (key, value)) in settings.iter().enumerate() {
            env.insert(format!("GIT_CONFIG_KEY_{i}"), key.to_string());
            env.insert(format!("GIT_CONFIG_VALUE_{i}"), value.to_string());
        }
        env.insert("GIT_NO_LAZY_FETCH".into(), "1".into());
        env.insert("GIT_DIR".into(), store.to_string_lossy().into_owned());
        env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
        env.entry("GIT_SSH_COMMAND".into()).or_insert_with(|| "ssh -o BatchMode=yes".into());
        let p = Prepared { program: self.program.clone(), args: with(HARDENED, args), env };
        finish(p.run(Some(store), None, if long { NETWORK } else { LOCAL }, MAX_OUTPUT).await, args)
    }

    /// The far side of a fetch from the worktree, as `git fetch
    /// --upload-pack` takes it (a shell command, to which git adds the
    /// repository's path): `git upload-pack` jailed as the agent, with an
    /// environment of its own (nothing of cryod's: no secret on a command
    /// line, nor in a process the agent may read).
    pub fn upload_pack(&self) -> Result<String, Failed> {
        let jail = self.jail.as_ref().ok_or(Failed::NoJail("no jail to read the worktree in"))?;
        // XDG_RUNTIME_DIR: where `systemd-run --user` (a chamber's limits)
        // finds the user's manager; the launchers' plan (folders, no secret).
        let kept = [
            "PATH",
            "TMPDIR",
            "GIT_CONFIG_GLOBAL",
            "GIT_CONFIG_NOSYSTEM",
            "LANG",
            "XDG_RUNTIME_DIR",
            cryo_session::PLAN_VAR,
        ];
        let mut words: Vec<String> = vec!["exec".into(), "/usr/bin/env".into(), "-i".into()];
        words.extend(kept.iter().filter_map(|k| jail.env.get(*k).map(|v| format!("{k}={v}"))));
        words.push("GIT_NO_LAZY_FETCH=1".into());
        words.push(jail.program.to_string_lossy().into_owned());
        words.extend(jail.args.iter().map(|a| a.to_string_lossy().into_owned()));
        words.push("upload-pack".into());
        Ok(words.iter().map(|w| quoted(w)).collect::<Vec<_>>().join(" "))
    }

    /// `git ARGS` in `dir` (the chamber or its worktree), confined as the
    /// chamber's agent is.
    pub async fn jailed(&self, dir: &Path, args: &[&str], long: bool) -> Result<Out, Failed> {
        let mut p = self.jail.clone().ok_or(Failed::NoJail("no jail to run git in the worktree"))?;
        p.args.extend(with(HARDENED, args));
        finish(p.run(Some(dir), None, if long { NETWORK } else { LOCAL }, MAX_OUTPUT).await, args)
    }
}

/// `word` as one word of a POSIX shell's command line.
fn quoted(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "/._-=:,+@%".contains(c)) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// `pre` then `args`, as the arguments of a command.
fn with(pre: &[&str], args: &[&str]) -> Vec<OsString> {
    pre.iter().chain(args).map(OsString::from).collect()
}

/// A jailed git reads no file of the user's (hidden from the agent) nor of
/// the system's, and asks nobody anything.
fn isolate(env: &mut std::collections::BTreeMap<String, String>) {
    env.retain(|k, _| !k.starts_with("GIT_"));
    env.insert("GIT_CONFIG_GLOBAL".into(), "/dev/null".into());
    env.insert("GIT_CONFIG_NOSYSTEM".into(), "1".into());
    env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
}

/// A command's result: its output, or one line saying what failed (git's
/// own first `fatal:`/`error:` line when it wrote one).
fn finish(ran: Ran, args: &[&str]) -> Result<Out, Failed> {
    let verb = args.iter().find(|a| !a.starts_with('-')).copied().unwrap_or("git");
    match ran {
        Ran::Exited { code: 0, stdout, .. } => Ok(Out { stdout }),
        Ran::Exited { code, stderr, .. } => {
            // A push's refusal names its reason on its ref's line.
            let said = stderr
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with("! [") && l.contains("rejected]"))
                .or_else(|| stderr.lines().map(str::trim).find(|l| l.starts_with("fatal:") || l.starts_with("error:")))
                .or_else(|| stderr.lines().map(str::trim).find(|l| !l.is_empty()))
                .unwrap_or("")
                .to_string();
            Err(Failed::Exited { verb: verb.to_string(), code, said })
        }
        other => Err(Failed::Ran { verb: verb.to_string(), why: other.failure() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A jailed git reads neither the user's nor the system's settings.
    #[test]
    fn a_jailed_git_reads_no_settings_but_the_repositorys() {
        let mut env = std::collections::BTreeMap::new();
        env.insert("GIT_DIR".to_string(), "/elsewhere".to_string());
        env.insert("PATH".to_string(), "/usr/bin".to_string());
        isolate(&mut env);
        assert_eq!(env.get("GIT_DIR"), None);
        assert_eq!(env.get("GIT_CONFIG_GLOBAL").map(String::as_str), Some("/dev/null"));
        assert_eq!(env.get("GIT_CONFIG_NOSYSTEM").map(String::as_str), Some("1"));
    }

    /// The jailed far side is one shell command whose words are kept whole.
    #[test]
    fn the_jailed_upload_pack_is_quoted_whole() {
        let mut env = std::collections::BTreeMap::new();
        env.insert("PATH".to_string(), "/usr/bin".to_string());
        env.insert("SECRET".to_string(), "never".to_string());
        let jail = Prepared {
            program: "/bin/cryod".into(),
            args: vec!["__sandbox".into(), r#"{"w":["/a b","it's"]}"#.into(), "--".into(), "/usr/bin/git".into()],
            env,
        };
        let line = Git::new("/usr/bin/git".into(), jail).upload_pack().unwrap();
        assert!(!line.contains("never"), "{line}");
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("set -- {line}; printf '%s\\n' \"$@\""), "sh"])
            .output()
            .unwrap();
        let words = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(words.contains("{\"w\":[\"/a b\",\"it's\"]}\n"), "{words}");
        assert!(words.ends_with("/usr/bin/git\nupload-pack\n"), "{words}");
    }

    #[test]
    fn a_failure_is_gits_own_line() {
        let ran = Ran::Exited {
            code: 128,
            stdout: String::new(),
            stderr: "hint: x\nfatal: couldn't find remote ref refs/heads/nope\n".into(),
        };
        let e = finish(ran, &["fetch", "--no-tags"]).map(|_| ()).unwrap_err();
        assert_eq!(e.to_string(), "git fetch: fatal: couldn't find remote ref refs/heads/nope");
        assert!(matches!(e, Failed::Exited { code: 128, .. }));
        let quiet = Ran::Exited { code: 1, stdout: String::new(), stderr: String::new() };
        assert_eq!(finish(quiet, &["rev-parse"]).map(|_| ()).unwrap_err().to_string(), "git rev-parse exited 1");
    }
}
