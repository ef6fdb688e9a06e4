//! The simulated world: one event queue on one clock, the random chambers
//! a run begins with, and what each event does. Its rooms hold the rest:
//! the volatile daemon and its shell around each machine (`daemon`), the
//! effects it performs (`effects`) and approvals (`approvals`), the agents'
//! processes (`agents`), the people around cryod (`people`), one chamber
//! through a fixed script (`script`), and what a run tells (`report`).
//! What outlives cryod is [`super::durable`].

mod agents;
mod approvals;
mod daemon;
mod effects;
mod people;
mod report;
mod script;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};

use self::daemon::Daemon;
pub use self::report::{Failure, Report};
pub use self::script::{Files, ScriptStep};
use super::agent::Act;
use super::check::{Broken, Checker};
use super::durable::{ACCOUNTS, Disk, Ledger, Proc};
use super::{Config, Rng};
use crate::chamber::handoff::When;
use crate::chamber::{Check, Checked, Folder, Input};
use crate::session::Used;
use crate::todo::TodoList;

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

/// What happens at an instant of the simulated clock. `inc` names the
/// daemon incarnation an event is for: a dead one's come to nothing.
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

/// One simulated run: the durable half, the live daemon (if up), the
/// people around it, the checker, and the queue of what happens next.
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
            Ev::Timer { inc, chamber, timer } if inc == live => {
                if timer.matters_at_rest() {
                    let d = self.live();
                    d.timers[chamber] = d.timers[chamber].saturating_sub(1);
                }
                self.feed(chamber, Input::Timer(timer))?
            }
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
                if let Some(d) = self.daemon.as_mut()
                    && let Some((_, end @ None)) = d.slept.last_mut()
                {
                    *end = Some(self.now);
                }
                // A frozen chamber is not told (it hears at its thaw).
                for c in 0..self.disks.len() {
                    if self.frozen(c) {
                        continue;
                    }
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
}
