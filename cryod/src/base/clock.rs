//! The one place cryod reads the wall clock, and how it writes a time.
//!
//! Schedules, logs and the UI take time from a [`Clock`]; tests substitute a
//! settable one. Durations that only measure elapsed time (a session's
//! timeout, a grace period) use tokio's monotonic timers instead. A time
//! is written as RFC 3339 in UTC ([`rfc3339`]; approval requests to the
//! millisecond, [`rfc3339_ms`]), in the store and on the wire alike.

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

/// RFC 3339 to the second, in UTC.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// RFC 3339 to the millisecond, in UTC: an approval request is asked,
/// decided and taken within one second, and its times order them.
pub fn rfc3339_ms(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A time written as RFC 3339 (any offset), in UTC.
pub fn parse_rfc3339(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.to_utc())
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
