//! The people and the machine around cryod: operators' requests at
//! random (start, stop, pause, archive, wake, TODOs, acknowledgements),
//! mail written into inboxes, and the machine's sleep.

use std::collections::BTreeMap;
use std::time::Duration as StdDuration;

use chrono::Duration;

use super::{Ev, Step, World};
use crate::chamber::{Folder, Input, LogLine, ReqId, TodoCall};
use crate::message::Message;

impl World {
    /// The machine sleeps: nothing runs; the runtime's timers and the agents stop
    /// with it; wall-clock deadlines that pass are due at once on waking.
    pub(super) fn sleep(&mut self, hours: i64) -> Step {
        self.report.sleeps += 1;
        let now = self.now;
        if let Some(d) = self.daemon.as_mut() {
            d.slept.push((now, None));
        }
        for c in 0..self.disks.len() {
            if self.frozen(c) {
                continue;
            }
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

    pub(super) fn log_session(&self, c: usize) -> u64 {
        self.disks[c]
            .log
            .iter()
            .filter_map(|l| if let LogLine::Begin(n) = l { Some(*n) } else { None })
            .max()
            .unwrap_or(0)
    }

    pub(super) fn operator(&mut self, chamber: usize, make: impl FnOnce(ReqId) -> Input) -> Step {
        let Some(d) = self.daemon.as_mut() else { return Ok(()) };
        d.next_req += 1;
        let req = d.next_req;
        self.feed(chamber, make(req))
    }

    /// An operator resumes the chamber; one its budget paused may spend
    /// past that budget for the rest of the period.
    pub(super) fn resume(&mut self, c: usize) -> Step {
        let machine = self.daemon.as_ref().and_then(|d| d.machines[c].as_ref());
        let by_budget = machine.is_some_and(|m| {
            m.paused() && m.view().attention.is_some_and(|a| a.starts_with(crate::session::BUDGET_REACHED))
        });
        if by_budget {
            self.check.released(c, self.now.date_naive());
        }
        self.operator(c, |req| Input::Pause { req, pause: false })
    }

    pub(super) fn unarchive(&mut self, c: usize) -> Step {
        self.operator(c, |req| Input::Archive { req, archive: false })?;
        self.operator(c, |req| Input::Start { req, wait: false, agent_check: Ok(()), log_session: 0 })
    }

    pub(super) fn operator_action(&mut self, c: usize) -> Step {
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

    /// Writes a message file; an inbox file is seen by the watcher soon.
    pub(super) fn write(&mut self, c: usize, folder: Folder, msg: Message) -> String {
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

    pub(super) fn message(&self, from: &str, body: &str) -> Message {
        Message {
            from: from.into(),
            subject: body.into(),
            timestamp: Some(self.now),
            question: false,
            meta: BTreeMap::new(),
            body: body.into(),
        }
    }
}
