//! A supervisor's answers: the machine's replies to operators and agents,
//! and the provider hold it names in them.

use chrono::{DateTime, Utc};
use cryo_core::chamber::{Refusal, Reply, ReqId};

use super::*;

/// A caller waiting for the machine's reply.
pub(super) enum Waiter {
    Start(oneshot::Sender<Result<bool>>),
    Stop(oneshot::Sender<Result<(bool, bool)>>),
    Done(oneshot::Sender<()>),
    Pause(oneshot::Sender<Result<bool>>),
    Archive(oneshot::Sender<Result<bool>>),
    Reset(oneshot::Sender<Result<String>>),
    Wake(oneshot::Sender<Result<WakeOutcome>>),
    Deliver(oneshot::Sender<Result<Delivered>>),
    Agent(oneshot::Sender<Result<AgentReply>>),
    Plan(oneshot::Sender<Result<()>>),
}

/// The callers waiting for the machine's replies, by request id, and the
/// ids themselves: one counter for waiters and for inputs that answer
/// nobody, so no two requests share an id.
#[derive(Default)]
pub(super) struct Callers {
    waiting: HashMap<ReqId, Waiter>,
    next: ReqId,
}

impl Callers {
    /// `w` waits for the reply to the request id this returns.
    pub(super) fn wait(&mut self, w: Waiter) -> ReqId {
        let req = self.own_req();
        self.waiting.insert(req, w);
        req
    }

    /// A new request id: for a waiter, or for an input that answers nobody.
    pub(super) fn own_req(&mut self) -> ReqId {
        self.next += 1;
        self.next
    }

    /// Nobody waits for a reply.
    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Whoever waits for `req` (once).
    fn take(&mut self, req: ReqId) -> Option<Waiter> {
        self.waiting.remove(&req)
    }
}

impl Sup {
    /// Sends the machine's answer to whoever waits for `req`.
    pub(super) fn answer(&mut self, req: ReqId, result: std::result::Result<Reply, Refusal>) {
        let Some(waiter) = self.callers.take(req) else { return };
        let result = result.map_err(refusal);
        // A caller that went away is no longer waiting: its send fails.
        match (waiter, result) {
            (Waiter::Start(tx), r) => drop(tx.send(r.map(|r| matches!(r, Reply::Started(true))))),
            (Waiter::Stop(tx), r) => drop(tx.send(r.map(|r| match r {
                Reply::Stopped { already, ended } => (already, ended),
                _ => (false, false),
            }))),
            (Waiter::Done(tx), _) => drop(tx.send(())),
            // Pause, resume and acknowledge: whether nothing changed.
            (Waiter::Pause(tx), r) => drop(tx.send(r.map(|r| matches!(r, Reply::Paused(true))))),
            (Waiter::Archive(tx), r) => drop(tx.send(r.map(|r| matches!(r, Reply::Archived(true))))),
            (Waiter::Reset(tx), r) => drop(tx.send(r.map(|r| match r {
                Reply::Reset(dir) => dir,
                _ => String::new(),
            }))),
            (Waiter::Wake(tx), r) => drop(tx.send(r.map(|r| match r {
                Reply::Woke(w) => w,
                _ => WakeOutcome::default(),
            }))),
            (Waiter::Deliver(tx), r) => {
                let r = r.map(|r| match r {
                    Reply::Delivered { file, waits } => Delivered { file, waits: waits.or_else(|| self.held_line()) },
                    _ => Delivered::default(),
                });
                drop(tx.send(r))
            }
            (Waiter::Plan(tx), r) => drop(tx.send(r.map(|_| ()))),
            (Waiter::Agent(tx), r) => {
                let r = r.map(|r| self.agent_reply(r));
                drop(tx.send(r))
            }
        }
    }

    /// This chamber's provider account, if admission holds it at its limit,
    /// and when the hold ends (in the chamber's zone, for people).
    pub(super) fn held_until(&self) -> Option<(String, String, DateTime<Utc>)> {
        let account = self.config.as_ref().ok().map(ChamberConfig::provider_account)?;
        let left = self.shared.admission.held(&account)?;
        let at = self.now() + chrono::Duration::from_std(left).unwrap_or_default();
        Some((account, cryo_core::time::format_in(at, self.machine.tz()), at))
    }

    /// Mail for an account held at its provider's limit waits for the reset
    /// (an operator's wake waits too: admission holds every wake of it).
    pub(super) fn held_line(&self) -> Option<String> {
        let (account, at, _) = self.waits_for_limit()?;
        Some(format!("{account} is at its provider's limit: its agent reads it after {at}"))
    }

    pub(super) fn agent_reply(&mut self, r: Reply) -> AgentReply {
        match r {
            Reply::Hibernate(m) => AgentReply::Hibernate(m),
            Reply::Sent { file, reply } => AgentReply::Sent { file, reply },
            Reply::Mail(names) => {
                let mut mail = self.running.as_mut().map(|r| r.take_claimed()).unwrap_or_default();
                mail.retain(|m| names.contains(&m.name));
                AgentReply::Mail(mail)
            }
            Reply::Dialog { claimed, last, all } => {
                if let Some(r) = self.running.as_mut() {
                    r.forget_claimed();
                }
                // Only the messages shown are read (all of them for `--all`).
                let messages = self.mailbox().dialog((!all).then_some(last as usize));
                AgentReply::Dialog { messages, claimed }
            }
            Reply::Todos { todos, tz } => AgentReply::Todos { todos, tz },
            _ => AgentReply::Todos { todos: Vec::new(), tz: self.machine.tz() },
        }
    }
}
