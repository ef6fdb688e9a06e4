//! The simulated agents' processes: each takes its next scripted act
//! after a pause, calls cryod through its session's token, hears the
//! answer, and dies (an exit, a signal) for the daemon that spawned it to
//! hear of.

use std::collections::VecDeque;
use std::time::Duration as StdDuration;

use super::{Ev, Step, World};
use crate::chamber::{Call, Input, Refusal, Reply};
use crate::sim::agent::Act;

impl World {
    /// A pause an agent takes before its next act.
    pub(super) fn think(&mut self) -> StdDuration {
        if self.script.is_some() {
            // A script, not a model: each step takes a moment.
            return StdDuration::from_millis(20 + self.rng.below(50));
        }
        StdDuration::from_millis(200 + self.rng.below(20_000))
    }

    pub(super) fn die(&mut self, pid: u32, status: &str) {
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

    pub(super) fn agent_step(&mut self, pid: u32) -> Step {
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

    pub(super) fn agent_answer(&mut self, pid: u32, result: Result<Reply, Refusal>) -> Step {
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
