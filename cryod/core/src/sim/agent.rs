//! Scripted agents: each spawned process runs a small plan of `cryo-agent`
//! calls, chosen at random from behaviours real agents show (the good one,
//! a crash before or after reading mail, a hang, an exit without
//! hibernating, a failure exit, a linger, a hibernate that does not exit),
//! and reacts to refusals the way the protocol tells it to.

use std::collections::VecDeque;

use super::Rng;
use crate::chamber::{Call, TodoCall};

/// One thing an agent does next.
#[derive(Debug, Clone)]
pub enum Act {
    Call(Call),
    /// The process exits with this code.
    Exit(i32),
    /// The process does nothing more (until it is killed).
    Hang,
    /// Its CLI asks whether it may run a tool call (`[approvals]`).
    Ask {
        tool: String,
        input: serde_json::Value,
    },
}

/// An agent process's mind.
#[derive(Debug, Clone)]
pub struct Agent {
    pub plan: VecDeque<Act>,
    /// Its hibernate was accepted (and not taken back by a linger release).
    pub hibernated: bool,
    /// Exits soon after a SIGTERM (else only SIGKILL ends it).
    pub obeys_term: bool,
    /// After an accepted hibernate it exits (else it lingers on, alive).
    pub exits_after_hibernate: bool,
    /// Calls made; a confused agent gives up after too many.
    pub calls: u32,
    pub received: u32,
    /// Follows its plan to the letter (a scripted scenario): no answers
    /// added, no advice taken from refusals.
    pub literal: bool,
    /// Ended without its hibernate, it had met its provider's limit, which
    /// resets this many minutes later (its stream says so).
    pub limit_resets_in: Option<u64>,
}

fn todo_add(at: String) -> Act {
    Act::Call(Call::Todo(TodoCall::Add {
        text: "next step".into(),
        at,
        every: String::new(),
        cron: String::new(),
        missed: String::new(),
        precheck: String::new(),
    }))
}

fn hibernate(complete: bool, exit_code: i32, linger_secs: u32) -> Act {
    Act::Call(Call::Hibernate { summary: "done for now".into(), complete, exit_code, linger_secs })
}

/// A shell command the agent's CLI asks about: one the simulated policy
/// allows, refuses, or sends to a person.
fn ask(rng: &mut Rng) -> Act {
    let command =
        ["git push origin main", "cargo publish", "ls -la", "rm -rf target", "make deploy"][rng.below(5) as usize];
    Act::Ask { tool: "Bash".into(), input: serde_json::json!({ "command": command }) }
}

fn send(text: &str) -> Act {
    Act::Call(Call::Send { text: text.into(), question: false, subject: String::new() })
}

/// A later time in one of the forms the time grammar accepts.
fn later(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => format!("+{}m", 1 + rng.below(90)),
        1 => format!("+{}h", 1 + rng.below(30)),
        2 => format!("{} minutes", 5 + rng.below(600)),
        3 => format!("+{}d", 1 + rng.below(3)),
        4 => format!("tomorrow {:02}:{:02}", rng.below(24), rng.below(60)),
        _ => format!("{:02}:{:02}", rng.below(24), 15 * rng.below(4)),
    }
}

impl Agent {
    /// A new agent for a session; `mail` says whether the prompt mentions
    /// unread mail, `recurring` how many recurring TODOs the chamber has (a
    /// sensible agent adds another only while there are few: otherwise every
    /// poll would add a poll, and the wakes would grow without bound).
    pub fn new(rng: &mut Rng, mail: bool, recurring: usize) -> Agent {
        let mut plan = VecDeque::new();
        let roll = rng.below(100);
        let mut obeys_term = rng.below(10) != 0;
        let exits_after_hibernate = rng.below(20) != 0;
        if mail || rng.below(4) == 0 {
            plan.push_back(Act::Call(Call::Receive));
        }
        match roll {
            // Crashes at once (a bad key, a missing binary).
            0..=4 => plan = VecDeque::from([Act::Exit(1)]),
            // Reads the mail, then crashes before answering.
            5..=8 => {
                plan.push_front(Act::Call(Call::Receive));
                plan.push_back(Act::Exit(2));
            }
            // Hangs until its time is up.
            9..=11 => {
                plan.push_back(send("working on it"));
                plan.push_back(Act::Hang);
                obeys_term = rng.below(2) == 0;
            }
            // Exits cleanly without hibernating.
            12..=14 => {
                plan.push_back(send("all done, bye"));
                plan.push_back(Act::Exit(0));
            }
            // Reports a failure.
            15..=18 => {
                plan.push_back(send("this did not work"));
                plan.push_back(hibernate(false, 3, 0));
                plan.push_back(Act::Exit(3));
            }
            // Completes the plan.
            19..=24 => {
                plan.push_back(send("the plan is complete"));
                plan.push_back(hibernate(true, 0, 0));
                plan.push_back(Act::Exit(0));
            }
            // Hibernates without saying anything (needs a fallback).
            25..=29 => {
                plan.push_back(todo_add(later(rng)));
                plan.push_back(hibernate(false, 0, 0));
                plan.push_back(Act::Exit(0));
            }
            // The good agent: answers, schedules, hibernates (sometimes lingers).
            _ => {
                if rng.one_in(4) {
                    plan.push_back(ask(rng));
                }
                plan.push_back(send("progress report"));
                match rng.below(10) {
                    0 | 1 if recurring >= 2 => {}
                    0 => plan.push_back(Act::Call(Call::Todo(TodoCall::Add {
                        text: "daily check".into(),
                        at: String::new(),
                        every: String::new(),
                        cron: format!("{} {} * * *", 15 * rng.below(4), rng.below(24)),
                        missed: if rng.below(2) == 0 { "skip".into() } else { String::new() },
                        precheck: String::new(),
                    }))),
                    1 => plan.push_back(Act::Call(Call::Todo(TodoCall::Add {
                        text: "poll".into(),
                        at: String::new(),
                        every: format!("{}h", 2 + rng.below(20)),
                        cron: String::new(),
                        missed: String::new(),
                        precheck: String::new(),
                    }))),
                    2 => plan.push_back(Act::Call(Call::Todo(TodoCall::List))),
                    3 => plan.push_back(Act::Call(Call::Dialog { last: 5, all: false })),
                    _ => {}
                }
                plan.push_back(todo_add(later(rng)));
                let linger = if rng.below(6) == 0 { 30 + rng.below(300) as u32 } else { 0 };
                plan.push_back(hibernate(false, 0, linger));
                plan.push_back(Act::Exit(0));
            }
        }
        let limit_resets_in = (rng.below(6) == 0).then(|| 1 + rng.below(120));
        Agent {
            plan,
            hibernated: false,
            obeys_term,
            exits_after_hibernate,
            calls: 0,
            received: 0,
            literal: false,
            limit_resets_in,
        }
    }

    /// An agent that does exactly `plan`, then exits 0.
    pub fn literal(plan: Vec<Act>) -> Agent {
        Agent {
            plan: plan.into(),
            hibernated: false,
            obeys_term: true,
            exits_after_hibernate: true,
            calls: 0,
            received: 0,
            literal: true,
            limit_resets_in: None,
        }
    }

    /// The next act, if it has one.
    pub fn next_act(&mut self) -> Option<Act> {
        self.plan.pop_front()
    }

    /// Its CLI heard the answer to a tool call it asked about: it goes on
    /// (allowed, or refused: it finds another way, the same to its plan), or, told the answer has not come
    /// (`parked`), ends its turn as told (now and then it does not, and
    /// cryod ends it).
    pub fn approval(&mut self, parked: bool, rng: &mut Rng) {
        if parked && !self.literal {
            self.plan = VecDeque::from([if rng.one_in(5) { Act::Hang } else { Act::Exit(0) }]);
        }
    }

    /// The prompt says a person answered the call this agent's conversation
    /// asked about: it makes the same call again first.
    pub fn repeat(&mut self, tool: String, input: serde_json::Value) {
        if !self.literal {
            self.plan.push_front(Act::Ask { tool, input });
        }
    }

    /// What the agent does with a refused call: the protocol's own advice.
    pub fn refused(&mut self, call: &Call, why: &str, rng: &mut Rng) {
        if self.literal {
            return;
        }
        if self.calls > 40 {
            // Confused: it gives up.
            self.plan = VecDeque::from([Act::Exit(1)]);
            return;
        }
        if let Call::Hibernate { complete, exit_code, linger_secs, .. } = call {
            if why.contains("unread") || why.contains("new mail arrived") {
                self.plan.push_front(hibernate(*complete, *exit_code, *linger_secs));
                self.plan.push_front(send("answer to the new mail"));
                self.plan.push_front(Act::Call(Call::Receive));
            } else if why.contains("due now") {
                self.plan.push_front(hibernate(false, 0, 0));
                self.plan.push_front(todo_add(later(rng)));
            } else if why.contains("the session is ending") {
                // Its linger was cut: it is being stopped.
            } else {
                // No next wake declared.
                self.plan.push_front(hibernate(false, 0, 0));
                self.plan.push_front(todo_add(later(rng)));
            }
        }
    }
}
