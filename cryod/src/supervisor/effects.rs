//! How the supervisor carries out each of the machine's effects: the store,
//! the chamber's files, processes, timers, the scheduler, admission and the
//! callers. Effects whose outcome the machine needs return it as the
//! matching result input.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cryo_core::chamber::{Effect, Failed, Input, LogLine, Sig};
use cryo_session::Error as AgentError;
use cryo_session::{Prepared, Tell, Turn, Watch};
use nix::sys::signal::Signal;

use super::ledger::{Ended, Flag, Journal};
use super::{Event, Sup};
use crate::chamber::log;
use crate::services::runtime::{NoticeKind, TokenEntry};

/// Leftovers of an ended session's group get this long after SIGTERM.
const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

/// SIGTERM to what is left of an ended session's group, SIGKILL soon after.
fn end_leftovers(pgid: i32) {
    if cryo_session::signal_group(pgid, Signal::SIGTERM) {
        tokio::spawn(async move {
            tokio::time::sleep(LEFTOVER_GRACE).await;
            cryo_session::signal_group(pgid, Signal::SIGKILL);
        });
    }
}

impl Sup {
    /// Performs one effect; returns its result for the machine, if it has
    /// one. Each kind of work has its method: here, the schedule, admission
    /// and processes; in `ledger` the store; in `files` the chamber's files.
    pub(super) async fn perform(&mut self, effect: Effect) -> Option<Input> {
        // A fleet node writes only while it trusts its lease: a frozen one
        // waits here; one that lost it drops the chamber.
        if !self.owner.may_write(&self.shared.lease).await {
            return None;
        }
        match effect {
            // ---- schedule and admission
            Effect::Plan(at) => self.shared.scheduler.plan(self.id, at, self.due_sink()),
            Effect::RequestAdmission(trigger) => return Some(self.request_admission(trigger).await),
            Effect::CancelAdmission => self.shared.admission.cancel(self.id),
            Effect::Release => self.release(),
            Effect::Precheck { nonce, checks, timeout } => self.precheck(nonce, checks, timeout).await,
            Effect::Notify(n) => self.notify(n),
            Effect::HandOff(handoff) => return self.hand_off(handoff),
            Effect::HoldProvider { until } => self.hold_provider(until),
            Effect::ArmTimer { timer, after } => self.arm_timer(timer, after),
            // ---- the ledger
            Effect::RecordPassed(slots) => self.record_passed(slots).await,
            Effect::RecordWake(w) => return Some(self.record_wake(w).await),
            Effect::SessionStarted { number, pid, at, trigger, due } => {
                self.session_started(number, pid, at, (trigger, due)).await
            }
            Effect::SessionEnded { number, at, outcome, summary, trigger, started, thread } => {
                return self.session_ended(Ended { number, at, outcome, summary, trigger, started, thread }).await;
            }
            Effect::JournalClaim { number, names, then } => return Some(self.journal_claim(number, names, then).await),
            Effect::JournalAnswer { number } => self.journal(Journal::Answer { number }).await,
            Effect::JournalAnswered { id } => self.journal(Journal::Answered { id }).await,
            Effect::JournalDrop { id } => self.journal(Journal::Drop { id }).await,
            Effect::SetStarted { started, then } => return Some(self.set_flag(Flag::Started(started), then).await),
            Effect::SetPaused { paused, then } => return Some(self.set_flag(Flag::Paused(paused), then).await),
            Effect::SetArchived { archived, then } => {
                return Some(self.set_flag(Flag::Archived(archived), then).await);
            }
            // ---- the chamber's files
            Effect::Reset { req } => return Some(self.reset(req)),
            Effect::UpdateTodos { op, then } => return self.update_todos(op, then).await,
            Effect::WriteMessage { folder, message, then } => return self.write_message(folder, message, then).await,
            Effect::ArchiveInbox { names, then } => return Some(self.archive(names, then)),
            Effect::WritePlan { req, text } => return self.write_plan(req, &text).await,
            Effect::RotateLogs => self.rotate_logs(),
            Effect::Log(line) => self.log(line),
            // ---- processes
            Effect::RegisterToken { token, session } => {
                let entry = TokenEntry { chamber: self.id, name: self.machine.name().to_string(), session };
                self.shared.tokens.admit(token, entry);
            }
            Effect::RevokeToken { token } => {
                self.shared.tokens.forget(&token);
                // The session's door closes with it.
                if let Some(running) = self.running.as_mut() {
                    running.close_door();
                }
            }
            Effect::Prepare { session, wake_id } => self.git_prepare(session, wake_id).await,
            Effect::Settle { session } => self.git_settle(session).await,
            Effect::Spawn { session, wake_id, token, prompt, resume, workdir } => {
                let approvals = self.config.as_ref().ok().and_then(|c| c.approvals.clone());
                let turn = Turn {
                    prompt: &prompt,
                    prompt_file: cryo_session::PROMPT_FILE,
                    resume: resume.as_deref(),
                    approvals: approvals.as_deref(),
                    workdir: workdir.as_deref(),
                };
                let (result, notes) = match self.spawn_agent(session, &wake_id, &token, turn).await {
                    Ok((pid, notes)) => (Ok(pid), notes),
                    Err(e) => (Err(e), Vec::new()),
                };
                return Some(Input::Spawned { result, notes });
            }
            Effect::Signal { pgid, sig } => {
                cryo_session::signal_group(pgid, if sig == Sig::Kill { Signal::SIGKILL } else { Signal::SIGTERM });
            }
            Effect::EndLeftovers { pgid } => {
                end_leftovers(pgid);
                self.shared.trees.end(self.id, pgid);
            }
            Effect::Rewatch => {
                if let Ok(c) = &self.config {
                    let opened = crate::chamber::Dir::open(&self.root).ok();
                    self.shared.watcher.watch(self.id, &self.root, opened.as_ref(), &c.watch_dirs, self.watch_sink());
                }
            }
            // ---- views and callers
            Effect::SaveHealth => self.save_health().await,
            Effect::Publish => self.publish(),
            Effect::Reply { req, result } => self.answer(req, result),
        }
        None
    }

    /// Measures what limits the wake (the budgets, the provider account's
    /// hold) for the machine to judge, and queues for a permit.
    async fn request_admission(&mut self, trigger: cryo_core::session::Trigger) -> Input {
        let budgets = self.measure_budgets().await;
        let mut accounts = self.accounts().into_iter();
        let provider = accounts.next();
        let fallbacks: Vec<String> = accounts.collect();
        let held = self.waits_for_limit().map(|(account, _, until)| cryo_core::limits::AccountHold { account, until });
        self.shared.admission.request_or(trigger, self.id, provider, fallbacks, self.grant_sink());
        Input::AdmissionAsked { req: self.own_req(), budgets, held }
    }

    /// The permit goes back: the running session (its pre-checks too) ends.
    fn release(&mut self) {
        if let Some(running) = self.running.take() {
            running.release();
        }
    }

    fn notify(&self, n: cryo_core::chamber::notice::Notice) {
        let url = self.shared.hub_link(&format!("#/c/{}", self.machine.name()));
        let event = crate::services::notifier::Event {
            id: n.id,
            kind: n.kind.to_string(),
            chamber: self.machine.name().to_string(),
            title: n.title,
            body: n.body,
            url,
            at: self.now(),
            actions: Vec::new(),
        };
        self.shared.notifiers.notify(event, self.shared.system_zone.get());
    }

    /// Hands a session's end to the daemon's hand-off task; an answer only
    /// if cryod is stopping.
    fn hand_off(&self, handoff: cryo_core::chamber::handoff::HandOff) -> Option<Input> {
        let from = self.machine.name().to_string();
        let looped = self.shared.names.handoff_loop(&from, &handoff.to);
        let job = crate::services::runtime::HandOffJob { from_id: self.id, from, handoff, looped };
        let h = self.shared.handoffs.send(job).err()?.handoff;
        let result = Err(Failed::from("cryod is stopping"));
        Some(Input::HandedOff { to: h.to, session: h.session, result })
    }

    fn hold_provider(&self, until: chrono::DateTime<chrono::Utc>) {
        if let Some(account) = self.account() {
            let left = (until - self.now()).to_std().unwrap_or_default();
            tracing::info!(chamber = %self.machine.name(), %account, ?left, "provider limit: holding the account");
            let guessed = self.running.as_ref().is_some_and(|r| r.limit_guessed());
            self.shared.admission.hold(&account, left, guessed);
        }
    }

    fn arm_timer(&mut self, timer: cryo_core::chamber::Timer, after: Duration) {
        let tx = self.tx.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = tx.send(Event::Timer(timer));
        });
        self.timers.retain(|(_, task)| !task.is_finished());
        self.timers.push((timer, task.abort_handle()));
    }

    /// Runs a wake's pre-checks off the chamber's path, one after another,
    /// and reports what they said (ended with their process groups if the
    /// permit goes back first).
    /// A check that cannot be confined as its chamber says fails (the wake
    /// goes ahead, and its agent's own spawn says why).
    async fn precheck(&mut self, nonce: String, checks: Vec<cryo_core::chamber::Check>, timeout: Duration) {
        let (tx, root) = (self.tx.clone(), self.root.clone());
        let prepared: Vec<cryo_session::Result<Prepared>> = match self.config.clone() {
            Ok(config) => {
                let mut out = Vec::with_capacity(checks.len());
                for check in &checks {
                    out.push(self.confined_check(&config, &check.command).await);
                }
                out
            }
            Err(e) => checks.iter().map(|_| Err(AgentError::Setting(e.0.clone()))).collect(),
        };
        let name = self.machine.name().to_string();
        let task = tokio::spawn(async move {
            let mut results = Vec::with_capacity(checks.len());
            for (check, prepared) in checks.into_iter().zip(prepared) {
                let said = match prepared {
                    Ok(p) => p.check(&root, timeout).await,
                    Err(why) => cryo_core::chamber::Checked::Failed { why: format!("could not be confined: {why}") },
                };
                tracing::info!(chamber = %name, command = %check.command, ?said, "pre-check");
                results.push((check, said));
            }
            let _ = tx.send(Event::Prechecked { nonce, results });
        });
        if let Some(running) = self.running.as_mut() {
            running.checking(task.abort_handle());
        }
    }

    /// `sh -c command` as the chamber's agent would run: under its sandbox
    /// and limits, with its environment (the confined allowlist, a private
    /// TMPDIR), `[provider].env`, `CRYO_CHAMBER`, `CRYO_PRECHECK=1` and its
    /// zone; never cryod's socket.
    async fn confined_check(
        &mut self,
        config: &crate::chamber::config::ChamberConfig,
        command: &str,
    ) -> cryo_session::Result<Prepared> {
        // A key file that cannot be read leaves its key out: the agent's
        // spawn says why.
        let mut env = config.agent_env().unwrap_or_else(|_| config.provider_env.clone());
        env.insert("CRYO_CHAMBER".into(), self.machine.name().to_string());
        env.insert("CRYO_PRECHECK".into(), "1".into());
        if config.timezone_set {
            env.insert("TZ".into(), config.timezone.name().to_string());
        }
        let args = vec!["-c".to_string(), command.to_string()];
        let what = format!("cryo {} pre-check", self.machine.name());
        self.confined(config, ("sh", "/bin/sh".into()), &args, env, (&what, &[])).await
    }

    /// `program` (named `arg0`) with `args`, as the chamber's agent would
    /// run: under its sandbox and limits, with `env` over its environment
    /// (the confined allowlist and a private TMPDIR, else cryod's own),
    /// described as `what`, and able to read `readable` too.
    pub(super) async fn confined(
        &self,
        config: &crate::chamber::config::ChamberConfig,
        (arg0, program): (&str, PathBuf),
        args: &[String],
        env: std::collections::BTreeMap<String, String>,
        (what, readable): (&str, &[PathBuf]),
    ) -> cryo_session::Result<Prepared> {
        let jail = self.jail(config).await?;
        let path = std::env::var("PATH").unwrap_or_default();
        let run = cryo_session::Run { arg0, program, args, path: &path, door: None, what, readable, stdin: None };
        jail.prepare(env, run)
    }

    /// What confines the chamber's processes, as its config says.
    async fn jail<'a>(
        &'a self,
        config: &'a crate::chamber::config::ChamberConfig,
    ) -> cryo_session::Result<cryo_session::Jail<'a>> {
        // A path of `writable`, `readable` or a key file that leads
        // elsewhere than when read (the agent moved a link): read the file
        // again, which holds the chamber for the operator.
        if let Some(line) = config.moved() {
            let _ = self.tx.send(Event::Watched(crate::services::watch::Change::Config));
            return Err(AgentError::Setting(line));
        }
        let mode = self.sandbox_of(config);
        // Every other chamber (of every node) is hidden from a confined one.
        let others = match mode {
            crate::config::Sandbox::Off => Vec::new(),
            _ => {
                let all = self
                    .shared
                    .store
                    .chambers()
                    .await
                    .map_err(|e| AgentError::Unavailable(format!("cannot list the chambers: {e}")))?;
                all.into_iter().filter(|c| c.id != self.id).map(|c| PathBuf::from(c.path)).collect()
            }
        };
        Ok(cryo_session::Jail {
            chamber: self.machine.name(),
            root: &self.root,
            setup: config.setup(),
            mode,
            others,
            gateway_port: self.shared.gateway.addr().map(|a| a.port()),
            gateway_socket: self.shared.gateway.unix_path(),
            places: &self.shared.places,
        })
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
            Err(error) => {
                tracing::warn!(chamber = %self.machine.name(), %error, "cannot write cryo.log");
                // Never silently: the chamber's attention says why and what
                // to do (a link the agent planted there, a full disk).
                let line = format!(
                    "cryod cannot write cryo.log ({error}): the chamber's log stops until it can; remove or mend \
                     {}/cryo.log",
                    self.root.display()
                );
                let _ = self.tx.send(Event::Trouble(line));
            }
        }
    }

    /// Where the scheduler sends `Due`.
    fn due_sink(&self) -> crate::base::scheduler::Sink {
        let tx = self.tx.clone();
        Arc::new(move |at| tx.send(Event::Due(at)).is_ok())
    }

    /// Where admission sends a permit (given back if the chamber is gone).
    fn grant_sink(&self) -> crate::services::admission::Sink {
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

    /// A session's watch, if its chamber's settings watch anything: what
    /// it sees comes back as `Caught`.
    fn watch(&self, session: u64, config: &crate::chamber::config::ChamberConfig) -> Option<Watch> {
        let tx = self.tx.clone();
        Watch::new(
            config.watch.stall_after,
            config.watch.loop_after,
            Arc::new(move |caught| {
                let _ = tx.send(Event::Caught { session, caught });
            }),
        )
    }

    /// Where a session's stream reports the provider's limit.
    fn limit_sink(&self, session: u64) -> Arc<dyn Fn(cryo_session::Limited) + Send + Sync> {
        let tx = self.tx.clone();
        Arc::new(move |limited| {
            let _ = tx.send(Event::Limit { session, limited: Box::new(limited) });
        })
    }

    /// Session `number`'s way through the gateway: the account's upstream,
    /// what the session may spend in all (the lowest of `max_session_usd`
    /// and what each budget has left), and whom its findings are told.
    async fn through_gateway(
        &self,
        number: u64,
        watch: Option<&Watch>,
        trace: Option<Arc<crate::base::otlp::Trace>>,
    ) -> cryo_session::Through<crate::gateway::Asking> {
        let account = self.account();
        let upstream =
            account.as_ref().and_then(|a| self.shared.config.providers.get(a)).and_then(|p| p.upstream.clone());
        let left = self
            .measure_budgets()
            .await
            .into_iter()
            .filter(|b| b.key.ends_with("_usd"))
            .map(|b| (b.limit - b.used).max(0.0));
        let line = self.max_session_usd().into_iter().chain(left).reduce(f64::min);
        let account = account.unwrap_or_default();
        let (admission, name, held) = (self.shared.admission.clone(), self.machine.name().to_string(), account.clone());
        let hold: Arc<dyn Fn(Duration, String) + Send + Sync> = Arc::new(move |wait, source| {
            tracing::info!(chamber = %name, account = %held, ?wait, %source, "provider limit: holding new wakes");
            admission.hold_for(&held, wait, source);
        });
        let over = self.over_budget_sink(number);
        let alive: Arc<dyn Fn() + Send + Sync> = match watch.cloned() {
            Some(w) => Arc::new(move || w.touch()),
            None => Arc::new(|| {}),
        };
        let answered: Arc<dyn Fn(u64) + Send + Sync> = match watch.cloned() {
            Some(w) => Arc::new(move |h| w.request(h)),
            None => Arc::new(|_| {}),
        };
        let tell =
            crate::gateway::Tell { limit: self.limit_sink(number), hold, over: Arc::from(over), alive, answered };
        let fallback = self.fallback().is_some();
        let gateway = crate::gateway::Asking {
            gateway: self.shared.gateway.clone(),
            chamber: self.machine.name().to_string(),
            account: account.clone(),
            session: number,
            line,
            prices: self.shared.prices.clone(),
            tell,
            trace,
        };
        cryo_session::Through { gateway, account, upstream, fallback }
    }

    /// Where the file watcher sends what it saw.
    pub(super) fn watch_sink(&self) -> crate::services::watch::Sink {
        let tx = self.tx.clone();
        // The watcher may say the same thing again and again (every chamber
        // is told to look again when the kernel's queue overflows): a
        // chamber hears it once while it waits, so a frozen chamber's queue
        // stays short while its thaw waits its turn.
        Arc::new(move |c| {
            let _ = tx.send_unless_waiting(Event::Watched(c.clone()), |e| matches!(e, Event::Watched(w) if *w == c));
        })
    }

    /// Starts the agent in its own process group (see `cryo_session::start`);
    /// returns its pid (the group's id too) and the lines its start has for
    /// the session's block in `cryo.log`. An agent starts only under a
    /// permit: the running session's, which keeps its group and its door.
    async fn spawn_agent(
        &mut self,
        number: u64,
        wake_id: &str,
        token: &str,
        turn: Turn<'_>,
    ) -> Result<(u32, Vec<String>), Failed> {
        if self.running.is_none() {
            return Err(Failed::from("no admission permit is held"));
        }
        let mut notes = self.fallback_notes();
        let config = self.session_config()?;
        let config = config.as_ref();
        let lease = &self.shared.lease;
        // The trust left now, as an instant: were cryod frozen before the
        // keeper starts, the keeper finds it past and starts nothing.
        let until = cryo_session::keeper_until(lease.deadline());
        let keeper = lease.is_fleet().then_some(cryo_session::Keeper { until, fence: self.owner.fence().token });
        // The session's own door: the only socket its agent is given.
        let key = cryo_session::DoorKey { chamber: self.id, session: number };
        let door = self
            .shared
            .doors
            .open(key, &crate::base::random::hex(6))
            .map_err(|e| Failed(format!("cannot open the session's socket: {e}")))?;
        let tx = self.tx.clone();
        let on_exit = Box::new(move |e: cryo_session::Exit| {
            let _ = tx.send(Event::Exited { session: number, status: e.status, usage: e.usage, limited: e.limited });
        });
        let watch = self.watch(number, config);
        // The wake's trace, linked to the chamber's wake before.
        let trace = self.shared.otlp.trace(self.last_trace);
        let gateway = Some(self.through_gateway(number, watch.as_ref(), trace.clone()).await);
        let jail = self.jail(config).await.map_err(Failed::of)?;
        let readable = if config.git.is_some() { vec![self.git_store()] } else { Vec::new() };
        // Keys kept in files are read now, so a rotated key is used at once.
        let provider_env = config.agent_env().map_err(|e| Failed::of(AgentError::Setting(e.to_string())))?;
        let session = cryo_session::Session {
            provider_env,
            readable: &readable,
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
                watch,
                trace: trace.clone().map(|t| t as Arc<dyn cryo_session::Trace>),
            },
            prices: self.shared.prices.clone(),
            gateway,
            on_exit,
        };
        let started = cryo_session::start(session).await.map_err(Failed::of)?;
        let pgid = started.pid as i32;
        if let Some(pipe) = started.keeper {
            self.shared.lease.keep(pgid, pipe);
        }
        self.shared.live.add(pgid);
        if let Some(tree) = started.tree {
            self.shared.trees.add(self.id, pgid, tree);
        }
        if let Some(running) = self.running.as_mut() {
            running.started(pgid, door, started.ticket, trace);
        }
        notes.extend(started.notes);
        Ok((started.pid, notes))
    }

    /// Notes a write refused by the fence: the chamber is someone else's now.
    /// Any write that failed keeps the chamber from freezing (the store may
    /// not hold what its machine does).
    pub(super) fn fenced<T>(&mut self, r: Result<T, crate::store::StoreError>) -> Result<T, crate::store::StoreError> {
        self.unsaved |= r.is_err();
        if self.owner.fenced(&r)
            && let Err(e) = &r
        {
            tracing::warn!(chamber = %self.machine.name(), error = %e, "dropping the chamber");
        }
        r
    }
}

/// The end of `cryo-agent.log`: this session's part of its last 64 KiB.
pub(super) fn read_tail(root: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let rel = Path::new(cryo_session::AGENT_LOG);
    let Ok(mut f) = crate::chamber::Dir::open(root).and_then(|d| d.open_read(rel, None)) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.take(64 * 1024).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    // Only this session's part: after the last session header (and the
    // line under it that says what the session holds).
    match text.rfind("--- cryo session ") {
        Some(i) => {
            let rest = text[i..].split_once('\n').map(|(_, rest)| rest).unwrap_or_default();
            let rest = match rest.strip_prefix("--- it holds: ") {
                Some(r) => r.split_once('\n').map(|(_, r)| r).unwrap_or_default(),
                None => rest,
            };
            rest.to_string()
        }
        None => text,
    }
}
