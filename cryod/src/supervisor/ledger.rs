//! The supervisor's effects on the ledger: wakes, sessions, inbox
//! journals, passed slots and the registry's flags, each written under the
//! chamber's fence.

use chrono::{DateTime, Utc};
use cryo_core::chamber::{AfterClaim, AfterStore, Failed, Input, Passed};
use cryo_core::session::Trigger;

use super::Sup;
use super::boot::claims_json;
use crate::store::{Desired, SessionEnd, SessionStart, WakeRecord};

impl Sup {
    pub(super) async fn session_started(&mut self, number: u64, pid: u32, at: DateTime<Utc>, due: Due) {
        tracing::info!(chamber = %self.machine.name(), session = number, pid, "agent started");
        let (trigger, due) = due;
        if let Some(late) = due.and_then(|d| (at - d).to_std().ok()) {
            crate::base::metrics::get().wake_started(trigger.as_str(), late);
        }
        let lateness_ms = due.map(|d| cryo_core::session::lateness_ms(d, at));
        let start = SessionStart { number, pid, started_at: at, lateness_ms };
        let r = self.shared.store.session_started(self.owner.fence(), start).await;
        let _ = self.fenced(r);
    }

    pub(super) async fn journal_claim(&mut self, number: u64, names: Vec<String>, then: AfterClaim) -> Input {
        let r = self.shared.store.journal_claim(self.owner.fence(), number, names.clone(), self.now()).await;
        let result = self.fenced(r).map(|_| ()).map_err(Failed::of);
        Input::Journaled { then, names, result }
    }

    /// Marks inbox batches answered or dropped.
    pub(super) async fn journal(&mut self, change: Journal) {
        let (store, fence, at) = (&self.shared.store, self.owner.fence(), self.now());
        let r = match change {
            Journal::Answer { number } => store.journal_answer(fence, number, at).await,
            Journal::Answered { id } => store.claim_answered_by_id(fence, id, at).await,
            Journal::Drop { id } => store.journal_drop(fence, id).await,
        };
        let _ = self.fenced(r);
    }

    pub(super) async fn record_passed(&mut self, slots: Vec<Passed>) {
        let at = self.now();
        let slots = slots
            .into_iter()
            .map(|p| crate::store::PassedSlot {
                slot_at: p.due,
                todo_id: Some(p.todo),
                todo_text: Some(p.text),
                what: p.what.to_string(),
                reason: p.reason,
                at,
            })
            .collect();
        if let Err(error) = self.shared.store.record_passed(self.owner.fence(), slots).await {
            tracing::warn!(chamber = %self.machine.name(), %error, "cannot record the passed slots");
        }
    }

    pub(super) async fn record_wake(&mut self, w: cryo_core::chamber::WakeRecord) -> Input {
        let record = WakeRecord {
            number: w.number,
            wake_id: w.wake_id,
            trigger: w.trigger.as_str().into(),
            reasons: serde_json::to_string(&w.reasons).unwrap_or_default(),
            claimed: claims_json(&w.claims),
            due_at: w.due_at,
            created_at: w.created_at,
            resumed_from: w.resumed_from,
        };
        let r = self.shared.store.record_wake(self.owner.fence(), record).await;
        let r = self.fenced(r).map_err(Failed::of);
        if let Err(error) = &r {
            tracing::error!(chamber = %self.machine.name(), %error, "cannot record the wake; not spawning");
        }
        Input::Recorded(r)
    }

    /// Records a session's end, then measures the budgets again.
    pub(super) async fn session_ended(&mut self, e: Ended) -> Option<Input> {
        let Ended { number, at, outcome, summary, trigger, started, thread } = e;
        let lasted = started.and_then(|s| (at - s).to_std().ok());
        crate::base::metrics::get().session_ended(trigger.as_str(), outcome.kind(), lasted);
        let failed = outcome.failed();
        let outcome = outcome.describe();
        tracing::info!(chamber = %self.machine.name(), session = number, %outcome, "session ended");
        // The account is known for every session (its budget counts
        // them all), what it used only for a known kind's.
        let used = self.running.as_mut().and_then(|r| r.take_usage(number)).unwrap_or_default();
        let provider = self.account();
        let usage = cryo_session::Usage { provider, ..used };
        if let Some(trace) = self.running.as_mut().and_then(|r| r.take_trace()) {
            let span = (started.unwrap_or(at), at);
            self.last_trace = Some(trace.context());
            let agent = self.session_config().map(|c| c.agent.clone()).unwrap_or_default();
            let wake = Wake { chamber: self.machine.name(), agent: &agent, number, trigger: trigger.as_str() };
            trace_wake(&trace, wake, (&outcome, failed), &usage, span);
        }
        let thread = thread.map(|t| (t.sessions, t.tokens));
        let end = SessionEnd { number, ended_at: at, outcome, detail: summary, usage, thread };
        let r = self.shared.store.session_ended(self.owner.fence(), end).await;
        self.fenced(r).ok()?;
        let uses = self.measure_budgets().await;
        (!uses.is_empty()).then(|| Input::Budget { req: self.own_req(), uses })
    }

    /// Writes one of the registry's flags for the chamber.
    /// Keeps the machine's health, as it is now, in the store.
    pub(super) async fn save_health(&mut self) {
        let json = serde_json::to_string(&self.machine.health_record()).expect("a health record serializes");
        let r = self.shared.store.set_health(self.owner.fence(), json).await;
        if let Err(error) = self.fenced(r) {
            tracing::warn!(chamber = %self.machine.name(), %error, "cannot keep the chamber's health");
        }
    }

    pub(super) async fn set_flag(&mut self, flag: Flag, then: AfterStore) -> Input {
        let (store, fence) = (&self.shared.store, self.owner.fence());
        let (r, said) = match flag {
            Flag::Started(on) => {
                let desired = if on { Desired::Started } else { Desired::Stopped };
                (store.set_desired(fence, desired).await, Some(if on { "chamber started" } else { "chamber stopped" }))
            }
            Flag::Paused(on) => (store.set_paused(fence, on).await, None),
            Flag::Archived(on) => {
                (store.set_archived(fence, on).await, Some(if on { "chamber archived" } else { "chamber unarchived" }))
            }
        };
        let result = self.fenced(r).map_err(Failed::of);
        if let (Ok(()), Some(what)) = (&result, said) {
            tracing::info!(chamber = %self.machine.name(), "{what}");
        }
        Input::StoreWritten { then, result }
    }
}

/// A change to the inbox journal.
pub(super) enum Journal {
    /// Session `number`'s batches are answered.
    Answer { number: u64 },
    /// One batch of an ended session was answered.
    Answered { id: i64 },
    /// A batch whose files never left the inbox.
    Drop { id: i64 },
}

/// What woke a session, and when it was due.
pub(super) type Due = (Trigger, Option<DateTime<Utc>>);

/// A registry flag and its new value.
pub(super) enum Flag {
    Started(bool),
    Paused(bool),
    Archived(bool),
}

/// What [`Effect::SessionEnded`] carries.
pub(super) struct Ended {
    pub number: u64,
    pub at: DateTime<Utc>,
    pub outcome: cryo_core::session::Outcome,
    pub summary: String,
    pub trigger: Trigger,
    pub started: Option<DateTime<Utc>>,
    pub thread: Option<cryo_core::session::Thread>,
}

/// Which wake a root span is.
struct Wake<'a> {
    chamber: &'a str,
    agent: &'a str,
    number: u64,
    trigger: &'a str,
}

/// A wake's root span: the agent's run (`invoke_agent`), with the GenAI
/// semantic conventions' attributes and cryo's own.
fn trace_wake(
    trace: &crate::base::otlp::Trace,
    wake: Wake<'_>,
    (outcome, failed): (&str, bool),
    usage: &cryo_session::Usage,
    span: (DateTime<Utc>, DateTime<Utc>),
) {
    use crate::base::otlp::Value;
    let Wake { chamber, agent, number, trigger } = wake;
    let kind = cryo_session::Kind::of_agent(agent).name();
    let mut attributes: Vec<(&'static str, Value)> = vec![
        ("gen_ai.operation.name", "invoke_agent".into()),
        ("gen_ai.agent.name", chamber.into()),
        ("gen_ai.provider.name", crate::base::otlp::provider_name(kind).into()),
        ("gen_ai.usage.input_tokens", usage.input_tokens.into()),
        ("gen_ai.usage.output_tokens", usage.output_tokens.into()),
        ("cryo.chamber", chamber.into()),
        ("cryo.session", number.into()),
        ("cryo.trigger", trigger.into()),
        ("cryo.outcome", outcome.into()),
    ];
    let optional = [
        ("gen_ai.request.model", usage.model.clone()),
        ("gen_ai.response.model", usage.model.clone()),
        ("gen_ai.conversation.id", usage.provider_session.clone()),
        ("cryo.account", usage.provider.clone()),
    ];
    attributes.extend(optional.into_iter().filter_map(|(k, v)| v.map(|v| (k, Value::from(v)))));
    if let Some(cost) = usage.cost_usd {
        attributes.push(("cryo.cost_usd", cost.into()));
    }
    let error = failed.then(|| outcome.to_string());
    // The conventions name an agent's span after the agent: the chamber.
    trace.finish(format!("invoke_agent {chamber}"), span, attributes, error);
}
