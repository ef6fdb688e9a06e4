//! How the supervisor carries out each of the machine's effects: the store,
//! the chamber's files, processes, timers, the scheduler, admission and the
//! callers. Effects whose outcome the machine needs return it as the
//! matching result input.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cryo_core::chamber::{AfterClaim, Effect, Folder as MachineFolder, Input, LogLine, Sig, TodoWriteError};
use nix::sys::signal::Signal;

use super::boot::claims_json;
use super::{Event, Sup};
use crate::agent::kinds::{self, Turn};
use crate::agent::stream::Tell;
use crate::agent::{group, launch};
use crate::chamber::mailbox::{Folder, Stored};
use crate::chamber::{log, todos};
use crate::runtime::{NoticeKind, TokenEntry};
use crate::store::{Desired, SessionEnd, SessionStart, WakeRecord};

/// Leftovers of an ended session's group get this long after SIGTERM.
const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

impl Sup {
    /// Performs one effect; returns its result for the machine, if it has one.
    pub(super) async fn perform(&mut self, effect: Effect) -> Option<Input> {
        // A fleet node writes only while it trusts its lease: a frozen one
        // waits here; one that lost it drops the chamber.
        if self.shared.lease.is_fleet() && !self.shared.lease.held(self.epoch).await {
            self.dropped = true;
            return None;
        }
        let store = self.shared.store.clone();
        let fence = self.fence;
        match effect {
            Effect::Plan(at) => self.shared.scheduler.plan(self.id, at, self.due_sink()),
            Effect::RequestAdmission(trigger) => {
                // A budget reached pauses the chamber before its agent starts.
                let budget = self.budget_check().await;
                if matches!(&budget, Some(Input::Budget { reached: Some(_), .. })) {
                    return budget;
                }
                // An account held at its limit: the machine knows why its
                // wakes wait, and the sender of mail is told when it will be
                // read (once per hold).
                let held = match self.held_until() {
                    Some((_, local, until)) => {
                        let tell = trigger == cryo_core::session::Trigger::Inbox && !self.told_held;
                        self.told_held |= tell;
                        let notice = tell.then(|| {
                            let subject = "Your message waits for the provider's limit".to_string();
                            let body = format!(
                                "The provider's limit for this chamber's account was reached; your message will be \
                                 read after {local}."
                            );
                            (subject, body)
                        });
                        Some(Input::ProviderHeld { until, local, notice })
                    }
                    None => {
                        self.told_held = false;
                        None
                    }
                };
                let provider = self.config.as_ref().ok().map(kinds::provider_account);
                self.shared.admission.request(trigger, self.id, provider, self.grant_sink());
                return budget.or(held);
            }
            Effect::CancelAdmission => self.shared.admission.cancel(self.id),
            Effect::Release => {
                self.permit = None;
                // Checks run under their wake's permit: given back (a stop,
                // a pause), whatever still runs of them ends.
                if let Some(checks) = self.checks.take() {
                    checks.abort();
                }
            }
            Effect::Precheck { nonce, checks, timeout } => self.precheck(nonce, checks, timeout).await,
            Effect::RecordPassed(slots) => {
                let at = crate::rfc3339(self.now());
                let slots = slots
                    .into_iter()
                    .map(|p| crate::store::PassedSlot {
                        slot_at: crate::rfc3339(p.due),
                        todo_id: Some(p.todo),
                        todo_text: Some(p.text),
                        what: p.what.to_string(),
                        reason: p.reason,
                        at: at.clone(),
                    })
                    .collect();
                if let Err(error) = store.record_passed(fence, slots).await {
                    tracing::warn!(chamber = %self.machine.name(), %error, "cannot record the passed slots");
                }
            }
            Effect::Notify(n) => {
                let url = self.shared.hub_link(&format!("#/c/{}", self.machine.name()));
                let event = crate::notifier::Event {
                    id: n.id,
                    kind: n.kind.to_string(),
                    chamber: self.machine.name().to_string(),
                    title: n.title,
                    body: n.body,
                    url,
                    at: self.now(),
                };
                self.shared.notifiers.notify(event, self.shared.system_tz());
            }
            Effect::HandOff(handoff) => {
                let from = self.machine.name().to_string();
                let looped = self.shared.handoff_loop(&from, &handoff.to);
                let job = crate::runtime::HandOffJob { from_id: self.id, from, handoff, looped };
                if let Err(e) = self.shared.handoffs.send(job) {
                    let h = e.0.handoff;
                    let result = Err("cryod is stopping".to_string());
                    return Some(Input::HandedOff { to: h.to, session: h.session, result });
                }
            }
            Effect::HoldProvider { until } => {
                if let Ok(config) = &self.config {
                    let account = kinds::provider_account(config);
                    let left = (until - self.now()).to_std().unwrap_or_default();
                    tracing::info!(chamber = %self.machine.name(), %account, ?left, "provider limit: holding the account");
                    self.shared.admission.hold(&account, left, self.limit_guessed);
                }
            }
            Effect::ArmTimer { timer, after } => {
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    let _ = tx.send(Event::Timer(timer));
                });
            }
            Effect::RecordWake(w) => {
                let record = WakeRecord {
                    number: w.number,
                    wake_id: w.wake_id,
                    trigger: w.trigger.as_str().into(),
                    reasons: serde_json::to_string(&w.reasons).unwrap_or_default(),
                    claimed: claims_json(&w.claims),
                    due_at: w.due_at.map(crate::rfc3339),
                    created_at: crate::rfc3339(w.created_at),
                    resumed_from: w.resumed_from,
                };
                let r = self.fenced(store.record_wake(fence, record).await).map_err(|e| e.to_string());
                if let Err(error) = &r {
                    tracing::error!(chamber = %self.machine.name(), %error, "cannot record the wake; not spawning");
                }
                return Some(Input::Recorded(r));
            }
            Effect::SessionStarted { number, pid, at, trigger, due } => {
                tracing::info!(chamber = %self.machine.name(), session = number, pid, "agent started");
                if let Some(late) = due.and_then(|d| (at - d).to_std().ok()) {
                    crate::metrics::get().wake_started(trigger.as_str(), late);
                }
                let lateness_ms = due.map(|d| cryo_core::session::lateness_ms(d, at));
                let start = SessionStart { number, pid, started_at: crate::rfc3339(at), lateness_ms };
                let r = store.session_started(fence, start).await;
                let _ = self.fenced(r);
            }
            Effect::SessionEnded { number, at, outcome, summary, trigger, started, thread } => {
                let lasted = started.and_then(|s| (at - s).to_std().ok());
                crate::metrics::get().session_ended(trigger.as_str(), outcome.kind(), lasted);
                let outcome = outcome.describe();
                tracing::info!(chamber = %self.machine.name(), session = number, %outcome, "session ended");
                // The account is known for every session (its budget counts
                // them all), what it used only for a known kind's.
                let used = self.usage.take().filter(|u| u.0 == number).map(|u| u.1).unwrap_or_default();
                let provider = self.config.as_ref().ok().map(kinds::provider_account);
                let usage = crate::agent_events::Usage { provider, ..used };
                let thread = thread.map(|t| (t.sessions, t.tokens));
                let end = SessionEnd { number, ended_at: crate::rfc3339(at), outcome, detail: summary, usage, thread };
                let r = store.session_ended(fence, end).await;
                if self.fenced(r).is_ok() {
                    return self.budget_check().await;
                }
            }
            Effect::JournalClaim { number, names, then } => {
                let at = crate::rfc3339(self.now());
                let r = store.journal_claim(fence, number, names.clone(), at).await;
                let result = self.fenced(r).map(|_| ()).map_err(|e| e.to_string());
                return Some(Input::Journaled { then, names, result });
            }
            Effect::JournalAnswer { number } => {
                let r = store.journal_answer(fence, number, crate::rfc3339(self.now())).await;
                let _ = self.fenced(r);
            }
            Effect::JournalAnswered { id } => {
                let r = store.claim_answered_by_id(fence, id, crate::rfc3339(self.now())).await;
                let _ = self.fenced(r);
            }
            Effect::JournalDrop { id } => {
                let r = store.journal_drop(fence, id).await;
                let _ = self.fenced(r);
            }
            Effect::SetStarted { started, then } => {
                let desired = if started { Desired::Started } else { Desired::Stopped };
                let result = self.fenced(store.set_desired(fence, desired).await).map_err(|e| e.to_string());
                if result.is_ok() {
                    let what = if started { "chamber started" } else { "chamber stopped" };
                    tracing::info!(chamber = %self.machine.name(), "{what}");
                }
                return Some(Input::StoreWritten { then, result });
            }
            Effect::SetPaused { paused, then } => {
                let result = self.fenced(store.set_paused(fence, paused).await).map_err(|e| e.to_string());
                return Some(Input::StoreWritten { then, result });
            }
            Effect::SetArchived { archived, then } => {
                let result = self.fenced(store.set_archived(fence, archived).await).map_err(|e| e.to_string());
                if result.is_ok() {
                    let what = if archived { "chamber archived" } else { "chamber unarchived" };
                    tracing::info!(chamber = %self.machine.name(), "{what}");
                }
                return Some(Input::StoreWritten { then, result });
            }
            Effect::Reset { req } => {
                let (root, now) = (&self.root, self.now());
                // A cryo.toml made again (it had none) is confined as a new chamber's.
                let made = || crate::chamber::reset::to_history(root, now, crate::agent::sandbox::strongest());
                let result = off_worker(made).map_err(|e| e.to_string());
                match &result {
                    Ok(dir) => {
                        tracing::info!(chamber = %self.machine.name(), %dir, "chamber reset");
                        self.todos_written = None;
                    }
                    Err(error) => tracing::error!(chamber = %self.machine.name(), %error, "cannot reset"),
                }
                return Some(Input::ResetDone { req, result });
            }
            Effect::UpdateTodos { op, then } => {
                let (root, tz) = (&self.root, self.machine.tz());
                let outcome = off_worker(|| todos::update_with(root, tz, op.durable(), |list| op.apply(list)));
                match &outcome {
                    Ok((_, _, Some(stamp))) => self.todos_written = Some(*stamp),
                    Ok(_) => {}
                    Err(_) => self.todos_written = None,
                }
                let outcome = outcome.map(|(done, list, _)| (done, list));
                let result = outcome.map_err(|e| match e {
                    todos::UpdateError::Fault(m) => TodoWriteError::Fault(m),
                    todos::UpdateError::Refused(e) => TodoWriteError::Refused(e),
                    todos::UpdateError::Write(m) => {
                        tracing::error!(chamber = %self.machine.name(), error = %m, "write failed");
                        TodoWriteError::Write(m)
                    }
                });
                return Some(Input::TodosUpdated { then, result });
            }
            Effect::WriteMessage { folder, mut message, then } => {
                let folder = match folder {
                    MachineFolder::Inbox => Folder::Inbox,
                    MachineFolder::Outbox => Folder::Outbox,
                };
                // A fleet node's outbox messages carry the writer's fence.
                if let (Folder::Outbox, Some(f)) = (folder, self.fleet_fence()) {
                    message.meta.insert("fence".into(), f.to_string());
                }
                let (mailbox, now) = (self.mailbox(), self.now());
                let result = off_worker(|| mailbox.write(folder, &message, now)).map_err(|e| e.to_string());
                match &result {
                    Ok(name) => {
                        self.shared.notify(self.id, NoticeKind::Message { folder, name: name.clone() });
                        if folder == Folder::Outbox {
                            self.bridges.outbox_changed();
                        }
                    }
                    Err(error) => tracing::error!(chamber = %self.machine.name(), %error, "cannot write a message"),
                }
                return Some(Input::MessageWritten { then, result });
            }
            Effect::ArchiveInbox { names, then } => return Some(self.archive(names, then)),
            Effect::WritePlan { req, text } => {
                let result = off_worker(|| {
                    let dir = crate::chamber::Dir::open(&self.root)?;
                    dir.write(Path::new("plan.md"), text.as_bytes(), crate::chamber::NewFile::DURABLE)
                })
                .map(drop)
                .map_err(|e| e.to_string());
                return Some(Input::PlanWritten { req, result });
            }
            Effect::RotateLogs => {
                let (max, keep) = (self.shared.config.log_max_bytes, self.shared.config.log_keep);
                for rel in [log::LOG, crate::agent::launch::AGENT_LOG, crate::agent::stream::EVENTS_FILE] {
                    if let Err(error) = log::rotate(&self.root, rel, max, keep) {
                        tracing::warn!(chamber = %self.machine.name(), %error, file = rel, "cannot rotate a log");
                    }
                }
            }
            Effect::Log(line) => self.log(line),
            Effect::RegisterToken { token, session } => {
                let entry = TokenEntry { chamber: self.id, name: self.machine.name().to_string(), session };
                self.shared.tokens.lock().expect("tokens lock").insert(token, entry);
            }
            Effect::RevokeToken { token } => {
                self.shared.tokens.lock().expect("tokens lock").remove(&token);
                // The session's door closes with it.
                self.door = None;
            }
            Effect::Spawn { session, wake_id, token, prompt, resume } => {
                let turn = Turn { prompt: &prompt, prompt_file: launch::PROMPT_FILE, resume: resume.as_deref() };
                return Some(Input::Spawned(self.spawn_agent(session, &wake_id, &token, turn).await));
            }
            Effect::Signal { pgid, sig } => {
                group::signal_group(pgid, if sig == Sig::Kill { Signal::SIGKILL } else { Signal::SIGTERM });
            }
            Effect::EndLeftovers { pgid } => {
                if group::signal_group(pgid, Signal::SIGTERM) {
                    tokio::spawn(async move {
                        tokio::time::sleep(LEFTOVER_GRACE).await;
                        group::signal_group(pgid, Signal::SIGKILL);
                    });
                }
            }
            Effect::Rewatch => {
                if let Ok(c) = &self.config {
                    self.shared.watcher.watch(self.id, &self.root, &c.watch_dirs, self.watch_sink());
                }
            }
            Effect::Publish => self.publish(),
            Effect::Reply { req, result } => self.answer(req, result),
        }
        None
    }

    /// Runs a wake's pre-checks off the chamber's path, one after another,
    /// and reports what they said (ended with their process groups if the
    /// permit goes back first).
    /// A check that cannot be confined as its chamber says fails (the wake
    /// goes ahead, and its agent's own spawn says why).
    async fn precheck(&mut self, nonce: String, checks: Vec<cryo_core::chamber::Check>, timeout: Duration) {
        use crate::agent::precheck::{self, Prepared};
        let (tx, root) = (self.tx.clone(), self.root.clone());
        let prepared: Vec<Result<Prepared, String>> = match self.config.clone() {
            Ok(config) => {
                let mut out = Vec::with_capacity(checks.len());
                for check in &checks {
                    out.push(self.confined_check(&config, &check.command).await);
                }
                out
            }
            Err(e) => checks.iter().map(|_| Err(e.clone())).collect(),
        };
        let name = self.machine.name().to_string();
        let task = tokio::spawn(async move {
            let mut results = Vec::with_capacity(checks.len());
            for (check, prepared) in checks.into_iter().zip(prepared) {
                let said = match prepared {
                    Ok(p) => precheck::run(&root, &p, timeout).await,
                    Err(why) => cryo_core::chamber::Checked::Failed { why: format!("could not be confined: {why}") },
                };
                tracing::info!(chamber = %name, command = %check.command, ?said, "pre-check");
                results.push((check, said));
            }
            let _ = tx.send(Event::Prechecked { nonce, results });
        });
        self.checks = Some(task.abort_handle());
    }

    /// `sh -c command` as the chamber's agent would run: under its sandbox
    /// and limits, with its environment (the confined allowlist, a private
    /// TMPDIR), `[provider].env`, `CRYO_CHAMBER`, `CRYO_PRECHECK=1` and its
    /// zone; never cryod's socket.
    async fn confined_check(
        &mut self,
        config: &crate::chamber::config::ChamberConfig,
        command: &str,
    ) -> Result<crate::agent::precheck::Prepared, String> {
        use crate::agent::precheck::Prepared;
        // A key file that cannot be read leaves its key out: the agent's
        // spawn says why.
        let mut env = config.agent_env().unwrap_or_else(|_| config.provider_env.clone());
        env.insert("CRYO_CHAMBER".into(), self.machine.name().to_string());
        env.insert("CRYO_PRECHECK".into(), "1".into());
        if config.timezone_set {
            env.insert("TZ".into(), config.timezone.name().to_string());
        }
        let jail = self.jail(config).await?;
        let args = vec!["-c".to_string(), command.to_string()];
        let path = std::env::var("PATH").unwrap_or_default();
        let what = format!("cryo {} pre-check", self.machine.name());
        let run =
            launch::Run { arg0: "sh", program: "/bin/sh".into(), args: &args, path: &path, door: None, what: &what };
        let mut notes = Vec::new();
        let confined = launch::confine(&jail, &env, run, &mut notes)?;
        let Some(tmp) = confined.tmp else {
            // Unconfined: cryod's own environment, as for its agent.
            let mut p = Prepared::shell(command, &env);
            (p.program, p.args) = (confined.program, confined.args);
            return Ok(p);
        };
        let mut all: std::collections::BTreeMap<String, String> =
            std::env::vars().filter(|(k, _)| crate::agent::sandbox::env_kept(k)).collect();
        all.insert("TMPDIR".into(), tmp.to_string_lossy().into_owned());
        all.extend(env);
        Ok(Prepared { program: confined.program, args: confined.args, env: all })
    }

    /// What confines the chamber's processes, as its config says.
    async fn jail<'a>(&'a self, config: &'a crate::chamber::config::ChamberConfig) -> Result<launch::Jail<'a>, String> {
        // A path of `writable`, `readable` or a key file that leads
        // elsewhere than when read (the agent moved a link): read the file
        // again, which holds the chamber for the operator.
        if let Some(line) = config.moved() {
            let _ = self.tx.send(Event::Watched(crate::watch::Change::Config));
            return Err(line);
        }
        let mode = self.sandbox_of(config);
        // Every other chamber (of every node) is hidden from a confined one.
        let others = match mode {
            crate::config::Sandbox::Off => Vec::new(),
            _ => {
                let all = self.shared.store.chambers().await.map_err(|e| format!("cannot list the chambers: {e}"))?;
                all.into_iter().filter(|c| c.id != self.id).map(|c| PathBuf::from(c.path)).collect()
            }
        };
        Ok(launch::Jail {
            chamber: self.machine.name(),
            root: &self.root,
            config,
            mode,
            others,
            places: &self.shared.places,
        })
    }

    /// Moves the named inbox files to the archive (those that still parse;
    /// a bad one goes to `messages/rejected/`), keeping them for the reply.
    fn archive(&mut self, names: Vec<String>, then: AfterClaim) -> Input {
        let mailbox = self.mailbox();
        let result = off_worker(|| {
            let pending: Vec<Stored> =
                mailbox.read(Folder::Inbox)?.into_iter().filter(|m| names.contains(&m.name)).collect();
            mailbox.archive(pending)
        });
        let result = match result {
            Ok(claimed) => {
                let names = claimed.iter().map(|m| m.name.clone()).collect();
                self.claimed = claimed;
                Ok(names)
            }
            Err(e) => Err(e.to_string()),
        };
        Input::Archived { then, result }
    }

    /// The chamber's fence, for what a fleet node writes into its files.
    fn fleet_fence(&self) -> Option<i64> {
        self.shared.lease.is_fleet().then_some(self.fence.token)
    }

    pub(super) fn log(&self, line: LogLine) {
        let (root, now, tz) = (&self.root, self.now(), self.machine.tz());
        let written = match line {
            LogLine::Begin(n) => log::begin(root, n, now, tz, self.fleet_fence()),
            LogLine::Event(text) => log::event(root, now, tz, &text),
            LogLine::End => log::end(root),
        };
        match written {
            Ok(line) => self.shared.notify(self.id, NoticeKind::Log(line)),
            Err(error) => tracing::warn!(chamber = %self.machine.name(), %error, "cannot write cryo.log"),
        }
    }

    /// Where the scheduler sends `Due`.
    fn due_sink(&self) -> crate::scheduler::Sink {
        let tx = self.tx.clone();
        Arc::new(move |at| tx.send(Event::Due(at)).is_ok())
    }

    /// Where admission sends a permit (given back if the chamber is gone).
    fn grant_sink(&self) -> crate::admission::Sink {
        let tx = self.tx.clone();
        Arc::new(move |p| {
            tx.send(Event::Admitted(p)).map_err(|e| match e.0 {
                Event::Admitted(p) => p,
                _ => unreachable!("we sent Admitted"),
            })
        })
    }

    /// Where a session's stream reports it went over `max_session_usd`.
    fn over_budget_sink(&self, session: u64) -> Box<dyn Fn() + Send + Sync> {
        let tx = self.tx.clone();
        Box::new(move || {
            let _ = tx.send(Event::OverBudget { session });
        })
    }

    /// Where a session's stream reports the provider's limit.
    fn limit_sink(&self, session: u64) -> Arc<dyn Fn(crate::agent_events::Limited) + Send + Sync> {
        let tx = self.tx.clone();
        Arc::new(move |limited| {
            let _ = tx.send(Event::Limit { session, limited: Box::new(limited) });
        })
    }

    /// Where the file watcher sends what it saw.
    pub(super) fn watch_sink(&self) -> crate::watch::Sink {
        let tx = self.tx.clone();
        Arc::new(move |c| {
            let _ = tx.send(Event::Watched(c));
        })
    }

    /// Starts the agent in its own process group (see `agent::launch`);
    /// returns its pid (the group's id too).
    async fn spawn_agent(&mut self, number: u64, wake_id: &str, token: &str, turn: Turn<'_>) -> Result<u32, String> {
        let config = self.config.as_ref().map_err(Clone::clone)?;
        let lease = &self.shared.lease;
        // The trust left now, as an instant: were cryod frozen before the
        // keeper starts, the keeper finds it past and starts nothing.
        let until = crate::agent::keeper::until(lease.deadline());
        let keeper = lease.is_fleet().then_some(launch::Keeper { until, fence: self.fence.token });
        // The session's own door: the only socket its agent is given.
        let key = crate::agent::door::DoorKey { chamber: self.id, session: number };
        let door = self.shared.doors.open(key).map_err(|e| format!("cannot open the session's socket: {e}"))?;
        let tx = self.tx.clone();
        let on_exit = Box::new(move |e: launch::Exit| {
            let _ = tx.send(Event::Exited { session: number, status: e.status, usage: e.usage, limited: e.limited });
        });
        let jail = self.jail(config).await?;
        let session = launch::Session {
            jail,
            number,
            wake_id,
            token,
            turn,
            local_time: cryo_core::time::format_in(self.now(), self.machine.tz()),
            door: door.path(),
            keeper,
            wait: self.early(),
            tell: Tell {
                limit: self.limit_sink(number),
                over: self.max_session_usd().map(|max| (max, self.over_budget_sink(number))),
            },
            prices: self.shared.prices.clone(),
            on_exit,
        };
        let started = launch::start(session).await?;
        self.door = Some(door);
        for note in started.notes {
            self.log(LogLine::Event(note));
        }
        let pgid = started.pid as i32;
        if let Some(pipe) = started.keeper {
            self.shared.lease.keep(pgid, pipe);
        }
        self.shared.live.add(pgid);
        self.agent_pgid = Some(pgid);
        Ok(started.pid)
    }

    /// Notes a write refused by the fence: the chamber is someone else's now.
    pub(super) fn fenced<T>(&mut self, r: Result<T, crate::store::StoreError>) -> Result<T, crate::store::StoreError> {
        if let Err(e) = &r
            && e.is_fenced()
        {
            tracing::warn!(chamber = %self.machine.name(), error = %e, "dropping the chamber");
            self.dropped = true;
        }
        r
    }
}

/// Runs file work that waits on the disk (a locked, fsynced rewrite of
/// `todo.json`, a message written or archived) without holding up the
/// runtime: its worker hands the other chambers' tasks to another thread
/// meanwhile. Without it, one chamber's fsyncs delayed the wakes of chambers
/// due in the same instant (the runtime has as many workers as cores).
/// Needs the multi-threaded runtime, which cryod and every harness of it use.
fn off_worker<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

/// The end of `cryo-agent.log`: this session's part of its last 64 KiB.
pub(super) fn read_tail(root: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let rel = Path::new(crate::agent::launch::AGENT_LOG);
    let Ok(mut f) = crate::chamber::Dir::open(root).and_then(|d| d.open_read(rel, None)) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.take(64 * 1024).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    // Only this session's part: after the last session header.
    match text.rfind("--- cryo session ") {
        Some(i) => text[i..].split_once('\n').map(|(_, rest)| rest.to_string()).unwrap_or_default(),
        None => text,
    }
}
