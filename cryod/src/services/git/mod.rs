//! Git-aware chambers (`[git]` in `cryo.toml`): each session works in a
//! worktree of the chamber's own, on the chamber's branch, and what it
//! changed is kept, counted and shown.
//!
//! Two repositories per chamber:
//! - **cryod's copy** (`STATE/git/ID.git`, bare): out of the agent's
//!   reach. It fetches the base from `repo`, keeps the chamber's branch,
//!   marks where each session began and ended (`refs/cryo/sessions/N/…`,
//!   so a session's diff is exact even after a rebase), and pushes.
//! - **the worktree** (`CHAMBER/worktree`): a clone of cryod's copy, the
//!   agent's working folder and its to change (a sandboxed agent may
//!   write it and its chamber, not the user's checkout). Every git command
//!   cryod runs there runs jailed as the agent (see [`cmd`]).
//!
//! Before a session ([`prepare`]): what an earlier session left unsettled
//! (cryod stopped mid-session) is settled; the base is fetched; the branch
//! is made from it the first time (or from `repo`'s branch of that name);
//! the worktree is made (`mode = "session"`: afresh each session) or its
//! view of the base brought up to date. After it ([`settle`]): whatever
//! the agent left uncommitted is committed to the branch with a message
//! naming the session, cryod's copy fetches the branch, and (with `push`)
//! pushes it. A repository in a state this cannot be done in (locked,
//! mid-merge, a base it lacks) is one line, and the session does not run:
//! cryo never falls back to the user's checkout.

pub mod cmd;
mod diff;

use std::path::{Path, PathBuf};

pub use cmd::{Failed, Git};
use diff::numstat;
pub use diff::{Diff, FileChange, MAX_PATCH, diff};

use crate::chamber::config::{Git as Config, GitMode};
use crate::chamber::{Dir, NewFile};
use cryo_files::Kind;

/// The worktree's folder in the chamber.
pub const WORKTREE: &str = "worktree";

/// In cryod's copy: the session whose work is not settled yet.
const OPEN: &str = "cryo-open";

/// In cryod's copy: the base as last fetched (its name, its ref there).
const BASE: &str = "cryo-base";

/// The base as the last session's start fetched it.
pub fn last_base(p: &Place<'_>) -> Option<Base> {
    let text = std::fs::read_to_string(p.store.join(BASE)).ok()?;
    let mut lines = text.lines();
    let (name, local) = (lines.next()?.to_string(), lines.next()?.to_string());
    Some(Base { remote: String::new(), name, local })
}

/// One chamber's repositories and settings.
pub struct Place<'a> {
    pub chamber: &'a str,
    /// The chamber's folder.
    pub root: &'a Path,
    /// cryod's copy.
    pub store: PathBuf,
    pub config: &'a Config,
}

impl Place<'_> {
    /// cryod's copy of chamber `id`'s repository, in its state folder.
    pub fn store_of(state_dir: &Path, id: i64) -> PathBuf {
        state_dir.join("git").join(format!("{id}.git"))
    }

    pub fn branch(&self) -> String {
        self.config.branch_of(self.chamber)
    }

    pub fn worktree(&self) -> PathBuf {
        self.root.join(WORKTREE)
    }
}

/// A prepared worktree: where the session works, and what the prompt says.
#[derive(Debug, Clone)]
pub struct Ready {
    pub worktree: PathBuf,
    pub branch: String,
    /// The base's name (`main`, `refs/tags/v2`).
    pub base: String,
    /// Its commit now.
    pub base_tip: String,
    /// The branch's commit the session begins at.
    pub start: String,
    /// Commits the base gained since the last session (`None`: the first).
    pub moved: Option<u64>,
    /// An earlier session's work, settled only now (cryod stopped in it).
    pub settled_before: Option<Settled>,
    /// Lines for the session's block in `cryo.log`.
    pub notes: Vec<String>,
}

impl Ready {
    /// What the session's prompt opens with.
    pub fn prompt(&self, root: &Path) -> String {
        let base = match self.moved {
            None => format!("The base is `{}` (at {}).", self.base, short(&self.base_tip)),
            Some(0) => format!(
                "The base is `{}` (at {}): base moved: 0 commits since your last session.",
                self.base,
                short(&self.base_tip)
            ),
            Some(n) => format!(
                "The base is `{}` (at {}): base moved: {n} commit{} since your last session. Rebase or merge onto `origin/{}` as your plan says.",
                self.base,
                short(&self.base_tip),
                if n == 1 { "" } else { "s" },
                self.base.trim_start_matches("refs/heads/"),
            ),
        };
        format!(
            "GIT: your working folder is {wt}, a git worktree on branch `{branch}`. {base} Commit your work on \
             `{branch}` as you go: what you leave uncommitted is committed for you when the session ends. The \
             chamber's own files (plan.md, NOTES.md, todo.json, messages/) are in {root} ($CRYO_CHAMBER_DIR), \
             not in the worktree.\n\n",
            wt = self.worktree.display(),
            branch = self.branch,
            root = root.display(),
        )
    }
}

/// What a session did on the branch.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Settled {
    pub session: u64,
    pub branch: String,
    /// Its first and last commits (`start` empty: not known, cryod's copy
    /// was made again since).
    pub start: String,
    pub end: String,
    /// Commits from `start` to `end`.
    pub commits: u64,
    pub files: u64,
    pub additions: u64,
    pub deletions: u64,
    /// cryod committed what the agent left.
    pub committed_leftovers: bool,
    /// The pull request's number, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<u64>,
    /// Its page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request_url: Option<String>,
    /// What went wrong after the work was kept (a push refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Settled {
    /// One line for `cryo.log` and status.
    pub fn line(&self) -> String {
        let mut line = format!(
            "git: {} commit{} on {} ({} file{}, +{} -{})",
            self.commits,
            if self.commits == 1 { "" } else { "s" },
            self.branch,
            self.files,
            if self.files == 1 { "" } else { "s" },
            self.additions,
            self.deletions
        );
        if self.committed_leftovers {
            line.push_str("; cryo committed what the agent left");
        }
        if let Some(n) = self.pull_request {
            line.push_str(&format!("; pull request #{n}"));
        }
        line
    }
}

/// The first seven hex digits of a commit.
fn short(sha: &str) -> &str {
    &sha[..sha.len().min(7)]
}

/// The base as fetched: its name, where `repo` has it, and where cryod's
/// copy keeps it (a branch stays a branch, so the worktree's clone sees it
/// as `origin/NAME`; a tag a tag).
pub struct Base {
    pub name: String,
    remote: String,
    pub(super) local: String,
}

/// The base `config` names, or `repo`'s default branch.
pub(super) async fn base(git: &Git, p: &Place<'_>) -> Result<Base, Failed> {
    let name = match &p.config.base {
        Some(b) => b.clone(),
        None => {
            let repo = p.config.repo.as_arg();
            let out = git.remote(&p.store, &["ls-remote", "--symref", "--", &repo, "HEAD"]).await.map_err(|e| {
                Failed::Setting(format!(
                    "cannot read {repo} as a git repository ({e}): set [git] repo to one, or mend it"
                ))
            })?;
            out.stdout
                .lines()
                .find_map(|l| l.strip_prefix("ref: ")?.split_once('\t').map(|(r, _)| r.to_string()))
                .ok_or_else(|| {
                    Failed::Setting(format!(
                        "{repo} names no default branch (its HEAD): set [git] base to the branch to work from"
                    ))
                })?
        }
    };
    if let Some(tag) = name.strip_prefix("refs/tags/") {
        return Ok(Base { name: name.clone(), remote: name.clone(), local: format!("refs/tags/{tag}") });
    }
    if name.starts_with("refs/") && !name.starts_with("refs/heads/") {
        return Err(Failed::Setting(format!("[git] base {name:?} is neither a branch nor a tag (refs/tags/…)")));
    }
    let branch = name.trim_start_matches("refs/heads/").to_string();
    Ok(Base { remote: format!("refs/heads/{branch}"), local: format!("refs/heads/{branch}"), name: branch })
}

/// Makes cryod's copy if it is not there.
async fn ensure_store(git: &Git, p: &Place<'_>) -> Result<(), Failed> {
    if p.store.join("HEAD").is_file() {
        return Ok(());
    }
    let parent = p.store.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent).map_err(|e| Failed::File(format!("cannot create {}: {e}", parent.display())))?;
    git.trusted(parent, &["init", "-q", "--bare", "--", &p.store.to_string_lossy()], false).await?;
    Ok(())
}

/// The commit `rev` names in cryod's copy, if any.
pub(super) async fn rev(git: &Git, p: &Place<'_>, rev: &str) -> Result<Option<String>, Failed> {
    let out = git.trusted(&p.store, &["rev-parse", "-q", "--verify", &format!("{rev}^{{commit}}")], false).await;
    match out {
        Ok(o) => Ok(Some(o.stdout.trim().to_string())),
        // Exit 1, nothing said: no such ref.
        Err(Failed::Exited { code: 1, said, .. }) if said.is_empty() => Ok(None),
        Err(e) => Err(e),
    }
}

async fn set_ref(git: &Git, p: &Place<'_>, name: &str, sha: &str) -> Result<(), Failed> {
    git.trusted(&p.store, &["update-ref", name, sha], false).await.map(|_| ())
}

/// The session whose work is not settled yet, if one is open.
fn open_session(p: &Place<'_>) -> Option<u64> {
    std::fs::read_to_string(p.store.join(OPEN)).ok()?.trim().parse().ok()
}

/// Whether the worktree is there as cryo made it: a folder (not a link)
/// holding a `.git` folder.
fn worktree_state(p: &Place<'_>) -> Result<Option<bool>, Failed> {
    let d = Dir::open(p.root).map_err(|e| Failed::File(e.to_string()))?;
    match d.kind(Path::new(WORKTREE)) {
        Ok(None) => Ok(None),
        Ok(Some(Kind::Folder)) => Ok(Some(matches!(d.kind(&Path::new(WORKTREE).join(".git")), Ok(Some(Kind::Folder))))),
        _ => Err(Failed::Worktree(format!(
            "{} is not a folder cryo made (a link or a file took its place): move it away, and the next session \
             makes the worktree again",
            p.worktree().display()
        ))),
    }
}

/// Gets the worktree ready for session `session`: see the module's doc.
pub async fn prepare(git: &Git, p: &Place<'_>, session: u64) -> Result<Ready, Failed> {
    ensure_store(git, p).await?;
    let mut notes = Vec::new();
    // A session cryod stopped in: its work is settled first.
    let settled_before = match open_session(p) {
        Some(n) if n != session => Some(settle(git, p, n).await?),
        _ => None,
    };
    if let Some(s) = &settled_before {
        notes.push(format!("session {}'s work, settled now: {}", s.session, s.line()));
    }
    let base = base(git, p).await?;
    let repo = p.config.repo.as_arg();
    let spec = format!("+{}:{}", base.remote, base.local);
    let fetched =
        git.remote(&p.store, &["fetch", "-q", "--no-tags", "--no-write-fetch-head", "--", &repo, &spec]).await;
    fetched.map_err(|e| match &e {
        Failed::Exited { said, .. } if said.contains("couldn't find remote ref") => {
            Failed::Setting(format!("the base {:?} is not in {repo}: set [git] base to a branch it has", base.name))
        }
        _ => Failed::Setting(format!(
            "cannot fetch the base from {repo} ({e}): set [git] repo to a repository cryod can read"
        )),
    })?;
    let tip = rev(git, p, &base.local)
        .await?
        .ok_or_else(|| Failed::Setting(format!("the base {:?} names no commit", base.name)))?;
    // The chamber's branch is never the base itself (a default branch
    // named so, found only now).
    if base.local == format!("refs/heads/{}", p.branch()) {
        return Err(Failed::Setting(format!(
            "[git] branch {:?} is the base itself: name a branch of the chamber's own",
            p.branch()
        )));
    }
    // Kept for the diff, which reads cryod's copy alone.
    cryo_files::write_file(&p.store.join(BASE), format!("{}\n{}\n", base.name, base.local).as_bytes(), NewFile::QUICK)
        .map_err(|e| Failed::File(e.to_string()))?;
    let moved = match rev(git, p, "refs/cryo/seen").await? {
        None => None,
        Some(seen) if seen == tip => Some(0),
        Some(seen) => Some(count(git, p, &seen, &tip).await?),
    };
    set_ref(git, p, "refs/cryo/seen", &tip).await?;
    let branch = p.branch();
    let local = format!("refs/heads/{branch}");
    if rev(git, p, &local).await?.is_none() {
        // `repo`'s branch of that name (an earlier life of the chamber's
        // work), else the base.
        let spec = format!("+{local}:{local}");
        let args = ["fetch", "-q", "--no-tags", "--no-write-fetch-head", "--", &repo, &spec];
        if git.remote(&p.store, &args).await.is_err() {
            set_ref(git, p, &local, &tip).await?;
            notes.push(format!("git: branch {branch} made from {} at {}", base.name, short(&tip)));
        } else {
            notes.push(format!("git: branch {branch} taken from {repo}"));
        }
    }
    let start = rev(git, p, &local).await?.unwrap_or_default();
    let wt = p.worktree();
    match worktree_state(p)? {
        Some(true) if p.config.mode == GitMode::Worktree => {
            // Locked or mid-merge: the session does not start in it.
            stuck(p)?;
            // Its view of the base (and of the branch) brought up to date.
            let mut args = vec!["fetch", "-q", "--prune", "origin"];
            if base.local.starts_with("refs/tags/") {
                args.push("--tags");
            }
            git.jailed(&wt, &args, true).await.map_err(|e| Failed::Worktree(format!("in {}: {e}", wt.display())))?;
        }
        state => {
            if state.is_some() {
                // `session` mode's last one (settled), or one whose `.git`
                // is gone: kept aside, never deleted unseen.
                let aside = format!("{WORKTREE}.before-{session}");
                match (p.config.mode, state) {
                    (GitMode::Session, Some(true)) => remove(&wt)?,
                    _ => {
                        std::fs::rename(&wt, p.root.join(&aside))
                            .map_err(|e| Failed::File(format!("cannot move {} aside: {e}", wt.display())))?;
                        notes.push(format!("git: {} held no repository; moved to {aside}", wt.display()));
                    }
                }
            }
            clone(git, p, &branch).await?;
        }
    }
    set_ref(git, p, &format!("refs/cryo/sessions/{session}/start"), &start).await?;
    cryo_files::write_file(&p.store.join(OPEN), format!("{session}\n").as_bytes(), NewFile::DURABLE)
        .map_err(|e| Failed::File(e.to_string()))?;
    Ok(Ready { worktree: wt, branch, base: base.name, base_tip: tip, start, moved, settled_before, notes })
}

/// Pushes the chamber's branch to `repo`. Another's push to the branch
/// since cryod's last one is never overwritten (a lease on that commit).
/// Returns the commit pushed, if there was anything new to push.
pub async fn push(git: &Git, p: &Place<'_>) -> Result<Option<String>, Failed> {
    let local = format!("refs/heads/{}", p.branch());
    let Some(tip) = rev(git, p, &local).await? else { return Ok(None) };
    let pushed = rev(git, p, "refs/cryo/pushed").await?;
    if pushed.as_deref() == Some(tip.as_str()) {
        return Ok(None);
    }
    let repo = p.config.repo.as_arg();
    let spec = format!("{local}:{local}");
    let lease = pushed.as_ref().map(|sha| format!("--force-with-lease={local}:{sha}"));
    let mut args = vec!["push", "-q", "--no-verify"];
    args.extend(lease.as_deref());
    args.extend(["--", &repo, &spec]);
    git.remote(&p.store, &args).await.map_err(|e| match &e {
        Failed::Exited { said, .. } if said.contains("stale info") => Failed::Push(format!("the push of {} to {repo} was refused: the branch there moved since cryo's last push (another push?); cryo did not overwrite it", p.branch())),
        _ => Failed::Push(format!("the push of {} to {repo} failed: {e}", p.branch())),
    })?;
    set_ref(git, p, "refs/cryo/pushed", &tip).await?;
    Ok(Some(tip))
}

/// Commits from `from` to `to`.
pub(super) async fn count(git: &Git, p: &Place<'_>, from: &str, to: &str) -> Result<u64, Failed> {
    let out = git.trusted(&p.store, &["rev-list", "--count", &format!("{from}..{to}")], false).await?;
    Ok(out.stdout.trim().parse().unwrap_or(0))
}

/// A fresh worktree: cryod's copy cloned (as the agent would, so nothing
/// of it is written outside the chamber), with an identity of its own.
/// Its objects are copied as files (`--local`: the copy is cryod's own,
/// trusted: 0.9 s for 10,000 files here, against 2.8 s packing them anew), never
/// linked (`--no-hardlinks`: the agent could write the copy's files
/// through a second name).
async fn clone(git: &Git, p: &Place<'_>, branch: &str) -> Result<(), Failed> {
    let store = p.store.to_string_lossy();
    let args = ["clone", "-q", "--local", "--no-hardlinks", "--branch", branch, "--", &store, WORKTREE];
    git.jailed(p.root, &args, true).await.map_err(|e| Failed::Worktree(format!("cannot make the worktree: {e}")))?;
    let wt = p.worktree();
    let email = format!("{}@cryo.invalid", p.chamber);
    let name = format!("{} (cryo)", p.chamber);
    for (key, value) in [("user.name", name.as_str()), ("user.email", email.as_str())] {
        git.jailed(&wt, &["config", key, value], false).await?;
    }
    // The files cryod writes where a CLI reads its workspace's settings
    // are not the work: never committed as what a session left.
    let d = Dir::open(&wt).map_err(|e| Failed::File(e.to_string()))?;
    let exclude = Path::new(".git/info/exclude");
    let kept = d.read_if(exclude, 64 * 1024).ok().flatten().unwrap_or_default();
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    for line in OURS {
        if !text.lines().any(|l| l == *line) {
            text.push_str(&format!("{line}\n"));
        }
    }
    d.make_dirs(Path::new(".git/info"))
        .and_then(|_| d.write(exclude, text.as_bytes(), NewFile::QUICK))
        .map_err(|e| Failed::File(e.to_string()))?;
    Ok(())
}

/// What cryod itself writes in a worktree (a CLI's workspace settings).
const OURS: &[&str] = &["/.gemini/settings.json"];

/// Removes a worktree (a link in it is removed, never followed).
fn remove(wt: &Path) -> Result<(), Failed> {
    std::fs::remove_dir_all(wt).map_err(|e| Failed::File(format!("cannot remove {}: {e}", wt.display())))
}

/// Keeps session `session`'s work: see the module's doc.
pub async fn settle(git: &Git, p: &Place<'_>, session: u64) -> Result<Settled, Failed> {
    ensure_store(git, p).await?;
    let branch = p.branch();
    let local = format!("refs/heads/{branch}");
    let wt = p.worktree();
    let mut settled = Settled { session, branch: branch.clone(), ..Settled::default() };
    if worktree_state(p)? == Some(true) {
        stuck(p)?;
        let status = git.jailed(&wt, &["status", "--porcelain", "-z", "--untracked-files=all"], false).await?;
        if !status.stdout.is_empty() {
            git.jailed(&wt, &["add", "-A"], false).await?;
            let message = format!(
                "cryo: what session {session} left uncommitted\n\nCommitted by cryod when session {session} of \
                 chamber {} ended.",
                p.chamber
            );
            git.jailed(&wt, &["commit", "-q", "--no-verify", "-m", &message], false).await?;
            settled.committed_leftovers = true;
        }
        let wt_arg = wt.to_string_lossy();
        let head = git.jailed(&wt, &["symbolic-ref", "-q", "HEAD"], false).await.map(|o| o.stdout.trim().to_string());
        let spec = match head.as_deref() {
            Ok(h) if h == local => format!("+{local}:{local}"),
            // The agent left the branch: where it was is kept too.
            other => {
                let at = other.unwrap_or("a detached HEAD");
                settled.notes.push(format!(
                    "git: the worktree was on {at}, not {branch}: kept as refs/cryo/sessions/{session}/head"
                ));
                format!("+HEAD:refs/cryo/sessions/{session}/head")
            }
        };
        let both = format!("+{local}:{local}");
        // The worktree's side reads its `.git` jailed, as the agent could.
        let far = format!("--upload-pack={}", git.upload_pack()?);
        let mut args = vec!["fetch", "-q", "--no-tags", "--no-write-fetch-head", &far, "--", &wt_arg, &spec];
        if spec.starts_with("+HEAD") {
            args.push(&both);
        }
        git.trusted(&p.store, &args, false)
            .await
            .map_err(|e| Failed::Worktree(format!("cannot keep the worktree's work: {e}")))?;
    } else {
        settled.notes.push(format!("git: {} was gone when session {session} ended", wt.display()));
    }
    let end = rev(git, p, &local).await?.unwrap_or_default();
    let start = rev(git, p, &format!("refs/cryo/sessions/{session}/start")).await?.unwrap_or_default();
    if !end.is_empty() {
        set_ref(git, p, &format!("refs/cryo/sessions/{session}/end"), &end).await?;
    }
    if !start.is_empty() && !end.is_empty() {
        settled.commits = count(git, p, &start, &end).await?;
        let stat = numstat(git, p, &start, &end).await?;
        settled.files = stat.len() as u64;
        settled.additions = stat.iter().filter_map(|f| f.additions).sum();
        settled.deletions = stat.iter().filter_map(|f| f.deletions).sum();
    }
    (settled.start, settled.end) = (start, end);
    if p.config.mode == GitMode::Session && worktree_state(p)? == Some(true) {
        remove(&wt)?;
    }
    let _ = std::fs::remove_file(p.store.join(OPEN));
    Ok(settled)
}

/// A worktree git cannot commit in: locked, or mid-merge or rebase.
fn stuck(p: &Place<'_>) -> Result<(), Failed> {
    let d = Dir::open(&p.worktree()).map_err(|e| Failed::File(e.to_string()))?;
    let has = |rel: &str| matches!(d.kind(Path::new(".git").join(rel).as_path()), Ok(Some(_)));
    let wt = p.worktree();
    if has("index.lock") {
        return Err(Failed::Worktree(format!(
            "the worktree is locked: {}/.git/index.lock is there (a git command crashed, or still runs): remove it \
             once no git runs there",
            wt.display()
        )));
    }
    for (mark, what, abort) in [
        ("MERGE_HEAD", "a merge", "merge --abort"),
        ("rebase-merge", "a rebase", "rebase --abort"),
        ("rebase-apply", "a rebase", "rebase --abort"),
        ("CHERRY_PICK_HEAD", "a cherry-pick", "cherry-pick --abort"),
        ("REVERT_HEAD", "a revert", "revert --abort"),
    ] {
        if has(mark) {
            return Err(Failed::Worktree(format!(
                "the worktree {} is in the middle of {what}: finish it, or undo it with `git -C {} {abort}`",
                wt.display(),
                wt.display()
            )));
        }
    }
    Ok(())
}

/// Removes the worktree of the chamber at `root` and cryod's copy
/// `store` (the chamber is removed or reset), by what is there, whatever
/// `cryo.toml` says now. Every branch of the copy is kept first, in one
/// bundle in `kept` (a folder of cryod's, named with `stamp`); returns what
/// `history/` keeps of it: each branch's name and commit, and the bundle.
pub async fn prune(git: &Git, root: &Path, store: &Path, kept: &Path, stamp: &str) -> Result<Option<String>, Failed> {
    let mut said = None;
    if store.join("HEAD").is_file() {
        let heads = git
            .trusted(store, &["for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/"], false)
            .await?;
        if !heads.stdout.trim().is_empty() {
            std::fs::create_dir_all(kept)
                .map_err(|e| Failed::File(format!("cannot create {}: {e}", kept.display())))?;
            let file = kept.join(format!("{stamp}.bundle"));
            let path = file.to_string_lossy();
            git.trusted(store, &["bundle", "create", "-q", &path, "--branches"], true).await?;
            let branches: String =
                heads.stdout.lines().map(|l| format!("branch {}\n", l.replacen(' ', " at ", 1))).collect();
            said = Some(format!("{branches}its commits: git fetch {path} 'refs/heads/*:refs/remotes/cryo-kept/*'\n"));
        }
    }
    let wt = root.join(WORKTREE);
    if matches!(Dir::open(root).map(|d| d.kind(Path::new(WORKTREE))), Ok(Ok(Some(Kind::Folder)))) {
        remove(&wt)?;
    }
    if store.exists() {
        std::fs::remove_dir_all(store).map_err(|e| Failed::File(format!("cannot remove {}: {e}", store.display())))?;
    }
    Ok(said)
}
