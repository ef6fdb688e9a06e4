//! Admission: at most `max_concurrent_sessions` agents at once across the
//! daemon, admitted in priority order (inbox > manual > recovery > bootstrap >
//! scheduled), oldest first within a class. A burst of wakes is queued, never
//! dropped.
//!
//! A chamber asks with [`Admission::request`]; when a slot is free its
//! supervisor receives [`Event::Admitted`] carrying a [`Permit`], which frees
//! the slot when dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cryo_core::session::Trigger;
use tokio::sync::mpsc::UnboundedSender;

use crate::supervisor::Event;

#[derive(Clone)]
pub struct Admission(Arc<Mutex<State>>);

struct State {
    limit: usize,
    running: usize,
    seq: u64,
    queue: BTreeMap<(Trigger, u64), (i64, UnboundedSender<Event>)>,
}

/// A slot; dropping it admits the next waiting chamber.
pub struct Permit {
    admission: Admission,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permit")
    }
}

impl Admission {
    pub fn new(limit: usize) -> Admission {
        Admission(Arc::new(Mutex::new(State { limit: limit.max(1), running: 0, seq: 0, queue: BTreeMap::new() })))
    }

    /// Queues a request from `chamber`; it is answered with `Event::Admitted`.
    /// A chamber has at most one request queued: a new one replaces the old
    /// if it ranks higher.
    pub fn request(&self, trigger: Trigger, chamber: i64, tx: UnboundedSender<Event>) {
        let mut s = self.0.lock().expect("admission lock");
        if let Some(key) = s.queue.iter().find(|(_, (c, _))| *c == chamber).map(|(k, _)| *k) {
            if key.0 <= trigger {
                return;
            }
            s.queue.remove(&key);
        }
        let seq = s.seq;
        s.seq += 1;
        s.queue.insert((trigger, seq), (chamber, tx));
        self.grant(&mut s);
    }

    /// Withdraws `chamber`'s queued request, if any.
    pub fn cancel(&self, chamber: i64) {
        let mut s = self.0.lock().expect("admission lock");
        s.queue.retain(|_, (c, _)| *c != chamber);
    }

    pub fn running(&self) -> usize {
        self.0.lock().expect("admission lock").running
    }

    fn grant(&self, s: &mut State) {
        while s.running < s.limit {
            let Some((_, (_, tx))) = s.queue.pop_first() else { break };
            s.running += 1;
            let permit = Permit { admission: self.clone() };
            if let Err(returned) = tx.send(Event::Admitted(permit)) {
                // The chamber is gone: its permit comes back unused.
                let Event::Admitted(p) = returned.0 else { unreachable!("we sent Admitted") };
                std::mem::forget(p);
                s.running -= 1;
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let admission = self.admission.clone();
        let mut s = admission.0.lock().expect("admission lock");
        s.running -= 1;
        admission.grant(&mut s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_and_priority() {
        let a = Admission::new(1);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        a.request(Trigger::Scheduled, 1, tx.clone());
        let first = match rx.try_recv() {
            Ok(Event::Admitted(p)) => p,
            _ => panic!("first request is admitted at once"),
        };
        a.request(Trigger::Scheduled, 2, tx.clone());
        a.request(Trigger::Inbox, 3, tx.clone());
        a.request(Trigger::Manual, 4, tx.clone());
        assert!(rx.try_recv().is_err(), "the limit holds");
        assert_eq!(a.running(), 1);
        drop(first);
        // Inbox ranks first.
        let (tx3, mut rx3) = tokio::sync::mpsc::unbounded_channel::<Event>();
        drop(tx3);
        let _ = rx3.try_recv();
        let p = match rx.try_recv() {
            Ok(Event::Admitted(p)) => p,
            _ => panic!("the next is admitted when a slot frees"),
        };
        assert_eq!(a.running(), 1);
        a.cancel(4);
        drop(p);
        assert!(matches!(rx.try_recv(), Ok(Event::Admitted(_))));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_gone_chamber_returns_its_slot() {
        let a = Admission::new(1);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        drop(rx);
        a.request(Trigger::Inbox, 1, tx);
        assert_eq!(a.running(), 0);
    }
}
