//! A `[git]` chamber's worktree around each session (see [`crate::services::git`]):
//! made ready before the agent starts, its work kept when it ends.

use std::path::PathBuf;
use std::sync::Arc;

use cryo_core::chamber::{Failed, Workplace};

use crate::chamber::config::{ChamberConfig, Git as GitConfig, Repo};
use crate::services::git::{Git, Place, Settled};

use super::{Event, Sup};

impl Sup {
    /// cryod's copy of the chamber's repository.
    pub(super) fn git_store(&self) -> PathBuf {
        Place::store_of(&self.shared.places.state_dir, self.id)
    }

    /// The git program, its worktree commands jailed as the chamber's
    /// agent (which may read cryod's copy, to fetch from it).
    async fn git_program(&self, config: &ChamberConfig) -> Result<Git, Unready> {
        let program = Git::find()?;
        let auth = self.git_auth(config);
        let readable = [self.git_store()];
        let what = format!("cryo {} git", self.machine.name());
        let jail = self.confined(config, ("git", program.clone()), &[], Default::default(), (&what, &readable)).await?;
        Ok(Git::new(program, jail).with_settings(auth))
    }

    /// The GitHub bridge's token, as git's HTTP header, when `repo` is on
    /// the bridge's own host (and only then).
    fn git_auth(&self, config: &ChamberConfig) -> Vec<(String, String)> {
        let (Some(gc), Some(g)) = (config.git.as_ref(), config.github.as_ref()) else { return Vec::new() };
        let Repo::Url(url) = &gc.repo else { return Vec::new() };
        match self.github(g) {
            Ok(cfg) if same_host(url, &cfg.api_url) => {
                use base64::Engine;
                let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{}", cfg.token));
                vec![("http.extraHeader".into(), format!("Authorization: Basic {basic}"))]
            }
            _ => Vec::new(),
        }
    }

    /// What a git task needs of the chamber, owned: its program (jailed as
    /// the agent), the place, the GitHub bridge's settings for a pull
    /// request, and the chamber's git lock.
    async fn git_job(&self) -> Result<GitJob, Unready> {
        let config = self.session_config()?.into_owned();
        let git_config = config.git.clone().ok_or(Unready::NoTable)?;
        let git = self.git_program(&config).await?;
        let publish = git_config.push.then(|| Publish {
            pull_request: git_config.pull_request,
            github: config.github.as_ref().map(|g| self.github(g)),
        });
        Ok(GitJob {
            git,
            chamber: self.machine.name().to_string(),
            root: self.root.clone(),
            store: self.git_store(),
            config: *git_config,
            publish,
            lock: self.git_lock.clone(),
        })
    }

    /// Makes the worktree ready for session `session` in a task, one at a
    /// time per chamber (after any settling under way): the chamber hears
    /// back by [`Event::Prepared`] and answers everything meanwhile.
    pub(super) async fn git_prepare(&mut self, session: u64, wake_id: String) {
        let tx = self.tx.clone();
        let name = self.machine.name().to_string();
        let job = match self.git_job().await {
            Ok(job) => job,
            Err(why) => {
                let result = Err(Failed(format!("git: {why}")));
                let _ = tx.send(Event::Prepared { wake_id, result, settled_before: None });
                return;
            }
        };
        tokio::spawn(async move {
            let _one = job.lock.lock().await;
            let place = job.place();
            let (result, settled_before) = match crate::services::git::prepare(&job.git, &place, session).await {
                Ok(ready) => {
                    let before = ready.settled_before.clone();
                    let opening = ready.prompt(&job.root);
                    (Ok(Workplace { dir: ready.worktree, opening, notes: ready.notes }), before)
                }
                Err(e) => {
                    let line = format!("git: {e} (once mended, `cryoctl chamber wake {name}` runs a session)");
                    (Err(Failed(line)), None)
                }
            };
            let _ = tx.send(Event::Prepared { wake_id, result, settled_before });
        });
    }

    /// Keeps session `session`'s work in a task (under the chamber's git
    /// lock), then, unlocked, pushes it and opens its pull request if the
    /// chamber says so: the ledger and the chamber's status get what it
    /// did, `cryo.log` a line ([`Event::GitSettled`]). Work that cannot be
    /// kept now stays in the worktree; the next preparation settles it
    /// first (and says why it cannot).
    pub(super) async fn git_settle(&mut self, session: u64) {
        let tx = self.tx.clone();
        let job = match self.git_job().await {
            Ok(job) => job,
            Err(why) => {
                let line = format!("git: session {session}'s work is left in its worktree: {why}");
                let _ = tx.send(Event::GitSettled(Err(line)));
                return;
            }
        };
        tokio::spawn(async move {
            let settled = {
                let _one = job.lock.lock().await;
                crate::services::git::settle(&job.git, &job.place(), session).await
            };
            let said = match settled {
                Ok(mut settled) => {
                    job.publish(&mut settled).await;
                    Ok(settled)
                }
                Err(e) => Err(format!("git: session {session}'s work is left in its worktree: {e}")),
            };
            let _ = tx.send(Event::GitSettled(said));
        });
    }

    /// The GitHub bridge's settings and token, as the bridge reads them.
    fn github(
        &self,
        g: &crate::chamber::config::GithubSync,
    ) -> Result<cryo_sync::github::Config, crate::services::bridges::Error> {
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
        crate::services::bridges::github_config(g, &home, &self.root)
    }

    /// What a session did on the branch: into the ledger, the status and
    /// `cryo.log`.
    pub(super) async fn record_git(&mut self, settled: Settled) {
        self.log_line(settled.line());
        for note in &settled.notes {
            self.log_line(note.clone());
        }
        let json = serde_json::to_string(&settled).unwrap_or_default();
        let r = self.shared.store.set_session_git(self.owner.fence(), settled.session, json).await;
        if let Err(e) = r {
            tracing::warn!(chamber = %self.machine.name(), error = %e, "cannot record the session's git work");
        }
        self.git_last = Some(std::sync::Arc::new(settled));
        self.publish();
    }

    /// A line of `cryo.log`, outside a session's block.
    fn log_line(&self, line: String) {
        self.log(cryo_core::chamber::LogLine::Event(line));
    }
}

/// Why a git task cannot be given what it needs (see [`Sup::git_job`]):
/// one line, said in the chamber's log or as its wake's failure.
#[derive(Debug, thiserror::Error)]
enum Unready {
    /// The chamber's settings do not load as its session would run.
    #[error(transparent)]
    Config(#[from] Failed),
    /// They have no `[git]` table (any more).
    #[error("the chamber has no [git] table")]
    NoTable,
    /// No git program.
    #[error(transparent)]
    Git(#[from] crate::services::git::Failed),
    /// The git program cannot be confined as the chamber's agent is.
    #[error(transparent)]
    Jail(#[from] cryo_session::Error),
}

/// What a git task of one chamber works with (see [`Sup::git_job`]).
struct GitJob {
    git: Git,
    chamber: String,
    root: PathBuf,
    store: PathBuf,
    config: GitConfig,
    /// `push`: what to publish after settling.
    publish: Option<Publish>,
    /// One git task at a time on the chamber's repositories.
    lock: Arc<tokio::sync::Mutex<()>>,
}

/// `push` (and `pull_request`, with the GitHub bridge's settings).
struct Publish {
    pull_request: bool,
    github: Option<Result<cryo_sync::github::Config, crate::services::bridges::Error>>,
}

impl GitJob {
    fn place(&self) -> Place<'_> {
        Place { chamber: &self.chamber, root: &self.root, store: self.store.clone(), config: &self.config }
    }

    /// With `push`, the branch pushed to `repo`; with `pull_request`, its
    /// draft pull request opened (or its body brought up to date) through
    /// the GitHub bridge's credentials. What fails is a note: the work is
    /// kept in cryod's copy either way, and the next session pushes again.
    async fn publish(&self, settled: &mut Settled) {
        let Some(publish) = &self.publish else { return };
        let place = self.place();
        if let Err(e) = crate::services::git::push(&self.git, &place).await {
            settled.notes.push(format!("git: {e}"));
            return;
        }
        if !publish.pull_request {
            return;
        }
        let cfg = match &publish.github {
            Some(Ok(cfg)) => cfg,
            Some(Err(e)) => return settled.notes.push(format!("git: no pull request: [sync.github]: {e}")),
            None => return settled.notes.push("git: no pull request: the chamber has no [sync.github]".into()),
        };
        // The base the session's start fetched (no second ask of `repo`).
        let Some(base) = crate::services::git::last_base(&place).map(|b| b.name) else {
            return settled.notes.push("git: no pull request: the base is not known yet".into());
        };
        let name = &self.chamber;
        let title = format!("cryo: {name}");
        let body = format!(
            "The work of the cryo chamber `{name}` on `{}`, kept up to date by cryod as its sessions end (a \
             draft: mark it ready when it is).\n\nSession {}: {}.",
            settled.branch,
            settled.session,
            settled.line().trim_start_matches("git: ")
        );
        match cryo_sync::github::draft_pull_request(cfg, &settled.branch, &base, &title, &body).await {
            Ok((n, url)) => {
                settled.pull_request = Some(n);
                // Shown as a link: only a web page's address.
                settled.pull_request_url = Some(url).filter(|u| u.starts_with("https://") || u.starts_with("http://"));
            }
            Err(e) => settled.notes.push(format!("git: the pull request: {}", e.message())),
        }
    }
}

/// Whether a repository's URL is on the GitHub API's host (`github.com`
/// for `api.github.com`; an Enterprise server's own host for its
/// `https://HOST/api/v3`).
fn same_host(repo: &str, api: &str) -> bool {
    let host = |url: &str| -> Option<String> {
        let rest = url.split_once("://")?.1;
        let host = rest.split(['/', '?', '#']).next()?;
        Some(host.rsplit_once('@').map_or(host, |(_, h)| h).to_ascii_lowercase())
    };
    match (host(repo), host(api)) {
        (Some(r), Some(a)) => r == a || a.strip_prefix("api.") == Some(r.as_str()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    /// The token goes to the API's own host only.
    #[test]
    fn a_token_goes_to_its_own_host() {
        use super::same_host;
        assert!(same_host("https://github.com/acme/w.git", "https://api.github.com"));
        assert!(same_host("https://ghe.example.com/acme/w.git", "https://ghe.example.com/api/v3"));
        assert!(same_host("http://127.0.0.1:4000/acme/w.git", "http://127.0.0.1:4000"));
        assert!(!same_host("https://evil.example/github.com/x.git", "https://api.github.com"));
        assert!(!same_host("https://github.com.evil.example/x.git", "https://api.github.com"));
        assert!(!same_host("http://127.0.0.1:4001/x.git", "http://127.0.0.1:4000"));
        assert!(!same_host("/srv/repo", "https://api.github.com"));
    }
}
