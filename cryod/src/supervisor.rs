//! One task per chamber: every change of a chamber's state goes through its
//! supervisor, so there are no locks around chamber state and no two writers
//! of one chamber's files inside cryod.
//!
//! The supervisor receives [`Event`]s (operator requests, the scheduler's
//! `Due`, inbox and file hints, admission, the agent's calls, the process's
//! exit), asks `cryo-core` what they mean, and carries that out: claim TODOs,
//! spawn the agent, write messages and logs, finalize the session, and tell
//! the scheduler when it is next due.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use cryo_core::hibernate::{self, Ending, Gate, GateInput};
use cryo_core::message::{CRYOCHAMBER, Message};
use cryo_core::prompt::{self, PromptInput};
use cryo_core::session::{self, Conversation, Outcome, Trigger};
use cryo_core::todo::{self, Claim, Missed, NewTodo, Todo, TodoList};
use nix::sys::signal::Signal;
use tokio::sync::{mpsc, oneshot, watch};

use crate::admission::Permit;
use crate::chamber::config::{self as chamber_config, ChamberConfig};
use crate::chamber::mailbox::{Folder, Mailbox, Stored};
use crate::chamber::{log, todos};
use crate::error::{Error, Result};
use crate::runtime::{NoticeKind, Shared};
use crate::spawn;
use crate::store::{ChamberRecord, Desired, WakeRecord};

/// A missed slot of a `skip` TODO later than this is dropped.
const SKIP_GRACE: Duration = Duration::minutes(5);
/// An agent that dies sooner than this without hibernating is probably
/// misconfigured (wrong command, missing key).
const QUICK_EXIT: StdDuration = StdDuration::from_secs(5);
/// After an accepted hibernate the agent should exit; past this it is ended.
const AFTER_HIBERNATE: StdDuration = StdDuration::from_secs(60);
/// Lines of `cryo-agent.log` quoted in a failure report.
const TAIL_LINES: usize = 12;
const TAIL_CHARS: usize = 2000;

/// Which chamber file changed on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Todos,
    Config,
    /// The system's time zone changed.
    Zone,
}

/// Everything a supervisor reacts to.
pub enum Event {
    /// Start; with `wait`, the reply comes once a first session's agent has
    /// started (or failed to).
    Start {
        wait: bool,
        reply: oneshot::Sender<Result<bool>>,
    },
    /// Stop; with `wait`, the reply comes once the session has ended.
    Stop {
        wait: bool,
        reply: oneshot::Sender<Result<(bool, bool)>>,
    },
    /// Waiting for a start took too long (the session is queued).
    StartWaitOver,
    Remove(oneshot::Sender<()>),
    /// Pause (true) or resume (false); replies whether nothing changed.
    Pause(bool, oneshot::Sender<Result<bool>>),
    /// An operator's wake, with an optional message for the inbox.
    Wake {
        message: Option<String>,
        replace: bool,
        reply: oneshot::Sender<Result<WakeOutcome>>,
    },
    /// An operator's message for the inbox.
    Deliver {
        from: String,
        subject: String,
        text: String,
        reply: oneshot::Sender<Result<String>>,
    },
    /// An operator's TODO change.
    Todo {
        call: TodoCall,
        reply: oneshot::Sender<Result<AgentReply>>,
    },
    /// The scheduler says a TODO is due.
    Due,
    /// Something appeared in a watched inbox folder (its name, if known).
    Inbox(Option<String>),
    FileChanged(FileKind),
    Admitted(Permit),
    Agent {
        session: u64,
        call: AgentCall,
        reply: oneshot::Sender<Result<AgentReply>>,
    },
    Exited {
        session: u64,
        status: std::process::ExitStatus,
    },
    Timeout {
        session: u64,
    },
    /// The agent hibernated long ago but has not exited.
    AfterHibernate {
        session: u64,
    },
    LingerDone {
        session: u64,
    },
    /// The grace period after SIGTERM is over.
    Kill {
        session: u64,
    },
    /// The daemon is shutting down.
    Shutdown(oneshot::Sender<()>),
    /// The machine is about to sleep (true) or has woken up (false).
    Power {
        sleeping: bool,
    },
    /// A sync bridge's status changed.
    BridgesChanged,
    /// An operator asks the bridges to pull (or push) now; the answer is
    /// each bridge's count or error, and their status after.
    Sync {
        pull: bool,
        reply: oneshot::Sender<SyncOutcome>,
    },
    /// An operator replaces `plan.md`.
    WritePlan {
        text: String,
        reply: oneshot::Sender<Result<()>>,
    },
}

/// A call from `cryo-agent`.
#[derive(Debug)]
pub enum AgentCall {
    Hibernate { summary: String, complete: bool, exit_code: i32, linger_secs: u32 },
    Send { text: String, question: bool, subject: String },
    Receive,
    Dialog { last: u32, all: bool },
    Todo(TodoCall),
}

/// A change to (or a look at) the TODO list, by the agent or an operator.
#[derive(Debug)]
pub enum TodoCall {
    Add { text: String, at: String, every: String, cron: String, missed: String },
    List,
    Done(u64),
    Remove(u64),
}

/// What a pull or push asked by an operator did: per bridge, a count or an
/// error; then every bridge's status.
pub type SyncOutcome = (Vec<(String, std::result::Result<u64, String>)>, Vec<cryo_sync::Status>);

/// What an operator's wake did.
#[derive(Debug, Clone, Default)]
pub struct WakeOutcome {
    pub replaced: bool,
    pub queued: bool,
    pub message_file: Option<String>,
}

pub enum AgentReply {
    Hibernate(String),
    Sent { file: String, reply: bool },
    Mail(Vec<Stored>),
    Dialog { messages: Vec<Stored>, claimed: u32 },
    Todos { todos: Vec<Todo>, tz: Tz },
}

/// What a chamber looks like from outside, published after every event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub state: State,
    pub fault: Option<String>,
    pub agent: String,
    pub timezone: String,
    pub session: u64,
    pub next_wake: Option<DateTime<Utc>>,
    pub last_result: Option<String>,
    pub mail_waiting: u32,
    pub attention: Option<String>,
    pub warnings: Vec<String>,
    pub last_lateness_ms: Option<i64>,
    /// The last write into the chamber that failed, until one succeeds.
    pub error: Option<String>,
    /// Questions the agent asked with no message to it since.
    pub open_questions: u32,
    /// The sync bridges (none unless `cryo.toml` configures some and the
    /// chamber is started).
    pub bridges: Vec<cryo_sync::Status>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    #[default]
    Stopped,
    Idle,
    Running,
    Paused,
    Faulted,
}

/// A cheap handle to a supervisor.
#[derive(Clone)]
pub struct Handle {
    pub tx: mpsc::UnboundedSender<Event>,
    pub snapshot: watch::Receiver<Snapshot>,
}

/// Why cryod is cutting a session short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    Timeout,
    Stop,
    Shutdown,
    AfterHibernate,
    Replace,
}

struct Live {
    number: u64,
    token: String,
    trigger: Trigger,
    claims: Vec<Claim>,
    pgid: i32,
    started: Instant,
    hibernate: Option<(Ending, String)>,
    /// Claimed inbox messages not yet answered by a send.
    unanswered: Vec<String>,
    sent_any: bool,
    linger: Option<oneshot::Sender<Result<AgentReply>>>,
    ending: Option<Cut>,
    stop_waiters: Vec<oneshot::Sender<Result<(bool, bool)>>>,
    shutdown_waiters: Vec<oneshot::Sender<()>>,
    _permit: Permit,
}

impl Live {
    fn new(number: u64, token: String, trigger: Trigger, claims: Vec<Claim>, pgid: i32, permit: Permit) -> Live {
        Live {
            number,
            token,
            trigger,
            claims,
            pgid,
            started: Instant::now(),
            hibernate: None,
            unanswered: Vec::new(),
            sent_any: false,
            linger: None,
            ending: None,
            stop_waiters: Vec::new(),
            shutdown_waiters: Vec::new(),
            _permit: permit,
        }
    }
}

struct Sup {
    shared: Arc<Shared>,
    id: i64,
    name: String,
    root: PathBuf,
    tx: mpsc::UnboundedSender<Event>,
    snapshot: watch::Sender<Snapshot>,
    desired: Desired,
    config: std::result::Result<ChamberConfig, String>,
    warnings: Vec<String>,
    todos: std::result::Result<TodoList, String>,
    last_session: u64,
    /// A wake is queued for admission (its trigger and when it was asked for).
    wanted: Option<(Trigger, DateTime<Utc>)>,
    live: Option<Live>,
    last_result: Option<String>,
    previous_failure: Option<String>,
    attention: Option<String>,
    /// The plan was completed: no scheduled wakes until mail arrives.
    completed: bool,
    /// Sessions that failed in a row. After a failure, mail waits before it
    /// wakes the agent again (2^k minutes, at most a day), so an agent that
    /// crashes on every message does not loop.
    failures: u32,
    mail_hold_until: Option<DateTime<Utc>>,
    paused: bool,
    /// An operator asked for a session; it runs when the current one ends.
    manual_queued: bool,
    /// A `wake --replace` waiting for the old session to end: its message and
    /// the operator's reply.
    replace_with: Option<(Option<String>, oneshot::Sender<Result<WakeOutcome>>)>,
    last_lateness_ms: Option<i64>,
    /// Operators waiting for a start to show its first agent.
    start_waiters: Vec<oneshot::Sender<Result<bool>>>,
    /// The last write that failed (disk full, read-only), until one succeeds.
    write_error: Option<String>,
    open_questions: u32,
    bridges: crate::bridges::Bridges,
}

/// What start-up recovery hands a supervisor: the sessions of this chamber
/// that were running when cryod died, and the processes still carrying their
/// wake ids.
#[derive(Default)]
pub struct Recovery {
    pub open: Vec<crate::store::OpenSession>,
    pub processes: Arc<std::collections::HashMap<String, Vec<(i32, i32)>>>,
}

/// Starts the supervisor of `record`, first finishing what a killed cryod
/// left open.
pub async fn spawn(shared: Arc<Shared>, record: ChamberRecord, recovery: Recovery) -> Handle {
    let (tx, rx) = mpsc::unbounded_channel();
    let root = PathBuf::from(&record.path);
    let from_store = shared.store.last_session_number(record.id).await.unwrap_or(0);
    let last_session = from_store.max(log::last_session_number(&root.join("cryo.log")));
    let (snapshot, snap_rx) = watch::channel(Snapshot::default());
    let mut sup = Sup {
        shared,
        id: record.id,
        name: record.name.clone(),
        root,
        tx: tx.clone(),
        snapshot,
        desired: record.desired,
        config: Err(String::new()),
        warnings: Vec::new(),
        todos: Ok(TodoList::default()),
        last_session,
        wanted: None,
        live: None,
        last_result: None,
        previous_failure: None,
        attention: None,
        completed: false,
        failures: 0,
        mail_hold_until: None,
        paused: record.paused,
        manual_queued: false,
        replace_with: None,
        last_lateness_ms: None,
        start_waiters: Vec::new(),
        write_error: None,
        open_questions: 0,
        bridges: crate::bridges::Bridges::new({
            let tx = tx.clone();
            Arc::new(move || {
                let _ = tx.send(Event::BridgesChanged);
            })
        }),
    };
    sup.open_questions = sup.count_open_questions();
    if let Some(last) = sup.shared.store.recent_sessions(sup.id, 1).await.ok().and_then(|v| v.into_iter().next()) {
        sup.last_result = last.outcome;
        sup.last_lateness_ms = last.lateness_ms;
    }
    sup.load_config();
    sup.load_todos();
    if let Ok(c) = &sup.config {
        sup.shared.watcher.watch(sup.id, &sup.root, &c.watch_dirs, &tx);
    } else {
        sup.shared.watcher.watch(sup.id, &sup.root, &[], &tx);
    }
    sup.recover(recovery).await;
    sup.publish();
    tokio::spawn(sup.run(rx));
    Handle { tx, snapshot: snap_rx }
}

impl Sup {
    fn tz(&self) -> Tz {
        self.config.as_ref().map(|c| c.timezone).unwrap_or(self.shared.system_tz())
    }

    fn now(&self) -> DateTime<Utc> {
        self.shared.clock.now()
    }

    fn mailbox(&self) -> Mailbox {
        Mailbox::new(&self.root, self.tz())
    }

    fn fault(&self) -> Option<String> {
        match (&self.config, &self.todos) {
            (Err(e), _) | (_, Err(e)) => Some(e.clone()),
            _ => None,
        }
    }

    fn log_event(&self, text: &str) {
        match log::event(&self.root.join("cryo.log"), self.now(), self.tz(), text) {
            Ok(line) => self.shared.notify(self.id, NoticeKind::Log(line)),
            Err(error) => tracing::warn!(chamber = %self.name, %error, "cannot write cryo.log"),
        }
    }

    /// Writes a block marker to `cryo.log` (and tells live views).
    fn log_marker(&self, r: std::io::Result<String>) {
        match r {
            Ok(line) => self.shared.notify(self.id, NoticeKind::Log(line)),
            Err(error) => tracing::warn!(chamber = %self.name, %error, "cannot write cryo.log"),
        }
    }

    fn load_config(&mut self) {
        match chamber_config::load(&self.root, self.shared.system_tz()) {
            Ok(l) => {
                for w in &l.warnings {
                    tracing::warn!(chamber = %self.name, warning = %w, "cryo.toml");
                }
                self.warnings = l.warnings;
                self.config = Ok(l.config);
            }
            Err(e) => {
                tracing::warn!(chamber = %self.name, fault = %e, "chamber is faulted");
                self.config = Err(e);
            }
        }
    }

    fn load_todos(&mut self) {
        self.todos = todos::load(&self.root, self.tz());
        if let Err(e) = &self.todos {
            tracing::warn!(chamber = %self.name, fault = %e, "chamber is faulted");
        }
    }

    /// Changes `todo.json` through [`todos::update`] (locked, and never losing
    /// a concurrent edit); keeps the in-memory list and the write error in step.
    fn update_todos<T>(&mut self, change: impl FnMut(&mut TodoList) -> Result<T>) -> Result<T> {
        let (root, tz) = (&self.root, self.tz());
        let outcome = off_worker(|| todos::update(root, tz, change));
        self.updated(outcome)
    }

    fn updated<T>(&mut self, outcome: std::result::Result<(T, TodoList), todos::UpdateError<Error>>) -> Result<T> {
        match outcome {
            Ok((value, list)) => {
                self.todos = Ok(list);
                self.write_error = None;
                Ok(value)
            }
            Err(todos::UpdateError::Fault(m)) => {
                tracing::warn!(chamber = %self.name, fault = %m, "chamber is faulted");
                self.todos = Err(m.clone());
                Err(Error::Precondition(format!("the chamber is faulted: {m}")))
            }
            Err(todos::UpdateError::Refused(e)) => Err(e),
            Err(todos::UpdateError::Write(m)) => {
                tracing::error!(chamber = %self.name, error = %m, "write failed");
                self.write_error = Some(m.clone());
                Err(Error::Internal(m))
            }
        }
    }

    fn publish(&self) {
        let state = if self.fault().is_some() {
            State::Faulted
        } else if self.live.is_some() {
            State::Running
        } else if self.desired == Desired::Started && self.paused {
            State::Paused
        } else if self.desired == Desired::Started {
            State::Idle
        } else {
            State::Stopped
        };
        let next_wake = if self.desired == Desired::Started && !self.paused { self.next_wake() } else { None };
        let snap = Snapshot {
            state,
            fault: self.fault(),
            agent: self.config.as_ref().map(|c| c.agent.clone()).unwrap_or_default(),
            timezone: self.tz().name().to_string(),
            session: self.live.as_ref().map(|l| l.number).unwrap_or(self.last_session),
            next_wake,
            last_result: self.last_result.clone(),
            mail_waiting: self.mailbox().unread().len() as u32,
            attention: self.attention.clone(),
            warnings: self.warnings.clone(),
            last_lateness_ms: self.last_lateness_ms,
            error: self.write_error.clone(),
            open_questions: self.open_questions,
            bridges: self.bridges.statuses(),
        };
        let changed = *self.snapshot.borrow() != snap;
        self.snapshot.send_replace(snap);
        if changed {
            self.shared.notify(self.id, NoticeKind::Status);
        }
    }

    /// When this chamber next wakes by itself: its next TODO, or held mail.
    fn next_wake(&self) -> Option<DateTime<Utc>> {
        let todo = match (&self.todos, self.completed) {
            (Ok(t), false) => t.next_due(),
            _ => None,
        };
        let hold = self.mail_hold_until.filter(|_| !self.mailbox().unread().is_empty());
        [todo, hold].into_iter().flatten().min()
    }

    /// Runs the sync bridges `cryo.toml` asks for while the chamber is
    /// started (paused included: mail still flows), and none otherwise.
    fn reconcile_bridges(&mut self) {
        let active = self.desired == Desired::Started;
        self.bridges.reconcile(&self.root, self.config.as_ref().ok(), active);
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Event>) {
        if self.desired == Desired::Started {
            self.resume();
        }
        self.reconcile_bridges();
        self.publish();
        while let Some(ev) = rx.recv().await {
            let done = self.handle(ev).await;
            self.reconcile_bridges();
            self.publish();
            if done {
                break;
            }
        }
        self.shared.watcher.unwatch(self.id);
        self.shared.admission.cancel(self.id);
    }

    /// Returns true when the supervisor should exit.
    async fn handle(&mut self, ev: Event) -> bool {
        match ev {
            Event::Start { wait, reply } => {
                let r = self.start().await;
                self.reconcile_bridges();
                self.publish();
                if wait && matches!(r, Ok(false)) && self.wanted.is_some() {
                    self.start_waiters.push(reply);
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(StdDuration::from_secs(10)).await;
                        let _ = tx.send(Event::StartWaitOver);
                    });
                } else {
                    let _ = reply.send(r);
                }
            }
            Event::StartWaitOver => {
                for w in self.start_waiters.drain(..) {
                    let _ = w.send(Ok(false));
                }
            }
            Event::Stop { wait, reply } => {
                if wait {
                    self.stop(reply).await;
                } else {
                    let (tx, mut rx) = oneshot::channel();
                    self.stop(tx).await;
                    let running = self.live.is_some();
                    // Stopped already, or signalled: answer now.
                    let r = match rx.try_recv() {
                        Ok(r) => r,
                        Err(_) => Ok((false, running)),
                    };
                    let _ = reply.send(r);
                }
            }
            Event::Remove(reply) => {
                if self.live.is_some() {
                    let (tx, rx) = oneshot::channel();
                    self.stop(tx).await;
                    // Drive events until the session has ended.
                    drop(rx);
                    self.remove_after_stop(reply).await;
                    return true;
                }
                self.shared.scheduler.plan(self.id, None, &self.tx);
                let _ = reply.send(());
                return true;
            }
            Event::Pause(pause, reply) => {
                let r = self.set_paused(pause).await;
                // The caller reads the snapshot next: publish first.
                self.publish();
                let _ = reply.send(r);
            }
            Event::Wake { message, replace, reply } => self.wake(message, replace, reply),
            Event::Deliver { from, subject, text, reply } => {
                let r = self.deliver(&from, &subject, &text, true);
                let _ = reply.send(r);
            }
            Event::Todo { call, reply } => {
                let r = self.todo_call(call, "operator");
                let _ = reply.send(r);
            }
            Event::Due => self.replan(),
            Event::BridgesChanged => {}
            Event::Sync { pull, reply } => {
                let waiting = self.bridges.command(&self.root, self.tz(), pull);
                let cells = self.bridges.cells();
                tokio::spawn(async move {
                    let mut out = Vec::new();
                    for (name, rx) in waiting {
                        out.push((name, rx.await.unwrap_or_else(|_| Err("the bridge has ended".into()))));
                    }
                    let _ = reply.send((out, cells.iter().map(|c| c.get()).collect()));
                });
            }
            Event::WritePlan { text, reply } => {
                let r = if text.len() > 1024 * 1024 {
                    Err(Error::Invalid("the plan is over 1 MiB".into()))
                } else {
                    crate::chamber::write_atomic(&self.root.join("plan.md"), text.as_bytes())
                        .map_err(|e| Error::Internal(format!("cannot write plan.md: {e}")))
                };
                if r.is_ok() {
                    self.log_event("plan.md replaced by the operator");
                }
                let _ = reply.send(r);
            }
            Event::Power { sleeping } => {
                if self.live.is_some() {
                    self.log_event(if sleeping { "the machine is going to sleep" } else { "the machine woke up" });
                }
                if !sleeping {
                    self.replan();
                }
            }
            Event::Inbox(name) => {
                self.open_questions = 0;
                if let Some(name) = name {
                    self.shared.notify(self.id, NoticeKind::Message { folder: Folder::Inbox, name });
                }
                self.on_inbox();
            }
            Event::FileChanged(kind) => self.on_file_changed(kind),
            Event::Admitted(permit) => self.admitted(permit).await,
            Event::Agent { session, call, reply } => {
                if self.live.as_ref().map(|l| l.number) != Some(session) {
                    let _ = reply.send(Err(Error::Precondition("this session has ended".into())));
                } else {
                    self.agent_call(call, reply).await;
                }
            }
            Event::Exited { session, status } => {
                if self.live.as_ref().map(|l| l.number) == Some(session) {
                    self.finalize(Some(status)).await;
                }
            }
            Event::Timeout { session } => self.end_session(session, Cut::Timeout),
            Event::AfterHibernate { session } => self.end_session(session, Cut::AfterHibernate),
            Event::LingerDone { session } => self.linger_done(session),
            Event::Kill { session } => {
                if let Some(l) = self.live.as_ref().filter(|l| l.number == session) {
                    spawn::signal_group(l.pgid, Signal::SIGKILL);
                }
            }
            Event::Shutdown(reply) => {
                if let Some(l) = self.live.as_mut() {
                    l.shutdown_waiters.push(reply);
                    let n = l.number;
                    self.end_session(n, Cut::Shutdown);
                } else {
                    let _ = reply.send(());
                    return true;
                }
            }
        }
        false
    }

    async fn remove_after_stop(&mut self, reply: oneshot::Sender<()>) {
        // The session was signalled by `stop`; wait (bounded) for its process
        // group to go, then finalize. The chamber is being removed, so other
        // events are not needed any more.
        if let Some(l) = &self.live {
            let pgid = l.pgid;
            let deadline = Instant::now() + StdDuration::from_secs(self.shared.config.stop_grace_seconds + 2);
            while spawn::group_alive(pgid) && Instant::now() < deadline {
                tokio::time::sleep(StdDuration::from_millis(20)).await;
            }
            spawn::signal_group(pgid, Signal::SIGKILL);
        }
        self.finalize(None).await;
        self.shared.scheduler.plan(self.id, None, &self.tx);
        let _ = reply.send(());
    }

    // ---- recovery ------------------------------------------------------------

    /// Finishes sessions a killed cryod left open: ends their processes,
    /// re-queues their claimed TODOs, answers claimed mail, closes their
    /// `cryo.log` blocks, and records them as interrupted.
    async fn recover(&mut self, r: Recovery) {
        let now = self.now();
        let open_claims = self.shared.store.open_claims(self.id).await.unwrap_or_default();
        let outgoing = self.outgoing_messages();
        for s in &r.open {
            // Its processes were ended by the daemon before supervisors started
            // (all at once, see `Daemon::load`); here they are only counted.
            let groups: Vec<i32> =
                r.processes.get(&s.wake_id).map(|v| v.iter().map(|p| p.1).collect()).unwrap_or_default();
            let claims = claims_from_json(&s.claimed);
            let details = self.settle_claims(&Outcome::Interrupted, &claims, now);
            // Mail this session claimed and never answered.
            let mut unanswered = Vec::new();
            for c in open_claims.iter().filter(|c| c.session == s.number) {
                unanswered.extend(c.files.iter().filter(|f| !answered(&outgoing, f)).cloned());
            }
            let sent_any =
                outgoing.iter().any(|m| m.meta.get("session") == Some(&s.number.to_string()) && m.from != CRYOCHAMBER);
            let conv = Conversation { unanswered_batch: !unanswered.is_empty(), sent_any };
            let note = if groups.is_empty() {
                "cryod stopped during this session; it was found at restart".to_string()
            } else {
                format!(
                    "cryod stopped during this session; at restart its agent was still running and was ended ({} process group(s))",
                    groups.len()
                )
            };
            let mut all_details = vec![format!("{}.", capitalize(&note))];
            all_details.extend(details);
            self.write_fallbacks(s.number, &Outcome::Interrupted, conv, &unanswered, &all_details.join("\n\n"), now);
            self.log_event(&format!("session {} interrupted: {note}", s.number));
            self.log_marker(log::end(&self.root.join("cryo.log")));
            let _ = self
                .shared
                .store
                .session_ended(self.id, s.number, crate::rfc3339(now), Outcome::Interrupted.describe(), note.clone())
                .await;
            let _ = self.shared.store.journal_answer(self.id, s.number, crate::rfc3339(now)).await;
            tracing::warn!(chamber = %self.name, session = s.number, %note, "recovered an interrupted session");
            self.last_result = Some(Outcome::Interrupted.describe());
            self.previous_failure = Some(Outcome::Interrupted.describe());
        }
        // Batches of sessions that did end, but whose answer was lost.
        for c in open_claims.iter().filter(|c| !r.open.iter().any(|s| s.number == c.session)) {
            let archived: Vec<&String> =
                c.files.iter().filter(|f| self.mailbox().dir(Folder::InboxArchive).join(f).exists()).collect();
            if archived.is_empty() {
                // The claim was journaled but the files never moved: the agent
                // never saw them; they are still unread mail.
                let _ = self.shared.store.journal_drop(c.id).await;
                continue;
            }
            let _ = self.shared.store.claim_answered_by_id(c.id, crate::rfc3339(now)).await;
        }
        if !r.open.is_empty() {
            self.publish();
        }
    }

    /// Questions the agent asked after the last message it was sent.
    fn count_open_questions(&self) -> u32 {
        let mb = self.mailbox();
        let last_in = [Folder::Inbox, Folder::InboxArchive]
            .into_iter()
            .flat_map(|f| mb.read(f).unwrap_or_default())
            .map(|m| m.when)
            .max();
        [Folder::Outbox, Folder::OutboxArchive]
            .into_iter()
            .flat_map(|f| mb.read(f).unwrap_or_default())
            .filter(|m| m.message.question && last_in.is_none_or(|t| m.when > t))
            .count() as u32
    }

    /// Every message the chamber sent (outbox and its archive).
    fn outgoing_messages(&self) -> Vec<Message> {
        let mb = self.mailbox();
        [Folder::Outbox, Folder::OutboxArchive]
            .into_iter()
            .flat_map(|f| mb.read(f).unwrap_or_default())
            .map(|s| s.message)
            .collect()
    }

    /// Writes the `cryochamber` messages a session's end calls for.
    fn write_fallbacks(
        &mut self,
        number: u64,
        outcome: &Outcome,
        conv: Conversation,
        unanswered: &[String],
        details: &str,
        now: DateTime<Utc>,
    ) {
        let mailbox = self.mailbox();
        for f in session::fallbacks(number, outcome, conv, details) {
            let mut meta = BTreeMap::new();
            meta.insert("session".to_string(), number.to_string());
            if f.is_reply {
                meta.insert("in_reply_to".to_string(), unanswered.join(" "));
            }
            let msg = Message {
                from: CRYOCHAMBER.into(),
                subject: f.subject.clone(),
                timestamp: Some(now),
                question: false,
                meta,
                body: f.body,
            };
            match mailbox.write(Folder::Outbox, &msg, now) {
                Ok(name) => {
                    self.log_event(&format!("cryochamber wrote: {} ({name})", f.subject));
                    self.shared.notify(self.id, NoticeKind::Message { folder: Folder::Outbox, name });
                    self.bridges.outbox_changed();
                }
                Err(error) => {
                    tracing::error!(chamber = %self.name, %error, "cannot write a fallback message");
                    self.write_error = Some(format!("cannot write a fallback message: {error}"));
                }
            }
        }
    }

    // ---- operator requests ---------------------------------------------

    async fn start(&mut self) -> Result<bool> {
        self.load_config();
        self.load_todos();
        if let Some(f) = self.fault() {
            return Err(Error::Precondition(format!("{} is faulted, so it cannot start: {f}", self.name)));
        }
        if let Ok(c) = &self.config {
            let program = spawn::split_words(&c.agent).map_err(Error::Precondition)?.remove(0);
            let path = std::env::var("PATH").unwrap_or_default();
            if spawn::find_program(&program, &self.root, &path).is_none() {
                return Err(Error::Precondition(format!(
                    "the agent command {program:?} is not found on cryod's PATH or in {}: install it or set `agent` in cryo.toml",
                    self.root.display()
                )));
            }
        }
        if self.desired == Desired::Started {
            return Ok(true);
        }
        // The files may have changed since the supervisor loaded them.
        let from_log = log::last_session_number(&self.root.join("cryo.log"));
        self.last_session = self.last_session.max(from_log);
        self.mail_hold_until = None;
        self.shared.store.set_desired(self.id, Desired::Started).await?;
        self.desired = Desired::Started;
        self.attention = None;
        tracing::info!(chamber = %self.name, "chamber started");
        self.resume();
        Ok(false)
    }

    async fn stop(&mut self, reply: oneshot::Sender<Result<(bool, bool)>>) {
        let was_started = self.desired == Desired::Started;
        if was_started && let Err(e) = self.shared.store.set_desired(self.id, Desired::Stopped).await {
            let _ = reply.send(Err(e.into()));
            return;
        }
        self.desired = Desired::Stopped;
        self.wanted = None;
        self.shared.admission.cancel(self.id);
        self.shared.scheduler.plan(self.id, None, &self.tx);
        match self.live.as_mut() {
            Some(l) => {
                l.stop_waiters.push(reply);
                let n = l.number;
                self.end_session(n, Cut::Stop);
            }
            None => {
                self.reconcile_bridges();
                self.publish();
                let _ = reply.send(Ok((!was_started, false)));
            }
        }
        tracing::info!(chamber = %self.name, "chamber stopped");
    }

    async fn set_paused(&mut self, pause: bool) -> Result<bool> {
        if pause && self.desired != Desired::Started {
            return Err(Error::Precondition(format!("{} is stopped; only a started chamber can be paused", self.name)));
        }
        if self.paused == pause {
            return Ok(true);
        }
        self.shared.store.set_paused(self.id, pause).await?;
        self.paused = pause;
        if pause {
            self.wanted = None;
            self.shared.admission.cancel(self.id);
            self.shared.scheduler.plan(self.id, None, &self.tx);
            tracing::info!(chamber = %self.name, "chamber paused");
        } else {
            tracing::info!(chamber = %self.name, "chamber resumed");
            self.replan();
        }
        Ok(false)
    }

    fn wake(&mut self, message: Option<String>, replace: bool, reply: oneshot::Sender<Result<WakeOutcome>>) {
        let refuse = |why: String| Err(Error::Precondition(why));
        let check = if let Some(f) = self.fault() {
            refuse(format!("{} is faulted: {f}", self.name))
        } else if self.desired != Desired::Started {
            refuse(format!("{} is stopped: start it first (`cryoctl chamber start {}`)", self.name, self.name))
        } else if self.paused {
            refuse(format!("{} is paused: resume it first (`cryoctl chamber resume {}`)", self.name, self.name))
        } else if self.replace_with.is_some() {
            refuse("a replacing wake is already under way".into())
        } else {
            Ok(())
        };
        if let Err(e) = check {
            let _ = reply.send(Err(e));
            return;
        }
        if let Some(l) = &self.live
            && replace
        {
            let n = l.number;
            self.replace_with = Some((message, reply));
            self.end_session(n, Cut::Replace);
            return;
        }
        let mut out = WakeOutcome::default();
        if let Some(m) = message {
            match self.deliver("operator", "", &m, false) {
                Ok(f) => out.message_file = Some(f),
                Err(e) => {
                    let _ = reply.send(Err(e));
                    return;
                }
            }
        }
        self.completed = false;
        self.manual_queued = true;
        out.queued = self.live.is_some();
        self.log_event(if out.queued { "operator wake: queued after the running session" } else { "operator wake" });
        self.replan();
        let _ = reply.send(Ok(out));
    }

    /// Writes an operator's message into the inbox; returns its file name.
    /// With `wake`, the message wakes the agent as mail does (the watcher
    /// would too, a little later).
    fn deliver(&mut self, from: &str, subject: &str, text: &str, wake: bool) -> Result<String> {
        if text.trim().is_empty() {
            return Err(Error::Invalid("the message is empty".into()));
        }
        let limit = cryo_core::message::MAX_MESSAGE_BYTES - 4096;
        if text.len() > limit {
            return Err(Error::Invalid(format!("the message is {} bytes, over the limit of {limit}", text.len())));
        }
        let now = self.now();
        let from = if from.trim().is_empty() { "operator" } else { from };
        let subject = if subject.trim().is_empty() { first_line(text) } else { subject.to_string() };
        let msg = Message {
            from: from.to_string(),
            subject,
            timestamp: Some(now),
            question: false,
            meta: BTreeMap::new(),
            body: text.to_string(),
        };
        let name = self
            .mailbox()
            .write(Folder::Inbox, &msg, now)
            .map_err(|e| Error::Internal(format!("cannot write the inbox: {e}")))?;
        if wake {
            self.on_inbox();
        }
        Ok(format!("messages/inbox/{name}"))
    }

    // ---- planning ----------------------------------------------------------

    /// After a start or a daemon restart: bootstrap a new chamber, else run
    /// what is due and what waits in the inbox.
    fn resume(&mut self) {
        if self.last_session == 0 && self.live.is_none() {
            self.want(Trigger::Bootstrap);
        }
        self.replan();
    }

    /// Looks at the files and decides: wake now (due TODOs, unread mail) or
    /// tell the scheduler when the next TODO is due.
    fn replan(&mut self) {
        if self.desired != Desired::Started || self.paused || self.fault().is_some() {
            self.shared.scheduler.plan(self.id, None, &self.tx);
            return;
        }
        if self.manual_queued && self.live.is_none() {
            self.want(Trigger::Manual);
        }
        let now = self.now();
        let next = match (&self.todos, self.completed) {
            (Ok(t), false) => t.next_due(),
            _ => None,
        };
        let hold = self.mail_hold_until.filter(|h| *h > now);
        if self.live.is_none() {
            if next.is_some_and(|t| t <= now) {
                self.want(Trigger::Scheduled);
            }
            if hold.is_none() && !self.mailbox().unread().is_empty() {
                self.want(Trigger::Inbox);
            }
        }
        // While a session runs, a due TODO waits for it to end (then replan).
        let wake = [next.filter(|t| *t > now), hold].into_iter().flatten().min();
        self.shared.scheduler.plan(self.id, wake, &self.tx);
    }

    fn want(&mut self, trigger: Trigger) {
        if self.desired != Desired::Started || self.paused || self.live.is_some() {
            return;
        }
        let now = self.now();
        match self.wanted {
            Some((t, _)) if t <= trigger => {}
            Some((_, since)) => self.wanted = Some((trigger, since)),
            None => self.wanted = Some((trigger, now)),
        }
        let (t, _) = self.wanted.expect("set above");
        self.shared.admission.request(t, self.id, self.tx.clone());
    }

    fn on_inbox(&mut self) {
        if let Some(l) = self.live.as_mut() {
            if let Some(reply) = l.linger.take() {
                let _ = reply.send(Err(Error::Precondition(
                    "refused: new mail arrived while you lingered. Run `cryo-agent receive`, answer it, then hibernate again."
                        .into(),
                )));
                l.hibernate = None;
                self.log_event("linger released: new mail arrived");
            }
            return;
        }
        if !self.mailbox().unread().is_empty() {
            self.completed = false;
            if self.mail_hold_until.is_some_and(|h| h > self.now()) {
                return;
            }
            self.want(Trigger::Inbox);
        }
    }

    fn on_file_changed(&mut self, kind: FileKind) {
        match kind {
            FileKind::Todos => {
                let before = self.todos.clone();
                self.load_todos();
                if self.todos != before {
                    tracing::debug!(chamber = %self.name, "todo.json changed on disk");
                    self.replan();
                }
            }
            FileKind::Zone => {
                // Chambers on the system's zone re-read it; repeating TODOs on
                // a cron schedule move to the new zone's wall clock.
                self.load_config();
                if self.config.as_ref().is_ok_and(|c| !c.timezone_set) {
                    let (now, tz) = (self.now(), self.tz());
                    let _ = self.update_todos(|l| Ok(l.rezone(now, tz)));
                    self.log_event(&format!("the system's time zone is now {}: re-planned", tz.name()));
                    self.replan();
                }
            }
            FileKind::Config => {
                let before = self.config.clone();
                self.load_config();
                if self.config != before {
                    tracing::info!(chamber = %self.name, "cryo.toml changed on disk");
                    if let Ok(c) = &self.config {
                        self.shared.watcher.watch(self.id, &self.root, &c.watch_dirs, &self.tx);
                    }
                    self.replan();
                }
            }
        }
    }

    // ---- a session ---------------------------------------------------------

    async fn admitted(&mut self, permit: Permit) {
        let Some((trigger, asked_at)) = self.wanted.take() else { return };
        if self.live.is_some() || self.desired != Desired::Started || self.paused {
            return;
        }
        // Any session answers a queued operator wake; it is recorded as one.
        let trigger = if std::mem::take(&mut self.manual_queued) { Trigger::Manual } else { trigger };
        let now = self.now();
        let tz = self.tz();
        let completed = self.completed;
        let claims =
            match self.update_todos(|l| Ok(if completed { Vec::new() } else { l.claim_due(now, tz, SKIP_GRACE) })) {
                Ok(c) => c,
                Err(e) => {
                    self.last_result = Some(format!("no session started: {e}"));
                    return;
                }
            };
        let Ok(list) = self.todos.clone() else { return };
        let mail = self.mailbox().unread();
        let demand = !claims.is_empty() || !mail.is_empty() || matches!(trigger, Trigger::Bootstrap | Trigger::Manual);
        if !demand {
            // Demand-driven: nothing is due and no mail waits.
            self.replan();
            return;
        }
        let Ok(config) = self.config.clone() else { return };
        let number = self.last_session + 1;
        let wake_id = format!("w{}-{}-{}", self.id, number, random_hex(6));
        let token = random_hex(32);
        let due = claims.iter().map(|c| c.due).min().or(Some(asked_at));
        let prompt_text = prompt::build(&PromptInput {
            chamber: &self.name,
            session: number,
            now,
            tz,
            trigger,
            claims: &claims,
            mail: &mail,
            todos: &list,
            due: claims.iter().map(|c| c.due).min(),
            previous_failure: self.previous_failure.as_deref(),
            note: None,
        });
        let mut reasons: Vec<String> = claims.iter().map(|c| format!("todo:{}", c.id)).collect();
        reasons.extend(mail.iter().map(|m| format!("mail:{m}")));
        let record = WakeRecord {
            chamber_id: self.id,
            number,
            wake_id: wake_id.clone(),
            trigger: trigger.as_str().into(),
            reasons: serde_json::to_string(&reasons).unwrap_or_default(),
            claimed: claims_json(&claims),
            due_at: due.map(crate::rfc3339),
            created_at: crate::rfc3339(now),
        };
        if let Err(e) = self.shared.store.record_wake(record).await {
            tracing::error!(chamber = %self.name, error = %e, "cannot record the wake; not spawning");
            return;
        }
        self.last_session = number;
        let cryo_log = self.root.join("cryo.log");
        let (max, keep) = (self.shared.config.log_max_bytes, self.shared.config.log_keep);
        for path in [cryo_log.clone(), self.root.join("cryo-agent.log")] {
            if let Err(error) = log::rotate(&path, max, keep) {
                tracing::warn!(chamber = %self.name, %error, file = %path.display(), "cannot rotate a log");
            }
        }
        self.log_marker(log::begin(&cryo_log, number, now, tz));
        self.log_event(&format!(
            "trigger: {} ({})",
            trigger.as_str(),
            if reasons.is_empty() { "-".into() } else { reasons.join(", ") }
        ));

        // The token is valid before the agent exists: a fast agent calls
        // cryo-agent at once. Its calls queue behind this function, so they
        // find the session live.
        self.shared.tokens.lock().expect("tokens lock").insert(
            token.clone(),
            crate::runtime::TokenEntry {
                chamber: self.id,
                name: self.name.clone(),
                session: number,
                tx: self.tx.clone(),
            },
        );
        let spawned = self.spawn_agent(&config, number, &wake_id, &token, &prompt_text).await;
        let (pid, pgid) = match spawned {
            Ok(p) => p,
            Err(e) => {
                for w in self.start_waiters.drain(..) {
                    let _ = w.send(Err(Error::Precondition(format!("the agent could not start: {e}"))));
                }
                self.log_event(&format!("agent could not start: {e}"));
                let live = Live::new(number, token, trigger, claims, 0, permit);
                self.live = Some(live);
                self.attention = Some(format!("the agent could not start: {e}"));
                self.finalize_with(Outcome::Crashed(format!("could not start: {e}")), None).await;
                return;
            }
        };
        let started = self.now();
        let lateness = due.map(|d| (started - d).num_milliseconds().max(0));
        self.last_lateness_ms = lateness;
        let _ = self.shared.store.session_started(self.id, number, pid, crate::rfc3339(started), lateness).await;
        self.log_event(&format!("agent started (pid {pid})"));
        for w in self.start_waiters.drain(..) {
            let _ = w.send(Ok(false));
        }
        tracing::info!(chamber = %self.name, session = number, pid, trigger = trigger.as_str(), "agent started");
        if config.max_session_duration > 0 {
            let tx = self.tx.clone();
            let limit = StdDuration::from_secs(config.max_session_duration);
            tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                let _ = tx.send(Event::Timeout { session: number });
            });
        }
        self.live = Some(Live::new(number, token, trigger, claims, pgid, permit));
    }

    /// Spawns the agent in its own process group; returns (pid, pgid).
    async fn spawn_agent(
        &self,
        config: &ChamberConfig,
        number: u64,
        wake_id: &str,
        token: &str,
        prompt_text: &str,
    ) -> std::result::Result<(u32, i32), String> {
        let dot = self.root.join(".cryo");
        crate::chamber::make_dir_in(&self.root, &dot).map_err(|e| format!("cannot create {}: {e}", dot.display()))?;
        let prompt_rel = ".cryo/prompt.md";
        // A copy for people and for prompts too long for an argument; not worth
        // two fsyncs on every wake (it is rewritten by the next one).
        let _ = std::fs::write(self.root.join(prompt_rel), prompt_text.as_bytes());
        let as_root = nix::unistd::geteuid().is_root();
        let launch = spawn::command_line(&config.agent, &self.root, prompt_text, prompt_rel, as_root)?;
        let log_path = self.root.join("cryo-agent.log");
        let mut log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
        {
            use std::io::Write;
            let _ = writeln!(
                log_file,
                "--- cryo session {number} (wake {wake_id}) at {} ---",
                cryo_core::time::format_in(self.now(), self.tz())
            );
        }
        let mut path = std::env::var("PATH").unwrap_or_default();
        if let Some(dir) = &self.shared.agent_bin {
            path = format!("{}:{path}", dir.display());
        }
        // Found here rather than by the child: a program looked up on a PATH
        // set for the child makes std fall back from posix_spawn (vfork) to
        // fork, which copies the daemon's page tables on every wake. One not
        // found is left to the spawn, whose error says why.
        let program = spawn::find_program(&launch.program, &self.root, &path)
            .unwrap_or_else(|| std::path::PathBuf::from(&launch.program));
        let mut cmd = tokio::process::Command::new(&program);
        cmd.arg0(&launch.program)
            .args(&launch.args)
            .current_dir(&self.root)
            .stdin(std::process::Stdio::null())
            .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
            .stderr(log_file)
            .process_group(0)
            .kill_on_drop(false)
            .env("PATH", path)
            .env("CRYO_SOCKET", &self.shared.socket)
            .env("CRYO_CHAMBER", &self.name)
            .env("CRYO_SESSION", number.to_string())
            .env("CRYO_WAKE_ID", wake_id)
            .env("CRYO_SESSION_TOKEN", token)
            .envs(&launch.env)
            .envs(&config.provider_env);
        if config.timezone_set {
            cmd.env("TZ", config.timezone.name());
        }
        let mut child = cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{:?} not found on PATH", launch.program),
            _ => format!("cannot run {:?}: {e}", launch.program),
        })?;
        let pid = child.id().ok_or("the agent exited at once")?;
        let tx = self.tx.clone();
        tokio::spawn(async move {
            if let Ok(status) = child.wait().await {
                let _ = tx.send(Event::Exited { session: number, status });
            }
        });
        Ok((pid, pid as i32))
    }

    /// Ends the live session from outside: SIGTERM to its group, SIGKILL
    /// after the grace period.
    fn end_session(&mut self, session: u64, why: Cut) {
        let grace = StdDuration::from_secs(match why {
            Cut::Shutdown => self.shared.config.stop_grace_seconds.min(3),
            _ => self.shared.config.stop_grace_seconds,
        });
        let Some(l) = self.live.as_mut().filter(|l| l.number == session) else { return };
        if why == Cut::Timeout && l.hibernate.is_some() {
            return;
        }
        if l.ending.is_none() || matches!(why, Cut::Stop | Cut::Shutdown | Cut::Replace) {
            l.ending = Some(why);
        }
        if let Some(reply) = l.linger.take() {
            let _ = reply.send(Err(Error::Precondition("the session is ending".into())));
        }
        let pgid = l.pgid;
        let what = match why {
            Cut::Timeout => "session timed out: ending the agent",
            Cut::Stop => "stopped by the operator: ending the agent",
            Cut::Shutdown => "cryod is shutting down: ending the agent",
            Cut::AfterHibernate => "agent did not exit after hibernating: ending it",
            Cut::Replace => "replaced by the operator's wake: ending the agent",
        };
        self.log_event(what);
        spawn::signal_group(pgid, Signal::SIGTERM);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let _ = tx.send(Event::Kill { session });
        });
    }

    fn linger_done(&mut self, session: u64) {
        let tz = self.tz();
        let Some(l) = self.live.as_mut().filter(|l| l.number == session) else { return };
        if let Some(reply) = l.linger.take() {
            let msg = hibernate_message(&self.todos, tz, l.hibernate.as_ref().map(|h| h.0));
            let _ = reply.send(Ok(AgentReply::Hibernate(msg)));
            self.log_event("linger expired: hibernating");
            self.arm_after_hibernate(session);
        }
    }

    fn arm_after_hibernate(&self, session: u64) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(AFTER_HIBERNATE).await;
            let _ = tx.send(Event::AfterHibernate { session });
        });
    }

    async fn finalize(&mut self, status: Option<std::process::ExitStatus>) {
        let Some(l) = self.live.as_ref() else { return };
        let outcome = match (l.ending, &l.hibernate) {
            (Some(Cut::Stop | Cut::Replace), _) => Outcome::Stopped,
            (Some(Cut::Shutdown), None) => Outcome::Interrupted,
            (_, Some((ending, _))) => Outcome::Hibernated(*ending),
            (Some(Cut::Timeout), None) => Outcome::TimedOut,
            (_, None) => Outcome::Crashed(describe_status(status)),
        };
        self.finalize_with(outcome, status).await;
    }

    /// Completes, retries or re-queues a session's claimed TODOs by its
    /// outcome; returns sentences for the report.
    fn settle_claims(&mut self, outcome: &Outcome, claims: &[Claim], now: DateTime<Utc>) -> Vec<String> {
        let tz = self.tz();
        let max_attempts = self.config.as_ref().map(|c| c.max_attempts).unwrap_or(10);
        let mut details = Vec::new();
        let requeue = matches!(outcome, Outcome::Stopped | Outcome::Interrupted);
        let failed = outcome.failed() && !requeue;
        let settled = self.update_todos(|list| {
            Ok(if requeue {
                (list.requeue(claims, now), Vec::new(), list.clone())
            } else if failed {
                let (r, e) = list.fail(claims, now, max_attempts);
                (r, e, list.clone())
            } else {
                list.complete(claims);
                (Vec::new(), Vec::new(), list.clone())
            })
        });
        let Ok((retries, exhausted, list)) = settled else {
            details.push(
                "cryo could not update todo.json for this session's TODOs (see `cryoctl chamber status`).".into(),
            );
            return details;
        };
        if requeue && !retries.is_empty() {
            details.push(format!("Its TODOs were re-queued as {}.", ids_text(&retries)));
        } else {
            for id in &retries {
                if let Some(t) = list.get(*id) {
                    details.push(format!(
                        "Retry: TODO {id} \"{}\" at {}.",
                        t.text,
                        t.at.map(|a| cryo_core::time::format_in(a, tz)).unwrap_or_default()
                    ));
                }
            }
        }
        for c in exhausted {
            let m = format!(
                "TODO {} \"{}\" failed {} times (max_attempts = {max_attempts}); cryo gave up on it and needs you to look.",
                c.id,
                todo::base_text(&c.text),
                c.attempt + 1
            );
            details.push(m.clone());
            self.attention = Some(m);
        }
        details
    }

    async fn finalize_with(&mut self, outcome: Outcome, status: Option<std::process::ExitStatus>) {
        let Some(l) = self.live.take() else { return };
        let now = self.now();
        self.shared.tokens.lock().expect("tokens lock").remove(&l.token);
        if l.pgid > 0 {
            // Leftover children (an agent's background jobs) end with the session.
            let pgid = l.pgid;
            if spawn::signal_group(pgid, Signal::SIGTERM) {
                tokio::spawn(async move {
                    tokio::time::sleep(StdDuration::from_secs(2)).await;
                    spawn::signal_group(pgid, Signal::SIGKILL);
                });
            }
        }
        if let Some(s) = status {
            self.log_event(&format!("agent exited: {}", describe_status(Some(s))));
        }
        // TODOs: complete, retry or re-queue the claims.
        let mut details = self.settle_claims(&outcome, &l.claims, now);
        let quick = matches!(outcome, Outcome::Crashed(_)) && l.started.elapsed() < QUICK_EXIT;
        if outcome.failed() {
            let tail = session::log_tail(&read_tail(&self.root.join("cryo-agent.log")), TAIL_LINES, TAIL_CHARS);
            if quick {
                let m = format!(
                    "The agent exited within {} seconds without hibernating: likely a misconfiguration (agent command, API key, permissions). Check `agent` in cryo.toml.",
                    QUICK_EXIT.as_secs()
                );
                details.insert(0, m.clone());
                self.attention.get_or_insert(m);
            }
            if !tail.is_empty() {
                details.push(format!("Last lines of cryo-agent.log:\n\n```\n{tail}\n```"));
            }
        }
        let conv = Conversation { unanswered_batch: !l.unanswered.is_empty(), sent_any: l.sent_any };
        self.write_fallbacks(l.number, &outcome, conv, &l.unanswered, &details.join("\n\n"), now);
        if conv.unanswered_batch {
            let _ = self.shared.store.journal_answer(self.id, l.number, crate::rfc3339(now)).await;
        }
        let summary = l.hibernate.as_ref().map(|(_, s)| s.clone()).filter(|s| !s.is_empty());
        let result = match &summary {
            Some(s) => format!("{}: {}", outcome.describe(), s),
            None => outcome.describe(),
        };
        self.log_event(&format!("session ended: {result}"));
        self.log_marker(log::end(&self.root.join("cryo.log")));
        let _ = self
            .shared
            .store
            .session_ended(self.id, l.number, crate::rfc3339(now), outcome.describe(), summary.unwrap_or_default())
            .await;
        tracing::info!(chamber = %self.name, session = l.number, outcome = %outcome.describe(), "session ended");
        self.previous_failure = outcome.failed().then(|| outcome.describe());
        if outcome.failed() {
            self.failures = self.failures.saturating_add(1);
            let hold = todo::retry_delay(self.failures);
            self.mail_hold_until = Some(now + hold);
            if !self.mailbox().unread().is_empty() {
                self.log_event(&format!(
                    "mail waits; after {} failed session(s) the next wake for mail is held for {}",
                    self.failures,
                    cryo_core::time::humanize(hold)
                ));
            }
        } else {
            self.failures = 0;
            self.mail_hold_until = None;
        }
        self.completed = outcome == Outcome::Hibernated(Ending::Complete);
        self.last_result = Some(result);
        let _ = l.trigger;
        // Whoever waits reads the snapshot next: it must show the end.
        if !l.stop_waiters.is_empty() {
            self.reconcile_bridges();
            self.publish();
        }
        for w in l.stop_waiters {
            let _ = w.send(Ok((false, true)));
        }
        let shutting_down = !l.shutdown_waiters.is_empty();
        for w in l.shutdown_waiters {
            let _ = w.send(());
        }
        drop(l._permit);
        if let Some((message, reply)) = self.replace_with.take() {
            let mut out = WakeOutcome { replaced: true, ..WakeOutcome::default() };
            if let Some(m) = message {
                match self.deliver("operator", "", &m, false) {
                    Ok(f) => out.message_file = Some(f),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        self.replan();
                        return;
                    }
                }
            }
            self.manual_queued = true;
            let _ = reply.send(Ok(out));
        }
        if !shutting_down {
            self.replan();
        }
    }

    // ---- the agent's calls -------------------------------------------------

    async fn agent_call(&mut self, call: AgentCall, reply: oneshot::Sender<Result<AgentReply>>) {
        let r = match call {
            AgentCall::Hibernate { summary, complete, exit_code, linger_secs } => {
                match self.hibernate(summary, complete, exit_code, linger_secs) {
                    Ok(Some(r)) => Ok(r),
                    Ok(None) => {
                        // Lingering: the reply is sent later.
                        if let Some(l) = self.live.as_mut() {
                            l.linger = Some(reply);
                        }
                        return;
                    }
                    Err(e) => Err(e),
                }
            }
            AgentCall::Send { text, question, subject } => self.send(text, question, subject).await,
            AgentCall::Receive => self.receive().await.map(AgentReply::Mail),
            AgentCall::Dialog { last, all } => self.dialog(last, all).await,
            AgentCall::Todo(call) => self.todo_call(call, "agent"),
        };
        let _ = reply.send(r);
    }

    /// `Ok(None)`: accepted with linger; the reply waits.
    fn hibernate(
        &mut self,
        summary: String,
        complete: bool,
        exit_code: i32,
        linger: u32,
    ) -> Result<Option<AgentReply>> {
        self.load_todos();
        let now = self.now();
        let (has_next_wake, due_now) = match &self.todos {
            Ok(t) => (t.has_pending(), t.due(now).count()),
            Err(e) => {
                return Err(Error::Precondition(format!(
                    "todo.json cannot be read, so hibernate cannot check it: {e}"
                )));
            }
        };
        let unread = self.mailbox().unread().len();
        let gate = hibernate::gate(&GateInput { unread, has_next_wake, due_now, complete, exit_code });
        let number = self.live.as_ref().map(|l| l.number).unwrap_or(0);
        match gate {
            Gate::Refuse(why) => {
                self.log_event(&format!("hibernate refused: {why}"));
                Err(Error::Precondition(why))
            }
            Gate::Accept(ending) => {
                let l = self.live.as_mut().expect("agent calls come from a live session");
                l.hibernate = Some((ending, summary.clone()));
                let lingering = linger > 0 && !matches!(ending, Ending::Failure(_));
                let what = match ending {
                    Ending::Hibernate => "hibernate accepted".to_string(),
                    Ending::Complete => "hibernate --complete accepted".to_string(),
                    Ending::Failure(n) => format!("hibernate --exit {n} accepted"),
                };
                let summary_text = if summary.is_empty() { String::new() } else { format!(": {summary}") };
                self.log_event(&format!("{what}{summary_text}"));
                if lingering {
                    let secs = linger.min(3600);
                    self.log_event(&format!("lingering up to {secs}s for new mail"));
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(StdDuration::from_secs(u64::from(secs))).await;
                        let _ = tx.send(Event::LingerDone { session: number });
                    });
                    return Ok(None);
                }
                self.arm_after_hibernate(number);
                Ok(Some(AgentReply::Hibernate(hibernate_message(&self.todos, self.tz(), Some(ending)))))
            }
        }
    }

    async fn send(&mut self, text: String, question: bool, subject: String) -> Result<AgentReply> {
        if text.trim().is_empty() {
            return Err(Error::Invalid("the message is empty".into()));
        }
        let limit = cryo_core::message::MAX_MESSAGE_BYTES - 4096;
        if text.len() > limit {
            return Err(Error::Invalid(format!(
                "the message is {} bytes, over the limit of {limit}: put long output in a file under messages/attachments/ and send its name",
                text.len()
            )));
        }
        let now = self.now();
        let l = self.live.as_mut().expect("agent calls come from a live session");
        let mut meta = BTreeMap::new();
        meta.insert("session".to_string(), l.number.to_string());
        let reply = !l.unanswered.is_empty();
        if reply {
            meta.insert("in_reply_to".to_string(), l.unanswered.join(" "));
        }
        let subject = if subject.trim().is_empty() { first_line(&text) } else { subject };
        let msg = Message { from: self.name.clone(), subject, timestamp: Some(now), question, meta, body: text };
        let mailbox = self.mailbox();
        let file = off_worker(|| mailbox.write(Folder::Outbox, &msg, now))
            .map_err(|e| Error::Internal(format!("cannot write the outbox: {e}")))?;
        self.shared.notify(self.id, NoticeKind::Message { folder: Folder::Outbox, name: file.clone() });
        self.bridges.outbox_changed();
        if question {
            self.open_questions += 1;
        }
        let l = self.live.as_mut().expect("still live");
        l.sent_any = true;
        l.unanswered.clear();
        let what = if question { "send (question)" } else { "send" };
        let text = format!("{what}: {}{}", msg.subject, if reply { " [reply]" } else { "" });
        self.log_event(&text);
        Ok(AgentReply::Sent { file: format!("messages/outbox/{file}"), reply })
    }

    /// Claims the inbox: the batch is journaled (durably, in SQLite) before
    /// its files move to the archive, so a crash can never lose the duty to
    /// answer it.
    async fn receive(&mut self) -> Result<Vec<Stored>> {
        let mailbox = self.mailbox();
        let pending =
            mailbox.read(Folder::Inbox).map_err(|e| Error::Internal(format!("cannot read the inbox: {e}")))?;
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<String> = pending.iter().map(|m| m.name.clone()).collect();
        let number = self.live.as_ref().expect("live").number;
        let at = crate::rfc3339(self.now());
        self.shared
            .store
            .journal_claim(self.id, number, names.clone(), at)
            .await
            .map_err(|e| Error::Internal(format!("cannot journal the claim: {e}")))?;
        let claimed = off_worker(|| mailbox.archive(pending))
            .map_err(|e| Error::Internal(format!("cannot archive the inbox: {e}")))?;
        self.log_event(&format!("receive: {} message(s): {}", names.len(), names.join(", ")));
        self.live.as_mut().expect("live").unanswered.extend(claimed.iter().map(|m| m.name.clone()));
        Ok(claimed)
    }

    async fn dialog(&mut self, last: u32, all: bool) -> Result<AgentReply> {
        let claimed = self.receive().await?.len() as u32;
        let mut messages = self.mailbox().dialog();
        if !all {
            let n = if last == 0 { 20 } else { last as usize };
            let skip = messages.len().saturating_sub(n);
            messages.drain(..skip);
        }
        Ok(AgentReply::Dialog { messages, claimed })
    }

    fn todo_call(&mut self, call: TodoCall, by: &str) -> Result<AgentReply> {
        match call {
            TodoCall::Add { text, at, every, cron, missed } => self.todo_add(text, at, every, cron, missed, by),
            TodoCall::List => self.todo_list(),
            TodoCall::Done(id) => self.todo_change(id, true, by),
            TodoCall::Remove(id) => self.todo_change(id, false, by),
        }
    }

    fn todo_add(
        &mut self,
        text: String,
        at: String,
        every: String,
        cron: String,
        missed: String,
        by: &str,
    ) -> Result<AgentReply> {
        let now = self.now();
        let tz = self.tz();
        let at = match at.trim() {
            "" if every.is_empty() && cron.is_empty() => {
                return Err(Error::Invalid("give a time with --at (or --every / --cron for a repeating TODO)".into()));
            }
            "" => None,
            s => Some(cryo_core::time::parse_time(s, now, tz).map_err(|e| Error::Invalid(e.to_string()))?),
        };
        let missed = match missed.as_str() {
            "" | "once" => Missed::Once,
            "skip" => Missed::Skip,
            other => return Err(Error::Invalid(format!("--missed must be once or skip, not {other:?}"))),
        };
        let opt = |s: String| (!s.trim().is_empty()).then_some(s);
        let new = NewTodo { text, at, every: opt(every), cron: opt(cron), missed };
        let todo = self.update_todos(|list| {
            let id = list.add(new.clone(), now, tz).map_err(|e| Error::Invalid(e.to_string()))?;
            Ok(list.get(id).cloned().expect("just added"))
        })?;
        let id = todo.id;
        self.log_event(&format!(
            "todo add {id} by {by}: {} (at {})",
            todo.text,
            todo.at.map(|a| cryo_core::time::format_in(a, tz)).unwrap_or_default()
        ));
        self.replan();
        Ok(AgentReply::Todos { todos: vec![todo], tz })
    }

    fn todo_list(&mut self) -> Result<AgentReply> {
        self.load_todos();
        let list = self.todos.clone().map_err(Error::Precondition)?;
        Ok(AgentReply::Todos { todos: list.items, tz: self.tz() })
    }

    fn todo_change(&mut self, id: u64, done: bool, by: &str) -> Result<AgentReply> {
        self.update_todos(|list| {
            let r = if done { list.done(id) } else { list.remove(id).map(|_| ()) };
            r.map_err(|e| match e {
                todo::TodoError::NotFound(_) => Error::NotFound(e.to_string()),
                _ => Error::Precondition(e.to_string()),
            })
        })?;
        self.log_event(&format!("todo {} {id} by {by}", if done { "done" } else { "remove" }));
        self.replan();
        self.todo_list()
    }
}

fn hibernate_message(todos: &std::result::Result<TodoList, String>, tz: Tz, ending: Option<Ending>) -> String {
    match ending {
        Some(Ending::Complete) => "hibernating: plan complete; the chamber sleeps until a message arrives".into(),
        Some(Ending::Failure(n)) => {
            format!("hibernating after failure (exit {n}): cryo will retry and tell the operator")
        }
        _ => match todos.as_ref().ok().and_then(|t| t.next_due()) {
            Some(t) => format!("hibernating: next wake at {}", cryo_core::time::format_in(t, tz)),
            None => "hibernating".into(),
        },
    }
}

fn describe_status(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => "unknown exit".into(),
        },
        None => "no exit status".into(),
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

/// The claims as the wake ledger stores them (enough to retry them after a
/// crash of cryod itself).
fn claims_json(claims: &[Claim]) -> String {
    let v: Vec<serde_json::Value> = claims
        .iter()
        .map(|c| {
            serde_json::json!({
                "id": c.id, "text": c.text, "due": crate::rfc3339(c.due), "slots": c.slots, "attempt": c.attempt,
            })
        })
        .collect();
    serde_json::Value::Array(v).to_string()
}

/// The claims back from the ledger.
pub fn claims_from_json(s: &str) -> Vec<Claim> {
    let v: Vec<serde_json::Value> = serde_json::from_str(s).unwrap_or_default();
    v.iter()
        .filter_map(|c| {
            Some(Claim {
                id: c.get("id")?.as_u64()?,
                text: c.get("text")?.as_str()?.to_string(),
                due: DateTime::parse_from_rfc3339(c.get("due")?.as_str()?).ok()?.with_timezone(&Utc),
                slots: c.get("slots").and_then(|s| s.as_u64()).unwrap_or(1) as u32,
                attempt: c.get("attempt").and_then(|s| s.as_u64()).unwrap_or(0) as u32,
            })
        })
        .collect()
}

/// Whether some outgoing message answers inbox file `name`.
fn answered(outgoing: &[Message], name: &str) -> bool {
    outgoing.iter().any(|m| m.meta.get("in_reply_to").is_some_and(|r| r.split(' ').any(|f| f == name)))
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
}

fn ids_text(ids: &[u64]) -> String {
    ids.iter().map(|i| format!("TODO {i}")).collect::<Vec<_>>().join(", ")
}

fn first_line(s: &str) -> String {
    let line = s.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let mut out: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        out.push('…');
    }
    out
}

/// The last 64 KiB of a file, as text.
fn read_tail(path: &Path) -> String {
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

pub fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).expect("the OS random source works");
    b.iter().map(|x| format!("{x:02x}")).collect()
}
