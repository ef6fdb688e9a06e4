//! What a run tells: its counts ([`Report`]), a broken invariant with the
//! seed and the steps before it ([`Failure`]), and the trace those steps
//! come from (`CRYO_SIM_TRACE=C` prints one chamber's as it goes).

use std::fmt;

use super::World;
use crate::chamber::{Call, Input, TodoDone};

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
    /// Frozen chambers booted again by an input.
    pub thaws: u64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} chamber-days, {} wakes, {} agents spawned ({} resumed), {} slots passed by pre-checks, {} missed, {} hand-offs, {} events ({} of budgets), {} cryod crashes, {} failed writes, {} sleeps, {} inputs, {} effects, {} done TODOs archived (longest todo.json {}), {} worktrees made ready ({} could not be), {} provider holds, {} calls asked of a person ({} answered, {} sessions parked), {} thaws",
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
            self.parked,
            self.thaws
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
        self.thaws += o.thaws;
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

impl World {
    pub(super) fn show(&self, chamber: usize, arrow: &str, what: &dyn fmt::Debug) {
        if self.watch == Some(chamber) {
            let text = format!("{what:?}");
            let cut = text.char_indices().nth(300).map(|(i, _)| i).unwrap_or(text.len());
            eprintln!("{} c{chamber} {arrow} {}", self.now.format("%m-%d %H:%M:%S%.3f"), &text[..cut]);
        }
    }

    pub(super) fn note(&mut self, chamber: usize, what: &'static str) {
        if self.watch == Some(chamber) || (self.watch.is_some() && what.starts_with(char::is_uppercase)) {
            eprintln!("{} c{chamber} -- {what}", self.now.format("%m-%d %H:%M:%S%.3f"));
        }
        if self.trace.len() == 80 {
            self.trace.pop_front();
        }
        self.trace.push_back((self.now, chamber, what));
    }
}

/// A short name for an input, for the failure trace.
pub(super) fn label(i: &Input) -> &'static str {
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
