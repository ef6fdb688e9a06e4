//! One task per chamber: the shell around the chamber's machine
//! ([`cryo_core::chamber::Chamber`]). Every change of a chamber goes through
//! its supervisor, so there are no locks around chamber state and no two
//! writers of one chamber's files inside cryod.
//!
//! The supervisor turns what happens ([`Event`]: an operator's request, the
//! scheduler's `Due`, a file the watcher saw, a permit, an agent's call, an
//! exit, a timer) into the machine's [`Input`], adding what it observed of
//! the files (the inbox, `todo.json`, `cryo.toml`); then it performs the
//! machine's effects in order (in `effects.rs`), feeding each result straight
//! back. It decides nothing itself: the rules live in `cryo-core`.

mod approve;
mod boot;
pub mod budget;
mod effects;
mod files;
mod freeze;
mod git;
mod handle;
mod ledger;
mod limits;
mod outlets;
mod owner;
mod queue;
mod replies;
mod running;
mod trust;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use cryo_core::chamber::{Chamber, Effect, Failed, Input, Refusal, ReqId, Settings};
use tokio::sync::oneshot;

pub use self::approve::{Answer, Ask};
pub use self::boot::Recovery;
pub use self::freeze::TEST_STILL_FOR;
pub use self::handle::{AgentReply, Delivered, Edit, Event, Handle, Snapshot, SyncOutcome, Trusted};
use self::outlets::Outlets;
use self::owner::Ownership;
use self::replies::{Callers, Waiter};
use self::running::Running;
use crate::services::runtime::Thaw;
pub use cryo_core::chamber::{Call as AgentCall, State, TodoCall, WakeOutcome};

use crate::chamber::config::{self as chamber_config, ChamberConfig};
use crate::chamber::mailbox::{Folder, Mailbox};
use crate::chamber::{log, todos};
use crate::error::{Error, Result};
use crate::services::admission::Permit;
use crate::services::runtime::{NoticeKind, Shared};
use crate::services::watch::Change;

/// A chamber's supervisor. What it holds falls into parts with rules of
/// their own: its hold on the chamber ([`Ownership`]), the running session
/// ([`Running`]: made when a permit arrives, dropped when it goes back),
/// the callers waiting for replies ([`Callers`]) and where its look goes
/// out ([`Outlets`]); the rest lasts as long as the chamber.
struct Sup {
    shared: Arc<Shared>,
    id: i64,
    /// This supervisor's fence and lease epoch, and whether the chamber is
    /// still ours to write.
    owner: Ownership,
    /// The running session, while the chamber holds a permit.
    running: Option<Box<Running>>,
    /// What the operator accepted of `cryo.toml` (none yet: what it says
    /// when first read is).
    trusted: Option<handle::Accepted>,
    root: PathBuf,
    tx: queue::Sender<Event>,
    /// The snapshot for this node's views, and the fleet's mirror.
    outlets: Outlets,
    machine: Chamber,
    /// `cryo.toml` as last read (the machine keeps what its rules need).
    config: std::result::Result<ChamberConfig, Failed>,
    callers: Callers,
    /// `todo.json` as cryod last wrote it: the watcher's word that it
    /// changed is not worth a re-read while it is still that version.
    todos_written: Option<todos::Stamp>,
    bridges: crate::services::bridges::Bridges,
    /// The due instant the scheduler told ahead of time: until the clock
    /// reaches it, the machine is handed that instant as its time, and an
    /// agent's start waits for it (see [`Sup::now`]).
    ahead: Option<DateTime<Utc>>,
    /// The fallback account the last sessions billed (told once).
    fell_back: Option<String>,
    /// The last wake's root span, which the next one's links to.
    last_trace: Option<crate::base::otlp::Context>,
    /// One git task at a time on the chamber's repositories (a settling
    /// and the next preparation).
    git_lock: Arc<tokio::sync::Mutex<()>>,
    /// What the last session did on the `[git]` branch.
    git_last: Option<Arc<crate::services::git::Settled>>,
    /// Timers armed that have not fired yet (a chamber freezes only when
    /// none of them matters at rest; the rest are dropped then).
    timers: Vec<(cryo_core::chamber::Timer, tokio::task::AbortHandle)>,
    /// A write to the store failed since the boot: what the store holds
    /// may not be what the machine does, so the chamber never freezes.
    unsaved: bool,
}

/// For the tests of a supervisor that fails: `wake:NAME` in cryod's
/// environment makes chamber NAME's supervisor panic on an operator's wake,
/// `boot:NAME` at each of its boots.
pub const TEST_PANIC: &str = "CRYO_TEST_PANIC";

/// Panics if [`TEST_PANIC`] names this moment (`at`) of chamber `name`.
fn test_panic(at: &str, name: &str) {
    static SET: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let set = SET.get_or_init(|| std::env::var(TEST_PANIC).ok());
    if set.as_deref().and_then(|s| s.split_once(':')) == Some((at, name)) {
        panic!("{TEST_PANIC} names this chamber's {at}");
    }
}

/// How far the due instant the scheduler `told` is ahead of the clock's
/// `real` time: none once reached, nor when it is further ahead than a head
/// start (the clock was set back since).
fn lead(told: Option<DateTime<Utc>>, real: DateTime<Utc>) -> Option<std::time::Duration> {
    let left = (told? - real).to_std().ok()?;
    (left <= crate::base::scheduler::HEAD_START).then_some(left)
}

/// The next UTC midnight: when a daily budget starts again.
fn next_utc_day(now: DateTime<Utc>) -> DateTime<Utc> {
    let day = now.date_naive().succ_opt().unwrap_or(now.date_naive());
    day.and_hms_opt(0, 0, 0).map(|t| t.and_utc()).unwrap_or(now)
}

impl Sup {
    /// The machine's time: the clock's, or the due instant the scheduler
    /// told a head start ahead (a wake is decided and recorded as of its
    /// instant, a few milliseconds early). A clock set back past the head
    /// start drops the lead rather than holding the machine's time still.
    fn now(&self) -> DateTime<Utc> {
        let real = self.shared.clock.now();
        match (self.ahead, lead(self.ahead, real)) {
            (Some(told), Some(_)) => told,
            _ => real,
        }
    }

    /// The sandbox the chamber's sessions run under: its own `sandbox`,
    /// else cryod's.
    fn sandbox_of(&self, config: &ChamberConfig) -> crate::config::Sandbox {
        config.sandbox.unwrap_or(self.shared.config.sandbox)
    }

    /// How long until the told due instant, while it is still ahead.
    fn early(&self) -> Option<std::time::Duration> {
        lead(self.ahead, self.shared.clock.now())
    }

    fn mailbox(&self) -> Mailbox {
        Mailbox::new(&self.root, self.machine.tz())
    }

    fn wait(&mut self, w: Waiter) -> ReqId {
        self.callers.wait(w)
    }

    /// A new request id: for a waiter, or for an input that answers nobody.
    pub(super) fn own_req(&mut self) -> ReqId {
        self.callers.own_req()
    }

    /// Hands `input` to the machine and performs what it asks, depth first:
    /// the effects a result produces run before the rest of the list.
    async fn feed(&mut self, input: Input) {
        let mut queue: VecDeque<Effect> = self.machine.handle(input, self.now()).into();
        while let Some(effect) = queue.pop_front() {
            if !self.owner.is_ours() {
                return;
            }
            if let Some(result) = self.perform(effect).await {
                for e in self.machine.handle(result, self.now()).into_iter().rev() {
                    queue.push_front(e);
                }
            }
        }
    }

    /// Boxed: an async fn's by-value argument is kept twice in its future
    /// (the argument and the local it becomes), and this one lives as long
    /// as the chamber.
    /// Ends when the chamber finishes, is no longer ours, or its queue is
    /// abandoned (dropped at once); its end drops `rx`, which the handles'
    /// `closed` sees.
    /// A chamber at rest freezes (see `freeze`): at once after its boot,
    /// else once it has been still for a while; it ends then without
    /// letting go of its watches.
    async fn run(mut self: Box<Self>, mut rx: queue::Receiver<Event>) {
        self.machine.rest();
        self.publish();
        let mut still_for = std::time::Duration::ZERO;
        loop {
            let next = if self.may_freeze() {
                match tokio::time::timeout(still_for, rx.recv()).await {
                    Ok(next) => next,
                    Err(_) => match self.freeze(rx) {
                        Ok(()) => return,
                        // An event came meanwhile.
                        Err(back) => {
                            rx = back;
                            continue;
                        }
                    },
                }
            } else {
                rx.recv().await
            };
            let Some(ev) = next else { break };
            still_for = freeze::still_for();
            // Boxed: the future of an event is large (every effect's awaits)
            // and needed only while the event is handled, not at rest.
            Box::pin(self.event(ev)).await;
            // At rest, the machine keeps the next due time, not the list.
            self.machine.rest();
            if !self.owner.is_ours() {
                break;
            }
            self.publish();
            if self.machine.finished() {
                break;
            }
        }
        if !self.owner.is_ours() || rx.abandoned() {
            self.drop_chamber();
        }
        self.shared.watcher.unwatch(self.id);
        self.shared.admission.cancel(self.id);
    }

    /// Lets the chamber go without finalizing it: its agent is killed (never
    /// resumed), its tokens die, nothing more is written. The next owner's
    /// recovery closes the session and re-queues what it held.
    fn drop_chamber(&mut self) {
        tracing::warn!(chamber = %self.machine.name(), "chamber dropped: another owner will recover it");
        let mut running = self.running.take();
        if let Some(pgid) = running.as_mut().and_then(|r| r.exited()) {
            cryo_session::signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
            self.shared.trees.end(self.id, pgid);
            self.shared.lease.forget(pgid);
            self.shared.live.remove(pgid);
        }
        self.shared.tokens.forget_chamber(self.id);
        // Its door closes and its permit goes back.
        drop(running);
        self.outlets.stop_mirror();
    }

    /// Translates an event into the machine's input, with what the input
    /// needs observed first.
    async fn event(&mut self, ev: Event) {
        let input = match ev {
            Event::Start { wait, reply } => {
                self.reload_config().await;
                let req = self.wait(Waiter::Start(reply));
                let log_session = log::last_session_number(&self.root);
                Input::Start { req, wait, agent_check: self.agent_check(), log_session }
            }
            Event::Stop { wait, reply } => Input::Stop { req: self.wait(Waiter::Stop(reply)), wait },
            Event::Remove(reply) => Input::Remove { req: self.wait(Waiter::Done(reply)) },
            Event::Pause(pause, reply) => Input::Pause { req: self.wait(Waiter::Pause(reply)), pause },
            Event::Acknowledge(until, reply) => Input::Acknowledge { req: self.wait(Waiter::Pause(reply)), until },
            Event::Archive(archive, reply) => Input::Archive { req: self.wait(Waiter::Archive(reply)), archive },
            Event::Reset(reply) => Input::Reset { req: self.wait(Waiter::Reset(reply)) },
            Event::Trust { edit, diff, reply } => {
                let accepted = self.trust(edit, diff).await;
                let _ = reply.send(accepted);
                return;
            }
            Event::Wake { message, replace, reply } => {
                test_panic("wake", self.machine.name());
                Input::Wake { req: self.wait(Waiter::Wake(reply)), message, replace }
            }
            Event::Deliver { message, reply } => {
                let (from, subject, text, meta) = *message;
                Input::Deliver { req: self.wait(Waiter::Deliver(reply)), from, subject, text, meta }
            }
            Event::Todo { call, reply } => Input::Todo { req: self.wait(Waiter::Agent(reply)), call: *call },
            Event::WritePlan { text, reply } => Input::WritePlan { req: self.wait(Waiter::Plan(reply)), text },
            Event::Shutdown(reply) => Input::Shutdown { req: self.wait(Waiter::Done(reply)) },
            Event::Due(at) => {
                self.ahead = Some(at);
                Input::Due
            }
            Event::Watched(Change::Inbox(name)) => {
                self.shared.notify(self.id, NoticeKind::Message { folder: Folder::Inbox, name });
                Input::Inbox { unread: self.mailbox().unread(), arrived: true }
            }
            Event::Rescan | Event::Watched(Change::Rescan) => match self.rescanned() {
                Some(input) => input,
                None => return,
            },
            Event::Watched(Change::Todos) => match self.todos_changed() {
                Some(input) => input,
                None => return,
            },
            Event::Watched(Change::Config) => match self.read_config() {
                Some((config, warnings)) => Input::ConfigChanged { config, warnings },
                None => return,
            },
            Event::ZoneChanged => {
                let zone = self.shared.system_zone.get();
                let (config, warnings) = self.read_config().unwrap_or_else(|| self.settings());
                Input::ZoneChanged { zone, config, warnings }
            }
            Event::Admitted(permit) => self.admitted(permit).await,
            Event::Agent { session, call, reply } => {
                self.observe_inbox().await;
                Input::Agent { session, req: self.wait(Waiter::Agent(reply)), call: *call }
            }
            Event::Exited { session, status, usage, limited } => self.exited(session, status, usage, limited).await,
            Event::Timer(t) => {
                self.timers.retain(|(_, task)| !task.is_finished());
                Input::Timer(t)
            }
            Event::Prechecked { nonce, results } => Input::Prechecked { nonce, results },
            Event::Prepared { wake_id, result, settled_before } => {
                if let Some(s) = settled_before {
                    self.record_git(s).await;
                }
                Input::Prepared { wake_id, result }
            }
            Event::GitSettled(said) => {
                match said {
                    Ok(settled) => self.record_git(settled).await,
                    Err(line) => self.log(cryo_core::chamber::LogLine::Event(line)),
                }
                return;
            }
            Event::Limit { session, limited } => Input::ProviderLimit { session, until: self.limit_until(&limited) },
            Event::OverBudget { session } => Input::OverBudget { session, until: next_utc_day(self.now()) },
            Event::Caught { session, caught } => Input::Caught { session, caught },
            Event::Notice { subject, body } => Input::Notice { subject, body },
            Event::Trouble(line) => Input::Trouble { line },
            Event::Approve { session, ask, reply } => return self.approve(session, *ask, reply).await,
            Event::Parked { session, id, what } => Input::Parked { session, req: self.own_req(), id, what },
            Event::Answered(record) => match self.answered(*record) {
                Some(input) => input,
                None => return,
            },
            Event::Power { sleeping } => Input::Power { sleeping },
            Event::BridgesChanged => return,
            Event::HandedOff { to, session, result } => Input::HandedOff { to, session, result },
            Event::Sync { pull, reply } => return self.sync(pull, reply),
        };
        // The file may have changed since the watcher last spoke (and a
        // resting machine holds no list).
        if Chamber::wants_list(&input) {
            self.reload_todos().await;
        }
        self.feed(input).await;
    }

    /// The inbox read again: new mail is noticed (none new, no input).
    fn rescanned(&mut self) -> Option<Input> {
        let unread = self.mailbox().unread();
        if unread == self.machine.unread() {
            return None;
        }
        for name in unread.iter().filter(|n| !self.machine.unread().contains(n)) {
            self.shared.notify(self.id, NoticeKind::Message { folder: Folder::Inbox, name: name.clone() });
        }
        Some(Input::Inbox { unread, arrived: true })
    }

    /// `todo.json` changed, unless it is still what cryod last wrote.
    fn todos_changed(&mut self) -> Option<Input> {
        let stamp = || crate::chamber::Dir::open(&self.root).ok().and_then(|d| todos::stamp(&d));
        if self.todos_written.is_some() && stamp() == self.todos_written {
            return None;
        }
        self.todos_written = None;
        Some(Input::TodosChanged(todos::load(&self.root, self.machine.tz()).map_err(Failed::of)))
    }

    /// A permit arrived: the running session begins with it.
    async fn admitted(&mut self, permit: Permit) -> Input {
        match self.running.as_mut() {
            Some(running) => running.readmitted(permit),
            None => self.running = Some(Running::admitted(permit)),
        }
        // The inbox may have changed since the watcher last spoke.
        self.observe_inbox().await;
        Input::Admitted { nonce: random_hex(6), token: random_hex(32), fresh: self.fallback_fresh() }
    }

    /// The running agent exited: its group is let go, what it used kept for
    /// its session's row.
    async fn exited(
        &mut self,
        session: u64,
        status: std::process::ExitStatus,
        usage: Option<Box<cryo_session::Usage>>,
        limited: Option<Box<cryo_session::Limited>>,
    ) -> Input {
        // An agent that failed right after the provider refused it gave up
        // on a limit (its CLI's own retries spent): limited, not crashed.
        let gave_up = self.running.as_ref().and_then(|r| r.last_refusal()).filter(|_| !status.success());
        let limited = limited.or_else(|| {
            gave_up.map(|wait| {
                Box::new(cryo_session::Limited {
                    resets_at: None,
                    retry_after_ms: Some(wait.max(std::time::Duration::from_secs(1)).as_millis() as u64),
                    text: "the provider refused (429) and the agent's CLI gave up".into(),
                    exact: true,
                })
            })
        });
        // A keeper's pipe is no longer extended once its agent ended.
        if let Some(pgid) = self.running.as_mut().and_then(|r| r.exited()) {
            self.shared.lease.forget(pgid);
            self.shared.live.remove(pgid);
        }
        // The conversation it spoke in, for the machine; the rest for its row.
        // One spoken by a fallback's other agent is not the chamber's to
        // resume.
        let other_agent = self.fallback_fresh().is_some();
        let used = usage.as_ref().filter(|_| !other_agent).and_then(|u| {
            let tokens = u.input_tokens + u.output_tokens + u.cached_tokens;
            u.provider_session.clone().map(|conversation| cryo_core::session::Used { conversation, tokens })
        });
        if let Some(running) = self.running.as_mut() {
            running.used(session, usage.map(|u| *u));
        }
        self.observe_inbox().await;
        let log_tail = effects::read_tail(&self.root);
        let limited = limited.map(|l| self.limit_until(&l));
        Input::Exited { session, status: describe_status(status), log_tail, limited, used }
    }

    /// The machine's view plus the bridges, published for status views.
    fn publish(&mut self) {
        self.bridges.reconcile(&self.root, self.config.as_ref().ok(), self.machine.started());
        let sandbox = self.config.as_ref().ok().map(|c| self.sandbox_of(c));
        let git = self.git_last.clone();
        let accounts = self.accounts();
        let snap = Snapshot { view: self.machine.view(), bridges: self.bridges.statuses(), sandbox, git, accounts };
        if self.outlets.show(snap) {
            self.shared.notify(self.id, NoticeKind::Status);
        }
    }

    async fn reload_todos(&mut self) {
        let todos = todos::load(&self.root, self.machine.tz()).map_err(Failed::of);
        if self.machine.todos() != Some(todos.as_ref()) {
            if let Err(e) = &todos {
                tracing::warn!(chamber = %self.machine.name(), fault = %e, "chamber is faulted");
            }
            self.feed(Input::TodosChanged(todos)).await;
        }
    }

    /// Tells the machine what the inbox holds, if it differs from what it knows.
    async fn observe_inbox(&mut self) {
        let unread = self.mailbox().unread();
        if unread != self.machine.unread() {
            self.feed(Input::Inbox { unread, arrived: false }).await;
        }
    }

    fn sync(&mut self, pull: bool, reply: oneshot::Sender<SyncOutcome>) {
        let waiting = self.bridges.command(&self.root, self.machine.tz(), pull);
        let cells = self.bridges.cells();
        tokio::spawn(async move {
            let mut out = Vec::new();
            for (name, rx) in waiting {
                // Its line, as the operator reads it (it may travel to another node).
                let answer = rx.await.unwrap_or(Err(cryo_sync::bridge::CommandError::Ended));
                out.push((name, answer.map_err(|e| e.to_string())));
            }
            let _ = reply.send((out, cells.iter().map(|c| c.get()).collect()));
        });
    }
}

/// A chamber's supervisor as started: its handle, and why its boot fell
/// if it panicked (the handle's queue is closed then: the caller registers
/// it, then hands the fall to the daemon, which starts it again).
pub struct Spawned {
    pub handle: Handle,
    pub fell: Option<String>,
}

/// Starts the supervisor of a chamber, first finishing what a killed cryod
/// left open.
pub async fn spawn(shared: Arc<Shared>, record: crate::store::ChamberRecord, recovery: Recovery) -> Spawned {
    match boot::caught(boot::start(shared, record, recovery, boot::Place::new())).await {
        Ok(handle) => Spawned { handle, fell: None },
        Err(why) => {
            // A queue whose receiver is gone: the fallen supervisor's.
            let (tx, rx) = queue::channel();
            drop(rx);
            Spawned { handle: Handle { tx, snapshot: Default::default() }, fell: Some(why) }
        }
    }
}

/// Boots a frozen chamber again on its queue and snapshot, which must be
/// those of `entry` (its registry entry's handle; a queue it no longer
/// holds is let go), from its `record` and ledger `rows`, its machine told
/// that cryod ran meanwhile. Returns why the boot fell if it panicked: the
/// queue is closed then, and the caller hands the fall to the daemon as
/// [`spawn`]'s does.
pub async fn thaw(
    shared: Arc<Shared>,
    record: crate::store::ChamberRecord,
    rows: crate::store::BootRows,
    thaw: Thaw,
    entry: Handle,
) -> Option<String> {
    let rx = freeze::receiver(thaw).filter(|rx| rx.feeds(&entry.tx))?;
    let place = boot::Place { tx: rx.sender(), rx, snapshot: entry.snapshot, thawed: Some(freeze::thawed(&shared)) };
    let recovery = Recovery { rows: Some(rows), ..Recovery::default() };
    boot::caught(boot::start(shared, record, recovery, place)).await.err()
}

/// Reads a chamber's `cryo.toml` and checks what only cryod can: that
/// each `[[on_end]]` names a chamber it knows. Notes the chamber's links.
/// A `cryo.toml` whose settings of [`crate::chamber::trust::KEYS`] differ
/// from those `accepted` is held (an error naming them); with nothing
/// accepted yet, whatever it says is. Returns the digests read, if it was.
/// `root` is the chamber folder as [`chamber_config::open`] opened it.
/// Its warnings and fault are logged, but for those the chamber shows
/// already (`told`): a re-read, or a thaw, says only what is new, not every
/// warning again each time the file is read.
pub(super) fn load_config(
    shared: &Shared,
    root: &std::result::Result<crate::chamber::Dir, chamber_config::ConfigError>,
    name: &str,
    accepted: Option<&Trusted>,
    told: Told<'_>,
) -> (std::result::Result<ChamberConfig, Failed>, Vec<String>, Option<Trusted>) {
    let (mut read, mut unknown) = (None, false);
    // The text goes into the machine's settings (a core type): a string.
    let loaded = root.as_ref().map_err(Failed::of).and_then(|d| {
        let mut l = chamber_config::load_in(d, shared.system_zone.get()).map_err(Failed::of)?;
        l.pin_upstream(d.path());
        let changed = accepted.map(|a| crate::chamber::trust::changed(a, &l.trust)).unwrap_or_default();
        read = Some(l.trust.clone());
        if !changed.is_empty() {
            return Err(Failed(crate::chamber::trust::held(name, &changed)));
        }
        match l.config.on_end.iter().find(|c| !shared.names.may_name(&c.link.chamber)) {
            Some(c) => {
                unknown = true;
                Err(Failed(format!(
                    "{}: [[on_end]] `chamber`: no chamber named {:?} is registered (see `cryoctl chamber list`)",
                    c.at, c.link.chamber
                )))
            }
            None => Ok(l),
        }
    });
    let targets: Vec<String> =
        loaded.as_ref().map(|l| l.config.on_end.iter().map(|c| c.link.chamber.clone()).collect()).unwrap_or_default();
    shared.names.link(name, targets);
    shared.names.waits(name, unknown);
    match loaded {
        Ok(mut l) => {
            if nix::unistd::geteuid().is_root()
                && l.config.sandbox.unwrap_or(shared.config.sandbox) == crate::config::Sandbox::Off
            {
                l.warnings.push(
                    "sandbox = \"off\" while cryod runs as root: the agent runs as root with nothing but the \
                     seccomp filter between it and the machine; name `bwrap` or `landlock`"
                        .into(),
                );
            }
            for w in l.warnings.iter().filter(|w| !told.warnings.contains(w) && shared.start_lines.say(w)) {
                tracing::warn!(chamber = %name, warning = %w, "cryo.toml");
            }
            (Ok(l.config), l.warnings, read)
        }
        Err(e) => {
            if told.fault != Some(e.0.as_str()) {
                tracing::warn!(chamber = %name, fault = %e, "chamber is faulted");
            }
            (Err(e), Vec::new(), read)
        }
    }
}

/// What a chamber shows already of its `cryo.toml`: warnings and a fault
/// that a reading of the file does not log again.
#[derive(Default, Clone, Copy)]
pub(super) struct Told<'a> {
    pub(super) warnings: &'a [String],
    pub(super) fault: Option<&'a str>,
}

impl<'a> Told<'a> {
    pub(super) fn by(view: &'a cryo_core::chamber::View) -> Told<'a> {
        Told { warnings: &view.warnings, fault: view.fault.as_deref() }
    }
}

/// The machine's settings from a chamber's config.
fn settings(c: &ChamberConfig) -> Settings {
    // Only a known kind takes cryo's MCP server, names its conversation and
    // can be told to resume it.
    let known = cryo_session::Kind::of_agent(&c.agent) != cryo_session::Kind::Other;
    Settings {
        agent: c.agent.clone(),
        timezone: c.timezone,
        timezone_set: c.timezone_set,
        max_session_duration: c.max_session_duration,
        max_attempts: c.max_attempts,
        mcp: c.mcp && known,
        precheck: c.precheck.clone(),
        approvals: c.approvals.clone(),
        precheck_timeout: std::time::Duration::from_secs(c.precheck_timeout),
        on_end: c.on_end.iter().map(|c| c.link.clone()).collect(),
        expect_activity_within: c.expect_activity_within,
        git: c.git.is_some(),
        continuity: cryo_core::session::Continuity { resume: c.continuity.resume && known, ..c.continuity },
    }
}

fn refusal(r: Refusal) -> Error {
    match r {
        Refusal::Invalid(m) => Error::Invalid(m),
        Refusal::Precondition(m) => Error::Precondition(m),
        Refusal::NotFound(m) => Error::NotFound(m),
        Refusal::Internal(m) => Error::Internal(m),
    }
}

fn describe_status(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "unknown exit".into(),
    }
}

use crate::base::random::hex as random_hex;
#[cfg(test)]
mod tests;
