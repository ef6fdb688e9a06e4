//! What every supervisor and service shares: the store, the clock, the
//! config, admission, the scheduler, the file watcher and the live session
//! tokens.
//!
//! What several tasks change lives in a part that owns its lock and says
//! what its callers do ([`Tokens`], [`Names`], [`SystemZone`],
//! [`HandOffs`], [`TakeOnce`]): no caller takes a lock of `Shared`'s.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, RwLock};

use crate::base::clock::Clock;
use crate::base::scheduler::Scheduler;
use crate::config::Config;
use crate::services::admission::Admission;
use crate::services::watch::Watcher;
use crate::store::Store;
use chrono::{DateTime, Utc};
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
    /// One of the chamber's approval requests was asked or decided.
    Approval(Box<crate::store::ApprovalRecord>),
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

/// What the daemon and every supervisor hold. Its parts are the crate's,
/// not public: the fronts (hub, gRPC, fleet, service manager) never get a
/// `Shared`, and read what they need through the daemon's named reads. The
/// notices and the hub's address are reached only through the methods
/// below.
pub struct Shared {
    pub(crate) store: Store,
    /// This node's trust in its lease (always held on one machine).
    pub(crate) lease: crate::services::lease::Lease,
    pub(crate) clock: Clock,
    pub(crate) config: Config,
    /// Where `config` was read from (or would be: it may not exist).
    pub(crate) config_file: PathBuf,
    /// The system's zone, for chambers that name none.
    pub(crate) system_zone: SystemZone,
    pub(crate) admission: Admission,
    pub(crate) scheduler: Scheduler,
    pub(crate) watcher: Watcher,
    /// Live sessions by token.
    pub(crate) tokens: Tokens,
    /// Where sessions' doors are made (their connections go to the server
    /// `run` starts, which takes `door_rx`).
    pub(crate) doors: cryo_session::Doors,
    /// The process groups of running agents (the operator's socket refuses
    /// their processes).
    pub(crate) live: cryo_session::Live,
    /// The running sessions' cgroups, ended with them.
    pub(crate) trees: cryo_session::Trees,
    pub(crate) door_rx: TakeOnce<cryo_session::Incoming>,
    /// Where cryod's own things are (its state and config folders, the
    /// socket, `cryo-agent`): what agents must not reach, and what they must.
    pub(crate) places: cryo_session::Places,
    notices: tokio::sync::broadcast::Sender<Notice>,
    /// Cancelled when the daemon shuts down (streams end with it).
    pub(crate) shutdown: tokio_util::sync::CancellationToken,
    /// Where the hub listens (set once it is up).
    hub: std::sync::OnceLock<HubInfo>,
    /// What tokens cost, for agents whose CLI reports no cost.
    pub(crate) prices: std::sync::Arc<cryo_session::Prices>,
    /// The provider gateway known kinds reach their provider through.
    pub(crate) gateway: crate::gateway::Gateway,
    /// Where each wake's trace goes (nowhere without `[telemetry]`).
    pub(crate) otlp: crate::base::otlp::Exporter,
    /// The chambers `[[on_end]]` may name, and the links each names.
    pub(crate) names: Names,
    /// The notifiers of `[[notify]]`, and what they delivered.
    pub(crate) notifiers: crate::services::notifier::Notifiers,
    /// Hand-offs for the daemon to deliver.
    pub(crate) handoffs: HandOffs,
    /// Supervisors that panicked, for the daemon to start again.
    pub(crate) fallen: Jobs<Fallen>,
    /// Frozen chambers an event was sent to, for the daemon to boot again.
    pub(crate) thaws: Jobs<Thaw>,
    /// Chambers frozen (their supervisors freed), for the heaps' trim.
    pub(crate) freezes: std::sync::Arc<crate::base::memory::Waves>,
    /// When this cryod started (a thawed chamber's machine was "down"
    /// only before it).
    pub(crate) up_since: chrono::DateTime<chrono::Utc>,
    /// When the computer slept since (a thawed chamber's missed slots
    /// are told as the machine's sleep, not as cryod's).
    pub(crate) sleeps: Sleeps,
    /// Sessions waiting in place for a person's approval.
    pub(crate) approvals: crate::services::approvals::Waiting,
    /// The chambers' warnings while they boot, each said once.
    pub(crate) start_lines: crate::base::logline::Repeated,
    /// The next due times the last start read from the TODO lists, for
    /// this start's boots (open only while they run).
    pub(crate) kept: crate::chamber::rest::Kept,
}

/// The live sessions' tokens, each with the session it belongs to. A token
/// is admitted when its agent is spawned and forgotten when its session
/// ends, so a replayed token finds nothing. Locked only inside these
/// methods, each a moment: the agent service looks a token up on every call.
#[derive(Default)]
pub struct Tokens(Mutex<HashMap<String, TokenEntry>>);

impl Tokens {
    /// `token` is valid from now on, for the session `entry` names.
    pub fn admit(&self, token: String, entry: TokenEntry) {
        self.map().insert(token, entry);
    }

    /// The session `token` belongs to, while it runs.
    pub fn lookup(&self, token: &str) -> Option<TokenEntry> {
        self.map().get(token).cloned()
    }

    /// `token`'s session ended: it is worth nothing from now on.
    pub fn forget(&self, token: &str) {
        self.map().remove(token);
    }

    /// Every token of chamber `id` dies (its supervisor let it go).
    pub fn forget_chamber(&self, id: i64) {
        self.map().retain(|_, t| t.chamber != id);
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, TokenEntry>> {
        self.0.lock().expect("tokens lock")
    }
}

/// The names of the chambers cryod knows (those of other nodes of a fleet
/// too), which an `[[on_end]]` table may name, and each chamber's
/// `[[on_end]]` targets as its supervisor last read them (to name the loop
/// a hand-off closes). The daemon keeps the names; supervisors their links.
#[derive(Default)]
pub struct Names {
    known: RwLock<HashSet<String>>,
    links: RwLock<HashMap<String, Vec<String>>>,
    /// The chambers whose `cryo.toml` last named one cryod did not know:
    /// the ones to read it again when the names change (the rest need not
    /// be looked at, at any number of chambers).
    waiting: RwLock<HashSet<String>>,
}

impl Names {
    /// The registry's names are these now; whether that changed them.
    pub fn set_known(&self, names: HashSet<String>) -> bool {
        let mut known = self.known.write().expect("names lock");
        let changed = *known != names;
        *known = names;
        changed
    }

    /// One more name the registry knows; whether it is new. A chamber's
    /// registration adds its own name alone: rebuilding the whole set each
    /// time made adding the n-th chamber cost n (100,000 chambers could not
    /// be registered in an hour).
    pub fn add_known(&self, name: &str) -> bool {
        let mut known = self.known.write().expect("names lock");
        !known.contains(name) && known.insert(name.to_string())
    }

    /// Whether an `[[on_end]]` may name `chamber`: only a chamber cryod knows.
    pub fn may_name(&self, chamber: &str) -> bool {
        self.known.read().expect("names lock").contains(chamber)
    }

    /// Notes whether `chamber`'s `cryo.toml` waits on a name cryod does
    /// not know.
    pub fn waits(&self, chamber: &str, waits: bool) {
        let known = self.waiting.read().expect("waiting lock").contains(chamber);
        if known != waits {
            let mut waiting = self.waiting.write().expect("waiting lock");
            if waits {
                waiting.insert(chamber.to_string())
            } else {
                waiting.remove(chamber)
            };
        }
    }

    /// The chambers that wait on a name (see [`Names::waits`]).
    pub fn waiting(&self) -> HashSet<String> {
        self.waiting.read().expect("waiting lock").clone()
    }

    /// Notes `chamber`'s `[[on_end]]` targets (none forgets its links).
    pub fn link(&self, chamber: &str, targets: Vec<String>) {
        let mut links = self.links.write().expect("links lock");
        if targets.is_empty() {
            links.remove(chamber);
        } else {
            links.insert(chamber.to_string(), targets);
        }
    }

    /// Forgets a removed chamber's links, and that it waited on a name.
    pub fn unlink(&self, chamber: &str) {
        self.links.write().expect("links lock").remove(chamber);
        self.waiting.write().expect("waiting lock").remove(chamber);
    }

    /// The loop a hand-off from `from` to `to` closes, if the chambers'
    /// `[[on_end]]` links lead back.
    pub fn handoff_loop(&self, from: &str, to: &str) -> Option<Vec<String>> {
        let links = self.links.read().expect("links lock");
        let next = |c: &str| links.get(c).cloned().unwrap_or_default();
        cryo_core::chamber::handoff::loop_through(from, to, &next)
    }
}

/// The system's time zone, for chambers that name none: read by every
/// chamber, replaced when the system's zone changes.
pub struct SystemZone(RwLock<Tz>);

impl SystemZone {
    pub fn new(zone: Tz) -> SystemZone {
        SystemZone(RwLock::new(zone))
    }

    pub fn get(&self) -> Tz {
        *self.0.read().expect("zone lock")
    }

    /// The system's zone is `zone` now; whether that changed it.
    pub fn set(&self, zone: Tz) -> bool {
        let mut z = self.0.write().expect("zone lock");
        let changed = *z != zone;
        *z = zone;
        changed
    }
}

/// Something made with `Shared` that one task takes at start-up, once (a
/// channel's receiving end); the lock only hands it over.
pub struct TakeOnce<T>(Mutex<Option<T>>);

impl<T> TakeOnce<T> {
    pub fn new(value: T) -> TakeOnce<T> {
        TakeOnce(Mutex::new(Some(value)))
    }

    /// The value, to the first caller only.
    pub fn take(&self) -> Option<T> {
        self.0.lock().expect("take-once lock").take()
    }
}

/// A queue of jobs the supervisors hand the daemon: they send, the one
/// daemon task that takes the receiver does them (hand-offs, and the
/// supervisors that fell).
pub struct Jobs<T> {
    tx: tokio::sync::mpsc::UnboundedSender<T>,
    rx: TakeOnce<tokio::sync::mpsc::UnboundedReceiver<T>>,
}

impl<T> Jobs<T> {
    fn new() -> Jobs<T> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Jobs { tx, rx: TakeOnce::new(rx) }
    }

    /// Queues `job`; gives it back if nobody does them any more (cryod is
    /// stopping).
    pub fn send(&self, job: T) -> Result<(), Box<T>> {
        self.tx.send(job).map_err(|e| Box::new(e.0))
    }

    /// The receiving end, for the task that does them (once).
    pub fn take_receiver(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<T>> {
        self.rx.take()
    }
}

/// The computer's recent sleeps: from, and until (none while asleep).
#[derive(Default)]
pub struct Sleeps(Mutex<std::collections::VecDeque<Slept>>);

/// A sleep of the computer: from, and until (none while asleep).
pub type Slept = (DateTime<Utc>, Option<DateTime<Utc>>);

/// A frozen chamber an event was sent to, for the daemon to boot again on
/// its queue: the receiver as the supervisor froze it (whose type is the
/// supervisor's, so held opaque here).
pub struct Thaw {
    pub chamber: i64,
    pub frozen: Box<dyn std::any::Any + Send>,
}

impl Sleeps {
    /// Sleeps kept: a chamber's machine keeps no more spans than this.
    const KEPT: usize = 16;

    /// The computer goes to sleep (`sleeping`) or woke up, at `at`.
    pub fn power(&self, sleeping: bool, at: DateTime<Utc>) {
        let mut list = self.0.lock().expect("sleeps lock");
        match (sleeping, list.back_mut()) {
            (false, Some((_, end @ None))) => *end = Some(at),
            (false, _) => {}
            (true, Some((_, None))) => {}
            (true, _) => {
                if list.len() == Self::KEPT {
                    list.pop_front();
                }
                list.push_back((at, None));
            }
        }
    }

    pub fn list(&self) -> Vec<Slept> {
        self.0.lock().expect("sleeps lock").iter().copied().collect()
    }
}

/// The chambers' hand-offs (`[[on_end]]`), delivered by the daemon.
pub type HandOffs = Jobs<HandOffJob>;

/// A chamber whose supervisor panicked: the daemon ends what it left
/// running and starts it again (`Daemon::mend_fallen`).
#[derive(Debug)]
pub struct Fallen {
    pub chamber: i64,
    /// The panic's message.
    pub why: String,
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

/// Set to `0` in cryod's environment, keeps sessions out of cgroups of
/// their own even where cryod could make them (their keepers alone end
/// their trees): a test of that way, as root.
pub const CGROUPS_OVERRIDE: &str = "CRYO_SESSION_CGROUPS";

/// Where sessions' cgroups go, found once at start-up.
fn session_cgroups(state_dir: &std::path::Path) -> cryo_session::Cgroups {
    if std::env::var(CGROUPS_OVERRIDE).is_ok_and(|v| v == "0") {
        return cryo_session::Cgroups::none(&format!("{CGROUPS_OVERRIDE}=0"));
    }
    let cgroups = cryo_session::Cgroups::find(state_dir);
    tracing::info!(tree = %cgroups.describe(), "a session's process tree ends by");
    cgroups
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
        lease: crate::services::lease::Lease,
    ) -> std::sync::Arc<Shared> {
        let (socket, state_dir) = (paths.socket.clone(), paths.state_dir.clone());
        let config_file = std::path::absolute(&paths.config_file).unwrap_or_else(|_| paths.config_file.clone());
        let config_dir = config_file.parent().map(PathBuf::from).unwrap_or_else(|| config_file.clone());
        if let Err(error) = crate::chamber::mailbox::use_seal_key(&state_dir) {
            tracing::warn!(%error, "no seal key: cryod's own outbox messages cannot be told from forgeries");
        }
        let socket_dir = socket.parent().map(PathBuf::from).unwrap_or_default();
        let admission = Admission::new(
            config.session_limit(),
            config.providers.iter().filter_map(|(n, p)| Some((n.clone(), p.max_concurrent?))).collect(),
        );
        // Every hold is kept in the store, for the next start.
        let (kept_clock, kept_store) = (clock.clone(), store.clone());
        admission.keep_holds(std::sync::Arc::new(move |account, left, guessed, source| {
            let until = kept_clock.now() + chrono::Duration::from_std(left).unwrap_or(chrono::Duration::zero());
            let hold = crate::store::HoldRecord {
                account: account.to_string(),
                until,
                source: source.unwrap_or_default().to_string(),
                guessed,
            };
            let store = kept_store.clone();
            tokio::spawn(async move {
                if let Err(error) = store.set_hold(hold).await {
                    tracing::warn!(%error, "cannot keep a provider's hold");
                }
            });
        }));
        let (doors, door_rx) = cryo_session::Doors::new(socket_dir.join("a"));
        std::sync::Arc::new(Shared {
            config_file,
            names: Default::default(),
            notifiers: crate::services::notifier::Notifiers::new(&config.notify, clock.clone(), state_dir.clone()),
            handoffs: HandOffs::new(),
            fallen: Jobs::new(),
            thaws: Jobs::new(),
            freezes: Default::default(),
            up_since: clock.now(),
            sleeps: Default::default(),
            approvals: Default::default(),
            start_lines: Default::default(),
            kept: Default::default(),
            doors,
            live: Default::default(),
            door_rx: TakeOnce::new(door_rx),
            lease,
            admission,
            scheduler: Scheduler::start(clock.clone(), shutdown.clone()),
            watcher: Watcher::start(),
            tokens: Default::default(),
            system_zone: SystemZone::new(crate::base::clock::system_zone()),
            places: cryo_session::Places {
                socket,
                agent_bin: cryo_session::agent_bin_dir(),
                cgroups: session_cgroups(&state_dir),
                grace: std::time::Duration::from_secs(config.stop_grace_seconds),
                state_dir,
                config_dir,
            },
            trees: Default::default(),
            notices: tokio::sync::broadcast::channel(4096).0,
            shutdown,
            hub: Default::default(),
            prices: std::sync::Arc::new(cryo_session::Prices::new(&config.prices)),
            gateway: crate::gateway::Gateway::new(clock.clone()),
            otlp: crate::base::otlp::Exporter::start(config.telemetry.otlp_endpoint.as_deref(), clock.clone()),
            store,
            clock,
            config,
        })
    }

    pub fn notify(&self, chamber: i64, what: NoticeKind) {
        let _ = self.notices.send(Notice { chamber, what });
    }

    /// The notices sent from now on.
    pub fn notices(&self) -> tokio::sync::broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    /// Where the hub listens, once it is up (or why it is not).
    pub fn hub(&self) -> Option<&HubInfo> {
        self.hub.get()
    }

    /// Notes where the hub listens (once: a later call changes nothing).
    pub fn set_hub(&self, info: HubInfo) {
        let _ = self.hub.set(info);
    }

    /// `path` on the hub (`""` for its front page, `#/c/NAME` for a
    /// chamber's), or empty while the hub is not up.
    pub fn hub_link(&self, path: &str) -> String {
        match self.hub.get() {
            Some(h) if h.up => format!("{}{path}", h.url),
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(chamber: i64, session: u64) -> TokenEntry {
        TokenEntry { chamber, name: format!("c{chamber}"), session }
    }

    #[test]
    fn a_token_is_worth_something_only_between_admit_and_forget() {
        let tokens = Tokens::default();
        assert!(tokens.lookup("t").is_none(), "never issued");
        tokens.admit("t".into(), entry(1, 7));
        tokens.admit("u".into(), entry(1, 8));
        tokens.admit("v".into(), entry(2, 1));
        assert_eq!(tokens.lookup("t").map(|e| e.session), Some(7));
        tokens.forget("t");
        assert!(tokens.lookup("t").is_none(), "its session ended");
        tokens.forget_chamber(1);
        assert!(tokens.lookup("u").is_none(), "its chamber was let go");
        assert_eq!(tokens.lookup("v").map(|e| e.chamber), Some(2), "another chamber's stays");
    }

    #[test]
    fn names_say_what_may_be_named_and_links_close_loops() {
        let names = Names::default();
        assert!(names.set_known(["a".to_string(), "b".to_string()].into()));
        assert!(!names.set_known(["b".to_string(), "a".to_string()].into()), "the same names");
        assert!(names.may_name("a") && !names.may_name("z"));
        names.link("a", vec!["b".into()]);
        names.link("b", vec!["a".into()]);
        assert!(names.handoff_loop("a", "b").is_some());
        names.link("b", Vec::new());
        assert!(names.handoff_loop("a", "b").is_none(), "no targets: no links");
        names.link("b", vec!["a".into()]);
        names.waits("b", true);
        names.unlink("b");
        assert!(names.waiting().is_empty(), "a removed chamber waits on no name");
        assert!(names.handoff_loop("a", "b").is_none(), "a removed chamber's links go");
    }

    #[test]
    fn the_system_zone_says_whether_it_changed() {
        let zone = SystemZone::new(chrono_tz::UTC);
        assert!(!zone.set(chrono_tz::UTC));
        assert!(zone.set(chrono_tz::Europe::Paris));
        assert_eq!(zone.get(), chrono_tz::Europe::Paris);
    }

    #[test]
    fn a_take_once_value_goes_to_the_first_taker() {
        let once = TakeOnce::new(5);
        assert_eq!(once.take(), Some(5));
        assert_eq!(once.take(), None);
    }
}
