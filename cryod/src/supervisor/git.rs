//! A `[git]` chamber's worktree around each session (see [`crate::git`]):
//! made ready before the agent starts, its work kept when it ends.

use std::path::PathBuf;

use crate::chamber::config::ChamberConfig;
use crate::git::{Git, Place, Ready, Settled};

use super::Sup;

impl Sup {
    /// cryod's copy of the chamber's repository.
    pub(super) fn git_store(&self) -> PathBuf {
        Place::store_of(&self.shared.places.state_dir, self.id)
    }

    /// The git program, its worktree commands jailed as the chamber's
    /// agent (which may read cryod's copy, to fetch from it).
    async fn git_program(&self, config: &ChamberConfig) -> Result<Git, String> {
        let program = Git::find().map_err(|e| e.0)?;
        let readable = [self.git_store()];
        let what = format!("cryo {} git", self.machine.name());
        let jail = self
            .confined(config, ("git", program.clone()), &[], Default::default(), (&what, &readable))
            .await
            .map_err(|e| e.to_string())?;
        Ok(Git::new(program, jail))
    }

    /// Makes the worktree ready for session `number`, if the chamber has
    /// `[git]`: what the session's start needs (its folder, the prompt's
    /// opening), or the one line saying why it cannot start.
    pub(super) async fn git_prepare(&mut self, number: u64) -> Result<Option<Ready>, String> {
        let config = match self.session_config() {
            Ok(c) if c.git.is_some() => c.into_owned(),
            _ => return Ok(None),
        };
        let git = self.git_program(&config).await?;
        let store = self.git_store();
        let place =
            Place { chamber: self.machine.name(), root: &self.root, store, config: config.git.as_ref().expect("git") };
        let ready = crate::git::prepare(&git, &place, number).await.map_err(|e| format!("git: {e}"))?;
        self.git_open = Some(number);
        if let Some(s) = &ready.settled_before {
            self.record_git(s.clone()).await;
        }
        Ok(Some(ready))
    }

    /// Keeps session `number`'s work, if its worktree was made ready: the
    /// ledger and the chamber's status get what it did, `cryo.log` a line.
    /// One that cannot be kept now stays in the worktree, and the next
    /// session's start tries again (and says why it cannot).
    pub(super) async fn git_settle(&mut self, number: u64) {
        if self.git_open != Some(number) {
            return;
        }
        self.git_open = None;
        let Ok(config) = self.session_config().map(|c| c.into_owned()) else { return };
        let Some(git_config) = config.git.as_ref() else { return };
        let git = match self.git_program(&config).await {
            Ok(g) => g,
            Err(line) => return self.log_line(format!("git: the session's work is left in its worktree: {line}")),
        };
        let place =
            Place { chamber: self.machine.name(), root: &self.root, store: self.git_store(), config: git_config };
        match crate::git::settle(&git, &place, number).await {
            Ok(settled) => self.record_git(settled).await,
            Err(e) => self.log_line(format!("git: session {number}'s work is left in its worktree: {e}")),
        }
    }

    /// What a session did on the branch: into the ledger, the status and
    /// `cryo.log`.
    async fn record_git(&mut self, settled: Settled) {
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
