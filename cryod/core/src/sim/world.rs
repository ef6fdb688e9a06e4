//! The simulated world: durable files and ledger, the process table, the
//! volatile daemon, the people around it, and one event queue on one clock.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;

use super::agent::{Act, Agent};
use super::check::{self, Broken, Checker};
use super::{Config, Rng};

mod approvals;
mod effects;
use crate::chamber::approval::AWAITING_APPROVAL;
use crate::chamber::handoff::{HandedOff, OnEnd, When};
use crate::chamber::{
    Boot, Call, Chamber, Check, Checked, Effect, Folder, Input, Limits, Loaded, LogLine, OpenBatch, OpenSession,
    Outgoing, Passed, Refusal, Reply, ReqId, Rerun, Settings, Sig, TodoCall, TodoDone, TodoOp, TodoWriteError,
};
use crate::message::{CRYOCHAMBER, Message};
use crate::session::{Continuity, Outcome, Trigger, Used};
use crate::todo::{Claim, TodoList};

/// Zones with DST rules of every kind (and one without).
const ZONES: &[&str] =
    &["America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/Sao_Paulo", "Asia/Kolkata", "UTC"];
/// Starts a few days before a DST change somewhere.
const STARTS: &[&str] = &[
    "2026-03-05T10:00:00Z",
    "2026-03-26T08:00:00Z",
    "2026-04-01T12:00:00Z",
    "2026-09-30T18:00:00Z",
    "2026-10-22T06:00:00Z",
    "2026-10-30T23:30:00Z",
];
/// The simulated `max_session_duration`.
const SESSION_LIMIT: u64 = 1800;
const STOP_GRACE: StdDuration = StdDuration::from_secs(10);
/// A wake's ledger insert or claim fails (a full disk) this rarely.
const WRITE_FAILS_ONE_IN: u64 = 400;

/// One chamber's durable state: its files and its registry row.
#[derive(Debug, Clone)]
pub struct Disk {
    pub name: String,
    pub tz: Tz,
    pub max_attempts: u32,
    pub started: bool,
    pub paused: bool,
    pub archived: bool,
    pub todos: TodoList,
    pub inbox: BTreeMap<String, Message>,
    pub archive: BTreeMap<String, Message>,
    pub outbox: BTreeMap<String, Message>,
    pub log: Vec<LogLine>,
    /// Read from the machine at the end.
    pub completed: bool,
    pub faulted: bool,
    /// `session = "resume"`.
    pub resume: bool,
    /// It has a `precheck`.
    pub precheck: bool,
    /// It has `[git]`: each session works in a worktree made ready first.
    pub git: bool,
    /// The session whose worktree is made ready and not yet settled (its
    /// mark survives a crash of cryod; the next preparation settles it).
    pub worktree: Option<u64>,
    /// Its provider account (of [`ACCOUNTS`]), and the fallback its wakes
    /// go to while that one is held, if it has one.
    pub account: usize,
    pub fallback: Option<usize>,
    /// Its `[[on_end]]` table: the chamber it hands on to, when, and the
    /// link's rate.
    pub on_end: Option<(usize, When, u32)>,
    /// Its `[budget] daily_sessions`.
    pub daily_sessions: Option<u32>,
    /// It has `[approvals]` ([`approvals::policy`]).
    pub approvals: bool,
    /// Its health as the store keeps it (`Effect::SaveHealth`).
    pub health: Option<crate::chamber::HealthRecord>,
}

/// One wake in the ledger.
#[derive(Debug, Clone)]
pub struct Row {
    pub chamber: usize,
    pub number: u64,
    pub wake_id: String,
    pub claims: Vec<Claim>,
    pub ended: bool,
    pub outcome: String,
    /// The session whose conversation it continued.
    pub resumed_from: Option<u64>,
    /// When the wake was recorded (and so decided to continue it or not).
    pub recorded_at: DateTime<Utc>,
    /// When it ended, whether its outcome lets its conversation be resumed,
    /// and the conversation it left (as cryod records it).
    pub ended_at: Option<DateTime<Utc>>,
    pub resumable: bool,
    pub thread: Option<crate::session::Thread>,
}

/// A journaled inbox batch.
#[derive(Debug, Clone)]
pub struct Batch {
    pub id: i64,
    pub chamber: usize,
    pub session: u64,
    pub files: Vec<String>,
    pub answered: bool,
    pub dropped: bool,
}

/// The wake ledger and the claim journal (SQLite in cryod).
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    pub rows: Vec<Row>,
    pub batches: Vec<Batch>,
}

/// An agent process: it outlives the daemon that spawned it.
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    pub chamber: usize,
    pub session: u64,
    pub wake_id: String,
    pub token: String,
    /// The daemon incarnation that spawned it (and waits for its exit).
    pub inc: u32,
    pub alive: bool,
    pub agent: Agent,
    pub waiting: Option<(ReqId, Call)>,
    /// The approval request its CLI waits for in place.
    pub asking: Option<String>,
    /// The provider conversation it speaks in.
    pub conversation: String,
}

/// The volatile daemon: lost at a crash.
struct Daemon {
    inc: u32,
    machines: Vec<Option<Chamber>>,
    queue: BTreeMap<(Trigger, u64), usize>,
    seq: u64,
    running: usize,
    /// The chamber's permit has arrived (and is not given back yet).
    arrived: Vec<bool>,
    /// The chamber holds a permit (from the grant, before it arrives).
    slot: Vec<bool>,
    plans: Vec<Option<DateTime<Utc>>>,
    tokens: HashMap<String, (usize, u64)>,
    /// Agents waiting for a reply, by request.
    waiting: HashMap<ReqId, u32>,
    next_req: ReqId,
    /// The account each chamber's permit bills (its own, or a fallback).
    billing: Vec<Option<usize>>,
    /// Agents waiting in place for an approval request, by its id.
    asking: HashMap<String, Vec<u32>>,
}

#[derive(Debug, Clone)]
enum Ev {
    Due {
        inc: u32,
        chamber: usize,
        at: DateTime<Utc>,
    },
    Timer {
        inc: u32,
        chamber: usize,
        timer: crate::chamber::Timer,
    },
    Admit {
        inc: u32,
        chamber: usize,
    },
    Watch {
        inc: u32,
        chamber: usize,
    },
    Exited {
        inc: u32,
        pid: u32,
        status: String,
    },
    Checked {
        inc: u32,
        chamber: usize,
        nonce: String,
        results: Vec<(Check, Checked)>,
    },
    Prepared {
        inc: u32,
        chamber: usize,
        wake_id: String,
        result: Result<crate::chamber::Workplace, crate::chamber::Failed>,
    },
    /// A provider account's hold may be over: wakes waiting for it go.
    HoldOver {
        inc: u32,
    },
    /// An agent's wait for an approval in place is over.
    ApprovalWait {
        inc: u32,
        pid: u32,
        id: String,
    },
    /// A person decides an approval request (written to the store)...
    Decide {
        id: String,
    },
    /// ...and the chamber hears of it.
    Deliver {
        inc: u32,
        id: String,
    },
    Step {
        pid: u32,
    },
    TermExit {
        pid: u32,
    },
    Mail {
        chamber: usize,
    },
    Operator {
        chamber: usize,
    },
    Start {
        chamber: usize,
    },
    Resume {
        chamber: usize,
    },
    /// Unarchive, then start.
    Unarchive {
        chamber: usize,
    },
    Restart,
    Sleep {
        hours: i64,
    },
    Woke,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub chamber_days: u64,
    pub inputs: u64,
    pub effects: u64,
    pub wakes: u64,
    pub spawns: u64,
    pub crashes: u64,
    pub sleeps: u64,
    /// Ledger inserts and claims that failed as on a full disk.
    pub write_failures: u64,
    /// Sessions that continued their predecessor's conversation.
    pub resumed: u64,
    /// Slots their pre-checks passed by.
    pub passed: u64,
    /// Sessions' ends handed on to another chamber.
    pub handoffs: u64,
    /// Slots recorded as missed (late, run as one, or skipped), with a reason.
    pub missed: u64,
    /// Events raised for people (each once).
    pub notices: u64,
    /// Of those, a budget's (its 80%, or the pause at 100%).
    pub budget_notices: u64,
    /// Done TODOs moved out of `todo.json` (past `keep_done`).
    pub retired: u64,
    /// The most TODOs one `todo.json` held.
    pub longest_list: u64,
    /// `[git]` worktrees made ready, and those that could not be.
    pub prepared: u64,
    pub unprepared: u64,
    /// Provider accounts held at their limit.
    pub holds: u64,
    /// Tool calls sent to a person, requests decided, sessions parked.
    pub asked: u64,
    pub decided: u64,
    pub parked: u64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} chamber-days, {} wakes, {} agents spawned ({} resumed), {} slots passed by pre-checks, {} missed, {} hand-offs, {} events ({} of budgets), {} cryod crashes, {} failed writes, {} sleeps, {} inputs, {} effects, {} done TODOs archived (longest todo.json {}), {} worktrees made ready ({} could not be), {} provider holds, {} calls asked of a person ({} answered, {} sessions parked)",
            self.chamber_days,
            self.wakes,
            self.spawns,
            self.resumed,
            self.passed,
            self.missed,
            self.handoffs,
            self.notices,
            self.budget_notices,
            self.crashes,
            self.write_failures,
            self.sleeps,
            self.inputs,
            self.effects,
            self.retired,
            self.longest_list,
            self.prepared,
            self.unprepared,
            self.holds,
            self.asked,
            self.decided,
            self.parked
        )
    }
}

impl std::ops::AddAssign for Report {
    fn add_assign(&mut self, o: Report) {
        self.chamber_days += o.chamber_days;
        self.inputs += o.inputs;
        self.effects += o.effects;
        self.wakes += o.wakes;
        self.spawns += o.spawns;
        self.crashes += o.crashes;
        self.sleeps += o.sleeps;
        self.write_failures += o.write_failures;
        self.resumed += o.resumed;
        self.passed += o.passed;
        self.handoffs += o.handoffs;
        self.missed += o.missed;
        self.notices += o.notices;
        self.budget_notices += o.budget_notices;
        self.retired += o.retired;
        self.longest_list = self.longest_list.max(o.longest_list);
        self.prepared += o.prepared;
        self.unprepared += o.unprepared;
        self.holds += o.holds;
        self.asked += o.asked;
        self.decided += o.decided;
        self.parked += o.parked;
    }
}

/// A broken invariant, with the seed that reproduces it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    pub message: String,
    /// The last steps before it.
    pub trace: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "simulation seed {} failed: {}", self.seed, self.message)?;
        writeln!(f, "replay it with CRYO_SIM_SEED={}; the last steps were:", self.seed)?;
        for t in &self.trace {
            writeln!(f, "  {t}")?;
        }
        Ok(())
    }
}

/// One step of a scripted scenario ([`World::scripted`]).
#[derive(Debug, Clone)]
pub enum ScriptStep {
    /// Someone writes a message with this text into the inbox (and cryod
    /// has seen it before the next step).
    Mail(String),
    /// `cryoctl chamber start`.
    Start,
    /// `cryoctl chamber wake`.
    Wake,
    /// Time passes until this many sessions have ended in all (an hour at most).
    Ended(usize),
}

/// A scripted chamber's files at the end.
#[derive(Debug, Clone)]
pub struct Files {
    /// In the order written.
    pub outbox: Vec<Message>,
    pub todos: TodoList,
    pub log: Vec<LogLine>,
}

pub struct World {
    seed: u64,
    config: Config,
    rng: Rng,
    now: DateTime<Utc>,
    events: BTreeMap<(DateTime<Utc>, u64), Ev>,
    seq: u64,
    disks: Vec<Disk>,
    ledger: Ledger,
    /// Provider accounts held at their limit, until then (kept in the
    /// store: they outlive a crash of cryod).
    holds: BTreeMap<usize, DateTime<Utc>>,
    /// Approval requests (the store's).
    requests: Vec<approvals::Request>,
    /// Decided requests the live daemon has yet to tell its chamber.
    in_flight: std::collections::BTreeSet<String>,
    procs: Vec<Proc>,
    daemon: Option<Daemon>,
    incarnation: u32,
    crashes_on: bool,
    externals_on: bool,
    check: Checker,
    report: Report,
    trace: VecDeque<(DateTime<Utc>, usize, &'static str)>,
    names: u64,
    same_instant: u64,
    steps: u64,
    /// Every agent before this index has ended.
    first_live: usize,
    /// `CRYO_SIM_TRACE=N`: print chamber N's every input and effect.
    watch: Option<usize>,
    /// A scripted scenario's agents, one plan per session in order.
    script: Option<VecDeque<Vec<Act>>>,
}

type Step = Result<(), Broken>;

impl World {
    pub fn new(seed: u64, config: Config) -> World {
        let mut rng = Rng::new(seed);
        let start = STARTS[rng.below(STARTS.len() as u64) as usize];
        let now = DateTime::parse_from_rfc3339(start).expect("valid start").with_timezone(&Utc)
            + Duration::minutes(rng.below(600) as i64);
        let disks = (0..config.chambers)
            .map(|i| Disk {
                name: format!("c{i}"),
                tz: ZONES[rng.below(ZONES.len() as u64) as usize].parse().expect("known zone"),
                max_attempts: 2 + rng.below(6) as u32,
                started: false,
                paused: false,
                archived: false,
                todos: TodoList::default(),
                inbox: BTreeMap::new(),
                archive: BTreeMap::new(),
                outbox: BTreeMap::new(),
                log: Vec::new(),
                completed: false,
                faulted: false,
                resume: rng.one_in(2),
                precheck: rng.one_in(3),
                git: rng.one_in(4),
                worktree: None,
                account: rng.below(ACCOUNTS as u64) as usize,
                fallback: rng.one_in(4).then(|| rng.below(ACCOUNTS as u64) as usize),
                on_end: None,
                daily_sessions: None,
                approvals: rng.one_in(3),
                health: None,
            })
            .collect::<Vec<Disk>>();
        // Hand-offs: a fifth of the chambers hand on to the next one, and
        // some pairs hand on to each other on every end (a loop, with a
        // tight rate so the limit is met).
        let mut disks = disks;
        let n = disks.len();
        for i in 0..n {
            if n < 2 || disks[i].on_end.is_some() {
                continue;
            }
            let next = (i + 1) % n;
            if rng.one_in(20) && disks[next].on_end.is_none() {
                disks[i].on_end = Some((next, When::Any, 1));
                disks[next].on_end = Some((i, When::Any, 1));
            } else if rng.one_in(8) {
                let when = [When::Completed, When::Hibernated, When::Failed, When::Any][rng.below(4) as usize];
                disks[i].on_end = Some((next, when, 6));
            }
        }
        // Budgets: a sixth of the chambers may run only a few sessions a day.
        for d in &mut disks {
            if rng.one_in(6) {
                d.daily_sessions = Some(2 + rng.below(4) as u32);
            }
        }
        World {
            seed,
            check: Checker::new(config.chambers),
            config,
            rng,
            now,
            events: BTreeMap::new(),
            seq: 0,
            disks,
            ledger: Ledger::default(),
            holds: BTreeMap::new(),
            requests: Vec::new(),
            in_flight: Default::default(),
            procs: Vec::new(),
            daemon: None,
            incarnation: 0,
            crashes_on: true,
            externals_on: true,
            report: Report::default(),
            trace: VecDeque::new(),
            names: 0,
            same_instant: 0,
            steps: 0,
            first_live: 0,
            watch: std::env::var("CRYO_SIM_TRACE").ok().and_then(|c| c.parse().ok()),
            script: None,
        }
    }

    /// One chamber (zone UTC, `max_attempts` as given) through a fixed
    /// script: no crashes, no randomness that shows in its files; session
    /// k's agent does `sessions[k - 1]` to the letter. For comparing the
    /// machine with the real daemon on one scenario.
    pub fn scripted(steps: &[ScriptStep], sessions: Vec<Vec<Act>>, max_attempts: u32) -> Result<Files, Failure> {
        let mut w = World::new(0, Config { chambers: 1, days: 0, limit: 1, crash_one_in: 0 });
        w.crashes_on = false;
        w.externals_on = false;
        w.disks[0].tz = chrono_tz::UTC;
        w.disks[0].max_attempts = max_attempts;
        // As a plain agent command runs under cryod: no conversation to
        // resume, no pre-check, no `[git]`.
        w.disks[0].resume = false;
        w.disks[0].precheck = false;
        w.disks[0].git = false;
        w.disks[0].approvals = false;
        w.script = Some(sessions.into());
        match w.run_script(steps) {
            Ok(()) => {
                let d = &w.disks[0];
                Ok(Files { outbox: d.outbox.values().cloned().collect(), todos: d.todos.clone(), log: d.log.clone() })
            }
            Err(Broken(message)) => Err(Failure { seed: 0, message, trace: Vec::new() }),
        }
    }

    fn run_script(&mut self, steps: &[ScriptStep]) -> Step {
        self.restart()?;
        for step in steps {
            match step {
                ScriptStep::Mail(text) => {
                    let msg = self.message("tester", text);
                    self.write(0, Folder::Inbox, msg);
                    // The watcher sees it before the next step.
                    self.until(self.now + Duration::seconds(1))?;
                }
                ScriptStep::Start => {
                    let log_session = self.log_session(0);
                    self.operator(0, |req| Input::Start { req, wait: false, agent_check: Ok(()), log_session })?;
                }
                ScriptStep::Wake => self.operator(0, |req| Input::Wake { req, message: None, replace: false })?,
                ScriptStep::Ended(n) => {
                    let deadline = self.now + Duration::hours(1);
                    let ended = |w: &World| w.disks[0].log.iter().filter(|l| matches!(l, LogLine::End)).count();
                    while ended(self) < *n {
                        if self.now > deadline {
                            return Err(Broken(format!(
                                "{n} sessions did not end within an hour ({} did)",
                                ended(self)
                            )));
                        }
                        self.until(self.now + Duration::seconds(5))?;
                    }
                }
            }
        }
        Ok(())
    }

    pub fn run(mut self) -> Result<Report, Failure> {
        match self.run_inner() {
            Ok(()) => Ok(self.report),
            Err(Broken(message)) => Err(Failure {
                seed: self.seed,
                message,
                trace: self.trace.iter().map(|(t, c, what)| format!("{t} c{c} {what}")).collect(),
            }),
        }
    }

    fn run_inner(&mut self) -> Step {
        let start = self.now;
        self.restart()?;
        for c in 0..self.disks.len() {
            let at = self.now + Duration::seconds(self.rng.below(60) as i64);
            self.at(at, Ev::Start { chamber: c });
            let t = self.mail_gap();
            self.at(t, Ev::Mail { chamber: c });
            let t = self.now + Duration::hours(6 + self.rng.below(48) as i64);
            self.at(t, Ev::Operator { chamber: c });
        }
        let t = self.now + Duration::hours(12 + self.rng.below(120) as i64);
        let hours = 1 + self.rng.below(12) as i64;
        self.at(t, Ev::Sleep { hours });
        let drain = start + Duration::days(i64::from(self.config.days));
        self.until(drain)?;
        // The drain: no more crashes or outside input; every chamber started
        // and resumed; two days for all that is due to run.
        self.crashes_on = false;
        self.externals_on = false;
        if self.daemon.is_none() {
            self.restart()?;
        }
        for c in 0..self.disks.len() {
            self.resume(c)?;
            self.unarchive(c)?;
        }
        let due_before = self.now;
        self.until(due_before + Duration::days(2))?;
        self.reran()?;
        self.shutdown()?;
        self.report.chamber_days = self.config.chambers as u64 * (u64::from(self.config.days) + 2);
        self.check.end(&self.disks, &self.ledger, due_before)
    }

    // ---- the clock and the queue ------------------------------------------

    fn at(&mut self, t: DateTime<Utc>, ev: Ev) {
        self.seq += 1;
        self.events.insert((t.max(self.now), self.seq), ev);
    }

    fn after(&mut self, d: StdDuration, ev: Ev) {
        let t = self.now + Duration::from_std(d).unwrap_or(Duration::MAX);
        self.at(t, ev);
    }

    /// A pause an agent takes before its next act.
    fn think(&mut self) -> StdDuration {
        if self.script.is_some() {
            // A script, not a model: each step takes a moment.
            return StdDuration::from_millis(20 + self.rng.below(50));
        }
        StdDuration::from_millis(200 + self.rng.below(20_000))
    }

    fn mail_gap(&mut self) -> DateTime<Utc> {
        self.now + Duration::minutes(30 + self.rng.below(24 * 60) as i64)
    }

    fn until(&mut self, end: DateTime<Utc>) -> Step {
        while let Some((&(t, s), _)) = self.events.first_key_value() {
            if t > end {
                break;
            }
            let ev = self.events.remove(&(t, s)).expect("just seen");
            self.steps += 1;
            // A run's events grow with its chamber-days (a few hundred each);
            // far more means something reschedules itself without end.
            if self.steps > 20_000 * (self.config.chambers as u64) * (u64::from(self.config.days) + 2) {
                return Err(Broken(format!("a runaway: {} events by {t}", self.steps)));
            }
            if t == self.now {
                self.same_instant += 1;
                if self.same_instant > 100_000 {
                    return Err(Broken(format!("a livelock: 100,000 events at {t} without time moving on")));
                }
            } else {
                self.same_instant = 0;
            }
            self.now = t;
            self.dispatch(ev)?;
            // Agents end roughly in the order they started: skip the dead.
            while self.procs.get(self.first_live).is_some_and(|p| !p.alive) {
                self.first_live += 1;
            }
            Checker::processes(&self.procs[self.first_live..], self.config.limit)?;
            self.approvals_alive()?;
        }
        self.now = end;
        Ok(())
    }

    fn show(&self, chamber: usize, arrow: &str, what: &dyn fmt::Debug) {
        if self.watch == Some(chamber) {
            let text = format!("{what:?}");
            let cut = text.char_indices().nth(300).map(|(i, _)| i).unwrap_or(text.len());
            eprintln!("{} c{chamber} {arrow} {}", self.now.format("%m-%d %H:%M:%S%.3f"), &text[..cut]);
        }
    }

    fn note(&mut self, chamber: usize, what: &'static str) {
        if self.watch == Some(chamber) || (self.watch.is_some() && what.starts_with(char::is_uppercase)) {
            eprintln!("{} c{chamber} -- {what}", self.now.format("%m-%d %H:%M:%S%.3f"));
        }
        if self.trace.len() == 80 {
            self.trace.pop_front();
        }
        self.trace.push_back((self.now, chamber, what));
    }

    // ---- events ---------------------------------------------------------------

    fn inc(&self) -> u32 {
        self.daemon.as_ref().map(|d| d.inc).unwrap_or(0)
    }

    fn dispatch(&mut self, ev: Ev) -> Step {
        let live = self.inc();
        match ev {
            Ev::Due { inc, chamber, at } if inc == live => {
                let d = self.daemon.as_mut().expect("live");
                if d.plans[chamber] == Some(at) {
                    d.plans[chamber] = None;
                    self.feed(chamber, Input::Due)?;
                }
            }
            Ev::Timer { inc, chamber, timer } if inc == live => self.feed(chamber, Input::Timer(timer))?,
            Ev::Admit { inc, chamber } if inc == live => self.admit(chamber)?,
            Ev::Checked { inc, chamber, nonce, results } if inc == live => {
                self.feed(chamber, Input::Prechecked { nonce, results })?
            }
            Ev::Prepared { inc, chamber, wake_id, result } if inc == live => {
                self.feed(chamber, Input::Prepared { wake_id, result })?
            }
            Ev::HoldOver { inc } if inc == live => self.grant(),
            Ev::ApprovalWait { inc, pid, id } if inc == live => self.approval_wait_over(pid, id)?,
            Ev::Deliver { inc, id } if inc == live => self.deliver(id)?,
            Ev::Decide { id } => self.decide(id)?,
            Ev::Watch { inc, chamber } if inc == live => {
                let unread = self.disks[chamber].inbox.keys().cloned().collect();
                self.feed(chamber, Input::Inbox { unread, arrived: true })?;
            }
            Ev::Exited { inc, pid, status } if inc == live => {
                let p = &self.procs[pid as usize - 1];
                let (chamber, session) = (p.chamber, p.session);
                // An agent that did not hibernate may have met its provider's
                // limit (its stream said so): its work resumes later.
                let resets = p.agent.limit_resets_in.filter(|_| !p.agent.hibernated);
                let limited = resets.map(|m| self.now + Duration::minutes(m as i64));
                // What its stream said of its conversation (tokens vary by session).
                let used = Used { conversation: p.conversation.clone(), tokens: 1000 + (session * 737) % 2000 };
                self.observe_inbox(chamber)?;
                let input = Input::Exited { session, status, log_tail: String::new(), limited, used: Some(used) };
                self.feed(chamber, input)?;
            }
            Ev::Due { .. }
            | Ev::Timer { .. }
            | Ev::Admit { .. }
            | Ev::Watch { .. }
            | Ev::Exited { .. }
            | Ev::Checked { .. }
            | Ev::Prepared { .. }
            | Ev::HoldOver { .. }
            | Ev::ApprovalWait { .. }
            | Ev::Deliver { .. } => {}
            Ev::Step { pid } => self.agent_step(pid)?,
            Ev::TermExit { pid } => self.die(pid, "killed by signal 15"),
            Ev::Mail { chamber } => {
                if self.externals_on {
                    let msg = self.message("someone", "a note for the agent");
                    self.write(chamber, Folder::Inbox, msg);
                    let t = self.mail_gap();
                    self.at(t, Ev::Mail { chamber });
                }
            }
            Ev::Operator { chamber } => {
                if self.externals_on {
                    self.operator_action(chamber)?;
                    let t = self.now + Duration::hours(4 + self.rng.below(72) as i64);
                    self.at(t, Ev::Operator { chamber });
                }
            }
            Ev::Start { chamber } => {
                let log_session = self.log_session(chamber);
                self.operator(chamber, |req| Input::Start { req, wait: false, agent_check: Ok(()), log_session })?;
            }
            Ev::Resume { chamber } => self.resume(chamber)?,
            Ev::Unarchive { chamber } => self.unarchive(chamber)?,
            Ev::Restart => self.restart()?,
            Ev::Sleep { hours } => self.sleep(hours)?,
            Ev::Woke => {
                for c in 0..self.disks.len() {
                    self.feed(c, Input::Power { sleeping: false })?;
                }
                if self.externals_on {
                    let t = self.now + Duration::hours(24 + self.rng.below(200) as i64);
                    let hours = 1 + self.rng.below(12) as i64;
                    self.at(t, Ev::Sleep { hours });
                }
            }
        }
        Ok(())
    }

    /// The machine sleeps: nothing runs; the runtime's timers and the agents stop
    /// with it; wall-clock deadlines that pass are due at once on waking.
    fn sleep(&mut self, hours: i64) -> Step {
        self.report.sleeps += 1;
        for c in 0..self.disks.len() {
            self.feed(c, Input::Power { sleeping: true })?;
        }
        let wake = self.now + Duration::hours(hours);
        let later: Vec<_> = std::mem::take(&mut self.events).into_iter().collect();
        for ((t, s), ev) in later {
            let t = match ev {
                Ev::Due { .. } => t.max(wake),
                _ => t + Duration::hours(hours),
            };
            self.events.insert((t, s), ev);
        }
        self.at(wake, Ev::Woke);
        Ok(())
    }

    fn log_session(&self, c: usize) -> u64 {
        self.disks[c]
            .log
            .iter()
            .filter_map(|l| if let LogLine::Begin(n) = l { Some(*n) } else { None })
            .max()
            .unwrap_or(0)
    }

    fn operator(&mut self, chamber: usize, make: impl FnOnce(ReqId) -> Input) -> Step {
        let Some(d) = self.daemon.as_mut() else { return Ok(()) };
        d.next_req += 1;
        let req = d.next_req;
        self.feed(chamber, make(req))
    }

    /// An operator resumes the chamber; one its budget paused may spend
    /// past that budget for the rest of the period.
    fn resume(&mut self, c: usize) -> Step {
        let machine = self.daemon.as_ref().and_then(|d| d.machines[c].as_ref());
        let by_budget = machine.is_some_and(|m| {
            m.paused() && m.view().attention.is_some_and(|a| a.starts_with(crate::session::BUDGET_REACHED))
        });
        if by_budget {
            self.check.released(c, self.now.date_naive());
        }
        self.operator(c, |req| Input::Pause { req, pause: false })
    }

    fn unarchive(&mut self, c: usize) -> Step {
        self.operator(c, |req| Input::Archive { req, archive: false })?;
        self.operator(c, |req| Input::Start { req, wait: false, agent_check: Ok(()), log_session: 0 })
    }

    fn operator_action(&mut self, c: usize) -> Step {
        match self.rng.below(20) {
            0..=5 => {
                let text = format!("operator note {}", self.rng.hex(4));
                self.operator(c, |req| Input::Deliver {
                    req,
                    from: "op".into(),
                    subject: String::new(),
                    text,
                    meta: BTreeMap::new(),
                })
            }
            6..=8 => {
                let message = self.rng.one_in(2).then(|| "look at this".to_string());
                let replace = self.rng.one_in(3);
                self.operator(c, |req| Input::Wake { req, message, replace })
            }
            9..=10 => {
                let at = format!("+{}h", 1 + self.rng.below(40));
                let call = TodoCall::Add {
                    text: "operator task".into(),
                    at,
                    every: "".into(),
                    cron: "".into(),
                    missed: "".into(),
                    precheck: String::new(),
                };
                self.operator(c, |req| Input::Todo { req, call })
            }
            11..=12 => {
                let wait = self.rng.one_in(2);
                self.operator(c, |req| Input::Stop { req, wait })?;
                let t = self.now + Duration::minutes(10 + self.rng.below(24 * 60) as i64);
                self.at(t, Ev::Start { chamber: c });
                Ok(())
            }
            13..=14 => {
                self.operator(c, |req| Input::Pause { req, pause: true })?;
                let t = self.now + Duration::minutes(10 + self.rng.below(24 * 60) as i64);
                self.at(t, Ev::Resume { chamber: c });
                Ok(())
            }
            15 => {
                // Archived while a session may still be ending (then refused).
                let wait = self.rng.one_in(2);
                self.operator(c, |req| Input::Stop { req, wait })?;
                self.operator(c, |req| Input::Archive { req, archive: true })?;
                let t = self.now + Duration::minutes(10 + self.rng.below(24 * 60) as i64);
                self.at(t, Ev::Unarchive { chamber: c });
                Ok(())
            }
            16 => {
                // What needs a person set aside, or snoozed: refused when
                // nothing does; never a change to the chamber's work.
                let until = self.rng.one_in(2).then(|| self.now + Duration::minutes(1 + self.rng.below(600) as i64));
                self.operator(c, |req| Input::Acknowledge { req, until })
            }
            _ => self.operator(c, |req| Input::Todo { req, call: TodoCall::List }),
        }
    }

    // ---- the daemon -------------------------------------------------------------

    /// A crash of cryod: its volatile half is gone; agents live on.
    fn crash(&mut self) {
        self.report.crashes += 1;
        self.daemon = None;
        // Decisions on their way to a chamber die with it (the store has them).
        self.in_flight.clear();
        // The hand-off rate is counted in memory: a new cryod starts afresh.
        self.check.forget_links();
        self.note(0, "CRASH");
        let t = self.now + Duration::seconds(1 + self.rng.below(600) as i64);
        self.at(t, Ev::Restart);
    }

    /// A start of cryod: the agents of sessions still open are ended first,
    /// then every chamber's machine is made from the durable state and
    /// recovers (as `Daemon::load` and `supervisor::boot` do).
    fn restart(&mut self) -> Step {
        if self.daemon.is_some() {
            return Ok(());
        }
        self.incarnation += 1;
        self.note(0, "RESTART");
        let mut ended: HashMap<String, usize> = HashMap::new();
        for r in self.ledger.rows.iter().filter(|r| !r.ended) {
            for p in self.procs.iter_mut().filter(|p| p.alive && p.wake_id == r.wake_id) {
                p.alive = false;
                *ended.entry(r.wake_id.clone()).or_default() += 1;
            }
        }
        Checker::recovered(&self.procs, self.incarnation)?;
        let n = self.disks.len();
        // What a paused chamber waits for, and an answer that never reached
        // it, as `supervisor::boot` reads them.
        let awaiting: Vec<_> = (0..n)
            .map(|c| {
                let d = &self.disks[c];
                let last = self.ledger.rows.iter().filter(|r| r.chamber == c).max_by_key(|r| r.number);
                let last_asked = last.is_some_and(|r| r.outcome.starts_with(AWAITING_APPROVAL));
                let newest = if d.paused || last_asked { self.newest_request(c) } else { None };
                crate::approvals::request::at_boot(
                    d.paused,
                    last_asked,
                    d.health.as_ref().and_then(|h| h.attention.as_deref()),
                    newest,
                )
            })
            .collect();
        let mut machines = Vec::with_capacity(n);
        for (c, disk) in self.disks.iter().enumerate() {
            let rows: Vec<&Row> = self.ledger.rows.iter().filter(|r| r.chamber == c).collect();
            let last = rows.iter().map(|r| r.number).max().unwrap_or(0);
            let from_log =
                disk.log.iter().filter_map(|l| if let LogLine::Begin(n) = l { Some(*n) } else { None }).max();
            machines.push(Some(Chamber::new(
                Loaded {
                    id: c as i64 + 1,
                    name: disk.name.clone(),
                    started: disk.started,
                    paused: disk.paused,
                    archived: disk.archived,
                    begun_again: false,
                    last_session: last.max(from_log.unwrap_or(0)),
                    last_result: rows.iter().max_by_key(|r| r.number).map(|r| r.outcome.clone()),
                    last_lateness_ms: None,
                    open_questions: 0,
                    config: Ok(settings(disk)),
                    warnings: Vec::new(),
                    todos: Ok(disk.todos.clone()),
                    unread: disk.inbox.keys().cloned().collect(),
                    system_tz: chrono_tz::UTC,
                    // The conversation the newest session left, as cryod
                    // reads it from the ledger (none if it is open).
                    thread: rows.iter().max_by_key(|r| r.number).and_then(|r| r.thread.clone()),
                    last_visible: None,
                    rerun: rows
                        .iter()
                        .max_by_key(|r| r.number)
                        .filter(|r| r.ended)
                        .and_then(|r| Rerun::after(r.number, Some(&r.outcome), || outgoing(disk))),
                    awaiting: awaiting[c].awaiting.clone(),
                    health: disk.health.clone(),
                },
                Limits { stop_grace: STOP_GRACE },
            )));
        }
        self.daemon = Some(Daemon {
            inc: self.incarnation,
            machines,
            queue: BTreeMap::new(),
            seq: 0,
            running: 0,
            slot: vec![false; n],
            arrived: vec![false; n],
            plans: vec![None; n],
            tokens: HashMap::new(),
            waiting: HashMap::new(),
            next_req: 0,
            billing: vec![None; n],
            asking: HashMap::new(),
        });
        // The holds it reads back from the store end when they said.
        let ends: Vec<DateTime<Utc>> = self.holds.values().copied().filter(|u| *u > self.now).collect();
        for end in ends {
            self.at(end, Ev::HoldOver { inc: self.incarnation });
        }
        for (c, crate::approvals::request::AtBoot { answered, .. }) in awaiting.into_iter().enumerate() {
            let boot = self.boot_input(c, &ended);
            self.feed(c, Input::Boot(boot))?;
            if let Some((id, line)) = answered
                && self.daemon.is_some()
            {
                let req = self.own_req();
                self.feed(c, Input::Answered { req, id, line })?;
            }
        }
        Ok(())
    }

    fn boot_input(&self, c: usize, ended: &HashMap<String, usize>) -> Boot {
        let disk = &self.disks[c];
        Boot {
            open: (self.ledger.rows.iter().filter(|r| r.chamber == c && !r.ended))
                .map(|r| OpenSession {
                    number: r.number,
                    wake_id: r.wake_id.clone(),
                    claims: r.claims.clone(),
                    groups_ended: ended.get(&r.wake_id).copied().unwrap_or(0),
                })
                .collect(),
            batches: (self.ledger.batches.iter().filter(|b| b.chamber == c && !b.answered && !b.dropped))
                .map(|b| OpenBatch {
                    id: b.id,
                    session: b.session,
                    files: b.files.clone(),
                    archived: b.files.iter().filter(|f| disk.archive.contains_key(*f)).cloned().collect(),
                })
                .collect(),
            outgoing: outgoing(disk),
        }
    }

    /// After the drain, no running chamber's newest session is one cryod's
    /// own stop or death cut short: its work ran again.
    fn reran(&self) -> Step {
        let Some(d) = &self.daemon else { return Ok(()) };
        for (c, m) in d.machines.iter().enumerate() {
            let Some(m) = m else { continue };
            let v = m.view();
            if !matches!(
                v.state,
                crate::chamber::State::Idle | crate::chamber::State::Running | crate::chamber::State::Held
            ) {
                continue;
            }
            let newest = self.ledger.rows.iter().filter(|r| r.chamber == c).max_by_key(|r| r.number);
            if let Some(r) = newest.filter(|r| r.ended && r.outcome == Outcome::Interrupted.describe()) {
                return Err(Broken(format!(
                    "chamber {c}: session {} was interrupted and its work never ran again",
                    r.number
                )));
            }
        }
        Ok(())
    }

    /// A clean stop of cryod: every session ends, then the machines exit.
    fn shutdown(&mut self) -> Step {
        for c in 0..self.disks.len() {
            let view = self.daemon.as_ref().and_then(|d| d.machines[c].as_ref()).map(|m| (m.completed(), m.fault()));
            if let Some((completed, fault)) = view {
                self.disks[c].completed = completed;
                self.disks[c].faulted = fault.is_some();
            }
            self.operator(c, |req| Input::Shutdown { req })?;
        }
        let deadline = self.now + Duration::minutes(5);
        self.until(deadline)?;
        let open = self.daemon.as_ref().map(|d| d.machines.iter().flatten().count()).unwrap_or(0);
        if open > 0 {
            return Err(Broken(format!("{open} chamber(s) did not finish within five minutes of a shutdown")));
        }
        Ok(())
    }

    /// One event for a chamber, as the supervisor takes it: `todo.json` is
    /// handed over first where the input decides from it (and differs from
    /// what the machine holds), and the machine rests after.
    fn feed(&mut self, c: usize, input: Input) -> Step {
        fn machine(w: &mut World, c: usize) -> Option<&mut Chamber> {
            w.daemon.as_mut().and_then(|d| d.machines[c].as_mut())
        }
        let held = self.daemon.as_ref().and_then(|d| d.machines[c].as_ref()).map(|m| m.todos());
        let stale = held.is_some_and(|h| h != Some(Ok(&self.disks[c].todos)));
        if Chamber::wants_list(&input) && stale {
            let list = Ok(self.disks[c].todos.clone());
            self.handle(c, Input::TodosChanged(list))?;
        }
        self.handle(c, input)?;
        if let Some(d) = self.daemon.as_ref()
            && d.arrived[c]
            && let Some(m) = d.machines[c].as_ref()
            && m.live_session().is_none()
            && !m.checking()
        {
            return Err(Broken(format!("chamber {c} holds its permit with no session and no pre-check")));
        }
        if let Some(d) = self.daemon.as_ref()
            && let Some(m) = d.machines[c].as_ref()
        {
            check::alive(c, m, d.plans[c])?;
        }
        if let Some(m) = machine(self, c) {
            let planned = m.view().next_wake;
            m.rest();
            if m.view().next_wake != planned {
                return Err(Broken(format!(
                    "chamber {c}: at rest it plans {:?}, with its list {planned:?}",
                    m.view().next_wake
                )));
            }
        }
        Ok(())
    }

    /// Hands `input` to a chamber's machine and performs its effects depth
    /// first, as the supervisor does; cryod may crash before any effect.
    fn handle(&mut self, c: usize, input: Input) -> Step {
        let Some(d) = self.daemon.as_mut() else { return Ok(()) };
        let Some(mut machine) = d.machines[c].take() else { return Ok(()) };
        self.note(c, label(&input));
        self.show(c, "=>", &input);
        self.report.inputs += 1;
        let mut queue: VecDeque<Effect> = machine.handle(input, self.now).into();
        while let Some(effect) = queue.pop_front() {
            if self.crashes_on && self.config.crash_one_in > 0 && self.rng.one_in(self.config.crash_one_in) {
                self.crash();
                return Ok(());
            }
            self.report.effects += 1;
            self.show(c, "  <=", &effect);
            if let Effect::SaveHealth = effect {
                // Durable, as the store keeps it: the record as it is now.
                self.disks[c].health = Some(machine.health_record());
                continue;
            }
            if let Some(result) = self.perform(c, effect)? {
                self.note(c, label(&result));
                self.show(c, "  =>", &result);
                self.report.inputs += 1;
                for e in machine.handle(result, self.now).into_iter().rev() {
                    queue.push_front(e);
                }
            }
        }
        if let Some(d) = self.daemon.as_mut()
            && !machine.finished()
        {
            d.machines[c] = Some(machine);
        }
        Ok(())
    }

    /// The shell looks at the inbox before a wake, an agent's call and an exit.
    fn observe_inbox(&mut self, c: usize) -> Step {
        let unread: Vec<String> = self.disks[c].inbox.keys().cloned().collect();
        let known = self.daemon.as_ref().and_then(|d| d.machines[c].as_ref()).map(|m| m.unread().to_vec());
        if known.is_some_and(|k| k != unread) {
            self.feed(c, Input::Inbox { unread, arrived: false })?;
        }
        Ok(())
    }

    fn grant(&mut self) {
        let inc = self.inc();
        let Some(d) = self.daemon.as_mut() else { return };
        let mut granted = Vec::new();
        // Wakes whose every account is held wait in their places.
        let mut passed = Vec::new();
        while d.running < self.config.limit {
            let Some((key, c)) = d.queue.pop_first() else { break };
            let disk = &self.disks[c];
            let (own, fallbacks) =
                (account_name(disk.account), disk.fallback.map(account_name).into_iter().collect::<Vec<_>>());
            let held = |a: &str| self.holds.iter().any(|(k, until)| account_name(*k) == a && *until > self.now);
            let Ok(account) = crate::limits::pick_account(Some(&own), &fallbacks, held, |_| false) else {
                passed.push((key, c));
                continue;
            };
            d.billing[c] = account.and_then(|a| (0..ACCOUNTS).find(|k| account_name(*k) == a));
            d.running += 1;
            // It holds the slot from now on, though the permit is still on its way.
            d.slot[c] = true;
            granted.push(c);
        }
        d.queue.extend(passed);
        for c in granted {
            self.at(self.now, Ev::Admit { inc, chamber: c });
        }
    }

    fn admit(&mut self, c: usize) -> Step {
        let d = self.daemon.as_mut().expect("live");
        let Some(machine) = d.machines[c].as_ref() else {
            // A gone chamber: its permit comes back.
            d.slot[c] = false;
            d.running -= 1;
            self.grant();
            return Ok(());
        };
        if machine.live_session().is_some() {
            return Err(Broken(format!("chamber {c} was given a second permit while its session runs")));
        }
        self.observe_inbox(c)?;
        if let Some(d) = self.daemon.as_mut() {
            d.arrived[c] = true;
        }
        let (nonce, token) = (self.rng.hex(6), self.rng.hex(16));
        self.feed(c, Input::Admitted { nonce, token, fresh: None })
    }

    /// Writes a message file; an inbox file is seen by the watcher soon.
    fn write(&mut self, c: usize, folder: Folder, msg: Message) -> String {
        self.names += 1;
        let name = format!("{}-{:06}.md", self.now.format("%Y%m%d%H%M%S"), self.names);
        match folder {
            Folder::Inbox => {
                self.disks[c].inbox.insert(name.clone(), msg);
                if let Some(d) = &self.daemon {
                    let inc = d.inc;
                    self.after(StdDuration::from_millis(20), Ev::Watch { inc, chamber: c });
                }
            }
            Folder::Outbox => {
                self.disks[c].outbox.insert(name.clone(), msg);
            }
        }
        name
    }

    fn message(&self, from: &str, body: &str) -> Message {
        Message {
            from: from.into(),
            subject: body.into(),
            timestamp: Some(self.now),
            question: false,
            meta: BTreeMap::new(),
            body: body.into(),
        }
    }

    // ---- agents -------------------------------------------------------------------

    fn die(&mut self, pid: u32, status: &str) {
        let p = &mut self.procs[pid as usize - 1];
        if !p.alive {
            return;
        }
        p.alive = false;
        // Dying inside a hibernate's linger (a call that asked to linger and
        // is still open: the machine answers anything else at once) is a
        // hibernate: the agent ended its session, and only new mail would
        // have taken that back (`chamber::tests::recovery::a_hibernate_cut_inside_its_linger_*`).
        let lingering = matches!(p.waiting, Some((_, Call::Hibernate { linger_secs, .. })) if linger_secs > 0);
        p.waiting = None;
        let hibernated = p.agent.hibernated || lingering;
        let (chamber, session, inc) = (p.chamber, p.session, p.inc);
        self.check.sessions.insert((chamber, session), hibernated);
        // The daemon that spawned it hears of the exit, if it still lives.
        if self.inc() == inc {
            self.at(self.now, Ev::Exited { inc, pid, status: status.to_string() });
        }
    }

    fn agent_step(&mut self, pid: u32) -> Step {
        let p = &mut self.procs[pid as usize - 1];
        if !p.alive || p.waiting.is_some() || p.asking.is_some() {
            return Ok(());
        }
        match p.agent.next_act() {
            None => self.die(pid, "exit 0"),
            Some(Act::Exit(code)) => self.die(pid, &format!("exit {code}")),
            Some(Act::Hang) => {}
            Some(Act::Ask { tool, input }) => {
                let valid = self.daemon.as_ref().is_some_and(|d| d.tokens.contains_key(&p.token));
                if !valid {
                    self.die(pid, "exit 1");
                    return Ok(());
                }
                self.ask(pid, tool, input)?;
            }
            Some(Act::Call(call)) => {
                p.agent.calls += 1;
                let target = self.daemon.as_ref().and_then(|d| d.tokens.get(&p.token).copied());
                let Some((chamber, session)) = target else {
                    // cryod is down, or this session's token is no longer
                    // valid: `cryo-agent` fails and the agent gives up.
                    self.die(pid, "exit 1");
                    return Ok(());
                };
                let d = self.daemon.as_mut().expect("checked");
                d.next_req += 1;
                let req = d.next_req;
                d.waiting.insert(req, pid);
                self.procs[pid as usize - 1].waiting = Some((req, call.clone()));
                if matches!(call, Call::Receive | Call::Dialog { .. } | Call::Hibernate { .. }) {
                    self.observe_inbox(chamber)?;
                }
                self.feed(chamber, Input::Agent { session, req, call })?;
            }
        }
        Ok(())
    }

    fn agent_answer(&mut self, pid: u32, result: Result<Reply, Refusal>) -> Step {
        let p = &mut self.procs[pid as usize - 1];
        let Some((_, call)) = p.waiting.take() else { return Ok(()) };
        if !p.alive {
            return Ok(());
        }
        let chamber = p.chamber;
        match result {
            Ok(Reply::Hibernate(_)) => {
                p.agent.hibernated = true;
                if !p.agent.exits_after_hibernate {
                    p.agent.plan = VecDeque::from([Act::Hang]);
                }
            }
            Ok(Reply::Mail(names)) => {
                if !names.is_empty() && !p.agent.literal && !matches!(p.agent.plan.front(), Some(Act::Exit(_))) {
                    p.agent.plan.push_front(Act::Call(Call::Send {
                        text: "an answer".into(),
                        question: false,
                        subject: String::new(),
                    }));
                }
                p.agent.received += names.len() as u32;
                self.check.delivered(chamber, &names)?;
            }
            Ok(Reply::Dialog { claimed, .. }) if claimed > 0 && !p.agent.literal => {
                p.agent.plan.push_front(Act::Call(Call::Send {
                    text: "an answer".into(),
                    question: false,
                    subject: String::new(),
                }));
            }
            Ok(_) => {}
            Err(r) => {
                let why = r.text().to_string();
                if matches!(call, Call::Hibernate { .. }) && why.contains("new mail arrived") {
                    p.agent.hibernated = false;
                }
                if matches!(call, Call::Hibernate { .. }) && why.contains("the session is ending") {
                    // Its hibernate was accepted; the linger was cut short.
                    p.agent.hibernated = true;
                }
                p.agent.refused(&call, &why, &mut self.rng);
            }
        }
        let t = self.think();
        self.after(t, Ev::Step { pid });
        Ok(())
    }
}

/// The provider accounts the simulated chambers share.
pub const ACCOUNTS: usize = 3;

fn account_name(k: usize) -> String {
    format!("acct{k}")
}

fn settings(d: &Disk) -> Settings {
    Settings {
        agent: "sim-agent".into(),
        timezone: d.tz,
        timezone_set: true,
        max_session_duration: SESSION_LIMIT,
        max_attempts: d.max_attempts,
        mcp: false,
        continuity: continuity(d),
        precheck: d.precheck.then(|| "./is-there-work".to_string()),
        approvals: d.approvals.then(|| Box::new(approvals::policy())),
        precheck_timeout: crate::chamber::DEFAULT_PRECHECK_TIMEOUT,
        on_end: d
            .on_end
            .iter()
            .map(|&(to, when, max_per_hour)| OnEnd { chamber: format!("c{to}"), when, message: None, max_per_hour })
            .collect(),
        expect_activity_within: Some(Duration::days(2)),
        git: d.git,
    }
}

/// A chamber's continuity: half of them resume, with caps the simulated
/// days reach.
fn continuity(d: &Disk) -> Continuity {
    Continuity { resume: d.resume, max_age: Duration::hours(2), max_sessions: 3, max_tokens: Some(5000) }
}

/// A short name for an input, for the failure trace.
fn label(i: &Input) -> &'static str {
    match i {
        Input::Boot(_) => "boot",
        Input::Start { .. } => "start",
        Input::Stop { .. } => "stop",
        Input::Remove { .. } => "remove",
        Input::Pause { pause: true, .. } => "pause",
        Input::Pause { .. } => "resume",
        Input::Archive { archive: true, .. } => "archive",
        Input::Archive { .. } => "unarchive",
        Input::Reset { .. } => "reset",
        Input::Acknowledge { until: None, .. } => "acknowledge",
        Input::Acknowledge { .. } => "snooze",
        Input::Wake { .. } => "wake",
        Input::Deliver { .. } => "deliver",
        Input::Todo { .. } => "operator todo",
        Input::WritePlan { .. } => "write plan",
        Input::Shutdown { .. } => "shutdown",
        Input::Due => "due",
        Input::Inbox { arrived: true, .. } => "mail arrived",
        Input::Inbox { .. } => "inbox seen",
        Input::TodosChanged(_) => "todos changed",
        Input::ConfigChanged { .. } => "config changed",
        Input::ZoneChanged { .. } => "zone changed",
        Input::Power { sleeping: true } => "sleep",
        Input::Power { .. } => "woke",
        Input::Admitted { .. } => "admitted",
        Input::Agent { call: Call::Hibernate { .. }, .. } => "agent hibernate",
        Input::Agent { call: Call::Send { .. }, .. } => "agent send",
        Input::Agent { call: Call::Receive, .. } => "agent receive",
        Input::Agent { call: Call::Dialog { .. }, .. } => "agent dialog",
        Input::Agent { call: Call::Todo(_), .. } => "agent todo",
        Input::Exited { .. } => "exited",
        Input::Prechecked { .. } => "prechecked",
        Input::Prepared { result: Ok(_), .. } => "prepared",
        Input::Prepared { result: Err(_), .. } => "preparation failed",
        Input::HandedOff { .. } => "handed off",
        Input::ProviderLimit { .. } => "provider limit",
        Input::OverBudget { .. } => "over budget",
        Input::Caught { .. } => "caught",
        Input::Parked { .. } => "parked",
        Input::ApprovalAsked { .. } => "approval asked",
        Input::ApprovalTaken { .. } => "approval taken",
        Input::Answered { .. } => "answered",
        Input::Budget { .. } => "budget",
        Input::Notice { .. } => "notice",
        Input::Trouble { .. } => "trouble",
        Input::AdmissionAsked { .. } => "admission asked",
        Input::Timer(crate::chamber::Timer::Timeout(_)) => "timer: timeout",
        Input::Timer(crate::chamber::Timer::AfterHibernate(_)) => "timer: after hibernate",
        Input::Timer(crate::chamber::Timer::LingerDone(_)) => "timer: linger done",
        Input::Timer(crate::chamber::Timer::Kill(_)) => "timer: kill",
        Input::Timer(crate::chamber::Timer::StartWaitOver) => "timer: start wait",
        Input::Timer(crate::chamber::Timer::HandOffs) => "timer: hand-offs",
        Input::Timer(crate::chamber::Timer::Silence) => "timer: silence",
        Input::Timer(crate::chamber::Timer::Park(_)) => "timer: park",
        Input::Timer(crate::chamber::Timer::SnoozeEnd) => "timer: snooze end",
        Input::Recorded(_) => "recorded",
        Input::TodosUpdated { result: Ok((TodoDone::Claimed(_), _)), .. } => "todos: claimed",
        Input::TodosUpdated { result: Ok((TodoDone::Settled { .. }, _)), .. } => "todos: settled",
        Input::TodosUpdated { .. } => "todos updated",
        Input::Spawned { result: Ok(_), .. } => "spawned",
        Input::Spawned { result: Err(_), .. } => "spawn failed",
        Input::MessageWritten { .. } => "message written",
        Input::StoreWritten { .. } => "registry written",
        Input::Journaled { .. } => "journaled",
        Input::Archived { .. } => "archived",
        Input::PlanWritten { .. } => "plan written",
        Input::ResetDone { .. } => "reset done",
    }
}

/// What a chamber sent, as recovery reads it from the outbox.
fn outgoing(disk: &Disk) -> Vec<Outgoing> {
    (disk.outbox.values())
        .map(|m| Outgoing {
            session: m.meta.get("session").and_then(|s| s.parse().ok()),
            by_agent: m.from != CRYOCHAMBER,
            in_reply_to: m
                .meta
                .get("in_reply_to")
                .map(|r| r.split(' ').map(str::to_string).collect())
                .unwrap_or_default(),
        })
        .collect()
}
