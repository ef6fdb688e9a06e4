//! What the fronts (the hub, the gRPC services, the fleet's loops, the
//! service manager) read of the services the daemon holds, each by name:
//! the clock, `cryod.toml`, live notices and shutdown, the hub's address,
//! the session slots, the notifiers and the lease. The runtime itself is
//! never handed out, so no front reaches the store or a supervisor's parts
//! around the daemon's operations.

use std::path::Path;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::Daemon;
use crate::error::{Error, Result};
use crate::services::runtime::{HubInfo, Notice};

/// How this cryod follows chambers and ends sessions, as `Hello` tells.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Why the file watcher is degraded, if it is.
    pub watcher: Option<String>,
    /// How a session's process tree is ended (its cgroups, or why not).
    pub trees: String,
}

/// The session slots now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// Requests waiting for a permit, for whatever reason.
    pub queued: usize,
    /// Of those, the ones waiting for a slot (not for a held account).
    pub waiting: usize,
    pub running: usize,
    pub limit: usize,
}

impl Daemon {
    /// Now, by the daemon's clock (tests set it).
    pub fn now(&self) -> DateTime<Utc> {
        self.0.shared.clock.now()
    }

    /// `cryod.toml` as read at start.
    pub fn config(&self) -> &crate::config::Config {
        &self.0.shared.config
    }

    /// Where `cryod.toml` is (or would be), for messages that name it.
    pub fn config_file(&self) -> &Path {
        &self.0.shared.config_file
    }

    /// cryod's own state folder (the hub's token and invites, hook secrets).
    pub fn state_dir(&self) -> &Path {
        &self.0.shared.places.state_dir
    }

    /// The system's time zone now (for chambers that name none).
    pub fn system_zone(&self) -> chrono_tz::Tz {
        self.0.shared.system_zone.get()
    }

    pub fn setup(&self) -> Setup {
        let shared = &self.0.shared;
        Setup { watcher: shared.watcher.degraded().map(str::to_string), trees: shared.places.cgroups.describe() }
    }

    /// What happens in the chambers from now on (a slow reader is told it
    /// missed some).
    pub fn notices(&self) -> tokio::sync::broadcast::Receiver<Notice> {
        self.0.shared.notices()
    }

    /// Cancelled when cryod shuts down, for streams and loops to end with
    /// it; cancelling it stops nothing else.
    pub fn stopping(&self) -> CancellationToken {
        self.0.shared.shutdown.child_token()
    }

    /// Starts cryod's shutdown, as SIGTERM does (a drained node leaves).
    pub fn begin_shutdown(&self) {
        self.0.shared.shutdown.cancel();
    }

    /// Where the hub listens, or why it does not.
    pub fn hub(&self) -> HubInfo {
        self.0.shared.hub().cloned().unwrap_or_default()
    }

    /// `path` on the hub (`""` for its front page), or empty while the hub
    /// is not up.
    pub fn hub_link(&self, path: &str) -> String {
        self.0.shared.hub_link(path)
    }

    pub fn slots(&self) -> Slots {
        let admission = &self.0.shared.admission;
        let (queued, running, limit) = admission.depth();
        Slots { queued, waiting: admission.waiting_for_a_slot(), running, limit }
    }

    /// The provider accounts held at their limit now.
    pub fn holds(&self) -> Vec<crate::services::admission::Hold> {
        self.0.shared.admission.holds()
    }

    /// The `[[notify]]` notifiers: their log, and the devices subscribed
    /// to Web Push.
    pub fn notifiers(&self) -> &crate::services::notifier::Notifiers {
        &self.0.shared.notifiers
    }

    /// Sends a test notice through every notifier (or the one `only`
    /// names), and says how each delivery went.
    pub async fn notify_test(&self, only: Option<&str>) -> Result<Vec<crate::services::notifier::Delivery>> {
        let event = crate::services::notifier::Event {
            id: format!("test:{}", crate::base::random::hex(6)),
            kind: "test".into(),
            chamber: String::new(),
            title: "cryo: a test notice".into(),
            body: "`cryoctl notify test` sent this, to check that notices reach you.".into(),
            url: self.hub_link(""),
            at: self.now(),
            actions: Vec::new(),
        };
        self.notifiers().test(only, event, self.system_zone()).await.map_err(Error::from)
    }

    /// This node's trust in its fleet lease (always held on one machine).
    pub fn lease(&self) -> &crate::services::lease::Lease {
        &self.0.shared.lease
    }
}
