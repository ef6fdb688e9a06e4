//! `[git]` in `cryo.toml`: the repository a chamber's sessions work in,
//! each in a worktree of its own on the chamber's branch (see `crate::services::git`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::{ConfigError, Lines};
use super::reach::expand_home;

/// The branch a chamber works on unless `branch` says otherwise.
pub const DEFAULT_BRANCH: &str = "cryo/{chamber}";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGit {
    repo: String,
    base: Option<String>,
    mode: Option<String>,
    branch: Option<String>,
    push: Option<bool>,
    pull_request: Option<bool>,
}

/// Where the repository is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repo {
    /// A repository on this machine (absolute; `~/` and relative paths as
    /// `writable`'s are read).
    Path(PathBuf),
    /// One reached over the network (`https://`, `ssh://`, `git://`,
    /// `file://`, or `user@host:path`): fetched before each session.
    Url(String),
}

impl Repo {
    /// As git takes it.
    pub fn as_arg(&self) -> String {
        match self {
            Repo::Path(p) => p.to_string_lossy().into_owned(),
            Repo::Url(u) => u.clone(),
        }
    }
}

impl std::fmt::Display for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_arg())
    }
}

/// `mode`: one worktree the chamber keeps, or a fresh one each session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Worktree,
    Session,
}

/// `[git]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Git {
    pub repo: Repo,
    /// The branch or ref the work starts from and is compared with (`None`:
    /// the repository's default branch, as its `HEAD` names it).
    pub base: Option<String>,
    pub mode: Mode,
    /// The branch's template: `{chamber}` stands for the chamber's name.
    pub branch: String,
    /// Push the branch to `repo` after each session.
    pub push: bool,
    /// Open (or update) a draft pull request for the branch through the
    /// GitHub bridge's credentials (implies `push`).
    pub pull_request: bool,
}

impl Git {
    /// The chamber's branch.
    pub fn branch_of(&self, chamber: &str) -> String {
        self.branch.replace("{chamber}", chamber)
    }
}

/// `[git]`: a repository, and names git takes as branches.
pub(super) fn parse(raw: RawGit, dir: &Path, github: bool, lines: &Lines) -> Result<Git, ConfigError> {
    let bad = |key: &str, why: String| lines.invalid(key, format!("key `git.{key}`: {why}"));
    let repo = repo(&raw.repo).map_err(|why| bad("repo", why))?;
    let repo = match repo {
        Some(url) => Repo::Url(url),
        None => Repo::Path(expand_home(&raw.repo, dir).map_err(|e| bad("repo", e.to_string()))?),
    };
    let mode = match raw.mode.as_deref() {
        None | Some("worktree") => Mode::Worktree,
        Some("session") => Mode::Session,
        Some(m) => return Err(bad("mode", format!("{m:?} is not one of \"worktree\", \"session\""))),
    };
    if let Some(base) = &raw.base {
        ref_name(base).map_err(|why| bad("base", format!("{base:?} {why}")))?;
    }
    let branch = raw.branch.unwrap_or_else(|| DEFAULT_BRANCH.to_string());
    // Chamber names are letters, digits, `-`, `_` and `.`: checked with one.
    ref_name(&branch.replace("{chamber}", "chamber")).map_err(|why| bad("branch", format!("{branch:?} {why}")))?;
    if raw.base.as_ref().is_some_and(|b| b.trim_start_matches("refs/heads/") == branch) {
        return Err(bad(
            "branch",
            format!("{branch:?} is the base itself: the chamber's work needs a branch of its own"),
        ));
    }
    let pull_request = raw.pull_request.unwrap_or(false);
    if pull_request && !github {
        return Err(bad(
            "pull_request",
            "needs [sync.github] (its `repo` and `token_file`), whose credentials open the pull request".into(),
        ));
    }
    Ok(Git { repo, base: raw.base, mode, branch, push: raw.push.unwrap_or(false) || pull_request, pull_request })
}

/// The folder of the agent's (its chamber, or a `writable` one) that holds
/// `repo`, named or where a link leads, if one does: such a repository is
/// refused, as cryod would run git in it (its hooks on a push, its refs
/// and alternates on a fetch).
pub(super) fn agent_can_write(repo: &Path, dir: &Path, writable: &[PathBuf]) -> Option<PathBuf> {
    let resolve = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let theirs: Vec<PathBuf> =
        std::iter::once(dir.to_path_buf()).chain(writable.iter().cloned()).flat_map(|w| [resolve(&w), w]).collect();
    let (named, resolved) = (repo.to_path_buf(), resolve(repo));
    theirs.into_iter().find(|w| named.starts_with(w) || resolved.starts_with(w))
}

/// `Some(url)` if `raw` is a URL git fetches over a transport cryo allows,
/// `None` if it is a path; an error for anything else (`ext::`, a leading
/// `-` that git would take as an option).
fn repo(raw: &str) -> Result<Option<String>, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err("is empty: name a repository (a path, or a URL)".into());
    }
    if raw.starts_with('-') || raw.chars().any(char::is_control) {
        return Err(format!("{raw:?} is not a path or a URL git can take"));
    }
    if let Some((scheme, _)) = raw.split_once("://") {
        return match scheme {
            "https" | "http" | "ssh" | "git" | "file" => Ok(Some(raw.to_string())),
            _ => Err(format!("{raw:?}: the {scheme}:// transport is not one cryo uses (https, http, ssh, git, file)")),
        };
    }
    if raw.contains("::") {
        return Err(format!("{raw:?}: a remote helper's address is not one cryo uses"));
    }
    // scp's form, `user@host:path` or `host:path` (git's rule: a colon
    // before any slash).
    if let Some((host, _)) = raw.split_once(':')
        && !host.contains('/')
        && !host.is_empty()
    {
        return Ok(Some(raw.to_string()));
    }
    Ok(None)
}

/// Whether git takes `name` as a branch (`git check-ref-format --branch`'s
/// rules, and no leading `-`).
pub fn ref_name(name: &str) -> Result<(), &'static str> {
    let bad = name.is_empty()
        || name.starts_with('-')
        || name.starts_with('/')
        || name.ends_with('/')
        || name.ends_with('.')
        || name.ends_with(".lock")
        || name.contains("..")
        || name.contains("//")
        || name.contains("@{")
        || name == "@"
        || name.split('/').any(|part| part.starts_with('.') || part.ends_with(".lock"))
        || name.chars().any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c));
    if bad { Err("is not a name git takes for a branch") } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_the_agent_can_write_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let (chamber, project, repo) = (home.path().join("c"), home.path().join("p"), home.path().join("repo"));
        for d in [&chamber, &project, &repo] {
            std::fs::create_dir_all(d).unwrap();
        }
        assert!(agent_can_write(&chamber.join("project"), &chamber, &[]).is_some());
        assert!(agent_can_write(&project, &chamber, std::slice::from_ref(&project)).is_some());
        // A link to it from elsewhere.
        std::os::unix::fs::symlink(&project, home.path().join("via")).unwrap();
        assert!(agent_can_write(&home.path().join("via"), &chamber, std::slice::from_ref(&project)).is_some());
        assert_eq!(agent_can_write(&repo, &chamber, std::slice::from_ref(&project)), None);
    }

    #[test]
    fn repositories_and_branch_names() {
        assert_eq!(repo("https://example.com/a/b.git"), Ok(Some("https://example.com/a/b.git".into())));
        assert_eq!(repo("git@github.com:o/r.git"), Ok(Some("git@github.com:o/r.git".into())));
        assert_eq!(repo("~/src/project"), Ok(None));
        assert_eq!(repo("/srv/a:b/c"), Ok(None));
        assert!(repo("ext::sh -c touch% /tmp/pwned").unwrap_err().contains("remote helper"));
        assert!(repo("fd::3").unwrap_err().contains("remote helper"));
        assert!(repo("--upload-pack=touch /tmp/x").is_err());
        assert!(repo("ftp://host/x").unwrap_err().contains("ftp://"));
        for good in ["main", "cryo/chamber", "release/2.x", "refs/heads/main"] {
            assert_eq!(ref_name(good), Ok(()), "{good}");
        }
        for bad in ["", "-x", "a..b", "a b", "a~1", "x.lock", "a/.hidden", "a/", "@", "a@{1}", "a:b", "a\\b"] {
            assert!(ref_name(bad).is_err(), "{bad:?}");
        }
    }
}
