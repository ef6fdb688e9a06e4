//! What every supervisor and service shares: the store, the clock, the
//! config, admission, the scheduler, the file watcher and the live session
//! tokens.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::admission::Admission;
use crate::clock::Clock;
use crate::config::Config;
use crate::scheduler::Scheduler;
use crate::store::Store;
use crate::watch::Watcher;
use chrono_tz::Tz;

/// Something that happened in a chamber, for live views (follow streams,
/// the hub). Sent on a broadcast channel: a slow reader may miss notices and
/// is told so (it then re-reads the files); nothing depends on them.
#[derive(Clone, Debug)]
pub struct Notice {
    pub chamber: i64,
    pub what: NoticeKind,
}

#[derive(Clone, Debug)]
pub enum NoticeKind {
    /// A line appended to `cryo.log`.
    Log(String),
    /// A message file appeared.
    Message { folder: crate::chamber::mailbox::Folder, name: String },
    /// The chamber's snapshot changed.
    Status,
    /// The chamber was unregistered.
    Removed,
}

/// The session a token belongs to.
#[derive(Clone)]
pub struct TokenEntry {
    pub chamber: i64,
    pub name: String,
    pub session: u64,
}

/// Where the hub listens, once it is up (or why it is not).
#[derive(Clone, Debug, Default)]
pub struct HubInfo {
    pub url: String,
    pub token: String,
    pub up: bool,
    pub error: Option<String>,
    /// Something the user should know though it is up (it moved port).
    pub note: Option<String>,
}

pub struct Shared {
    pub store: Store,
    /// This node's trust in its lease (always held on one machine).
    pub lease: crate::lease::Lease,
    pub clock: Clock,
    pub config: Config,
    /// The system's zone, for chambers that name none; updated when the
    /// system's zone changes.
    pub system_tz: std::sync::RwLock<Tz>,
    pub admission: Admission,
    pub scheduler: Scheduler,
    pub watcher: Watcher,
    /// Live sessions by token. A token is added when its agent is spawned and
    /// removed when its session ends, so a replayed token finds nothing.
    pub tokens: Mutex<HashMap<String, TokenEntry>>,
    /// Where sessions' doors are made (their connections go to the server
    /// `run` starts, which takes `door_rx`).
    pub doors: crate::agent::door::Doors,
    /// The process groups of running agents (the operator's socket refuses
    /// their processes).
    pub live: crate::agent::group::Live,
    pub door_rx: Mutex<Option<crate::agent::door::Incoming>>,
    /// Where cryod's own things are (its state and config folders, the
    /// socket, `cryo-agent`): what agents must not reach, and what they must.
    pub places: crate::agent::launch::Places,
    pub notices: tokio::sync::broadcast::Sender<Notice>,
    /// Cancelled when the daemon shuts down (streams end with it).
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Where the hub listens (set once it is up).
    pub hub: std::sync::OnceLock<HubInfo>,
    /// What tokens cost, for agents whose CLI reports no cost.
    pub prices: std::sync::Arc<crate::agent_events::Prices>,
    /// The names of the chambers cryod knows (those of other nodes of a
    /// fleet too): an `[[on_end]]` table may name only these.
    pub names: std::sync::RwLock<std::collections::HashSet<String>>,
    /// Each chamber's `[[on_end]]` targets, as its supervisor last read
    /// them (to name the loop a hand-off closes).
    pub links: std::sync::RwLock<HashMap<String, Vec<String>>>,
    /// The notifiers of `[[notify]]`, and what they delivered.
    pub notifiers: crate::notifier::Notifiers,
    /// Hand-offs for the daemon to deliver (it takes the receiver).
    pub handoffs: tokio::sync::mpsc::UnboundedSender<HandOffJob>,
    pub handoff_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<HandOffJob>>>,
}

/// A hand-off on its way: chamber `from` (its id and name) hands a
/// session's end on to another chamber's inbox.
#[derive(Debug)]
pub struct HandOffJob {
    pub from_id: i64,
    pub from: String,
    pub handoff: cryo_core::chamber::handoff::HandOff,
    pub looped: Option<Vec<String>>,
}

impl Shared {
    /// The daemon's services, started: the scheduler's timer and the file
    /// watcher run from here on.
    pub fn start(
        config: Config,
        store: Store,
        clock: Clock,
        shutdown: tokio_util::sync::CancellationToken,
        paths: &cryo_proto::paths::Paths,
        lease: crate::lease::Lease,
    ) -> std::sync::Arc<Shared> {
        let (socket, state_dir) = (paths.socket.clone(), paths.state_dir.clone());
        let config_file = std::path::absolute(&paths.config_file).unwrap_or_else(|_| paths.config_file.clone());
        let config_dir = config_file.parent().map(PathBuf::from).unwrap_or(config_file);
        let (handoffs, handoff_rx) = tokio::sync::mpsc::unbounded_channel();
        if let Err(error) = crate::chamber::mailbox::use_seal_key(&state_dir) {
            tracing::warn!(%error, "no seal key: cryod's own outbox messages cannot be told from forgeries");
        }
        let socket_dir = socket.parent().map(PathBuf::from).unwrap_or_default();
        let (doors, door_rx) = crate::agent::door::Doors::new(socket_dir.join("a"));
        std::sync::Arc::new(Shared {
            names: Default::default(),
            notifiers: crate::notifier::Notifiers::new(&config.notify, clock.clone(), state_dir.clone()),
            links: Default::default(),
            handoffs,
            handoff_rx: Mutex::new(Some(handoff_rx)),
            doors,
            live: Default::default(),
            door_rx: Mutex::new(Some(door_rx)),
            lease,
            admission: Admission::new(
                config.max_concurrent_sessions,
                config.providers.iter().filter_map(|(n, p)| Some((n.clone(), p.max_concurrent?))).collect(),
            ),
            scheduler: Scheduler::start(clock.clone(), shutdown.clone()),
            watcher: Watcher::start(),
            tokens: Default::default(),
            system_tz: std::sync::RwLock::new(crate::clock::system_zone()),
            places: crate::agent::launch::Places {
                socket,
                agent_bin: crate::agent::kinds::agent_bin_dir(),
                state_dir,
                config_dir,
            },
            notices: tokio::sync::broadcast::channel(4096).0,
            shutdown,
            hub: Default::default(),
            prices: std::sync::Arc::new(crate::agent_events::Prices::new(&config.prices)),
            store,
            clock,
            config,
        })
    }

    pub fn notify(&self, chamber: i64, what: NoticeKind) {
        let _ = self.notices.send(Notice { chamber, what });
    }

    /// The loop a hand-off from `from` to `to` closes, if the chambers'
    /// `[[on_end]]` links lead back.
    pub fn handoff_loop(&self, from: &str, to: &str) -> Option<Vec<String>> {
        let links = self.links.read().expect("links lock");
        let next = |c: &str| links.get(c).cloned().unwrap_or_default();
        cryo_core::chamber::handoff::loop_through(from, to, &next)
    }

    /// `path` on the hub (`""` for its front page, `#/c/NAME` for a
    /// chamber's), or empty while the hub is not up.
    pub fn hub_link(&self, path: &str) -> String {
        match self.hub.get() {
            Some(h) if h.up => format!("{}{path}", h.url),
            _ => String::new(),
        }
    }

    pub fn system_tz(&self) -> Tz {
        *self.system_tz.read().expect("zone lock")
    }
}
