//! The daemon's own life beside its chambers: the heartbeat and the
//! running marker, hand-offs between chambers, the system's time zone,
//! sleep, and shutdown.

use tokio::sync::oneshot;

use super::*;
use crate::supervisor::Event;

impl Daemon {
    /// `[heartbeat]`: pings the monitor every interval while the store
    /// answers (a cryod that cannot reach its store is not healthy).
    pub(super) fn heartbeat(&self) {
        let Some(hb) = self.0.shared.config.heartbeat.clone() else { return };
        let every = hb.every().expect("checked when the config was read");
        self.every(tokio::time::Instant::now(), every, move |d| {
            let url = hb.url.clone();
            async move {
                let shared = &d.0.shared;
                match shared.store.last_session_number(0).await {
                    Ok(_) => {
                        if let Err(error) = shared.notifiers.ping(&url).await {
                            tracing::warn!(%error, "the heartbeat's monitor did not take the ping");
                        }
                    }
                    Err(error) => tracing::warn!(%error, "the store does not answer: no heartbeat"),
                }
            }
        });
    }

    /// Runs `job` at `first`, then every `period` (a late tick is run once,
    /// not caught up), until cryod shuts down or is dropped.
    pub(super) fn every<F, Fut>(&self, first: tokio::time::Instant, period: std::time::Duration, job: F)
    where
        F: Fn(Daemon) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let weak = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(first, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.shared.shutdown.is_cancelled() {
                    return;
                }
                job(Daemon(inner)).await;
            }
        });
    }

    /// Marks cryod running until a clean stop; a mark found at start means
    /// the last one did not stop cleanly: the `daemon` event says so.
    pub(super) fn mark_running(&self) {
        let shared = &self.0.shared;
        let marker = running_marker(shared);
        if let Ok(was) = std::fs::read_to_string(&marker) {
            let at = self.0.started_at;
            let body = format!(
                "The cryod that started at {} did not stop cleanly (killed, crashed, or the machine lost power). Sessions it left open were recovered; see `cryoctl chamber list`.",
                was.trim()
            );
            let event = crate::services::notifier::Event {
                id: format!("daemon:unclean:{}", at.timestamp_millis()),
                kind: "daemon".into(),
                chamber: String::new(),
                title: "cryod started after an unclean stop".into(),
                body,
                url: shared.hub_link(""),
                at,
                actions: Vec::new(),
            };
            shared.notifiers.notify(event, shared.system_zone.get());
        }
        if let Err(e) = std::fs::write(&marker, crate::base::clock::rfc3339(self.0.started_at)) {
            tracing::warn!(error = %e, file = %marker.display(), "cannot mark cryod running");
        }
    }

    /// Delivers the chambers' hand-offs (`[[on_end]]`), each as an
    /// operator's message from its chamber, wherever the other chamber
    /// runs; the sender hears how it went.
    pub(super) fn deliver_handoffs(&self) {
        let Some(mut rx) = self.0.shared.handoffs.take_receiver() else { return };
        let daemon = Arc::downgrade(&self.0);
        let shutdown = self.0.shared.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let job = tokio::select! {
                    job = rx.recv() => job,
                    () = shutdown.cancelled() => None,
                };
                let (Some(job), Some(inner)) = (job, daemon.upgrade()) else { break };
                tokio::spawn(Daemon(inner).hand_off(job));
            }
        });
    }

    pub(super) async fn hand_off(self, job: crate::services::runtime::HandOffJob) {
        let h = job.handoff;
        let sent = self.send(&ChamberRef::Name(h.to.clone()), &job.from, &h.subject, &h.body).await;
        tracing::info!(from = %job.from, to = %h.to, session = h.session, ok = sent.is_ok(), "hand-off");
        let result = sent
            .map(|d| cryo_core::chamber::handoff::HandedOff { file: d.file, waits: d.waits, looped: job.looped })
            .map_err(cryo_core::chamber::Failed::of);
        if let Ok(handle) = self.handle_of(job.from_id).await {
            let _ = handle.tx.send(Event::HandedOff { to: h.to, session: h.session, result });
        }
    }

    /// Watches the system's time zone; when it changes, every chamber
    /// re-plans in the new zone.
    pub(super) fn follow_the_system_zone(&self) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        crate::services::zone::follow(move || {
            let _ = tx.send(());
        });
        let weak = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            while rx.recv().await.is_some() {
                let Some(inner) = weak.upgrade() else { return };
                let zone = crate::base::clock::system_zone();
                if inner.shared.system_zone.set(zone) {
                    tracing::info!(zone = zone.name(), "the system's time zone changed");
                    for e in inner.chambers.read().expect("registry lock").values() {
                        let _ = e.handle.tx.send(Event::ZoneChanged);
                    }
                }
            }
        });
    }

    /// Tells every chamber the machine goes to sleep (or woke up); a
    /// frozen one hears of it when it thaws.
    pub fn power(&self, sleeping: bool) {
        self.0.shared.sleeps.power(sleeping, self.0.shared.clock.now());
        for e in self.chambers().values() {
            let _ = e.handle.tx.send_unless_frozen(Event::Power { sleeping });
        }
    }

    /// Ends every running session and stops every supervisor.
    pub async fn shutdown(&self) {
        // The loader stops at its batch's end: none boots after this. What
        // the boots read is written before the stop (else the next start
        // reads every chamber again).
        self.all_loaded().await;
        self.rest_saved().await;
        let handles: Vec<Handle> = self.chambers().values().map(|e| e.handle.clone()).collect();
        let mut waits = Vec::new();
        for h in handles {
            let (tx, rx) = oneshot::channel();
            // A frozen chamber has nothing to end.
            if let Ok(None) = h.tx.send_unless_frozen(Event::Shutdown(tx)) {
                waits.push(rx);
            }
        }
        for w in waits {
            let _ = w.await;
        }
        // A clean stop: the next start is not an unclean one.
        let _ = std::fs::remove_file(running_marker(&self.0.shared));
    }
}
