//! An agent's tool call judged by the chamber's `[approvals]` policy, and a
//! person's answer to one that asked.
//!
//! Allowed and refused calls are answered at once (a refusal is logged). A
//! call the policy sends to a person becomes a request in the store (or
//! takes the answer an earlier one got: the resumed session's repeat of the
//! call that was approved), and the session waits up to `approval_wait`
//! for it in place. Past that, the agent is told to stop, and the machine
//! parks the session ([`Input::Parked`]); the answer then reaches the
//! machine as [`Input::Answered`], and the next session resumes with it.

use cryo_core::approvals::request::{self, Asked, Joined, Screened};
use cryo_core::chamber::{Input, LogLine};
use tokio::sync::oneshot;

use super::{Event, Sup};
use crate::error::{Error, Result};
use crate::services::approvals::{self, Decision};
use crate::store::ApprovalRecord;

/// A tool call an agent's CLI asks about.
#[derive(Debug, Clone)]
pub struct Ask {
    /// The tool as the CLI names it.
    pub tool: String,
    /// Its arguments.
    pub input: serde_json::Value,
    /// Why, in the agent's words (may be empty).
    pub reason: String,
    /// The longest its CLI lets it wait in the session (shorter than
    /// `approval_wait`: Qwen Code's hooks get a minute).
    pub max_wait: Option<std::time::Duration>,
}

/// The answer to an [`Ask`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub allow: bool,
    /// For the agent: why not, or what the approval said.
    pub message: String,
}

impl Answer {
    fn allow(message: impl Into<String>) -> Answer {
        Answer { allow: true, message: message.into() }
    }

    fn deny(message: impl Into<String>) -> Answer {
        Answer { allow: false, message: message.into() }
    }
}

impl Sup {
    /// Writes `line` into the chamber's log and into the session's
    /// transcript (`cryo-agent.log`, appended beneath the chamber with no
    /// link followed), where a person reads the session.
    fn record(&self, line: String) {
        self.record_transcript(&line);
        self.log(LogLine::Event(line));
    }

    /// Writes `line` into the session's transcript only.
    fn record_transcript(&self, line: &str) {
        use std::io::Write;
        let written = crate::chamber::Dir::open(&self.root)
            .and_then(|d| d.append(std::path::Path::new(cryo_session::AGENT_LOG)))
            .map_err(|e| e.to_string())
            .and_then(|mut f| f.write_all(format!("cryo: {line}\n").as_bytes()).map_err(|e| e.to_string()));
        if let Err(error) = written {
            tracing::warn!(chamber = %self.machine.name(), %error, "cannot write the transcript");
        }
    }

    /// Judges `ask` of session `session`; the answer goes to `reply`, now
    /// or when a person answers (a task waits, not the supervisor).
    pub(super) async fn approve(&mut self, session: u64, ask: Ask, reply: oneshot::Sender<Result<Answer>>) {
        if self.machine.live_session().map(|(n, _)| n) != Some(session) {
            let _ = reply.send(Err(Error::Precondition("this session has ended".into())));
            return;
        }
        let policy = self.config.as_ref().map(|c| c.approvals.as_deref()).map_err(|why| why as &dyn std::fmt::Display);
        match request::screen(policy, &ask.tool, &ask.input, ask.max_wait) {
            Screened::Allow(message) => {
                let _ = reply.send(Ok(Answer::allow(message)));
            }
            Screened::Deny { message, log } => {
                if let Some(line) = log {
                    self.record(line);
                }
                let _ = reply.send(Ok(Answer::deny(message)));
            }
            Screened::Ask(asked) => self.ask(session, ask, asked, reply).await,
        }
    }

    /// A call the policy sends to a person: the answer it got already, or
    /// a request and a wait for it.
    async fn ask(&mut self, session: u64, ask: Ask, a: Asked, reply: oneshot::Sender<Result<Answer>>) {
        let (fence, at) = (self.owner.fence(), self.now());
        // An answer is good for a week: an old approval is not taken by a
        // call made long after.
        let since = at - approvals::ANSWER_KEPT;
        match self.shared.store.approval_take(fence, ask.tool.clone(), a.input.clone(), since, at).await {
            Ok(Some(done)) => {
                let answer = if done.state == "approved" {
                    self.record(format!("approval {} used: {}", done.id, a.what));
                    Answer::allow(approvals::decided_line(&done))
                } else {
                    Answer::deny(approvals::refused_message(&done))
                };
                let _ = reply.send(Ok(answer));
                return;
            }
            Ok(None) => {}
            Err(e) => {
                let _ = reply.send(Err(Error::from(e)));
                return;
            }
        }
        // The same call asked again while its request waits (the operator
        // resumed the chamber without answering): the same request.
        let pending = self.shared.store.approvals(Some(self.id), false, request::MAX_PENDING as u32 + 1).await;
        let pending = match pending {
            Ok(p) => p,
            Err(e) => {
                let _ = reply.send(Err(Error::from(e)));
                return;
            }
        };
        let (record, new) =
            match request::join(pending.iter().map(|p| (p.tool.as_str(), p.input.as_str())), &ask.tool, &a) {
                Joined::Same(i) => (pending[i].clone(), false),
                Joined::Refused { message, log } => {
                    self.log(LogLine::Event(log));
                    let _ = reply.send(Ok(Answer::deny(message)));
                    return;
                }
                Joined::New => {
                    let record = ApprovalRecord {
                        id: approvals::new_id(),
                        chamber_id: self.id,
                        session,
                        tool: ask.tool.clone(),
                        input: a.input.clone(),
                        subject: a.subject.clone(),
                        reason: ask.reason.chars().take(request::MAX_REASON).collect(),
                        rule: a.rule.clone(),
                        created_at: at,
                        state: "pending".into(),
                        decided_at: None,
                        decided_by: None,
                        answer: None,
                        used_at: None,
                    };
                    if let Err(e) = self.shared.store.approval_add(fence, record.clone()).await {
                        let _ = reply.send(Err(Error::from(e)));
                        return;
                    }
                    (record, true)
                }
            };
        if new {
            self.record(format!(
                "approval {} asked: {} ({}); `cryoctl approvals approve {}` or `cryoctl approvals deny {} --reason TEXT`",
                record.id, a.what, a.rule, record.id, record.id
            ));
            self.announce(&record);
        } else {
            self.record(format!("approval {} asked again: {}; it still waits for a person", record.id, a.what));
        }
        // The chamber shows `awaiting approval` while the session waits.
        self.feed(Input::ApprovalAsked { session, id: record.id.clone() }).await;
        let (ticket, waiting) = self.shared.approvals.wait(&record.id);
        let (tx, shared, id, wait) = (self.tx.clone(), self.shared.clone(), record.id.clone(), a.wait);
        tokio::spawn(async move {
            let decided = tokio::time::timeout(wait, waiting).await;
            let answer = match decided {
                Ok(Ok(Decision { approve: true, line })) => Answer::allow(line),
                Ok(Ok(Decision { approve: false, line })) => Answer::deny(line),
                // Let go without the answer (`Waiting::dismiss`): its session
                // has ended or is on its way out, and the chamber heard the
                // answer itself; the agent is told to stop, nothing parks.
                Ok(Err(_)) => Answer::deny(approvals::parked_message(&id)),
                // No answer in time: the session parks; the answer reaches
                // the next one.
                Err(_) => {
                    shared.approvals.forget(&id, ticket);
                    let _ = tx.send(Event::Parked { session, id: id.clone(), what: a.what });
                    Answer::deny(approvals::parked_message(&id))
                }
            };
            let _ = reply.send(Ok(answer));
        });
    }

    /// Tells the chamber's notifiers and views that a request waits, with
    /// an approve and a deny link when the hub is up.
    fn announce(&self, record: &ApprovalRecord) {
        let mut actions = Vec::new();
        // One-tap answers only for a call the notice shows whole; a longer
        // one is read on the hub first.
        let whole = record.subject.chars().count() <= approvals::NOTICE_SUBJECT;
        if let Some(hub) = self.shared.hub().filter(|h| h.up && whole) {
            let expires = self.now() + approvals::LINK_TTL;
            for (label, approve) in [("Approve", true), ("Deny", false)] {
                let token = approvals::link_token(&hub.token, &record.id, approve, expires);
                actions.push(crate::services::notifier::Action {
                    label: label.into(),
                    url: self.shared.hub_link(&format!("approve/{token}")),
                });
            }
        }
        let event = crate::services::notifier::Event {
            id: format!("{}:approval:{}", self.machine.name(), record.id),
            kind: "approval".into(),
            chamber: self.machine.name().to_string(),
            title: format!("{} asks: {}", self.machine.name(), approvals::what(record)),
            body: approvals::notice_body(record),
            url: self.shared.hub_link(&format!("#/c/{}", self.machine.name())),
            at: self.now(),
            actions,
        };
        self.shared.notifiers.notify(event, self.shared.system_zone.get());
        self.shared.notify(self.id, crate::services::runtime::NoticeKind::Approval(Box::new(record.clone())));
        self.shared.notify(self.id, crate::services::runtime::NoticeKind::Status);
    }

    /// A person answered `record` (decided in the store): the session that
    /// waits in place gets it (and the machine hears that it no longer
    /// waits), else the machine does.
    pub(super) fn answered(&mut self, record: ApprovalRecord) -> Option<Input> {
        // Open pages drop the request from what waits.
        self.shared.notify(self.id, crate::services::runtime::NoticeKind::Approval(Box::new(record.clone())));
        let line = approvals::decided_line(&record);
        let decision = Decision {
            approve: record.state == "approved",
            line: if record.state == "approved" { line.clone() } else { approvals::refused_message(&record) },
        };
        // The live session that asks takes it in place. Any other ask that
        // still waits (of a session that has ended, its wait not yet let
        // go, or of one parked or being ended) is let go without it, and
        // the machine hears the answer: a chamber parked for it resumes,
        // and the call runs once, in the session told of it.
        if !self.machine.asks(&record.id) {
            self.shared.approvals.dismiss(&record.id);
        } else if self.shared.approvals.answer(&record.id, decision) {
            // The waiting session takes it: it is used.
            let (fence, store) = (self.owner.fence(), self.shared.store.clone());
            let (tool, input) = (record.tool.clone(), record.input.clone());
            let at = self.now();
            // (A decided request has its time: the epoch never happens.)
            let since = record.decided_at.unwrap_or(chrono::DateTime::UNIX_EPOCH);
            tokio::spawn(async move {
                if let Err(error) = store.approval_take(fence, tool, input, since, at).await {
                    tracing::warn!(%error, "cannot mark an approval used");
                }
            });
            self.record(line);
            // The session that waits is the live one (which may have joined
            // the request an earlier session made).
            let session = self.machine.live_session().map_or(record.session, |(n, _)| n);
            return Some(Input::ApprovalTaken { session, id: record.id });
        }
        self.record_transcript(&line);
        Some(Input::Answered { req: self.own_req(), id: record.id, line })
    }
}
