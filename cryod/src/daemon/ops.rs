//! The operations on one chamber that operators (cryoctl, the hub, MCP)
//! and agents ask for: each is asked of the chamber's supervisor here, or
//! carried to the node that runs it (and followed if it moves meanwhile).

use std::path::Path;

use tokio::sync::oneshot;

use super::remote::Command;
use super::*;
use crate::error::{Error, Result};
use crate::supervisor::{self, Event};

impl Daemon {
    /// A page of a chamber's conversation, oldest first: both directions,
    /// and mail not yet read (see `Mailbox::page`).
    pub async fn conversation_page(
        &self,
        v: &ChamberView,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Vec<crate::chamber::mailbox::Stored>> {
        let tz = v.snap.view.timezone.parse().unwrap_or(chrono_tz::UTC);
        let mailbox = crate::chamber::mailbox::Mailbox::new(Path::new(&v.record.path), tz);
        let before = before.map(str::to_string);
        crate::chamber::blocking(move || mailbox.page(before.as_deref(), limit)).await
    }

    /// One of the fixed files of a chamber an operator may read.
    pub async fn read_chamber_file(&self, v: &ChamberView, name: &str) -> Result<String> {
        if !matches!(name, "plan.md" | "NOTES.md") {
            return Err(Error::NotFound(format!("{name} is not a chamber file cryo serves (plan.md, NOTES.md)")));
        }
        let (root, rel) = (std::path::PathBuf::from(&v.record.path), name.to_string());
        let read = crate::chamber::blocking(move || {
            crate::chamber::Dir::open(&root)?.read_if(Path::new(&rel), crate::chamber::MAX_TEXT_FILE)
        });
        match read.await? {
            Ok(b) => Ok(String::from_utf8_lossy(&b.unwrap_or_default()).into_owned()),
            Err(e) if e.is_planted() => Err(Error::Precondition(e.to_string())),
            // A file grown past what cryo serves is the file's state, not
            // cryod's failure: said as it is (a 4xx), with what to do.
            Err(crate::chamber::FileError::TooLarge { size, max, .. }) => Err(Error::Precondition(format!(
                "{name} is {} KiB, over the {} KiB cryo shows: trim it (the agent keeps only what its future self \
                 needs there)",
                size / 1024,
                max / 1024
            ))),
            Err(e) => Err(Error::Internal(e.to_string())),
        }
    }

    /// A `[git]` chamber removed or reset: its worktree and cryod's copy of
    /// its repository go; the branch's commits are kept in a bundle in
    /// cryod's state folder, and `history_rel/git.txt` in the chamber says
    /// where. What fails is logged: the removal or reset stands.
    async fn prune_git(&self, v: &ChamberView, history_rel: &str) {
        let root = std::path::PathBuf::from(&v.record.path);
        let state = &self.0.shared.places.state_dir;
        let store = crate::services::git::Place::store_of(state, v.record.id);
        // By what is there, not by cryo.toml (which the agent may have
        // changed since): cryod's copy and the worktree.
        if !store.exists() && !root.join(crate::services::git::WORKTREE).exists() {
            return;
        }
        let Ok(program) = crate::services::git::Git::find() else { return };
        let git = crate::services::git::Git::trusted_only(program);
        let stamp = history_rel.rsplit('/').next().unwrap_or(history_rel).to_string();
        let kept = state.join("git").join("kept");
        match crate::services::git::prune(&git, &root, &store, &kept, &format!("{}-{stamp}", v.record.id)).await {
            Ok(Some(text)) => {
                let rel = std::path::Path::new(history_rel);
                let written = crate::chamber::Dir::open(&root).and_then(|d| {
                    d.make_dirs(rel)?;
                    d.write(&rel.join("git.txt"), text.as_bytes(), crate::chamber::NewFile::DURABLE).map(drop)
                });
                if let Err(error) = written {
                    tracing::warn!(chamber = %v.record.name, %error, "cannot write the branch's name into history/");
                }
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(chamber = %v.record.name, %error, "cannot prune the worktree"),
        }
    }

    /// What a `[git]` chamber's branch changed since it left its base, or
    /// session `session`'s changes (read from cryod's copy of its
    /// repository, on the node that runs it).
    pub async fn chamber_diff(&self, v: &ChamberView, session: Option<u64>) -> Result<crate::services::git::Diff> {
        if self.elsewhere(v) {
            return Err(Error::Precondition(format!(
                "{} runs on another node: ask cryoctl there (its repository's copy is kept by that node)",
                v.record.name
            )));
        }
        let root = std::path::PathBuf::from(&v.record.path);
        let system = self.0.shared.system_zone.get();
        let at = root.clone();
        let loaded = crate::chamber::blocking(move || crate::chamber::config::load(&at, system)).await?;
        let loaded = loaded.map_err(|e| Error::Precondition(e.to_string()))?;
        // What the operator accepted, not an edit of the agent's.
        let records = self.0.shared.store.chambers().await?;
        let accepted = records.iter().find(|r| r.id == v.record.id).and_then(|r| r.trusted.as_deref());
        if let Some(accepted) = accepted.map(crate::chamber::trust::from_json)
            && accepted.get("git") != loaded.trust.get("git")
        {
            return Err(Error::Precondition(format!(
                "{}'s [git] changed and is not accepted yet: see it, then `cryoctl chamber trust {}`",
                v.record.name, v.record.name
            )));
        }
        let Some(git_config) = loaded.config.git else {
            return Err(Error::Precondition(format!("{} has no [git] section in its cryo.toml", v.record.name)));
        };
        let git = crate::services::git::Git::trusted_only(
            crate::services::git::Git::find().map_err(|e| Error::Precondition(e.to_string()))?,
        );
        let store = crate::services::git::Place::store_of(&self.0.shared.places.state_dir, v.record.id);
        let place = crate::services::git::Place { chamber: &v.record.name, root: &root, store, config: &git_config };
        crate::services::git::diff(&git, &place, session).await.map_err(|e| match e {
            crate::services::git::Failed::Unrecorded { .. } => Error::NotFound(e.to_string()),
            _ => Error::Precondition(e.to_string()),
        })
    }

    /// Replaces a chamber's `plan.md` (through its supervisor, the one writer).
    pub async fn write_plan(&self, v: &ChamberView, text: &str) -> Result<()> {
        let text = text.to_string();
        let mine = text.clone();
        if !self.elsewhere(v)
            && let Some(written) = self.ask_here(v.record.id, |reply| Event::WritePlan { text: mine, reply }).await?
        {
            return written;
        }
        self.forward(v, Command::WritePlan { text }).await?.done()
    }

    /// Asks the chamber's supervisor on this node, where the caller cannot
    /// follow a hand-over (see [`Daemon::ask_here`]).
    pub(super) async fn ask<T>(&self, id: i64, make: impl FnOnce(oneshot::Sender<T>) -> Event) -> Result<T> {
        self.ask_here(id, make).await?.ok_or_else(|| {
            Error::Unavailable(
                "the chamber was handed to another node of the fleet meanwhile: run the command again".into(),
            )
        })
    }

    /// Asks the chamber's supervisor on this node. `None`: the chamber was
    /// handed on to another node of the fleet under the call (a balancing
    /// round, a move), so the caller follows it there with
    /// [`Daemon::forward`].
    pub(super) async fn ask_here<T>(
        &self,
        id: i64,
        make: impl FnOnce(oneshot::Sender<T>) -> Event,
    ) -> Result<Option<T>> {
        let handed_on = || self.0.shared.store.fleet().is_some() && (self.leaving(id) || !self.runs(id));
        let handle = match self.handle_of(id).await {
            Err(_) if handed_on() => return Ok(None),
            h => h?,
        };
        let (tx, rx) = oneshot::channel();
        if handle.tx.send(make(tx)).is_err() {
            return if handed_on() {
                Ok(None)
            } else {
                Err(Error::Internal("the chamber's supervisor has stopped".into()))
            };
        }
        match rx.await {
            Ok(answer) => Ok(Some(answer)),
            Err(_) if handed_on() => Ok(None),
            Err(_) => Err(Error::Internal("the chamber's supervisor did not answer".into())),
        }
    }

    /// Unregisters a chamber (ending its session); its files stay.
    pub async fn remove(&self, r: &ChamberRef) -> Result<ChamberView> {
        let v = self.resolve(r).await?;
        if self.elsewhere(&v) {
            self.forward(&v, Command::Remove).await?.done()?;
            self.remote_mut().remove(&v.record.id);
            self.0.shared.notify(v.record.id, crate::services::runtime::NoticeKind::Removed);
            self.note_names();
            return Ok(v);
        }
        let fence = self.chambers().get(&v.record.id).map(|e| e.record.fence()).unwrap_or(v.record.fence());
        self.ask(v.record.id, Event::Remove).await?;
        let stamp = self.0.shared.clock.now().format("%Y%m%dT%H%M%SZ");
        self.prune_git(&v, &format!("history/removed-{stamp}")).await;
        self.0.shared.store.remove_chamber(fence).await?;
        self.chambers_mut().remove(&v.record.id);
        self.0.shared.names.unlink(&v.record.name);
        self.0.shared.notify(v.record.id, crate::services::runtime::NoticeKind::Removed);
        self.note_names();
        tracing::info!(chamber = %v.record.name, "chamber removed from the registry");
        Ok(v)
    }

    /// Starts a chamber. Returns the view and whether it was started already.
    /// With `wait`, returns once a first session's agent has started.
    pub async fn start(&self, r: &ChamberRef, wait: bool) -> Result<(ChamberView, bool)> {
        let v = self.resolve(r).await?;
        if !self.elsewhere(&v)
            && let Some(already) = self.ask_here(v.record.id, |reply| Event::Start { wait, reply }).await?
        {
            return Ok((self.view_of(v.record.id).unwrap_or(v), already?));
        }
        let (v, already, _) = self.forward(&v, Command::Start { wait }).await?.flags(&v)?;
        Ok((v, already))
    }

    /// Stops a chamber; returns once a running session has ended.
    /// The flags: it was stopped already; a session was ended.
    pub async fn stop(&self, r: &ChamberRef, wait: bool) -> Result<(ChamberView, bool, bool)> {
        let v = self.resolve(r).await?;
        if !self.elsewhere(&v)
            && let Some(answer) = self.ask_here(v.record.id, |reply| Event::Stop { wait, reply }).await?
        {
            let (already, ended) = answer?;
            return Ok((self.view_of(v.record.id).unwrap_or(v), already, ended));
        }
        self.forward(&v, Command::Stop { wait }).await?.flags(&v)
    }

    /// Pauses (or resumes) a chamber; the flag says nothing changed.
    pub async fn pause(&self, r: &ChamberRef, pause: bool) -> Result<(ChamberView, bool)> {
        let v = self.resolve(r).await?;
        if !self.elsewhere(&v)
            && let Some(already) = self.ask_here(v.record.id, |tx| Event::Pause(pause, tx)).await?
        {
            return Ok((self.view_of(v.record.id).unwrap_or(v), already?));
        }
        let (v, already, _) = self.forward(&v, Command::Pause { pause }).await?.flags(&v)?;
        Ok((v, already))
    }

    /// A person sets what needs them on a chamber aside (a failure, a
    /// fault, an attention line, mail on a stopped chamber): it leaves the
    /// queue until it changes or, with `until`, until then.
    pub async fn acknowledge(&self, r: &ChamberRef, snooze: Snooze) -> Result<ChamberView> {
        let until = snooze.end(self.0.shared.clock.now())?;
        let v = self.resolve(r).await?;
        if !self.elsewhere(&v)
            && let Some(done) = self.ask_here(v.record.id, |tx| Event::Acknowledge(until, tx)).await?
        {
            done?;
            return Ok(self.view_of(v.record.id).unwrap_or(v));
        }
        Ok(self.forward(&v, Command::Acknowledge { until }).await?.flags(&v)?.0)
    }

    /// The operator accepts a chamber's `cryo.toml` as it is (see
    /// `chamber::trust`): the keys that changed since last accepted.
    /// With an `edit`, the digests of a `cryo.toml` about to be written by
    /// an operator (the hub's settings) are accepted instead.
    pub async fn trust(
        &self,
        r: &ChamberRef,
        edit: Option<crate::supervisor::Edit>,
        diff: bool,
    ) -> Result<(ChamberView, Vec<crate::chamber::trust::Change>)> {
        let v = self.resolve(r).await?;
        let mine = edit.clone();
        if !self.elsewhere(&v)
            && let Some(keys) = self.ask_here(v.record.id, |reply| Event::Trust { edit: mine, diff, reply }).await?
        {
            return Ok((self.view_of(v.record.id).unwrap_or(v), keys?));
        }
        let (view, keys) = self.forward(&v, Command::Trust { edit, diff }).await?.trusted()?;
        Ok((remote::with_view(&v, view), keys))
    }

    /// Archives a chamber (stopping it first: an archived chamber is never
    /// started) or unarchives it (it stays stopped); the flag says nothing
    /// changed.
    pub async fn archive(&self, r: &ChamberRef, archive: bool) -> Result<(ChamberView, bool)> {
        let v = self.resolve(r).await?;
        if self.elsewhere(&v) {
            let (v, already, _) = self.forward(&v, Command::Archive { archive }).await?.flags(&v)?;
            return Ok((v, already));
        }
        if archive && v.snap.view.state != State::Stopped {
            self.ask(v.record.id, |reply| Event::Stop { wait: true, reply }).await??;
        }
        let already = self.ask(v.record.id, |tx| Event::Archive(archive, tx)).await??;
        Ok((self.view_of(v.record.id).unwrap_or(v), already))
    }

    /// Resets a chamber: stops it (ending a session), then moves its
    /// runtime files into `history/TIMESTAMP/`; returns that folder
    /// (relative to the chamber). The chamber stays stopped.
    pub async fn reset(&self, r: &ChamberRef) -> Result<(ChamberView, String)> {
        let v = self.resolve(r).await?;
        if self.elsewhere(&v) {
            let (view, dir) = self.forward(&v, Command::Reset).await?.reset()?;
            return Ok((remote::with_view(&v, view), dir));
        }
        if v.snap.view.state != State::Stopped {
            self.ask(v.record.id, |reply| Event::Stop { wait: true, reply }).await??;
        }
        let dir = self.ask(v.record.id, Event::Reset).await??;
        self.prune_git(&v, &dir).await;
        Ok((self.view_of(v.record.id).unwrap_or(v), dir))
    }

    /// Runs a session now; with `replace`, ends a running one first.
    pub async fn wake(
        &self,
        r: &ChamberRef,
        message: Option<String>,
        replace: bool,
    ) -> Result<(ChamberView, supervisor::WakeOutcome)> {
        let v = self.resolve(r).await?;
        let mine = message.clone();
        if !self.elsewhere(&v)
            && let Some(out) = self.ask_here(v.record.id, |reply| Event::Wake { message: mine, replace, reply }).await?
        {
            return Ok((self.view_of(v.record.id).unwrap_or(v), out?));
        }
        self.forward(&v, Command::Wake { message, replace }).await?.woken(&v)
    }

    /// Writes a message into a chamber's inbox; returns the file.
    pub async fn send(&self, r: &ChamberRef, from: &str, subject: &str, text: &str) -> Result<supervisor::Delivered> {
        self.send_with(r, from, subject, text, Default::default()).await
    }

    /// [`Daemon::send`], with front matter beyond `from` and `subject`.
    pub async fn send_with(
        &self,
        r: &ChamberRef,
        from: &str,
        subject: &str,
        text: &str,
        meta: std::collections::BTreeMap<String, String>,
    ) -> Result<supervisor::Delivered> {
        let v = self.resolve(r).await?;
        let (from, subject, text) = (from.to_string(), subject.to_string(), text.to_string());
        let mine = Box::new((from.clone(), subject.clone(), text.clone(), meta.clone()));
        if !self.elsewhere(&v)
            && let Some(d) = self.ask_here(v.record.id, |reply| Event::Deliver { message: mine, reply }).await?
        {
            return d;
        }
        self.forward(&v, Command::Send { from, subject, text, meta }).await?.delivered()
    }

    /// An operator's TODO call.
    pub async fn todo(&self, r: &ChamberRef, call: supervisor::TodoCall) -> Result<supervisor::AgentReply> {
        let v = self.resolve(r).await?;
        let mine = Box::new(call.clone());
        if !self.elsewhere(&v)
            && let Some(answer) = self.ask_here(v.record.id, |reply| Event::Todo { call: mine, reply }).await?
        {
            return answer;
        }
        self.forward(&v, Command::Todo { call }).await?.todos()
    }

    /// Asks a chamber's bridges to pull (or push) now; returns each one's
    /// count or error, and every bridge's status after.
    pub async fn sync(&self, r: &ChamberRef, pull: bool) -> Result<supervisor::SyncOutcome> {
        let v = self.resolve(r).await?;
        if !self.elsewhere(&v)
            && let Some(answer) = self.ask_here(v.record.id, |reply| Event::Sync { pull, reply }).await?
        {
            return Ok(answer);
        }
        self.forward(&v, Command::Sync { pull }).await?.synced()
    }

    /// The most recent sessions of a chamber, newest first.
    pub async fn sessions(&self, id: i64, limit: u32) -> Result<Vec<crate::store::SessionRow>> {
        Ok(self.0.shared.store.recent_sessions(id, limit).await?)
    }

    /// How many scheduled slots of a chamber passed without a session, and
    /// the newest of them.
    pub async fn passed(&self, id: i64, limit: u32) -> Result<(u64, Vec<crate::store::PassedSlot>)> {
        Ok(self.0.shared.store.passed(id, limit).await?)
    }

    /// Each budget that applies to the chamber at `dir` (its own and its
    /// provider account's) and what is used of it now; none if its
    /// `cryo.toml` does not load.
    pub async fn budgets(&self, id: i64, dir: &Path) -> Result<Vec<crate::supervisor::budget::BudgetUse>> {
        let shared = &self.0.shared;
        let dir = dir.to_path_buf();
        let loaded = crate::chamber::blocking(move || crate::chamber::config::load(&dir, chrono_tz::UTC)).await?;
        let Ok(loaded) = loaded else { return Ok(Vec::new()) };
        let Some(applying) = crate::supervisor::budget::Applying::to(&loaded.config, &shared.config) else {
            return Ok(Vec::new());
        };
        Ok(applying.measured(&shared.store, shared.clock.now(), id).await?)
    }

    /// The live session `token` was issued to (none once it has ended).
    pub fn session_of_token(&self, token: &str) -> Option<crate::services::runtime::TokenEntry> {
        self.0.shared.tokens.lookup(token)
    }

    /// An agent's call, for the chamber and session its token belongs to.
    pub async fn agent_call(
        &self,
        chamber: i64,
        session: u64,
        call: supervisor::AgentCall,
    ) -> Result<supervisor::AgentReply> {
        let handle = self.handle_of(chamber).await?;
        let (reply, rx) = oneshot::channel();
        handle
            .tx
            .send(Event::Agent { session, call: Box::new(call), reply })
            .map_err(|_| Error::Unavailable("the chamber's supervisor has stopped".into()))?;
        rx.await.map_err(|_| Error::Unavailable("the session ended during the call".into()))?
    }
}

/// How long what needs a person is set aside ([`Daemon::acknowledge`]).
#[derive(Debug, Clone, Default)]
pub struct Snooze {
    /// Until this time (RFC 3339); empty: see `secs`.
    pub until: String,
    /// For this many seconds from now; 0 with no `until`: until what
    /// needs the person changes.
    pub secs: u64,
}

/// The longest snooze: a year (a later time is a mistake, not a plan).
const SNOOZE_MAX_DAYS: i64 = 366;

impl Snooze {
    fn end(&self, now: chrono::DateTime<chrono::Utc>) -> Result<Option<chrono::DateTime<chrono::Utc>>> {
        let most = now + chrono::Duration::days(SNOOZE_MAX_DAYS);
        let until = match (self.until.trim(), self.secs) {
            ("", 0) => return Ok(None),
            // Past a year is refused below, without overflowing on the way.
            ("", secs) => now + chrono::Duration::seconds(secs.min(SNOOZE_MAX_DAYS as u64 * 86_400 + 1) as i64),
            (at, 0) => chrono::DateTime::parse_from_rfc3339(at)
                .map_err(|e| {
                    Error::Invalid(format!("until {at:?} is not a time (RFC 3339, e.g. 2026-11-29T09:00:00Z): {e}"))
                })?
                .to_utc(),
            _ => return Err(Error::Invalid("a snooze ends at a time or after a while, not both".into())),
        };
        if until > most {
            return Err(Error::Invalid(format!("a snooze lasts at most {SNOOZE_MAX_DAYS} days")));
        }
        Ok(Some(until))
    }
}

#[cfg(test)]
mod tests {
    use super::Snooze;

    /// What a person sends (the hub's body, `cryoctl --for`): a time, a
    /// while, or neither; one line for the rest.
    #[test]
    fn a_snooze_ends_at_a_time_after_a_while_or_when_it_changes() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-29T09:00:00Z").unwrap().to_utc();
        let end = |until: &str, secs| Snooze { until: until.into(), secs }.end(now).map_err(|e| e.to_string());
        assert_eq!(end("", 0), Ok(None));
        assert_eq!(end("", 3600), Ok(Some(now + chrono::Duration::hours(1))));
        assert_eq!(end("2026-11-30T09:00:00+01:00", 0), Ok(Some(now + chrono::Duration::hours(23))));
        for (until, secs, says) in [
            ("tomorrow", 0, "is not a time"),
            ("2026-11-30T09:00:00Z", 60, "not both"),
            ("", u64::MAX, "at most 366 days"),
            ("9999-01-01T00:00:00Z", 0, "at most 366 days"),
        ] {
            let e = end(until, secs).expect_err(until);
            assert!(e.contains(says) && !e.contains('\n'), "{until:?} {secs}: {e}");
        }
    }
}
