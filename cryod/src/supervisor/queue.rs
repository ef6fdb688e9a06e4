//! A supervisor's queue of events: unbounded, many senders, one receiver,
//! and nearly free while empty. tokio's unbounded channel allocates a block
//! of 32 slots when it is made, more than a resting chamber holds in all
//! else; this one holds what waits, in a `VecDeque` behind a lock taken for
//! a push or a pop. It also carries the supervisor's two signals, so a
//! resting chamber pays for no token of its own: the order to drop the
//! chamber at once ([`Sender::abandon`]), and the supervisor's end (its
//! receiver gone: [`Sender::closed`]).

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
        state: Mutex::new(State { items: VecDeque::new(), senders: 1, open: true, abandoned: false }),
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
        drop(s);
        self.0.ready.notify_one();
        Ok(())
    }

    /// Tells the receiver to stop at once: its next `recv` (or the one
    /// waiting) gives `None`, though values still wait.
    pub fn abandon(&self) {
        self.0.state().abandoned = true;
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
            drop(s);
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

    #[test]
    fn a_value_sent_to_a_gone_receiver_comes_back() {
        let (tx, rx) = channel();
        tx.send("kept").unwrap();
        drop(rx);
        assert_eq!(tx.send("back").unwrap_err().0, "back");
    }
}
