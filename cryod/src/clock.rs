//! The one place cryod reads the wall clock.
//!
//! Schedules, logs and the UI take time from a [`Clock`]; tests substitute a
//! settable one. Durations that only measure elapsed time (a session's
//! timeout, a grace period) use tokio's monotonic timers instead.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

/// Wall-clock time for cryod.
#[derive(Clone)]
pub struct Clock(Arc<Inner>);

enum Inner {
    System,
    Fixed(Mutex<DateTime<Utc>>),
}

impl Clock {
    pub fn system() -> Clock {
        Clock(Arc::new(Inner::System))
    }

    /// A clock that stands still at `t` until [`Clock::set`] moves it.
    pub fn fixed(t: DateTime<Utc>) -> Clock {
        Clock(Arc::new(Inner::Fixed(Mutex::new(t))))
    }

    pub fn now(&self) -> DateTime<Utc> {
        match &*self.0 {
            #[allow(clippy::disallowed_methods)] // the one sanctioned read of the wall clock
            Inner::System => Utc::now(),
            Inner::Fixed(t) => *t.lock().expect("clock lock is never poisoned"),
        }
    }

    /// Whether this is the real system clock (timers may then use the OS's
    /// wall-clock timers directly).
    pub fn is_system(&self) -> bool {
        matches!(&*self.0, Inner::System)
    }

    /// Moves a fixed clock; no effect on the system clock.
    pub fn set(&self, to: DateTime<Utc>) {
        if let Inner::Fixed(t) = &*self.0 {
            *t.lock().expect("clock lock is never poisoned") = to;
        }
    }
}

/// The system's time zone as an IANA zone (`TZ`, then `/etc/localtime`), UTC
/// if it cannot be told.
pub fn system_zone() -> chrono_tz::Tz {
    if let Ok(tz) = std::env::var("TZ")
        && let Ok(z) = tz.trim_start_matches(':').parse()
    {
        return z;
    }
    iana_time_zone::get_timezone().ok().and_then(|n| n.parse().ok()).unwrap_or(chrono_tz::UTC)
}
