//! Telling a service manager how cryod is doing (sd_notify(3)): `READY=1` once
//! the socket serves (the chambers boot meanwhile: "loading N chamber(s)"),
//! a one-line `STATUS=` kept current from the last one booted on, `WATCHDOG=1` at half the watchdog interval, and
//! `STOPPING=1` on the way out ([`stopping`]). Without `NOTIFY_SOCKET` (started by hand)
//! every call does nothing.

pub mod logind;

use std::time::Duration;

use sd_notify::NotifyState;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::daemon::Daemon;
use crate::services::runtime::NoticeKind;

/// How often, at most, the status line is made again.
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// The one-line summary systemd shows as the unit's status.
pub fn summary(d: &Daemon) -> String {
    let loading = d.loading();
    if loading > 0 {
        return format!("{} chamber(s), loading {loading} of them", d.chamber_count());
    }
    let (chambers, running, next) = d.tally();
    let next = match next {
        Some(t) => format!("next wake {}", crate::base::clock::rfc3339(t)),
        None => "no wake planned".into(),
    };
    format!("{chambers} chamber(s), {running} session(s) running, {next}")
}

fn notify(states: &[NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(states) {
        tracing::debug!(%error, "sd_notify failed");
    }
}

/// Says cryod is on its way out: called on the shutdown path itself (a
/// task woken by the shutdown could be dropped with the runtime before it
/// said so, on a loaded machine).
pub fn stopping() {
    notify(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// Reports readiness, then keeps the status line and the watchdog going
/// until shutdown.
pub fn ready(d: &Daemon) {
    let status = summary(d);
    notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
    tracing::debug!(%status, "notified the service manager: ready");
    let stopping = d.stopping();
    if let Some(interval) = sd_notify::watchdog_enabled() {
        let period = (interval / 2).max(Duration::from_millis(50));
        let shutdown = stopping.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tick.tick() => notify(&[NotifyState::Watchdog]),
                }
            }
        });
    }
    let daemon = d.clone();
    tokio::spawn(async move {
        let mut notices = daemon.notices();
        // A line per change only once every chamber is booted: each
        // boot is a change, and a line reads them all.
        daemon.all_loaded().await;
        let mut last = summary(&daemon);
        let mut made = tokio::time::Instant::now();
        notify(&[NotifyState::Status(&last)]);
        loop {
            let n = tokio::select! {
                _ = stopping.cancelled() => return,
                n = notices.recv() => n,
            };
            match n {
                Ok(n) if !matches!(n.what, NoticeKind::Status | NoticeKind::Removed) => continue,
                Err(RecvError::Closed) => return,
                _ => {}
            }
            // A burst of changes (a thousand chambers due at once, or
            // registered one after another) is told once a second at most:
            // the line reads every chamber.
            tokio::select! {
                _ = stopping.cancelled() => return,
                () = tokio::time::sleep(STATUS_EVERY.saturating_sub(made.elapsed())) => {}
            }
            while !matches!(notices.try_recv(), Err(TryRecvError::Empty | TryRecvError::Closed)) {}
            let now = summary(&daemon);
            made = tokio::time::Instant::now();
            if now != last {
                notify(&[NotifyState::Status(&now)]);
                last = now;
            }
        }
    });
}
