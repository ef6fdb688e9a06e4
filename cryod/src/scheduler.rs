//! One wall-clock scheduler for every chamber.
//!
//! Each chamber's next due time sits in one ordered set; the scheduler sleeps
//! until the earliest, sends that chamber `Event::Due`, and waits for its next
//! plan. Sleeps are bounded and re-check the wall clock, because tokio's
//! timers stop while the machine is suspended.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::supervisor::Event;

/// Longest sleep before the wall clock is read again.
const MAX_SLEEP: Duration = Duration::from_secs(60);

enum Plan {
    Set(i64, DateTime<Utc>, UnboundedSender<Event>),
    Clear(i64),
}

/// A handle to the scheduler task.
#[derive(Clone)]
pub struct Scheduler {
    tx: UnboundedSender<Plan>,
}

impl Scheduler {
    pub fn start(clock: Clock, shutdown: CancellationToken) -> Scheduler {
        let (tx, rx) = unbounded_channel();
        tokio::spawn(run(rx, clock, shutdown));
        Scheduler { tx }
    }

    /// Sets (or clears) when `chamber` is next due.
    pub fn plan(&self, chamber: i64, at: Option<DateTime<Utc>>, tx: &UnboundedSender<Event>) {
        let _ = self.tx.send(match at {
            Some(t) => Plan::Set(chamber, t, tx.clone()),
            None => Plan::Clear(chamber),
        });
    }
}

async fn run(mut rx: UnboundedReceiver<Plan>, clock: Clock, shutdown: CancellationToken) {
    let mut order: BTreeSet<(DateTime<Utc>, i64)> = BTreeSet::new();
    let mut by_id: HashMap<i64, (DateTime<Utc>, UnboundedSender<Event>)> = HashMap::new();
    loop {
        let now = clock.now();
        while let Some(&(t, id)) = order.first() {
            if t > now {
                break;
            }
            order.pop_first();
            if let Some((_, tx)) = by_id.remove(&id) {
                let _ = tx.send(Event::Due);
            }
        }
        let sleep = match order.first() {
            Some((t, _)) => (*t - now).to_std().unwrap_or_default().min(MAX_SLEEP),
            None => MAX_SLEEP,
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            msg = rx.recv() => {
                let Some(msg) = msg else { return };
                let id = match &msg { Plan::Set(id, ..) | Plan::Clear(id) => *id };
                if let Some((t, _)) = by_id.remove(&id) {
                    order.remove(&(t, id));
                }
                if let Plan::Set(id, t, tx) = msg {
                    order.insert((t, id));
                    by_id.insert(id, (t, tx));
                }
            }
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}
