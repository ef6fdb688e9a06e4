//! Admission: at most `max_concurrent_sessions` agents at once across the
//! daemon, admitted in priority order (inbox > manual > recovery > bootstrap >
//! scheduled), oldest first within a class. A burst of wakes is queued, never
//! dropped.
//!
//! A chamber asks with [`Admission::request`], giving a [`Sink`]; when a slot
//! is free the sink receives a [`Permit`], which frees the slot when dropped.
//! A chamber holds one permit at most: while it holds one (or one is on its
//! way to it), its requests are ignored; it asks again after giving it back.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use cryo_core::session::Trigger;

/// Where a chamber receives its permit; it hands the permit back if the
/// chamber is gone.
pub type Sink = Arc<dyn Fn(Permit) -> Result<(), Permit> + Send + Sync>;

#[derive(Clone)]
pub struct Admission(Arc<Mutex<State>>);

struct State {
    limit: usize,
    running: usize,
    seq: u64,
    /// Waiting requests: the chamber, its sink, and since when it waits.
    queue: BTreeMap<(Trigger, u64), (i64, Sink, std::time::Instant)>,
    /// Chambers holding a permit.
    holders: HashSet<i64>,
}

/// A slot; dropping it admits the next waiting chamber.
pub struct Permit {
    admission: Admission,
    chamber: i64,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permit")
    }
}

impl Admission {
    pub fn new(limit: usize) -> Admission {
        Admission(Arc::new(Mutex::new(State {
            limit: limit.max(1),
            running: 0,
            seq: 0,
            queue: BTreeMap::new(),
            holders: HashSet::new(),
        })))
    }

    /// Queues a request from `chamber`; it is answered through `sink`.
    /// A chamber has at most one request queued: a new one replaces the old
    /// if it ranks higher.
    pub fn request(&self, trigger: Trigger, chamber: i64, sink: Sink) {
        let mut s = self.0.lock().expect("admission lock");
        if s.holders.contains(&chamber) {
            return;
        }
        let mut since = std::time::Instant::now();
        if let Some(key) = s.queue.iter().find(|(_, (c, ..))| *c == chamber).map(|(k, _)| *k) {
            if key.0 <= trigger {
                return;
            }
            if let Some((.., asked)) = s.queue.remove(&key) {
                since = asked;
            }
        }
        let seq = s.seq;
        s.seq += 1;
        s.queue.insert((trigger, seq), (chamber, sink, since));
        self.grant(&mut s);
    }

    /// Withdraws `chamber`'s queued request, if any.
    pub fn cancel(&self, chamber: i64) {
        let mut s = self.0.lock().expect("admission lock");
        s.queue.retain(|_, (c, ..)| *c != chamber);
    }

    pub fn running(&self) -> usize {
        self.0.lock().expect("admission lock").running
    }

    /// Requests waiting, slots held, and the limit (for the figures).
    pub fn depth(&self) -> (usize, usize, usize) {
        let s = self.0.lock().expect("admission lock");
        (s.queue.len(), s.running, s.limit)
    }

    fn grant(&self, s: &mut State) {
        while s.running < s.limit {
            let Some(((trigger, _), (chamber, sink, since))) = s.queue.pop_first() else { break };
            crate::metrics::get().admitted(trigger.as_str(), since.elapsed());
            s.running += 1;
            s.holders.insert(chamber);
            let permit = Permit { admission: self.clone(), chamber };
            if let Err(returned) = sink(permit) {
                // The chamber is gone: its permit comes back unused.
                std::mem::forget(returned);
                s.running -= 1;
                s.holders.remove(&chamber);
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let admission = self.admission.clone();
        let mut s = admission.0.lock().expect("admission lock");
        s.running -= 1;
        s.holders.remove(&self.chamber);
        admission.grant(&mut s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Granted = std::sync::mpsc::Receiver<(i64, Permit)>;

    fn sinks() -> (impl Fn(i64) -> Sink, Granted) {
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let tx = Arc::new(tx);
        let make = move |id: i64| -> Sink {
            let tx = tx.clone();
            Arc::new(move |p| tx.lock().unwrap().send((id, p)).map_err(|e| e.0.1))
        };
        (make, rx)
    }

    #[test]
    fn limit_and_priority() {
        let a = Admission::new(1);
        let (sink, rx) = sinks();
        a.request(Trigger::Scheduled, 1, sink(1));
        let (id, first) = rx.try_recv().expect("the first request is admitted at once");
        assert_eq!(id, 1);
        a.request(Trigger::Scheduled, 2, sink(2));
        a.request(Trigger::Inbox, 3, sink(3));
        a.request(Trigger::Manual, 4, sink(4));
        assert!(rx.try_recv().is_err(), "the limit holds");
        assert_eq!(a.running(), 1);
        drop(first);
        let (id, p) = rx.try_recv().expect("the next is admitted when a slot frees");
        assert_eq!(id, 3, "inbox ranks first");
        assert_eq!(a.running(), 1);
        a.cancel(4);
        drop(p);
        assert_eq!(rx.try_recv().map(|g| g.0).ok(), Some(2), "manual was cancelled; scheduled is next");
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_chamber_holds_one_permit_at_most() {
        let a = Admission::new(4);
        let (sink, rx) = sinks();
        a.request(Trigger::Scheduled, 1, sink(1));
        let (_, p) = rx.try_recv().expect("admitted");
        // Asked again while it holds the permit (mail arrived meanwhile).
        a.request(Trigger::Inbox, 1, sink(1));
        assert!(rx.try_recv().is_err(), "no second permit for the same chamber");
        assert_eq!(a.running(), 1);
        drop(p);
        a.request(Trigger::Inbox, 1, sink(1));
        assert_eq!(rx.try_recv().map(|g| g.0).ok(), Some(1), "once given back, it may ask again");
    }

    #[test]
    fn a_gone_chamber_returns_its_slot() {
        let a = Admission::new(1);
        let (sink, rx) = sinks();
        drop(rx);
        a.request(Trigger::Inbox, 1, sink(1));
        assert_eq!(a.running(), 0);
    }
}
