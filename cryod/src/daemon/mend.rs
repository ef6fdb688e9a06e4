//! Supervisors that fell: a panic in one chamber's supervisor (a bug of
//! ours) is caught where it runs (`supervisor::boot`), and the chamber is
//! started again here as after a crash of cryod: what its session left
//! running is ended, the session is recovered, and a new supervisor takes
//! the chamber up. A chamber that falls again soon waits longer each time,
//! its line saying why and when it starts again; it is never left without
//! a supervisor and without a word.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::services::runtime::Fallen;

/// A fall this long after the last one starts the count again.
const FORGIVEN_AFTER: Duration = Duration::from_secs(600);

/// The longest wait before a chamber that keeps falling starts again.
const LONGEST_WAIT: Duration = Duration::from_secs(300);

/// How long a chamber waits before it starts again after its `falls`-th
/// fall in a row: the first at once, then 1, 2, 4 … seconds, at most
/// [`LONGEST_WAIT`].
fn wait_after(falls: u32) -> Duration {
    match falls {
        0 | 1 => Duration::ZERO,
        n => Duration::from_secs(1u64 << (n - 2).min(16)).min(LONGEST_WAIT),
    }
}

/// The falls of each chamber: how many in a row, and when the last was.
#[derive(Default)]
struct Falls(HashMap<i64, (u32, Instant)>);

impl Falls {
    /// Counts a fall of `chamber` now; the falls in a row, this one included.
    fn count(&mut self, chamber: i64, now: Instant) -> u32 {
        let (n, last) = self.0.entry(chamber).or_insert((0, now));
        if now.duration_since(*last) > FORGIVEN_AFTER {
            *n = 0;
        }
        *n += 1;
        *last = now;
        *n
    }
}

impl Daemon {
    /// Takes the supervisors that fell, each as it comes, until shutdown.
    pub(super) fn mend_fallen(&self) {
        let Some(mut rx) = self.0.shared.fallen.take_receiver() else { return };
        let daemon = Arc::downgrade(&self.0);
        let shutdown = self.0.shared.shutdown.clone();
        tokio::spawn(async move {
            let mut falls = Falls::default();
            loop {
                let fallen = tokio::select! {
                    f = rx.recv() => f,
                    () = shutdown.cancelled() => None,
                };
                let (Some(fallen), Some(inner)) = (fallen, daemon.upgrade()) else { break };
                let wait = wait_after(falls.count(fallen.chamber, Instant::now()));
                tokio::spawn(Daemon(inner).mend(fallen, wait));
            }
        });
    }

    /// A supervisor whose boot fell, now registered (with a closed queue),
    /// is mended as one that fell later.
    pub(super) fn fell_at_boot(&self, chamber: i64, fell: Option<String>) {
        if let Some(why) = fell {
            let _ = self.0.shared.fallen.send(Fallen { chamber, why });
        }
    }

    /// Ends what the fallen supervisor left (its session's processes, its
    /// tokens, watches and place in the queue), says so, and after `wait`
    /// starts the chamber again.
    async fn mend(self, Fallen { chamber, why }: Fallen, wait: Duration) {
        let shared = &self.0.shared;
        for pgid in shared.trees.end_chamber(chamber) {
            cryo_session::signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
            shared.lease.forget(pgid);
            shared.live.remove(pgid);
        }
        shared.tokens.forget_chamber(chamber);
        shared.watcher.unwatch(chamber);
        shared.admission.cancel(chamber);
        let Some((name, root, snapshot)) = self.chambers().get(&chamber).map(|e| {
            // (Its time zone as last shown; the system's if none.)
            (e.record.name.clone(), std::path::PathBuf::from(&e.record.path), e.handle.snapshot.clone())
        }) else {
            return;
        };
        let when = if wait.is_zero() { "now".to_string() } else { format!("in {} s", wait.as_secs()) };
        tracing::error!(chamber = %name, %why, "the chamber's supervisor failed (a bug in cryod); it starts again {when}");
        let line = format!(
            "cryod's supervisor of this chamber failed ({}); it starts again {when}, recovering its session. If this repeats, see cryod's log and report it.",
            crate::chamber::log::one_line(&why)
        );
        let tz = snapshot.borrow().view.timezone.parse().unwrap_or(shared.system_zone.get());
        match crate::chamber::log::event(&root, shared.clock.now(), tz, &line) {
            Ok(logged) => shared.notify(chamber, crate::services::runtime::NoticeKind::Log(logged)),
            Err(error) => tracing::warn!(chamber = %name, %error, "cannot write the failure to cryo.log"),
        }
        snapshot.show_fallen(line);
        shared.notify(chamber, crate::services::runtime::NoticeKind::Status);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shared.shutdown.cancelled() => return,
        }
        if let Err(error) = self.start_again(chamber).await {
            // Tried again after the next wait, as another fall.
            let why = format!("its record could not be read: {error}");
            let _ = shared.fallen.send(Fallen { chamber, why });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chamber_that_keeps_falling_waits_longer_each_time() {
        let waits: Vec<u64> = (1..=12).map(|n| wait_after(n).as_secs()).collect();
        assert_eq!(waits, [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(wait_after(u32::MAX), LONGEST_WAIT);
    }

    #[test]
    fn a_fall_long_after_the_last_starts_the_count_again() {
        let mut falls = Falls::default();
        let t = Instant::now();
        assert_eq!(falls.count(1, t), 1);
        assert_eq!(falls.count(1, t + Duration::from_secs(5)), 2);
        assert_eq!(falls.count(2, t + Duration::from_secs(5)), 1, "each chamber counts its own");
        assert_eq!(falls.count(1, t + Duration::from_secs(5) + FORGIVEN_AFTER + Duration::from_secs(1)), 1);
    }
}
