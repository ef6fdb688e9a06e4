//! The daemon's shared state and the operations every front end calls.
//!
//! [`Daemon`] is a cheap handle. The gRPC services and the hub call the same
//! methods here, so there is one implementation of each operation.

pub mod approvals;
mod history;
mod hooks;
mod life;
mod loading;
mod mend;
pub use crate::base::memory::hold_mmap_threshold;
mod moves;
pub use self::moves::{FleetNodes, FleetStatus};
mod ops;
pub use self::ops::Snooze;
mod registry;
pub mod remote;
pub mod schedule;
mod seed;
mod services;
mod thaw;
pub use self::services::{Setup, Slots};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use chrono::{DateTime, Utc};

use crate::chamber::scaffold;
use crate::error::{Error, Result};
use crate::services::runtime::Shared;
use crate::store::ChamberRecord;
use crate::supervisor::{Handle, Snapshot};

pub use crate::supervisor::State;

/// How an operator names a chamber.
#[derive(Debug, Clone)]
pub enum ChamberRef {
    Name(String),
    /// An absolute path: the chamber folder or any folder inside it.
    Path(PathBuf),
}

/// A chamber as cryod sees it now: its registry record and its supervisor's
/// latest snapshot.
#[derive(Debug, Clone)]
pub struct ChamberView {
    pub record: ChamberRecord,
    pub snap: Snapshot,
}

struct Entry {
    record: ChamberRecord,
    handle: Handle,
}

/// The chambers this node runs, by id, and which has a name or runs in a
/// folder: a registration asks whether its folder is registered, and each
/// `status` or `start` names one. At 100,000 chambers comparing every path
/// was a third of a registration's cost, and every name 87% of a start's.
/// Read through `Deref`; changed only here, so the indexes stay true.
#[derive(Default)]
struct Chambers {
    by_id: BTreeMap<i64, Entry>,
    by_path: Index,
    by_name: Index,
}

/// Chambers by a hash of one of their strings (not the string again: 16
/// bytes a chamber), and the rare chamber whose hash another has.
#[derive(Default)]
struct Index {
    first: std::collections::HashMap<u64, i64>,
    collided: Vec<i64>,
}

impl Index {
    fn key(s: &str) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        s.hash(&mut h);
        h.finish()
    }

    fn add(&mut self, id: i64, s: &str) {
        match self.first.entry(Self::key(s)) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(id);
            }
            std::collections::hash_map::Entry::Occupied(_) => self.collided.push(id),
        }
    }

    /// Takes chamber `id` (whose string was `s`) out; `of` gives another
    /// chamber's string, for a collided one to take its place.
    fn remove<'a>(&mut self, id: i64, s: &str, of: impl Fn(i64) -> Option<&'a str>) {
        let key = Self::key(s);
        if self.first.get(&key) == Some(&id) {
            self.first.remove(&key);
            if let Some(i) = self.collided.iter().position(|c| of(*c).is_some_and(|x| Self::key(x) == key)) {
                self.first.insert(key, self.collided.swap_remove(i));
            }
        } else {
            self.collided.retain(|c| *c != id);
        }
    }

    /// The chambers whose string may be `s` (to be compared).
    fn candidates(&self, s: &str) -> impl Iterator<Item = i64> + '_ {
        self.first.get(&Self::key(s)).copied().into_iter().chain(self.collided.iter().copied())
    }
}

impl Chambers {
    fn insert(&mut self, id: i64, entry: Entry) {
        self.remove(&id);
        self.by_path.add(id, &entry.record.path);
        self.by_name.add(id, &entry.record.name);
        self.by_id.insert(id, entry);
    }

    fn remove(&mut self, id: &i64) -> Option<Entry> {
        let Chambers { by_id, by_path, by_name } = self;
        let entry = by_id.remove(id)?;
        by_path.remove(*id, &entry.record.path, |c| by_id.get(&c).map(|e| e.record.path.as_str()));
        by_name.remove(*id, &entry.record.name, |c| by_id.get(&c).map(|e| e.record.name.as_str()));
        Some(entry)
    }

    /// The chamber whose folder is `path`.
    fn at_path(&self, path: &str) -> Option<&Entry> {
        self.by_path.candidates(path).filter_map(|id| self.by_id.get(&id)).find(|e| e.record.path == path)
    }

    /// The chamber named `name`.
    fn named(&self, name: &str) -> Option<&Entry> {
        self.by_name.candidates(name).filter_map(|id| self.by_id.get(&id)).find(|e| e.record.name == name)
    }
}

impl std::ops::Deref for Chambers {
    type Target = BTreeMap<i64, Entry>;

    fn deref(&self) -> &Self::Target {
        &self.by_id
    }
}

impl Entry {
    /// The registry's entry for a chamber its supervisor now runs. What
    /// only its boot reads (the accepted settings, the health record: the
    /// supervisor holds them from then on) is not kept twice: at 100,000
    /// chambers that was a kilobyte each.
    fn new(mut record: ChamberRecord, handle: Handle) -> Entry {
        record.trusted = None;
        record.health = None;
        Entry { record, handle }
    }

    fn view(&self) -> ChamberView {
        let mut record = self.record.clone();
        // The supervisor owns the desired state once running.
        record.desired = match self.handle.snapshot.borrow().view.state {
            State::Stopped => crate::store::Desired::Stopped,
            State::Idle | State::Running | State::Paused | State::AwaitingApproval | State::Held => {
                crate::store::Desired::Started
            }
            State::Faulted => record.desired,
        };
        ChamberView { record, snap: self.handle.snapshot.borrow().clone() }
    }
}

/// A chamber this node runs, as the ownership round sees it.
pub struct Local {
    pub fence: crate::store::Fence,
    /// A session runs now.
    pub running: bool,
    /// The node the chamber prefers.
    pub home: Option<String>,
}

/// The daemon: shared services and the registered chambers.
#[derive(Clone)]
pub struct Daemon(Arc<Inner>);

struct Inner {
    shared: Arc<Shared>,
    started_at: DateTime<Utc>,
    chambers: RwLock<Chambers>,
    /// The chambers other nodes of the fleet own (or no node does yet), as
    /// the database last said.
    remote: RwLock<BTreeMap<i64, ChamberRecord>>,
    /// Held while a chamber starts running here (added, or taken up).
    starting: tokio::sync::Mutex<()>,
    /// Chambers being handed over to another node now.
    leaving: std::sync::Mutex<std::collections::HashSet<i64>>,
    /// Chambers other nodes run whose inboxes this node watches for them.
    remote_watched: std::sync::Mutex<std::collections::HashSet<i64>>,
    /// What each chamber's wakes were last laid out from.
    schedule_memo: schedule::Memo,
    /// The chambers not booted yet (the socket serves before the last is).
    loading: loading::Loading,
}

/// What `add` did.
pub struct Added {
    pub view: ChamberView,
    pub already_registered: bool,
    pub init: Option<scaffold::Scaffolded>,
}

/// Chambers booted at once when cryod starts.
const BOOT_BATCH: usize = 64;

impl Daemon {
    /// The chambers this node runs. Taken before [`Daemon::remote`] when
    /// both are (never the other way round).
    fn chambers(&self) -> RwLockReadGuard<'_, Chambers> {
        self.0.chambers.read().expect("registry lock")
    }

    fn chambers_mut(&self) -> RwLockWriteGuard<'_, Chambers> {
        self.0.chambers.write().expect("registry lock")
    }

    /// The chambers other nodes of the fleet run, as the database last said.
    fn remote(&self) -> RwLockReadGuard<'_, BTreeMap<i64, ChamberRecord>> {
        self.0.remote.read().expect("registry lock")
    }

    fn remote_mut(&self) -> RwLockWriteGuard<'_, BTreeMap<i64, ChamberRecord>> {
        self.0.remote.write().expect("registry lock")
    }

    /// Loads the registry and starts a supervisor for every chamber (on one
    /// machine; a fleet node starts with none and claims its share).
    pub async fn load(shared: Arc<Shared>) -> Result<Daemon> {
        let started_at = shared.clock.now();
        // What the last start kept of each chamber at rest, read (a few
        // megabytes of JSON at 10,000 chambers) while the registry is.
        let kept = (!shared.lease.is_fleet()).then(|| {
            let shared = shared.clone();
            tokio::task::spawn_blocking(move || {
                shared.kept.open(shared.places.state_dir.join(crate::chamber::rest::FILE))
            })
        });
        let records = shared.store.chambers().await?;
        // `[[on_end]]` may name any of them: known before the first boot.
        shared.names.set_known(records.iter().map(|r| r.name.clone()).collect());
        let mut remote = BTreeMap::new();
        // The providers' holds a stopped cryod kept: not one wake of a held
        // account runs before the provider said.
        let now = shared.clock.now();
        for h in shared.store.holds().await.unwrap_or_default() {
            if let Ok(left) = (h.until - now).to_std() {
                let source = Some(h.source).filter(|s| !s.is_empty());
                shared.admission.restore(&h.account, left, h.guessed, source);
            }
        }
        // Every session tree a killed cryod of this state folder left in
        // its cgroups ends now (none is running as this cryod's).
        let ended = shared.places.cgroups.end_all();
        if ended > 0 {
            tracing::warn!(trees = ended, "ended the session trees a stopped cryod left");
        }
        let mut loading = loading::Loading::none();
        if shared.lease.is_fleet() {
            remote = records.into_iter().map(|r| (r.id, r)).collect();
            tracing::info!("registry loaded; claiming this node's share of the fleet's chambers");
        } else {
            // Sessions that were running when cryod died, and what still runs
            // of them, are handed to their chambers' supervisors to finish.
            let all = shared.store.open_sessions(None).await?;
            if !all.is_empty() {
                tracing::warn!(sessions = all.len(), "recovering sessions left open by a stopped cryod");
            }
            let processes = end_leftovers(&shared, &all).await;
            let mut open: std::collections::HashMap<i64, Vec<crate::store::OpenSession>> = Default::default();
            for s in all {
                open.entry(s.chamber_id).or_default().push(s);
            }
            // Booted after this returns, while the socket serves
            // (`loading`), each from the next due time its TODO list gave
            // the last start if its files are still those versions.
            if let Some(kept) = kept {
                let _ = kept.await;
            }
            loading = loading::Loading::of(records, open, processes);
        }
        let daemon = Daemon(Arc::new(Inner {
            shared,
            started_at,
            chambers: RwLock::new(Chambers::default()),
            remote: RwLock::new(remote),
            starting: Default::default(),
            leaving: Default::default(),
            remote_watched: Default::default(),
            schedule_memo: Default::default(),
            loading,
        }));
        daemon.follow_the_system_zone();
        daemon.deliver_handoffs();
        daemon.mend_fallen();
        daemon.thaw_frozen();
        daemon.trim_after_waves();
        daemon.mark_running();
        daemon.heartbeat();
        daemon.prune_daily();
        // The strongest sandbox is asked once (bubblewrap is run to see):
        // off the workers, before a client asks.
        tokio::task::spawn_blocking(cryo_session::Sandbox::strongest);
        tokio::spawn(daemon.clone().boot_all());
        Ok(daemon)
    }

    pub fn started_at(&self) -> DateTime<Utc> {
        self.0.started_at
    }

    /// The chambers this node runs, those still loading included.
    pub fn chamber_count(&self) -> usize {
        self.chambers().len() + self.loading()
    }

    /// The chambers this node runs.
    pub fn local(&self) -> Vec<Local> {
        self.chambers()
            .values()
            .map(|e| Local {
                fence: e.record.fence(),
                running: e.handle.snapshot.borrow().view.in_session,
                home: e.record.home.clone(),
            })
            .collect()
    }

    /// A chamber's view by its id (for notices).
    pub fn view_by_id(&self, id: i64) -> Option<ChamberView> {
        self.view_of(id)
    }

    fn view_of(&self, id: i64) -> Option<ChamberView> {
        let local = self.chambers().get(&id).map(Entry::view);
        let waiting = || self.0.loading.pending().get(&id).map(remote_view);
        local.or_else(|| self.remote().get(&id).map(remote_view)).or_else(waiting)
    }

    /// Whether this node runs the chamber.
    pub fn runs(&self, id: i64) -> bool {
        self.chambers().contains_key(&id)
    }

    /// Whether another node of the fleet runs the chamber (an operation on
    /// it is sent to that node).
    fn elsewhere(&self, v: &ChamberView) -> bool {
        self.0.shared.store.fleet().is_some() && !self.runs(v.record.id)
    }

    fn handle_now(&self, id: i64) -> Result<Handle> {
        if let Some(h) = self.chambers().get(&id).map(|e| e.handle.clone()) {
            return Ok(h);
        }
        match self.remote().get(&id) {
            Some(r) => Err(Error::Precondition(format!(
                "chamber {:?} is run by another node of the fleet ({}): run this on that node",
                r.name,
                r.owner.as_deref().unwrap_or("none yet; it is being taken over")
            ))),
            None => Err(Error::NotFound("the chamber was removed".into())),
        }
    }

    /// The state of each chamber this node runs.
    pub fn local_states(&self) -> Vec<State> {
        self.chambers().values().map(|e| e.handle.snapshot.borrow().view.state).collect()
    }

    /// How many of this node's chambers are frozen (at rest, without a
    /// supervisor: see `supervisor::freeze`).
    pub fn frozen(&self) -> usize {
        self.chambers().values().filter(|e| e.handle.tx.is_frozen()).count()
    }

    /// How many chambers there are (of every node of a fleet), how many run
    /// a session, and the next wake of any: read in place, no view copied
    /// (the service's status line asks after every change of state).
    pub fn tally(&self) -> (usize, usize, Option<DateTime<Utc>>) {
        let (mut count, mut running, mut next) = (0, 0, None::<DateTime<Utc>>);
        let mut add = |in_session: bool, wake: Option<DateTime<Utc>>| {
            count += 1;
            running += usize::from(in_session);
            next = match (next, wake) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        };
        for e in self.chambers().values() {
            let snap = e.handle.snapshot.borrow();
            add(snap.view.in_session, snap.view.next_wake);
        }
        for r in self.remote().values() {
            let m = r.mirror.as_ref().filter(|_| r.owner.is_some());
            add(m.is_some_and(|m| m.in_session), m.and_then(|m| m.next_wake));
        }
        (count, running, next)
    }

    /// Every chamber (of every node of a fleet), by name, as they are now:
    /// one not booted yet as its record says ([`Daemon::list`] waits for
    /// all).
    pub fn list_now(&self) -> Vec<ChamberView> {
        let local = self.chambers();
        let mut all: Vec<_> = local.values().map(Entry::view).collect();
        all.extend(self.remote().values().map(remote_view));
        // A record leaves `pending` just after its chamber joins: once.
        all.extend(self.0.loading.pending().values().filter(|r| !local.contains_key(&r.id)).map(remote_view));
        drop(local);
        all.sort_by(|a, b| a.record.name.cmp(&b.record.name));
        all
    }

    /// The chamber registered at exactly `path` (its canonical folder),
    /// once every chamber is booted. Only the match is copied: every
    /// `chamber add` asks, and a copy of every view each time made
    /// registering the n-th chamber cost n.
    pub(super) async fn at_path(&self, path: &str) -> Option<ChamberView> {
        self.all_loaded().await;
        if let Some(e) = self.chambers().at_path(path) {
            return Some(e.view());
        }
        self.remote().values().find(|r| r.path == path).map(remote_view)
    }

    /// The names of the chambers `ids` names (without copying their views,
    /// and only theirs: one chamber's answer costs one lookup).
    pub fn names(&self, ids: impl IntoIterator<Item = i64>) -> std::collections::HashMap<i64, String> {
        let local = self.chambers();
        let remote = self.remote();
        let waiting = self.0.loading.pending();
        let name = |id: i64| {
            let pending = || waiting.get(&id);
            local.get(&id).map(|e| &e.record).or_else(|| remote.get(&id)).or_else(pending).map(|r| r.name.clone())
        };
        ids.into_iter().filter_map(|id| Some((id, name(id)?))).collect()
    }

    /// One chamber, by name or by a path inside it, as it is now: one not
    /// booted yet as its record says ([`Daemon::resolve`] boots it first).
    pub fn resolve_now(&self, r: &ChamberRef) -> Result<ChamberView> {
        // Only the match is copied out (a status call must not cost a copy
        // of every chamber).
        let local = self.chambers();
        let remote = self.remote();
        let waiting = self.0.loading.pending();
        let hit = match r {
            // This node's own by its index; others' (a fleet's, or those
            // still loading) by a scan.
            ChamberRef::Name(n) => local
                .named(n)
                .map(|e| (&e.record, Some(e)))
                .or_else(|| remote.values().chain(waiting.values()).find(|rec| &rec.name == n).map(|rec| (rec, None))),
            ChamberRef::Path(p) => {
                let p = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                // The deepest registered chamber containing the path: this
                // node's by its index, folder by folder up; others' by a scan.
                let own = p.ancestors().find_map(|a| local.at_path(a.to_str()?)).map(|e| (&e.record, Some(e)));
                let others =
                    remote.values().chain(waiting.values()).filter(|rec| p.starts_with(&rec.path)).map(|r| (r, None));
                own.into_iter().chain(others).max_by_key(|(rec, _)| rec.path.len())
            }
        };
        let found = hit.map(|(rec, local)| local.map(Entry::view).unwrap_or_else(|| remote_view(rec)));
        found.ok_or_else(|| match r {
            ChamberRef::Name(n) => Error::NotFound(format!("no chamber named {n:?} (see `cryoctl chamber list`)")),
            ChamberRef::Path(p) => Error::NotFound(format!(
                "{} is not inside a registered chamber (register it with `cryoctl chamber add`)",
                p.display()
            )),
        })
    }
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Err(Error::Invalid(format!("{} is not an absolute path", p.display())))
    }
}

/// A chamber name: 1 to 64 of letters, digits, `.`, `_`, `-`, not starting with `.` or `-`.
pub fn validate_name(n: &str) -> Result<()> {
    let ok = !n.is_empty()
        && n.len() <= 64
        && !n.starts_with(['.', '-'])
        && n.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "invalid chamber name {n:?}: use 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' or '-'"
        )))
    }
}

/// Ends what still runs of `open` sessions on this machine (found by the
/// wake id in their environment) and returns those processes, by wake id,
/// for the recovery to report.
async fn end_leftovers(
    shared: &Shared,
    open: &[crate::store::OpenSession],
) -> Arc<std::collections::HashMap<String, Vec<(i32, i32)>>> {
    if open.is_empty() {
        return Default::default();
    }
    let processes = cryo_session::processes_by_wake();
    let procs: Vec<(i32, i32)> = open.iter().filter_map(|s| processes.get(&s.wake_id)).flatten().copied().collect();
    let grace = std::time::Duration::from_secs(shared.config.stop_grace_seconds.min(3));
    cryo_session::end_groups(&procs, grace).await;
    Arc::new(processes)
}

/// A chamber another node runs, as its owner last published it; one no
/// live node runs yet shows its desired state.
fn remote_view(r: &ChamberRecord) -> ChamberView {
    let mut view = r.mirror.as_deref().cloned().unwrap_or_default();
    view.state = remote_state(r);
    if r.owner.is_none() || r.mirror.is_none() {
        view.archived = r.archived;
    }
    ChamberView {
        record: r.clone(),
        snap: Snapshot { view, bridges: Vec::new(), sandbox: None, git: None, accounts: Vec::new() },
    }
}

/// Another node's chamber's state: as its owner's mirror says, else as
/// desired (no owner runs it yet).
fn remote_state(r: &ChamberRecord) -> State {
    match (&r.owner, &r.mirror) {
        (Some(_), Some(m)) => m.state,
        _ => match r.desired {
            crate::store::Desired::Started => State::Idle,
            crate::store::Desired::Stopped => State::Stopped,
        },
    }
}

/// A valid name from a folder's name.
fn derive_name(dir: &Path) -> String {
    let raw = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut s: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' }).collect();
    s = s.trim_start_matches(['.', '-']).chars().take(64).collect();
    if s.is_empty() { "chamber".to_string() } else { s }
}

/// Present while a cryod runs; left behind by one that did not stop cleanly.
fn running_marker(shared: &Shared) -> PathBuf {
    shared.places.state_dir.join("cryod.running")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_name("my-chamber_2.0").is_ok());
        for bad in ["", ".hidden", "-x", "a/b", "a b", "..", "é", &"x".repeat(65)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(derive_name(Path::new("/x/My Project!")), "My-Project-");
        assert_eq!(derive_name(Path::new("/x/.hidden")), "hidden");
        assert_eq!(derive_name(Path::new("/")), "chamber");
    }

    /// An index finds each chamber by its string, and stays exact when two
    /// strings share a hash (forced here: the index is given the same
    /// string's hash for both) and when either goes.
    #[test]
    fn an_index_stays_exact_through_collisions_and_removals() {
        let strings = std::collections::HashMap::from([(1, "a"), (2, "b"), (3, "c")]);
        let of = |id: i64| strings.get(&id).copied();
        let mut index = Index::default();
        index.add(1, "a");
        // 2 and 3 collide with 1: they go to the side list.
        index.collided.push(2);
        index.collided.push(3);
        let found = |index: &Index, s: &str| index.candidates(s).filter(|id| of(*id) == Some(s)).collect::<Vec<_>>();
        assert_eq!(found(&index, "a"), vec![1]);
        // "b" hashes elsewhere, so only the side list can hold it.
        assert_eq!(found(&index, "b"), vec![2]);
        // 1 goes: a collided chamber of the same hash would take its place
        // (here none has "a"'s hash), and 2 and 3 are still found.
        index.remove(1, "a", of);
        assert!(found(&index, "a").is_empty());
        assert_eq!(found(&index, "c"), vec![3]);
        index.remove(2, "b", of);
        assert!(found(&index, "b").is_empty() && found(&index, "c") == vec![3]);
        // A collided chamber takes the first place when its holder goes.
        let mut index = Index::default();
        index.add(1, "a");
        index.collided.push(4);
        let same = |id: i64| (id == 4 || id == 1).then_some("a");
        index.remove(1, "a", same);
        assert_eq!(index.first.get(&Index::key("a")), Some(&4));
        assert!(index.collided.is_empty());
    }
}
