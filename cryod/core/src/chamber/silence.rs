//! The dead man's switch: a chamber that writes no visible message for
//! `expect_activity_within` while started raises `silent`, once per
//! silence. One timer serves it: armed for the window's end, it re-arms
//! for what is left when a message came meanwhile.

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};

/// The silence being watched; see the module documentation.
#[derive(Debug, Clone, Default)]
pub(super) struct Silence {
    /// When the chamber last wrote a visible message (or the watch began).
    last_visible: Option<DateTime<Utc>>,
    /// The silence timer is armed.
    armed: bool,
    /// `silent` was raised for this silence.
    told: bool,
}

/// What the silence timer's firing means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Over {
    /// Nothing to say (no window, said already, or not started).
    Quiet,
    /// A message came meanwhile: the window runs on; arm again.
    Early,
    /// Silent since then, for longer than the window: raise `silent`.
    Silent { since: DateTime<Utc>, window: Duration },
}

impl Silence {
    /// No timer armed and nothing said: a boot makes it again.
    pub(super) fn is_quiet(&self) -> bool {
        !self.armed && !self.told
    }

    /// `last_visible`: when the newest visible message was written.
    pub(super) fn new(last_visible: Option<DateTime<Utc>>) -> Silence {
        Silence { last_visible, ..Silence::default() }
    }

    /// A visible message was written: the silence starts again.
    pub(super) fn heard(&mut self, at: DateTime<Utc>) {
        self.last_visible = Some(at);
        self.told = false;
    }

    /// Arms the one timer for `window` after the last visible message,
    /// unless it is armed or this silence was told: returns when it fires,
    /// from `now`.
    pub(super) fn arm(&mut self, window: Duration, now: DateTime<Utc>) -> Option<StdDuration> {
        if self.armed || self.told {
            return None;
        }
        let since = *self.last_visible.get_or_insert(now);
        self.armed = true;
        Some((since + window - now).to_std().unwrap_or_default())
    }

    /// The timer fired: `silent` is due (once) if nothing visible came for
    /// the whole `window` and the chamber `wakes` (started, not paused).
    pub(super) fn over(&mut self, window: Option<Duration>, now: DateTime<Utc>, wakes: bool) -> Over {
        self.armed = false;
        let (Some(window), Some(since)) = (window, self.last_visible) else { return Over::Quiet };
        if now - since < window {
            return Over::Early;
        }
        if !wakes || self.told {
            return Over::Quiet;
        }
        self.told = true;
        Over::Silent { since, window }
    }

    /// Reset: no message yet; the next one starts the watch (an armed
    /// timer stays armed).
    pub(super) fn reset(&mut self) {
        self.last_visible = None;
        self.told = false;
    }
}
