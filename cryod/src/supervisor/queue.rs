//! A supervisor's queue of events: unbounded, many senders, one receiver,
//! and nearly free while empty. tokio's unbounded channel allocates a block
//! of 32 slots when it is made, more than a resting chamber holds in all
//! else; this one holds what waits, in a `VecDeque` behind a lock taken for
//! a push or a pop. It also carries the supervisor's two signals, so a
//! resting chamber pays for no token of its own: the order to drop the
//! chamber at once ([`Sender::abandon`]), and the supervisor's end (its
//! receiver gone: [`Sender::closed`]).
//!
//! A resting supervisor may *freeze* ([`Receiver::freeze`]): its task ends
//! and the receiver waits inside the queue with what thaws it, which the
//! next value sent calls (outside the lock) with the receiver. To every
//! sender a frozen queue is an open one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

struct Inner<T> {
    state: Mutex<State<T>>,
    ready: Notify,
    /// Told when the receiver goes.
    gone: Notify,
}

struct State<T> {
    items: VecDeque<T>,
    senders: usize,
    /// The receiver is still there.
    open: bool,
    /// The receiver is to stop at once, whatever still waits.
    abandoned: bool,
    /// The receiver, frozen, and what thaws it.
    frozen: Option<Frozen<T>>,
}

/// A frozen receiver and the call that gives it a task again.
struct Frozen<T> {
    rx: Receiver<T>,
    thaw: Box<dyn FnOnce(Receiver<T>) + Send>,
}

impl<T> Frozen<T> {
    fn thaw(self) {
        (self.thaw)(self.rx)
    }
}

/// Sends to the queue; cloned freely.
pub struct Sender<T>(Arc<Inner<T>>);

/// The one receiver.
pub struct Receiver<T>(Arc<Inner<T>>);

/// The receiver is gone: the value comes back.
#[derive(Debug)]
pub struct SendError<T>(pub T);

pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let inner = Arc::new(Inner {
        state: Mutex::new(State { items: VecDeque::new(), senders: 1, open: true, abandoned: false, frozen: None }),
        ready: Notify::new(),
        gone: Notify::new(),
    });
    (Sender(inner.clone()), Receiver(inner))
}

impl<T> Inner<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().expect("queue lock")
    }
}

impl<T> Sender<T> {
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        let mut s = self.0.state();
        if !s.open {
            return Err(SendError(value));
        }
        s.items.push_back(value);
        let frozen = s.frozen.take();
        drop(s);
        match frozen {
            Some(f) => f.thaw(),
            None => self.0.ready.notify_one(),
        }
        Ok(())
    }

    /// Sends `value` unless one `like` it already waits (then it is
    /// dropped): for what need be heard once however often it is said.
    pub fn send_unless_waiting(&self, value: T, like: impl Fn(&T) -> bool) -> Result<(), SendError<T>> {
        let s = self.0.state();
        if s.open && s.items.iter().any(like) {
            return Ok(());
        }
        drop(s);
        self.send(value)
    }

    /// Sends `value` unless the receiver is frozen (then it comes back in
    /// `Ok(Some)`): for what a resting chamber need not hear.
    pub fn send_unless_frozen(&self, value: T) -> Result<Option<T>, SendError<T>> {
        if self.0.state().frozen.is_some() {
            return Ok(Some(value));
        }
        // Thawed meanwhile (by another sender): it hears this too.
        self.send(value).map(|()| None)
    }

    /// Whether the receiver is frozen.
    pub fn is_frozen(&self) -> bool {
        self.0.state().frozen.is_some()
    }

    /// Tells the receiver to stop at once: its next `recv` (or the one
    /// waiting) gives `None`, though values still wait. A frozen one is
    /// dropped, never thawed.
    pub fn abandon(&self) {
        let frozen = {
            let mut s = self.0.state();
            s.abandoned = true;
            s.frozen.take()
        };
        drop(frozen);
        self.0.ready.notify_one();
    }

    /// Whether the receiver has gone.
    pub fn is_closed(&self) -> bool {
        !self.0.state().open
    }

    /// Returns once the receiver has gone (dropped, or its task ended).
    pub async fn closed(&self) {
        loop {
            let gone = self.0.gone.notified();
            tokio::pin!(gone);
            // Registered before the check: a drop in between is not missed.
            gone.as_mut().enable();
            if !self.0.state().open {
                return;
            }
            gone.await;
        }
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.state().senders += 1;
        Sender(self.0.clone())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut s = self.0.state();
        s.senders -= 1;
        if s.senders == 0 {
            // Nobody can thaw a frozen receiver now: it goes.
            let frozen = s.frozen.take();
            drop(s);
            drop(frozen);
            self.0.ready.notify_one();
        }
    }
}

impl<T> Receiver<T> {
    /// The next value; `None` once every sender is gone and the queue is
    /// empty, or once a sender abandoned it. Cancel-safe: a value is taken
    /// only by the poll that returns it.
    pub async fn recv(&mut self) -> Option<T> {
        loop {
            {
                let mut s = self.0.state();
                if s.abandoned {
                    return None;
                }
                if let Some(v) = s.items.pop_front() {
                    if s.items.is_empty() && s.items.capacity() > 16 {
                        // A burst is over: give its room back.
                        s.items.shrink_to_fit();
                    }
                    return Some(v);
                }
                if s.senders == 0 {
                    return None;
                }
            }
            // A notification sent since the check above is kept for us.
            self.0.ready.notified().await;
        }
    }

    /// Whether a sender abandoned the queue.
    pub fn abandoned(&self) -> bool {
        self.0.state().abandoned
    }

    /// Whether `tx` sends to this receiver.
    pub fn feeds(&self, tx: &Sender<T>) -> bool {
        Arc::ptr_eq(&self.0, &tx.0)
    }

    /// A sender of this queue.
    pub fn sender(&self) -> Sender<T> {
        self.0.state().senders += 1;
        Sender(self.0.clone())
    }

    /// Freezes the receiver while nothing waits: it is kept in the queue,
    /// and the next value sent calls `thaw` with it. Given back if a value
    /// waits, the queue was abandoned or no sender is left.
    pub fn freeze(self, thaw: impl FnOnce(Receiver<T>) + Send + 'static) -> Result<(), Receiver<T>> {
        let inner = self.0.clone();
        let mut s = inner.state();
        if !s.items.is_empty() || s.abandoned || s.senders == 0 {
            drop(s);
            return Err(self);
        }
        // The events a run held left their room behind (an event is 280
        // bytes; a chamber thawed by a run of them kept 1-2 KB frozen).
        s.items = VecDeque::new();
        s.frozen = Some(Frozen { rx: self, thaw: Box::new(thaw) });
        Ok(())
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let left = {
            let mut s = self.0.state();
            s.open = false;
            std::mem::take(&mut s.items)
        };
        self.0.gone.notify_waiters();
        // Dropped outside the lock: a value's own drop may send elsewhere.
        drop(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn values_come_in_order_and_the_end_is_seen() {
        let (tx, mut rx) = channel();
        let tx2 = tx.clone();
        tx.send(1).unwrap();
        tx2.send(2).unwrap();
        let waiting = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(v) = rx.recv().await {
                got.push(v);
            }
            got
        });
        tokio::task::yield_now().await;
        tx.send(3).unwrap();
        drop((tx, tx2));
        assert_eq!(waiting.await.unwrap(), [1, 2, 3]);
    }

    /// Abandoned, the receiver stops though values wait; its end is seen
    /// by a sender waiting for it, and by one that asks after it.
    #[tokio::test]
    async fn an_abandoned_queue_stops_at_once_and_its_end_is_seen() {
        let (tx, mut rx) = channel();
        tx.send(1).unwrap();
        let ending = tokio::spawn({
            let tx = tx.clone();
            async move { tx.closed().await }
        });
        tx.abandon();
        assert_eq!(rx.recv().await, None, "a waiting value is not handed out");
        assert!(rx.abandoned());
        assert!(!ending.is_finished(), "the receiver is still there");
        drop(rx);
        ending.await.unwrap();
        tx.closed().await;
    }

    /// Frozen, the receiver is handed to its thaw by the first value sent,
    /// which waits for it; a sender that need not thaw it gets its value
    /// back.
    #[tokio::test]
    async fn a_frozen_receiver_is_thawed_by_the_first_value_sent() {
        let (tx, rx) = channel();
        let (thawed_tx, thawed) = std::sync::mpsc::channel();
        rx.freeze(move |rx| thawed_tx.send(rx).unwrap()).map_err(|_| ()).expect("nothing waits: it freezes");
        assert!(tx.is_frozen() && !tx.is_closed());
        assert_eq!(tx.send_unless_frozen(0).unwrap(), Some(0), "a frozen receiver is not thawed for this");
        assert!(thawed.try_recv().is_err());
        tx.send(1).unwrap();
        let mut rx = thawed.try_recv().expect("thawed by the send");
        assert!(!tx.is_frozen());
        tx.send(2).unwrap();
        assert_eq!(tx.send_unless_frozen(3).unwrap(), None, "a thawed one hears it");
        assert_eq!((rx.recv().await, rx.recv().await, rx.recv().await), (Some(1), Some(2), Some(3)));
    }

    /// A frozen queue keeps no room for the values of its last run.
    #[tokio::test]
    async fn a_frozen_queue_holds_no_room() {
        let (tx, mut rx) = channel();
        for v in 0..10 {
            tx.send(v).unwrap();
        }
        while !tx.0.state().items.is_empty() {
            rx.recv().await;
        }
        assert!(tx.0.state().items.capacity() >= 10, "a short run's room is kept while it runs");
        rx.freeze(|_| ()).map_err(|_| ()).expect("nothing waits: it freezes");
        assert_eq!(tx.0.state().items.capacity(), 0);
    }

    /// A value like one that waits is not queued twice.
    #[tokio::test]
    async fn a_value_like_one_waiting_is_dropped() {
        let (tx, mut rx) = channel();
        tx.send_unless_waiting(1, |v| *v == 1).unwrap();
        tx.send_unless_waiting(1, |v| *v == 1).unwrap();
        tx.send_unless_waiting(2, |v| *v == 2).unwrap();
        assert_eq!((rx.recv().await, rx.recv().await), (Some(1), Some(2)));
        tx.send_unless_waiting(1, |v| *v == 1).unwrap();
        assert_eq!(rx.recv().await, Some(1), "heard again once the first was taken");
    }

    /// A receiver with a value waiting does not freeze.
    #[test]
    fn a_receiver_with_a_value_waiting_does_not_freeze() {
        let (tx, rx) = channel();
        tx.send(1).unwrap();
        let rx = rx.freeze(|_| panic!("never thawed")).expect_err("a value waits");
        assert!(!tx.is_frozen());
        drop(rx);
        assert!(tx.is_closed());
    }

    /// Abandoned, or left by its last sender, a frozen receiver is dropped
    /// without a thaw, and the queue is closed.
    #[test]
    fn a_frozen_receiver_abandoned_or_left_is_dropped_unthawed() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        struct Dropped(std::sync::Arc<AtomicBool>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.store(true, SeqCst);
            }
        }
        // A frozen queue whose thaw, never called, says when it is dropped.
        let frozen = || {
            let (tx, rx) = channel::<u8>();
            let gone = std::sync::Arc::new(AtomicBool::new(false));
            let thaw = Dropped(gone.clone());
            let froze = rx.freeze(move |_| {
                let _kept = &thaw;
                panic!("never thawed")
            });
            assert!(froze.is_ok());
            (tx, gone)
        };
        let (tx, gone) = frozen();
        let tx2 = tx.clone();
        tx.abandon();
        assert!(gone.load(SeqCst) && tx2.is_closed() && !tx2.is_frozen());
        assert!(tx2.send(1).is_err());

        let (tx, gone) = frozen();
        drop(tx);
        assert!(gone.load(SeqCst), "the last sender took the frozen receiver with it");
    }

    #[test]
    fn a_value_sent_to_a_gone_receiver_comes_back() {
        let (tx, rx) = channel();
        tx.send("kept").unwrap();
        drop(rx);
        assert_eq!(tx.send("back").unwrap_err().0, "back");
    }
}
