//! Sleep and resume through logind (`org.freedesktop.login1.Manager` on the
//! system bus).
//!
//! While agent sessions run, cryod holds a `delay` inhibitor lock, so when the
//! machine is about to sleep (`PrepareForSleep(true)`) it can note it in each
//! running session's `cryo.log` before letting go. On resume
//! (`PrepareForSleep(false)`) every chamber re-plans at once and runs what
//! became due, with the delayed-wake notice. Without a system bus (containers)
//! cryod runs on; the wall-clock timer still sees a resume, only later.

use futures_util::StreamExt;
use tokio::sync::broadcast::error::RecvError;

use crate::daemon::Daemon;
use crate::services::runtime::NoticeKind;

#[zbus::proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1"
)]
trait Login1 {
    fn inhibit(&self, what: &str, who: &str, why: &str, mode: &str) -> zbus::Result<zbus::OwnedFd>;

    #[zbus(signal)]
    fn prepare_for_sleep(&self, start: bool) -> zbus::Result<()>;
}

/// Follows sleep and resume until shutdown.
pub fn follow(d: &Daemon) {
    let daemon = d.clone();
    tokio::spawn(async move {
        if let Err(e) = run(daemon).await {
            tracing::info!(error = %e, "no logind on a system bus: sleep and resume are seen from the wall clock only");
        }
    });
}

async fn run(daemon: Daemon) -> zbus::Result<()> {
    let conn = zbus::Connection::system().await?;
    let login = Login1Proxy::new(&conn).await?;
    let mut sleeps = login.receive_prepare_for_sleep().await?;
    let (mut notices, stopping) = (daemon.notices(), daemon.stopping());
    let mut lock: Option<zbus::OwnedFd> = None;
    let mut asleep = false;
    tracing::info!("following sleep and resume through logind");
    loop {
        // Hold the lock exactly while sessions run (and we are awake).
        let want = !asleep && daemon.slots().running > 0;
        if want && lock.is_none() {
            // The lock is one end of a pipe: no agent may inherit it.
            let why = "recording running agent sessions before sleep";
            match cryo_session::receive(login.inhibit("sleep", "cryod", why, "delay")).await {
                Some(Ok(fd)) => lock = Some(fd),
                Some(Err(error)) => tracing::warn!(%error, "logind refused a sleep inhibitor"),
                None => tracing::warn!("logind did not answer for a sleep inhibitor"),
            }
        } else if !want && lock.is_some() {
            lock = None;
        }
        tokio::select! {
            _ = stopping.cancelled() => return Ok(()),
            s = sleeps.next() => {
                let Some(signal) = s else { return Ok(()) };
                let start = signal.args().map(|a| a.start).unwrap_or(false);
                asleep = start;
                broadcast(&daemon, start);
                if start {
                    tracing::info!("the machine is going to sleep");
                    // Let it sleep: the log lines are written (the supervisors
                    // handle events in order), then the lock goes.
                    tokio::task::yield_now().await;
                    lock = None;
                } else {
                    tracing::info!(chambers = daemon.chamber_count(), "the machine woke up: re-planning every chamber");
                }
            }
            n = notices.recv() => match n {
                Ok(n) if !matches!(n.what, NoticeKind::Status) => {}
                Err(RecvError::Closed) => return Ok(()),
                _ => {}
            },
        }
    }
}

fn broadcast(daemon: &Daemon, sleeping: bool) {
    daemon.power(sleeping);
}
