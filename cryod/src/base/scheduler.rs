//! One wall-clock scheduler for every chamber.
//!
//! Each chamber's next due time sits in one ordered set; the scheduler waits
//! until the earliest, tells that chamber through its [`Sink`], and waits for
//! its next plan. No chamber has a polling loop; an idle daemon sleeps until the next
//! deadline.
//!
//! Waiting is on the wall clock. tokio's timers measure a clock that stops
//! while a Linux machine is suspended, so on Linux the wait is a
//! `CLOCK_REALTIME` timerfd armed with an absolute time and
//! `TFD_TIMER_CANCEL_ON_SET`: it fires on time after a suspend, and a change of
//! the system time cancels it at once so everything is re-planned. Elsewhere
//! (and with a test clock) the wait is a series of bounded sleeps that
//! re-check the clock.
//!
//! A chamber is told [`HEAD_START`] before its deadline, with the deadline:
//! it decides and records its wake as of that instant ahead of it, and only
//! the agent's start waits for the instant itself (`supervisor`), so the
//! durable record is not on the path from the due time to the agent.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

use crate::base::clock::Clock;

/// How a chamber is told it is due at the instant given (at most
/// [`HEAD_START`] ahead); false once the chamber is gone.
pub type Sink = Arc<dyn Fn(DateTime<Utc>) -> bool + Send + Sync>;

/// How long before its deadline a chamber is told, on the system clock: room
/// for admission and the wake's durable record (a few milliseconds, more on
/// a loaded machine), and nothing a person could see.
pub const HEAD_START: Duration = Duration::from_millis(30);

/// Longest sleep before the wall clock is read again, where no timerfd is
/// used.
const MAX_SLEEP: Duration = Duration::from_secs(60);

enum Plan {
    Set(i64, DateTime<Utc>, Sink),
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
    pub fn plan(&self, chamber: i64, at: Option<DateTime<Utc>>, due: Sink) {
        let _ = self.tx.send(match at {
            Some(t) => Plan::Set(chamber, t, due),
            None => Plan::Clear(chamber),
        });
    }
}

/// The ordered deadlines.
#[derive(Default)]
struct Plans {
    order: BTreeSet<(DateTime<Utc>, i64)>,
    by_id: HashMap<i64, (DateTime<Utc>, Sink)>,
}

impl Plans {
    fn apply(&mut self, msg: Plan) {
        let id = match &msg {
            Plan::Set(id, ..) | Plan::Clear(id) => *id,
        };
        if let Some((t, _)) = self.by_id.remove(&id) {
            self.order.remove(&(t, id));
        }
        if let Plan::Set(id, t, tx) = msg {
            self.order.insert((t, id));
            self.by_id.insert(id, (t, tx));
        }
    }

    /// Sends `Due` to every chamber due by `now + lead`; returns when the
    /// next one is to be told (its deadline less `lead`).
    fn fire(&mut self, now: DateTime<Utc>, lead: Duration) -> Option<DateTime<Utc>> {
        let lead = chrono::Duration::from_std(lead).unwrap_or_default();
        while let Some(&(t, id)) = self.order.first() {
            if t > now + lead {
                return Some(t - lead);
            }
            self.order.pop_first();
            if let Some((_, due)) = self.by_id.remove(&id) {
                due(t);
            }
        }
        None
    }
}

async fn run(mut rx: UnboundedReceiver<Plan>, clock: Clock, shutdown: CancellationToken) {
    let mut plans = Plans::default();
    // A test clock is stepped by hand: its chambers are told at the instant.
    let lead = if clock.is_system() { HEAD_START } else { Duration::ZERO };
    #[cfg(target_os = "linux")]
    let mut timer = if clock.is_system() {
        match wall::WallTimer::new() {
            Ok(t) => Some(t),
            Err(error) => {
                tracing::warn!(%error, "no timerfd: waking every minute to check the clock");
                None
            }
        }
    } else {
        None
    };
    loop {
        let next = plans.fire(clock.now(), lead);
        #[cfg(target_os = "linux")]
        if let Some(timer) = timer.as_mut() {
            if let Err(error) = timer.arm(next) {
                tracing::warn!(%error, "cannot arm the timerfd");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                msg = rx.recv() => match msg {
                    Some(m) => plans.apply(m),
                    None => return,
                },
                r = timer.wait() => match r {
                    Ok(wall::Fired::Deadline) => {}
                    Ok(wall::Fired::ClockChanged) => tracing::info!("the system clock changed: re-planning every chamber"),
                    Err(error) => tracing::warn!(%error, "timerfd read failed"),
                },
            }
            continue;
        }
        let now = clock.now();
        let sleep = next.map(|t| (t - now).to_std().unwrap_or_default().min(MAX_SLEEP)).unwrap_or(MAX_SLEEP);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            msg = rx.recv() => match msg {
                Some(m) => plans.apply(m),
                None => return,
            },
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}

#[cfg(target_os = "linux")]
mod wall {
    //! A `CLOCK_REALTIME` timerfd driven by tokio.

    use std::os::fd::{AsFd, AsRawFd, RawFd};

    use chrono::{DateTime, Utc};
    use nix::errno::Errno;
    use nix::sys::time::TimeSpec;
    use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
    use tokio::io::unix::AsyncFd;

    struct Fd(TimerFd);

    impl AsRawFd for Fd {
        fn as_raw_fd(&self) -> RawFd {
            self.0.as_fd().as_raw_fd()
        }
    }

    pub struct WallTimer {
        fd: AsyncFd<Fd>,
    }

    pub enum Fired {
        Deadline,
        ClockChanged,
    }

    /// With nothing to wait for, the timer is still armed this far ahead, so
    /// a change of the clock is seen even by an idle daemon.
    const IDLE_SECS: i64 = 365 * 86_400;

    impl WallTimer {
        pub fn new() -> std::io::Result<WallTimer> {
            let t = TimerFd::new(ClockId::CLOCK_REALTIME, TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC)?;
            // `AsyncFd::new` is deprecated because an `AsRawFd` may not own its
            // fd; `Fd` owns the timerfd, which lives exactly as long as the
            // AsyncFd, so the registration cannot outlive it.
            #[allow(deprecated)]
            let fd = AsyncFd::new(Fd(t))?;
            Ok(WallTimer { fd })
        }

        /// Arms the timer for `at` (absolute wall time), or far ahead.
        pub fn arm(&mut self, at: Option<DateTime<Utc>>) -> nix::Result<()> {
            #[allow(clippy::disallowed_methods)] // only to arm an idle timer far ahead
            let at = at.unwrap_or_else(|| Utc::now() + chrono::Duration::seconds(IDLE_SECS));
            // A zero expiration disarms a timerfd: never arm at the epoch.
            let secs = at.timestamp().max(1);
            let nanos = i64::from(at.timestamp_subsec_nanos());
            let spec = TimeSpec::new(secs, nanos);
            self.fd.get_ref().0.set(
                Expiration::OneShot(spec),
                TimerSetTimeFlags::TFD_TIMER_ABSTIME | TimerSetTimeFlags::TFD_TIMER_CANCEL_ON_SET,
            )
        }

        /// Waits until the deadline passes or the clock is changed.
        pub async fn wait(&mut self) -> std::io::Result<Fired> {
            loop {
                let mut guard = self.fd.readable().await?;
                let mut buf = [0u8; 8];
                match nix::unistd::read(guard.get_inner().0.as_fd(), &mut buf) {
                    Ok(_) => return Ok(Fired::Deadline),
                    Err(Errno::ECANCELED) => return Ok(Fired::ClockChanged),
                    Err(Errno::EAGAIN) => guard.clear_ready(),
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn fires_in_order_and_replans() {
        let mut p = Plans::default();
        let (tx, mut rx) = unbounded_channel();
        let sink = |id: i64| -> Sink {
            let tx = tx.clone();
            Arc::new(move |_| tx.send(id).is_ok())
        };
        p.apply(Plan::Set(1, t("2026-01-01T10:00:00Z"), sink(1)));
        p.apply(Plan::Set(2, t("2026-01-01T09:00:00Z"), sink(2)));
        p.apply(Plan::Set(3, t("2026-01-01T11:00:00Z"), sink(3)));
        // Re-planning chamber 3 earlier replaces its old deadline.
        p.apply(Plan::Set(3, t("2026-01-01T09:30:00Z"), sink(3)));
        p.apply(Plan::Clear(1));
        assert_eq!(p.fire(t("2026-01-01T08:00:00Z"), Duration::ZERO), Some(t("2026-01-01T09:00:00Z")));
        assert!(rx.try_recv().is_err());
        assert_eq!(p.fire(t("2026-01-01T09:45:00Z"), Duration::ZERO), None);
        assert_eq!(rx.try_recv(), Ok(2));
        assert_eq!(rx.try_recv(), Ok(3));
        assert!(rx.try_recv().is_err(), "a cleared plan never fires");
    }

    #[test]
    fn a_chamber_is_told_its_deadline_ahead_of_it() {
        let mut p = Plans::default();
        let (tx, mut rx) = unbounded_channel();
        p.apply(Plan::Set(1, t("2026-01-01T10:00:00Z"), Arc::new(move |at| tx.send(at).is_ok())));
        // Armed a head start before the deadline, and nothing told sooner.
        let lead = Duration::from_millis(30);
        assert_eq!(p.fire(t("2026-01-01T09:59:59Z"), lead), Some(t("2026-01-01T09:59:59.970Z")));
        assert!(rx.try_recv().is_err());
        // Told then, with the deadline itself.
        assert_eq!(p.fire(t("2026-01-01T09:59:59.970Z"), lead), None);
        assert_eq!(rx.try_recv(), Ok(t("2026-01-01T10:00:00Z")));
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_timerfd_fires_at_a_wall_clock_deadline() {
        let mut timer = wall::WallTimer::new().unwrap();
        let clock = Clock::system();
        let due = clock.now() + chrono::Duration::milliseconds(50);
        timer.arm(Some(due)).unwrap();
        assert!(matches!(timer.wait().await.unwrap(), wall::Fired::Deadline));
        assert!(clock.now() >= due);
    }
}
