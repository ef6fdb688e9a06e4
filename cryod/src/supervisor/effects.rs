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
use crate::chamber::mailbox::{Folder, Stored};
use crate::chamber::{log, todos};
use crate::runtime::{NoticeKind, TokenEntry};
use crate::spawn;
use crate::store::{Desired, SessionEnd, SessionStart, WakeRecord};

/// Leftovers of an ended session's group get this long after SIGTERM.
const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

/// How long a keeper may take to start its agent.
const KEEPER_START: Duration = Duration::from_secs(10);
/// Where the prompt is kept for people (and for one too long for an argument).
const PROMPT_FILE: &str = ".cryo/prompt.md";

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
                let provider = self.config.as_ref().ok().map(spawn::provider_account);
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
            Effect::Precheck { nonce, checks, timeout } => self.precheck(nonce, checks, timeout),
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
                    let account = spawn::provider_account(config);
                    let left = (until - self.now()).to_std().unwrap_or_default();
                    tracing::info!(chamber = %self.machine.name(), %account, ?left, "provider limit: holding the account");
                    self.shared.admission.hold(&account, left);
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
                let provider = self.config.as_ref().ok().map(spawn::provider_account);
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
                let made = || crate::chamber::reset::to_history(root, now, crate::sandbox::strongest());
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
                let result = crate::chamber::write_atomic(&self.root.join("plan.md"), text.as_bytes())
                    .map_err(|e| e.to_string());
                return Some(Input::PlanWritten { req, result });
            }
            Effect::RotateLogs => {
                let (max, keep) = (self.shared.config.log_max_bytes, self.shared.config.log_keep);
                let events = self.root.join(".cryo").join(EVENTS_FILE);
                for path in [self.root.join("cryo.log"), self.root.join("cryo-agent.log"), events] {
                    if let Err(error) = log::rotate(&path, max, keep) {
                        tracing::warn!(chamber = %self.machine.name(), %error, file = %path.display(), "cannot rotate a log");
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
            }
            Effect::Spawn { session, wake_id, token, prompt, resume } => {
                let turn = spawn::Turn { prompt: &prompt, prompt_file: PROMPT_FILE, resume: resume.as_deref() };
                return Some(Input::Spawned(self.spawn_agent(session, &wake_id, &token, &turn).await));
            }
            Effect::Signal { pgid, sig } => {
                spawn::signal_group(pgid, if sig == Sig::Kill { Signal::SIGKILL } else { Signal::SIGTERM });
            }
            Effect::EndLeftovers { pgid } => {
                if spawn::signal_group(pgid, Signal::SIGTERM) {
                    tokio::spawn(async move {
                        tokio::time::sleep(LEFTOVER_GRACE).await;
                        spawn::signal_group(pgid, Signal::SIGKILL);
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
    fn precheck(&mut self, nonce: String, checks: Vec<cryo_core::chamber::Check>, timeout: Duration) {
        let (tx, root) = (self.tx.clone(), self.root.clone());
        // A key file that cannot be read leaves its key out: the agent's
        // spawn says why.
        let mut env =
            self.config.as_ref().map(|c| c.agent_env().unwrap_or_else(|_| c.provider_env.clone())).unwrap_or_default();
        env.insert("CRYO_CHAMBER".into(), self.machine.name().to_string());
        env.insert("CRYO_PRECHECK".into(), "1".into());
        if let Ok(c) = &self.config
            && c.timezone_set
        {
            env.insert("TZ".into(), c.timezone.name().to_string());
        }
        let name = self.machine.name().to_string();
        let task = tokio::spawn(async move {
            let mut results = Vec::with_capacity(checks.len());
            for check in checks {
                let said = crate::precheck::run(&root, &check.command, &env, timeout).await;
                tracing::info!(chamber = %name, command = %check.command, ?said, "pre-check");
                results.push((check, said));
            }
            let _ = tx.send(Event::Prechecked { nonce, results });
        });
        self.checks = Some(task.abort_handle());
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

    fn log(&self, line: LogLine) {
        let path = self.root.join("cryo.log");
        let (now, tz) = (self.now(), self.machine.tz());
        let written = match line {
            LogLine::Begin(n) => log::begin(&path, n, now, tz, self.fleet_fence()),
            LogLine::Event(text) => log::event(&path, now, tz, &text),
            LogLine::End => log::end(&path),
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
    fn over_budget_sink(&self, session: u64) -> Box<dyn Fn() + Send> {
        let tx = self.tx.clone();
        Box::new(move || {
            let _ = tx.send(Event::OverBudget { session });
        })
    }

    /// Where a session's stream reports the provider's limit.
    fn limit_sink(&self, session: u64) -> Box<dyn Fn(crate::agent_events::Limited) + Send> {
        let tx = self.tx.clone();
        Box::new(move |limited| {
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

    /// Spawns the agent in its own process group; returns its pid (the
    /// group's id too). A fleet node starts it under a keeper.
    async fn spawn_agent(
        &mut self,
        number: u64,
        wake_id: &str,
        token: &str,
        turn: &spawn::Turn<'_>,
    ) -> Result<u32, String> {
        let config = self.config.as_ref().map_err(Clone::clone)?;
        // Keys kept in files are read now, so a rotated key is used at once.
        let provider_env = config.agent_env()?;
        let dot = self.root.join(".cryo");
        crate::chamber::make_dir_in(&self.root, &dot).map_err(|e| format!("cannot create {}: {e}", dot.display()))?;
        let (prompt, prompt_rel) = (turn.prompt, turn.prompt_file);
        // A copy for people, and for prompts too long for an argument (which
        // the agent reads at once, so it is written first); not worth an
        // fsync (it is rewritten by the next wake).
        let prompt_path = self.root.join(prompt_rel);
        let long = prompt.len() > spawn::MAX_PROMPT_ARG;
        if long {
            let _ = std::fs::write(&prompt_path, prompt.as_bytes());
        }
        let as_root = nix::unistd::geteuid().is_root();
        let mut path = std::env::var("PATH").unwrap_or_default();
        if let Some(dir) = &self.shared.agent_bin {
            path = format!("{}:{path}", dir.display());
        }
        let mcp = config.mcp.then(|| spawn::Mcp {
            program: crate::paths::find_program("cryo-agent", &self.root, &path)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|| "cryo-agent".into()),
        });
        let launch = spawn::command_line(&config.agent, &self.root, turn, as_root, mcp.as_ref(), &provider_env)?;
        // The same every session, once the binary's place is known: written
        // only when it changes (not on every wake's path).
        for (rel, text) in &launch.files {
            let file = self.root.join(rel);
            if std::fs::read(&file).ok().as_deref() != Some(text.as_bytes()) {
                crate::chamber::write_replacing(&file, text.as_bytes(), false)
                    .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
            }
        }
        let log_path = self.root.join("cryo-agent.log");
        let mut log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
        let mode = self.sandbox_of(config);
        {
            use std::io::Write;
            let confined = match mode {
                crate::config::Sandbox::Off => String::new(),
                m => format!(", sandbox {}", m.as_str()),
            };
            let _ = writeln!(
                log_file,
                "--- cryo session {number} (wake {wake_id}{confined}) at {} ---",
                cryo_core::time::format_in(self.now(), self.machine.tz())
            );
        }
        // Found here rather than by the child: a program looked up on a PATH
        // set for the child makes std fall back from posix_spawn (vfork) to
        // fork, which copies the daemon's page tables on every wake. One not
        // found is left to the spawn, whose error says why.
        let program = crate::paths::find_program(&launch.program, &self.root, &path)
            .unwrap_or_else(|| std::path::PathBuf::from(&launch.program));
        // Confined: run through cryod's Landlock launcher, which restricts
        // itself and becomes the agent, or through bubblewrap.
        let own_exe = || std::env::current_exe().map_err(|e| format!("cannot find cryod's own binary: {e}"));
        // Asking may run bubblewrap once: off the worker (an unconfined
        // session asks nothing, and keeps its worker).
        let unavailable = match mode {
            crate::config::Sandbox::Off => None,
            confined => off_worker(|| crate::sandbox::unavailable(confined)),
        };
        if let Some(why) = unavailable {
            return Err(why);
        }
        // The private TMPDIR of a confined session.
        let mut tmp = None;
        let (program, args): (std::path::PathBuf, Vec<std::ffi::OsString>) = match mode {
            crate::config::Sandbox::Off => (program, launch.args.iter().map(Into::into).collect()),
            confined => {
                let (policy, dir) =
                    self.sandbox_policy(config, &provider_env, &launch.program, &program, &path).await?;
                tmp = Some(dir);
                if confined == crate::config::Sandbox::Landlock {
                    (own_exe()?, crate::sandbox::wrap(&policy, &program, &launch.args))
                } else {
                    // The resolved file: a link to it may lie in a hidden root.
                    let real = std::fs::canonicalize(&program).unwrap_or(program);
                    (crate::sandbox::bwrap()?, crate::sandbox::bwrap_args(&policy, &real, &launch.args))
                }
            }
        };
        // Resource limits: a transient systemd scope around the whole tree.
        let (program, args) = match (config.limits.is_empty(), crate::sandbox::systemd_run()) {
            (true, _) => (program, args),
            (false, Ok(run)) => {
                let what = format!("cryo {} session {number}", self.machine.name());
                let args = crate::sandbox::scope_args(&config.limits, &what, &program, &args);
                (run, args)
            }
            (false, Err(why)) => {
                self.log(LogLine::Event(format!("memory_max and cpu_weight are not applied: {why}")));
                (program, args)
            }
        };
        let kept = self.shared.lease.is_fleet();
        let mut cmd = if kept {
            let mut cmd = tokio::process::Command::new(own_exe()?);
            let deadline = self.shared.lease.deadline().as_millis().to_string();
            cmd.arg(crate::keeper::ARG).arg(deadline);
            // A known kind's output comes back through the keeper.
            if launch.events.is_some() {
                cmd.arg(crate::keeper::RELAY);
            }
            cmd.arg(&program).args(&args);
            cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
            cmd
        } else {
            let mut cmd = tokio::process::Command::new(&program);
            cmd.arg0(&launch.program).args(&args).stdin(std::process::Stdio::null());
            // A known kind's event stream is read (transcript and usage);
            // anything else writes straight to the log.
            if launch.events.is_some() {
                cmd.stdout(std::process::Stdio::piped());
            } else {
                cmd.stdout(log_file.try_clone().map_err(|e| e.to_string())?);
            }
            cmd
        };
        // A confined agent gets only an allowlist of cryod's environment,
        // and a private TMPDIR.
        if let Some(tmp) = &tmp {
            cmd.env_clear().envs(std::env::vars().filter(|(k, _)| crate::sandbox::env_kept(k))).env("TMPDIR", tmp);
        }
        let transcript = log_file.try_clone().map_err(|e| e.to_string())?;
        let stderr_log = log_file.try_clone().map_err(|e| e.to_string())?;
        if launch.read_logs && !kept {
            cmd.stderr(std::process::Stdio::piped());
        } else {
            cmd.stderr(log_file);
        }
        cmd.current_dir(&self.root)
            .process_group(0)
            .kill_on_drop(false)
            .env("PATH", path)
            .env("CRYO_SOCKET", &self.shared.socket)
            .env("CRYO_CHAMBER", self.machine.name())
            .env("CRYO_SESSION", number.to_string())
            .env("CRYO_WAKE_ID", wake_id)
            .env("CRYO_SESSION_TOKEN", token)
            .envs(&provider_env)
            .envs(&launch.env);
        if config.timezone_set {
            cmd.env("TZ", config.timezone.name());
        }
        if kept {
            // The owner's fence, for the agent's own records (traces).
            cmd.env("CRYO_FENCE", self.fence.token.to_string());
        }
        // The spawn waits for the child's exec (vfork): off the worker, so
        // other chambers' wakes of the same instant go on meanwhile.
        // A wake decided ahead of its due instant starts its agent at the
        // instant: a thread's sleep is precise to tens of microseconds,
        // tokio's timers to a millisecond.
        let wait = self.early();
        let spawned = off_worker(|| {
            if let Some(left) = wait {
                std::thread::sleep(left);
            }
            let _gate = crate::fds::spawning();
            cmd.spawn()
        });
        // The copy for people once the agent runs, off the chamber's path.
        if !long {
            let text = prompt.to_string();
            tokio::task::spawn_blocking(move || std::fs::write(prompt_path, text));
        }
        let mut child = spawned.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{:?} not found on PATH", launch.program),
            _ => format!("cannot run {:?}: {e}", launch.program),
        })?;
        let logs = Logs { transcript, stderr: stderr_log, raw: dot.join(EVENTS_FILE) };
        if kept {
            let read = launch.events.map(|format| (format, self.model_of(&launch, format, &provider_env), logs));
            return self.kept(child, number, read).await;
        }
        let pid = child.id().ok_or("the agent exited at once")?;
        self.agent_pgid = Some(pid as i32);
        let stream = match (launch.events, child.stdout.take()) {
            (Some(format), Some(out)) => {
                let model = self.model_of(&launch, format, &provider_env);
                Some(self.read_stream(number, format, model, logs, out, child.stderr.take()))
            }
            _ => None,
        };
        let tx = self.tx.clone();
        tokio::spawn(async move {
            if let Ok(status) = child.wait().await {
                let (usage, limited) = match stream {
                    Some(s) => s.finish().await,
                    None => (None, None),
                };
                let _ = tx.send(Event::Exited { session: number, status, usage, limited });
            }
        });
        Ok(pid)
    }

    /// What a sandboxed session may reach (see `sandbox`), and its private
    /// temporary folder; `arg0` is the agent's name for itself, `program`
    /// the file it names, found on `path`.
    async fn sandbox_policy(
        &self,
        config: &crate::chamber::config::ChamberConfig,
        provider_env: &std::collections::BTreeMap<String, String>,
        arg0: &str,
        program: &std::path::Path,
        path: &str,
    ) -> Result<(crate::sandbox::Policy, std::path::PathBuf), String> {
        use std::path::PathBuf;
        for (key, dirs) in [("writable", &config.writable), ("readable", &config.readable)] {
            if let Some(missing) = dirs.iter().find(|d| !d.is_dir()) {
                return Err(format!("cryo.toml: {key} names {}, which is not a folder", missing.display()));
            }
        }
        let tmp = self.root.join(".cryo/tmp");
        crate::chamber::make_dir_in(&self.root, &tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        let (state, config_dir) = (&self.shared.state_dir, &self.shared.config_dir);
        let mut hidden = vec![state.clone(), config_dir.clone(), PathBuf::from("/tmp")];
        hidden.extend(home.clone());
        // cryod's TMPDIR, and the user's runtime folder: its sockets (the
        // session bus, the systemd user manager) would run anything outside.
        for var in ["TMPDIR", "XDG_RUNTIME_DIR"] {
            hidden.extend(std::env::var_os(var).filter(|t| !t.is_empty() && t != "/").map(PathBuf::from));
        }
        // Every other chamber (of every node).
        let others = self.shared.store.chambers().await.map_err(|e| format!("cannot list the chambers: {e}"))?;
        hidden.extend(others.into_iter().filter(|c| c.id != self.id).map(|c| PathBuf::from(c.path)));
        let mut writable = vec![self.root.clone(), PathBuf::from("/dev")];
        writable.extend(config.writable.iter().cloned());
        // The CLI's own state, made if missing (the CLI would make it, but
        // cannot inside), and its setup file.
        let kind = crate::spawn::Kind::of(arg0);
        let var = |name: &str| provider_env.get(name).cloned().or_else(|| std::env::var(name).ok());
        for dir in home.as_deref().map(|h| kind.state_dirs(h, var)).unwrap_or_default() {
            std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            writable.push(dir);
        }
        let mut readable = config.readable.clone();
        readable.extend(kind.config_files(var).into_iter().filter(|f| f.exists()));
        readable.extend(crate::sandbox::program_install(program, path));
        // cryod's socket: its folder, unless that holds cryod's own state.
        let socket = &self.shared.socket;
        let socket_dir = socket.parent().filter(|d| {
            let d = std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf());
            ![state, config_dir].iter().any(|s| s.starts_with(&d) || d.starts_with(s))
        });
        let reachable = vec![socket_dir.map_or_else(|| socket.clone(), std::path::Path::to_path_buf)];
        Ok((crate::sandbox::Policy { writable, readable, hidden, reachable, arg0: arg0.to_string() }, tmp))
    }

    /// The model a known kind's session uses: its agent line's, else its
    /// own configuration's.
    fn model_of(
        &self,
        launch: &spawn::Launch,
        format: crate::agent_events::Format,
        provider_env: &std::collections::BTreeMap<String, String>,
    ) -> Option<String> {
        launch.model.clone().or_else(|| spawn::configured_model(format, &self.root, provider_env))
    }

    /// Reads a known kind's events (`out`) and log lines (`err`) into the
    /// transcript, the raw events file and the session's usage.
    fn read_stream(
        &self,
        number: u64,
        format: crate::agent_events::Format,
        model: Option<String>,
        logs: Logs,
        out: impl tokio::io::AsyncRead + Unpin + Send + 'static,
        err: Option<impl tokio::io::AsyncRead + Unpin + Send + 'static>,
    ) -> EventStream {
        let tell = Tell {
            limit: self.limit_sink(number),
            over: self.max_session_usd().map(|max| (max, self.over_budget_sink(number))),
        };
        let s = read_events(out, format, model, logs.raw, logs.transcript, self.shared.prices.clone(), tell);
        if let Some(err) = err {
            read_logs(err, logs.stderr, s.seen.clone(), self.limit_sink(number));
        }
        s
    }

    /// An agent started under a keeper: waits for its pid, hands the
    /// keeper's pipe to the lease (which extends its deadline), reads a
    /// known kind's output as the keeper relays it (`read`), and reports
    /// the agent's own status when the keeper tells it.
    async fn kept(
        &mut self,
        mut child: tokio::process::Child,
        number: u64,
        read: Option<(crate::agent_events::Format, Option<String>, Logs)>,
    ) -> Result<u32, String> {
        use tokio::io::AsyncBufReadExt;
        let stdin = child.stdin.take().ok_or("the keeper has no stdin")?;
        let stdout = child.stdout.take().ok_or("the keeper has no stdout")?;
        // Lines of bytes: a relayed line need not be UTF-8.
        let mut lines = tokio::io::BufReader::new(stdout).split(b'\n');
        let first = tokio::time::timeout(KEEPER_START, lines.next_segment()).await;
        let first = first.map(|r| r.map(|l| l.map(|l| String::from_utf8_lossy(&l).into_owned())));
        let pid = match first {
            Ok(Ok(Some(l))) if l.starts_with("pid ") => l[4..].trim().parse::<u32>().map_err(|e| e.to_string())?,
            Ok(Ok(Some(l))) => {
                let _ = child.wait().await;
                return Err(format!("the agent did not start ({l})"));
            }
            _ => {
                let _ = child.kill().await;
                return Err("the session's keeper did not start the agent".into());
            }
        };
        let pipe = stdin.into_owned_fd().map_err(|e| format!("the keeper's pipe: {e}"))?;
        let pgid = pid as i32;
        self.shared.lease.keep(pgid, std::fs::File::from(pipe));
        self.agent_pgid = Some(pgid);
        // The relayed output, through pipes in memory, to the readers a
        // child's own output would go to.
        let (mut to_out, mut to_err, stream) = match read {
            Some((format, model, logs)) => {
                let (out_w, out_r) = tokio::io::duplex(64 * 1024);
                let (err_w, err_r) = tokio::io::duplex(16 * 1024);
                (Some(out_w), Some(err_w), Some(self.read_stream(number, format, model, logs, out_r, Some(err_r))))
            }
            None => (None, None, None),
        };
        let (tx, shared) = (self.tx.clone(), self.shared.clone());
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let mut status = None;
            while let Ok(Some(mut l)) = lines.next_segment().await {
                // A relayed line goes on as it came, bytes and all.
                let to = match l.get(..4) {
                    Some(b"out ") => &mut to_out,
                    Some(b"err ") => &mut to_err,
                    _ => {
                        status = crate::keeper::status_from_report(&String::from_utf8_lossy(&l)).or(status);
                        continue;
                    }
                };
                if let Some(w) = to {
                    l.push(b'\n');
                    let _ = w.write_all(&l[4..]).await;
                }
            }
            drop((to_out, to_err));
            let _ = child.wait().await;
            shared.lease.forget(pgid);
            use std::os::unix::process::ExitStatusExt;
            let status = status.unwrap_or_else(|| std::process::ExitStatus::from_raw(Signal::SIGKILL as i32));
            let (usage, limited) = match stream {
                Some(s) => s.finish().await,
                None => (None, None),
            };
            let _ = tx.send(Event::Exited { session: number, status, usage, limited });
        });
        Ok(pid)
    }

    /// Notes a write refused by the fence: the chamber is someone else's now.
    fn fenced<T>(&mut self, r: Result<T, crate::store::StoreError>) -> Result<T, crate::store::StoreError> {
        if let Err(e) = &r
            && e.is_fenced()
        {
            tracing::warn!(chamber = %self.machine.name(), error = %e, "dropping the chamber");
            self.dropped = true;
        }
        r
    }
}

/// The raw event stream of a known kind's agent, in `.cryo/`.
pub const EVENTS_FILE: &str = "agent-events.jsonl";

/// How long the end of an agent's stream is awaited once it exited (a child
/// it left running may hold the pipe open).
const STREAM_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// A known kind's stdout being read: its lines go raw to
/// `.cryo/agent-events.jsonl` and rendered to `cryo-agent.log`, and what
/// the session used is gathered.
struct EventStream {
    seen: Arc<std::sync::Mutex<Seen>>,
    done: tokio::task::JoinHandle<()>,
}

/// What a stream said so far.
#[derive(Default)]
struct Seen {
    usage: crate::agent_events::Usage,
    limited: Option<crate::agent_events::Limited>,
}

impl Seen {
    /// Keeps the first limit seen (stdout or the logs), and tells it at
    /// once: an agent that would wait out the limit is ended.
    fn limited(&mut self, l: &crate::agent_events::Limited, tell: &dyn Fn(crate::agent_events::Limited)) {
        if self.limited.is_none() {
            self.limited = Some(l.clone());
            tell(l.clone());
        }
    }
}

impl EventStream {
    /// What the stream said, once it ended (or after [`STREAM_DRAIN`]).
    async fn finish(self) -> (Option<Box<crate::agent_events::Usage>>, Option<Box<crate::agent_events::Limited>>) {
        let _ = tokio::time::timeout(STREAM_DRAIN, self.done).await;
        let seen = std::mem::take(&mut *self.seen.lock().expect("stream lock"));
        ((!seen.usage.is_empty()).then(|| Box::new(seen.usage)), seen.limited.map(Box::new))
    }
}

/// Where a known kind's output goes: the readable transcript (and its
/// log lines), and the raw events file.
struct Logs {
    transcript: std::fs::File,
    stderr: std::fs::File,
    raw: PathBuf,
}

/// What a session's stream tells the supervisor as soon as it is seen.
struct Tell {
    /// The provider's limit.
    limit: Box<dyn Fn(crate::agent_events::Limited) + Send>,
    /// The cost passed `max_session_usd` (the maximum, and whom to tell).
    over: Option<(f64, Box<dyn Fn() + Send>)>,
}

fn read_events(
    out: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    format: crate::agent_events::Format,
    model: Option<String>,
    raw: PathBuf,
    mut transcript: std::fs::File,
    prices: Arc<crate::agent_events::Prices>,
    tell: Tell,
) -> EventStream {
    let Tell { limit, over } = tell;
    use std::io::Write;
    use tokio::io::AsyncBufReadExt;
    let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
    let shared = seen.clone();
    let done = tokio::spawn(async move {
        let mut reader = crate::agent_events::Reader::new(format, model);
        let mut told_over = false;
        let mut raw = std::fs::OpenOptions::new().create(true).append(true).open(&raw).ok();
        let mut lines = tokio::io::BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(f) = raw.as_mut() {
                let _ = writeln!(f, "{line}");
            }
            let text: String = reader.line(&line).into_iter().map(|l| l + "\n").collect();
            let _ = transcript.write_all(text.as_bytes());
            let mut u = reader.usage.clone();
            if u.cost_usd.is_none() {
                u.cost_usd = prices.cost(&u);
            }
            if let (Some((max, tell)), Some(cost)) = (&over, u.cost_usd)
                && cost > *max
                && !told_over
            {
                told_over = true;
                tell();
            }
            let mut seen = shared.lock().expect("stream lock");
            seen.usage = u;
            if let Some(l) = &reader.limited {
                seen.limited(l, &*limit);
            }
        }
    });
    EventStream { seen, done }
}

/// An agent's log lines (OpenCode's stderr): kept in `cryo-agent.log` as
/// they are, and read for the provider's limit.
fn read_logs(
    err: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    mut log: std::fs::File,
    seen: Arc<std::sync::Mutex<Seen>>,
    limit: Box<dyn Fn(crate::agent_events::Limited) + Send>,
) {
    use std::io::Write;
    use tokio::io::AsyncBufReadExt;
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(err).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = writeln!(log, "{line}");
            if let Some(l) = crate::agent_events::opencode_log_limit(&line) {
                seen.lock().expect("stream lock").limited(&l, &*limit);
            }
        }
    });
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
pub(super) fn read_tail(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    // Only this session's part: after the last session header.
    match text.rfind("--- cryo session ") {
        Some(i) => text[i..].split_once('\n').map(|(_, rest)| rest.to_string()).unwrap_or_default(),
        None => text,
    }
}
