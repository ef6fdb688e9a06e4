//! The daemon's shared state and the operations every front end calls.
//!
//! [`Daemon`] is a cheap handle. The gRPC services and the hub call the same
//! methods here, so there is one implementation of each operation.

mod hooks;
pub mod remote;
pub mod schedule;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use tokio::sync::oneshot;

use self::remote::Command;
use crate::chamber::scaffold;
use crate::error::{Error, Result};
use crate::runtime::Shared;
use crate::store::ChamberRecord;
use crate::supervisor::{self, Event, Handle, Snapshot};

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

impl Entry {
    fn view(&self) -> ChamberView {
        let mut record = self.record.clone();
        // The supervisor owns the desired state once running.
        record.desired = match self.handle.snapshot.borrow().view.state {
            State::Stopped => crate::store::Desired::Stopped,
            State::Idle | State::Running | State::Paused => crate::store::Desired::Started,
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
    chambers: RwLock<BTreeMap<i64, Entry>>,
    /// The chambers other nodes of the fleet own (or no node does yet), as
    /// the database last said.
    remote: RwLock<BTreeMap<i64, ChamberRecord>>,
    /// Held while a chamber starts running here (added, or taken up).
    starting: tokio::sync::Mutex<()>,
    /// Chambers being handed over to another node now.
    leaving: std::sync::Mutex<std::collections::HashSet<i64>>,
    /// Chambers other nodes run whose inboxes this node watches for them.
    remote_watched: std::sync::Mutex<std::collections::HashSet<i64>>,
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
    /// Loads the registry and starts a supervisor for every chamber (on one
    /// machine; a fleet node starts with none and claims its share).
    pub async fn load(shared: Arc<Shared>) -> Result<Daemon> {
        let started_at = shared.clock.now();
        let records = shared.store.chambers().await?;
        // `[[on_end]]` may name any of them: known before the first boot.
        *shared.names.write().expect("names lock") = records.iter().map(|r| r.name.clone()).collect();
        let mut chambers = BTreeMap::new();
        let mut remote = BTreeMap::new();
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
            // Booted a batch at a time: each boot waits for a few store
            // queries, and the queries of a batch share the store thread's
            // wake-ups (one after the other, the round trips were most of a
            // start-up).
            let mut records = records.into_iter().peekable();
            while records.peek().is_some() {
                let mut batch = tokio::task::JoinSet::new();
                for record in records.by_ref().take(BOOT_BATCH) {
                    let recovery = supervisor::Recovery {
                        open: open.remove(&record.id).unwrap_or_default(),
                        processes: processes.clone(),
                    };
                    let shared = shared.clone();
                    batch.spawn(async move {
                        let handle = supervisor::spawn(shared, record.clone(), recovery).await;
                        (record, handle)
                    });
                }
                while let Some(booted) = batch.join_next().await {
                    let (record, handle) =
                        booted.map_err(|e| Error::Internal(format!("a chamber's boot failed: {e}")))?;
                    chambers.insert(record.id, Entry { record, handle });
                }
            }
            tracing::info!(chambers = chambers.len(), "registry loaded");
        }
        let daemon = Daemon(Arc::new(Inner {
            shared,
            started_at,
            chambers: RwLock::new(chambers),
            remote: RwLock::new(remote),
            starting: Default::default(),
            leaving: Default::default(),
            remote_watched: Default::default(),
        }));
        daemon.follow_the_system_zone();
        daemon.deliver_handoffs();
        daemon.mark_running();
        daemon.heartbeat();
        // The strongest sandbox is asked once (bubblewrap is run to see):
        // off the workers, before a client asks.
        tokio::task::spawn_blocking(crate::agent::sandbox::strongest);
        Ok(daemon)
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.0.shared
    }

    pub fn started_at(&self) -> DateTime<Utc> {
        self.0.started_at
    }

    pub fn chamber_count(&self) -> usize {
        self.0.chambers.read().expect("registry lock").len()
    }

    /// Takes over a chamber this node has just claimed (with its new
    /// fence): what its last owner left open (sessions, claimed mail, the
    /// agents still running on this machine) is recovered first.
    pub async fn adopt(&self, record: ChamberRecord) {
        let _one = self.0.starting.lock().await;
        if self.runs(record.id) {
            return;
        }
        let shared = &self.0.shared;
        let open = shared.store.open_sessions(Some(record.id)).await.unwrap_or_default();
        if !open.is_empty() {
            tracing::warn!(chamber = %record.name, sessions = open.len(), "recovering sessions its last owner left open");
        }
        let processes = end_leftovers(shared, &open).await;
        self.run_here(record, supervisor::Recovery { open, processes }).await;
    }

    /// Starts running a chamber here: its supervisor, its registry entry.
    /// Callers hold `starting` and have checked that it does not run here
    /// yet: a chamber just added is also the database's "owned by this
    /// node, not run here" to the ownership round, and must not get two
    /// supervisors.
    async fn run_here(&self, mut record: ChamberRecord, recovery: supervisor::Recovery) {
        let shared = &self.0.shared;
        record.owner_name = shared.store.fleet().map(|pg| pg.node().name.clone());
        let handle = supervisor::spawn(shared.clone(), record.clone(), recovery).await;
        tracing::info!(chamber = %record.name, fence = record.fence, "chamber runs here");
        let id = record.id;
        self.0.chambers.write().expect("registry lock").insert(id, Entry { record, handle });
        // (A refresh of the fleet's view may have listed it as remote meanwhile.)
        self.0.remote.write().expect("registry lock").remove(&id);
        // Live views (and the service manager's status line) learn of it.
        shared.notify(id, crate::runtime::NoticeKind::Status);
        self.note_names();
    }

    /// `[heartbeat]`: pings the monitor every interval while the store
    /// answers (a cryod that cannot reach its store is not healthy).
    fn heartbeat(&self) {
        let Some(hb) = self.0.shared.config.heartbeat.clone() else { return };
        let every = hb.every().expect("checked when the config was read");
        let weak = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.shared.shutdown.is_cancelled() {
                    return;
                }
                match inner.shared.store.last_session_number(0).await {
                    Ok(_) => {
                        if let Err(error) = inner.shared.notifiers.ping(&hb.url).await {
                            tracing::warn!(%error, "the heartbeat's monitor did not take the ping");
                        }
                    }
                    Err(error) => tracing::warn!(%error, "the store does not answer: no heartbeat"),
                }
            }
        });
    }

    /// Marks cryod running until a clean stop; a mark found at start means
    /// the last one did not stop cleanly: the `daemon` event says so.
    fn mark_running(&self) {
        let shared = &self.0.shared;
        let marker = running_marker(shared);
        if let Ok(was) = std::fs::read_to_string(&marker) {
            let at = self.0.started_at;
            let body = format!(
                "The cryod that started at {} did not stop cleanly (killed, crashed, or the machine lost power). Sessions it left open were recovered; see `cryoctl chamber list`.",
                was.trim()
            );
            let event = crate::notifier::Event {
                id: format!("daemon:unclean:{}", at.timestamp_millis()),
                kind: "daemon".into(),
                chamber: String::new(),
                title: "cryod started after an unclean stop".into(),
                body,
                url: shared.hub_link(""),
                at,
            };
            shared.notifiers.notify(event, shared.system_tz());
        }
        if let Err(e) = std::fs::write(&marker, crate::rfc3339(self.0.started_at)) {
            tracing::warn!(error = %e, file = %marker.display(), "cannot mark cryod running");
        }
    }

    /// Keeps the names `[[on_end]]` may use the registry's; a chamber
    /// faulted on a name it did not know reads its `cryo.toml` again.
    fn note_names(&self) {
        let names: std::collections::HashSet<String> = {
            let local = self.0.chambers.read().expect("registry lock");
            let remote = self.0.remote.read().expect("registry lock");
            local.values().map(|e| e.record.name.clone()).chain(remote.values().map(|r| r.name.clone())).collect()
        };
        let mut known = self.0.shared.names.write().expect("names lock");
        if *known == names {
            return;
        }
        *known = names;
        drop(known);
        for e in self.0.chambers.read().expect("registry lock").values() {
            if e.handle.snapshot.borrow().view.state == State::Faulted {
                let _ = e.handle.tx.send(Event::Watched(crate::watch::Change::Config));
            }
        }
    }

    /// Delivers the chambers' hand-offs (`[[on_end]]`), each as an
    /// operator's message from its chamber, wherever the other chamber
    /// runs; the sender hears how it went.
    fn deliver_handoffs(&self) {
        let Some(mut rx) = self.0.shared.handoff_rx.lock().expect("hand-off lock").take() else { return };
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

    async fn hand_off(self, job: crate::runtime::HandOffJob) {
        let h = job.handoff;
        let sent = self.send(&ChamberRef::Name(h.to.clone()), &job.from, &h.subject, &h.body).await;
        tracing::info!(from = %job.from, to = %h.to, session = h.session, ok = sent.is_ok(), "hand-off");
        let result = sent
            .map(|d| cryo_core::chamber::handoff::HandedOff { file: d.file, waits: d.waits, looped: job.looped })
            .map_err(|e| e.to_string());
        if let Ok(handle) = self.handle_of(job.from_id) {
            let _ = handle.tx.send(Event::HandedOff { to: h.to, session: h.session, result });
        }
    }

    /// Drops a chamber at once, finalizing nothing (it is another node's
    /// now, or this node's lease is lost): its agent is killed.
    pub async fn drop_chamber(&self, id: i64) {
        let Some(entry) = self.unregister_here(id) else { return };
        entry.handle.drop.cancel();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), entry.handle.ended.cancelled()).await;
        self.0.shared.notify(id, crate::runtime::NoticeKind::Status);
    }

    /// Takes a chamber out of this node's registry and into its view of the
    /// rest of the fleet in one step, so a lookup meanwhile finds it in one
    /// or the other (never "no chamber named …").
    fn unregister_here(&self, id: i64) -> Option<Entry> {
        let mut chambers = self.0.chambers.write().expect("registry lock");
        let entry = chambers.remove(&id)?;
        self.0.remote.write().expect("registry lock").insert(id, entry.record.clone());
        Some(entry)
    }

    /// Hands a chamber over cleanly: its session ends as at shutdown, it is
    /// no longer run here, and the database gives it to node `to` (which
    /// becomes its home) or, without `to`, to whichever node claims it
    /// first. `Ok(false)`: `to` could not take it (it left or began
    /// draining), so it was released to the fleet instead.
    pub async fn hand_over(&self, id: i64, to: Option<&str>) -> Result<bool> {
        let pg = self.0.shared.store.fleet().cloned().ok_or_else(|| Error::Internal("not a fleet".into()))?;
        let handle = self.handle_of(id)?;
        // The ownership round must not take it back while it goes.
        self.0.leaving.lock().expect("leaving lock").insert(id);
        let went = async {
            let (tx, rx) = oneshot::channel();
            if handle.tx.send(Event::Shutdown(tx)).is_ok() {
                let _ = rx.await;
            }
            let entry = self.unregister_here(id);
            let entry = entry.ok_or_else(|| Error::Unavailable("the chamber was dropped meanwhile".into()))?;
            // Until its supervisor has ended (and let go of its watches), the
            // chamber is still this node's in every way but the registry.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), entry.handle.ended.cancelled()).await;
            let fence = entry.record.fence();
            if let Some(to) = to
                && pg.assign(fence, to).await?
            {
                return Ok(true);
            }
            pg.release(fence).await?;
            Ok(to.is_none())
        }
        .await;
        self.0.leaving.lock().expect("leaving lock").remove(&id);
        self.0.shared.notify(id, crate::runtime::NoticeKind::Status);
        went
    }

    /// Whether the chamber is being handed over by this node now.
    pub fn leaving(&self, id: i64) -> bool {
        self.0.leaving.lock().expect("leaving lock").contains(&id)
    }

    /// The chambers this node runs.
    pub fn local(&self) -> Vec<Local> {
        self.0
            .chambers
            .read()
            .expect("registry lock")
            .values()
            .map(|e| Local {
                fence: e.record.fence(),
                running: e.handle.snapshot.borrow().view.state == State::Running,
                home: e.record.home.clone(),
            })
            .collect()
    }

    /// Asks a chamber this node runs to read its inbox again (mail written
    /// where the watcher cannot see it).
    pub fn rescan(&self, id: i64) {
        if let Some(e) = self.0.chambers.read().expect("registry lock").get(&id) {
            let _ = e.handle.tx.send(Event::Rescan);
        }
    }

    /// What the database says of the chambers this node does not run.
    pub fn set_remote(&self, records: Vec<ChamberRecord>) {
        let local = self.0.chambers.read().expect("registry lock");
        let mut remote = self.0.remote.write().expect("registry lock");
        let fresh: BTreeMap<i64, ChamberRecord> =
            records.into_iter().filter(|r| !local.contains_key(&r.id)).map(|r| (r.id, r)).collect();
        // Live views hear of the chambers whose owner or mirror changed.
        let changed: Vec<i64> = fresh.iter().filter(|(id, r)| remote.get(id) != Some(r)).map(|(id, _)| *id).collect();
        let domain = self.0.shared.store.fleet().map(|pg| pg.node().domain.clone());
        let inboxes: Vec<(i64, PathBuf)> = fresh
            .values()
            .filter(|r| Some(&r.domain) == domain.as_ref())
            .map(|r| (r.id, PathBuf::from(&r.path).join("messages/inbox")))
            .collect();
        // Assigned under the registry's lock: a chamber added or taken up
        // here meanwhile is never put back among the remote ones.
        *remote = fresh;
        drop((local, remote));
        if self.0.shared.config.store.domain.is_some() {
            self.watch_remote_inboxes(&inboxes);
        }
        for id in changed {
            self.0.shared.notify(id, crate::runtime::NoticeKind::Status);
        }
        self.note_names();
    }

    /// On a shared filesystem, another machine's writes reach no watcher of
    /// the owner's: this node watches the inboxes of the chambers others
    /// run in its domain, and tells their owner of new mail (which reads
    /// its inbox again at once).
    fn watch_remote_inboxes(&self, inboxes: &[(i64, PathBuf)]) {
        let Some(pg) = self.0.shared.store.fleet().cloned() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let watcher = &self.0.shared.watcher;
        let mut watched = self.0.remote_watched.lock().expect("watched lock");
        for (id, inbox) in inboxes {
            let id = *id;
            // (Only an inbox that exists: this node writes nothing into a chamber it does not run.)
            if watched.contains(&id) || !inbox.is_dir() {
                continue;
            }
            let (pg, rt) = (pg.clone(), rt.clone());
            let sink: crate::watch::Sink = Arc::new(move |c| {
                if let crate::watch::Change::Inbox(_) | crate::watch::Change::Rescan = c {
                    let pg = pg.clone();
                    rt.spawn(async move { pg.mail_written(id).await });
                }
            });
            watcher.watch_for_owner(id, inbox, sink);
            watched.insert(id);
        }
        // Those run here now (their supervisor's watch replaced this one) or gone.
        let remote: std::collections::HashSet<i64> = inboxes.iter().map(|(id, _)| *id).collect();
        watched.retain(|id| {
            let keep = remote.contains(id);
            if !keep {
                watcher.unwatch_for_owner(*id);
            }
            keep
        });
    }

    /// Scaffolds a chamber folder; a new `cryo.toml` gets `sandbox`, or
    /// the strongest mode this machine provides.
    pub fn init(
        &self,
        dir: &Path,
        agent: Option<&str>,
        sandbox: Option<crate::config::Sandbox>,
    ) -> Result<scaffold::Scaffolded> {
        let dir = absolute(dir)?;
        if dir.exists() && !dir.is_dir() {
            return Err(Error::Invalid(format!("{} exists and is not a folder", dir.display())));
        }
        let sandbox = sandbox.unwrap_or_else(crate::agent::sandbox::strongest);
        scaffold::init(&dir, agent, sandbox)
            .map_err(|e| Error::Invalid(format!("cannot scaffold {}: {e}", dir.display())))
    }

    /// Registers a chamber folder.
    pub async fn add(
        &self,
        dir: &Path,
        name: Option<&str>,
        init: bool,
        agent: Option<&str>,
        sandbox: Option<crate::config::Sandbox>,
    ) -> Result<Added> {
        let dir = absolute(dir)?;
        let scaffolded = if init { Some(self.init(&dir, agent, sandbox)?) } else { None };
        let canonical = std::fs::canonicalize(&dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::NotFound(format!("{} does not exist (use --init to create a chamber there)", dir.display()))
            }
            _ => Error::Invalid(format!("{}: {e}", dir.display())),
        })?;
        if !canonical.is_dir() {
            return Err(Error::Invalid(format!("{} is not a folder", canonical.display())));
        }
        if !canonical.join("cryo.toml").is_file() && !canonical.join("plan.md").is_file() {
            return Err(Error::Precondition(format!(
                "{} has neither cryo.toml nor plan.md, so it is not a chamber: add --init to scaffold one",
                canonical.display()
            )));
        }
        let path = canonical.to_str().ok_or_else(|| Error::Invalid(format!("{} is not UTF-8", canonical.display())))?;
        let (base, exact) = match name {
            Some(n) => {
                validate_name(n)?;
                (n.to_string(), true)
            }
            None => (derive_name(&canonical), false),
        };
        let created = crate::rfc3339(self.0.shared.clock.now());
        let new = crate::store::NewChamber {
            base_name: base,
            exact_name: exact,
            path: path.to_string(),
            created_at: created,
        };
        let (record, existed) = self.0.shared.store.add_chamber(new).await?;
        if !existed {
            tracing::info!(chamber = %record.name, path = %record.path, "chamber registered");
            let _one = self.0.starting.lock().await;
            if !self.runs(record.id) {
                self.run_here(record.clone(), Default::default()).await;
            }
        }
        if existed && self.view_of(record.id).is_none() {
            // Another node's, not yet in this node's view of the fleet.
            self.0.remote.write().expect("registry lock").insert(record.id, record.clone());
            self.note_names();
        }
        if existed {
            // The operator adds it again: its settings as they are now are
            // accepted (a new chamber's are when first read). One that does
            // not load is shown as faulted, as before.
            match self.trust(&ChamberRef::Name(record.name.clone()), None).await {
                Ok(_) | Err(Error::Precondition(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let view = self.view_of(record.id).ok_or_else(|| Error::Internal("chamber vanished".into()))?;
        Ok(Added { view, already_registered: existed, init: scaffolded })
    }

    /// A chamber's view by its id (for notices).
    pub fn view_by_id(&self, id: i64) -> Option<ChamberView> {
        self.view_of(id)
    }

    /// A page of a chamber's conversation, oldest first: both directions,
    /// and mail not yet read (see `Mailbox::page`).
    pub async fn conversation_page(
        &self,
        v: &ChamberView,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Vec<crate::chamber::mailbox::Stored>> {
        let tz = v.snap.view.timezone.parse().unwrap_or(chrono_tz::UTC);
        let mailbox = crate::chamber::mailbox::Mailbox::new(Path::new(&v.record.path), tz);
        let before = before.map(str::to_string);
        crate::chamber::blocking(move || mailbox.page(before.as_deref(), limit)).await
    }

    /// One of the fixed files of a chamber an operator may read.
    pub async fn read_chamber_file(&self, v: &ChamberView, name: &str) -> Result<String> {
        if !matches!(name, "plan.md" | "NOTES.md") {
            return Err(Error::NotFound(format!("{name} is not a chamber file cryo serves (plan.md, NOTES.md)")));
        }
        let (root, rel) = (std::path::PathBuf::from(&v.record.path), name.to_string());
        let read = crate::chamber::blocking(move || {
            crate::chamber::Dir::open(&root)?.read_if(Path::new(&rel), crate::chamber::MAX_TEXT_FILE)
        });
        match read.await? {
            Ok(b) => Ok(String::from_utf8_lossy(&b.unwrap_or_default()).into_owned()),
            Err(e) if e.is_planted() => Err(Error::Precondition(e.to_string())),
            Err(e) => Err(Error::Internal(e.to_string())),
        }
    }

    /// Replaces a chamber's `plan.md` (through its supervisor, the one writer).
    pub async fn write_plan(&self, v: &ChamberView, text: &str) -> Result<()> {
        let text = text.to_string();
        let mine = text.clone();
        if !self.elsewhere(v)
            && let Some(written) = self.ask_here(v.record.id, |reply| Event::WritePlan { text: mine, reply }).await?
        {
            return written;
        }
        self.forward(v, Command::WritePlan { text }).await?.done()
    }

    fn view_of(&self, id: i64) -> Option<ChamberView> {
        let local = self.0.chambers.read().expect("registry lock").get(&id).map(Entry::view);
        local.or_else(|| self.0.remote.read().expect("registry lock").get(&id).map(remote_view))
    }

    /// Whether this node runs the chamber.
    pub fn runs(&self, id: i64) -> bool {
        self.0.chambers.read().expect("registry lock").contains_key(&id)
    }

    /// Whether another node of the fleet runs the chamber (an operation on
    /// it is sent to that node).
    fn elsewhere(&self, v: &ChamberView) -> bool {
        self.0.shared.store.fleet().is_some() && !self.runs(v.record.id)
    }

    /// The database's record of a chamber, read again (and every other
    /// chamber's, to refresh this node's view of the fleet).
    pub(crate) async fn refresh_record(&self, id: i64) -> Result<ChamberRecord> {
        let records = self.0.shared.store.chambers().await?;
        let found = records.iter().find(|r| r.id == id).cloned();
        self.set_remote(records);
        found.ok_or_else(|| Error::NotFound("the chamber was removed".into()))
    }

    /// Moves a chamber to another node of the fleet (by its name or id): a
    /// clean hand-over, carried out by the chamber's owner. The chamber's
    /// home becomes that node. Returns the view, the node's id and whether
    /// the chamber was there already.
    pub async fn move_to(&self, r: &ChamberRef, to: &str) -> Result<(ChamberView, String, bool)> {
        let v = self.resolve(r)?;
        let node = self.live_node(to).await?;
        if node.draining {
            return Err(Error::Precondition(format!("node {to:?} is draining: it takes no chambers")));
        }
        if node.domain != v.record.domain {
            return Err(Error::Precondition(format!(
                "node {to:?} is in storage domain {:?}, the chamber in {:?}: it cannot reach the chamber's folder",
                node.domain, v.record.domain
            )));
        }
        let id = node.id.clone();
        let (view, already) = if self.runs(v.record.id) {
            self.move_here_to(v.record.id, &id).await?
        } else {
            let (view, already, _) = self.forward(&v, Command::Move { to: id.clone() }).await?.flags(&v)?;
            (view, already)
        };
        Ok((view, id, already))
    }

    /// Hands a chamber this node runs to node `to`. The flag: it was there
    /// already.
    pub(crate) async fn move_here_to(&self, id: i64, to: &str) -> Result<(ChamberView, bool)> {
        let pg = self.0.shared.store.fleet().cloned().ok_or_else(|| Error::Internal("not a fleet".into()))?;
        let v = self.view_by_id(id).ok_or_else(|| Error::NotFound("the chamber was removed".into()))?;
        if to == pg.node_id() {
            return Ok((v, true));
        }
        if !self.hand_over(id, Some(to)).await? {
            return Err(Error::Unavailable(format!(
                "node {to} can no longer take chamber {:?}; it was released to the fleet",
                v.record.name
            )));
        }
        tracing::info!(chamber = %v.record.name, node = %to, "chamber moved");
        let record = self.refresh_record(id).await?;
        Ok((ChamberView { record, snap: v.snap }, false))
    }

    /// Marks a node draining (by name or id): it takes no chambers, hands
    /// its own over as their sessions end, then leaves the fleet and exits.
    /// Returns the node's id.
    pub async fn drain(&self, node: &str) -> Result<String> {
        let n = self.live_node(node).await?;
        let pg = self.0.shared.store.fleet().ok_or_else(|| Error::Internal("not a fleet".into()))?;
        if !pg.set_draining(&n.id).await? {
            return Err(Error::NotFound(format!("node {node:?} left the fleet meanwhile")));
        }
        tracing::info!(node = %n.id, name = %n.name, "node asked to drain");
        Ok(n.id)
    }

    /// The live node of the fleet with this name or id.
    async fn live_node(&self, name: &str) -> Result<crate::store::postgres::FleetNode> {
        let pg = self.0.shared.store.fleet().cloned().ok_or_else(|| {
            Error::Precondition("this cryod is not a node of a fleet (its store is not PostgreSQL)".into())
        })?;
        let nodes = pg.nodes().await?;
        let mut live: Vec<_> =
            nodes.iter().filter(|n| n.lease_left_ms > 0 && (n.id == name || n.name == name)).cloned().collect();
        match live.len() {
            0 => {
                let names: Vec<_> = nodes.iter().filter(|n| n.lease_left_ms > 0).map(|n| n.name.as_str()).collect();
                Err(Error::NotFound(format!(
                    "no live node named {name:?} (live: {}; see `cryoctl fleet status`)",
                    names.join(", ")
                )))
            }
            1 => Ok(live.remove(0)),
            _ => Err(Error::Invalid(format!("several live nodes are named {name:?}: give the node's id"))),
        }
    }

    fn handle_of(&self, id: i64) -> Result<Handle> {
        if let Some(h) = self.0.chambers.read().expect("registry lock").get(&id).map(|e| e.handle.clone()) {
            return Ok(h);
        }
        match self.0.remote.read().expect("registry lock").get(&id) {
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
        self.0.chambers.read().expect("registry lock").values().map(|e| e.handle.snapshot.borrow().view.state).collect()
    }

    /// How many chambers there are (of every node of a fleet), how many run
    /// a session, and the next wake of any: read in place, no view copied
    /// (the service's status line asks after every change of state).
    pub fn tally(&self) -> (usize, usize, Option<DateTime<Utc>>) {
        let (mut count, mut running, mut next) = (0, 0, None::<DateTime<Utc>>);
        let mut add = |state: State, wake: Option<DateTime<Utc>>| {
            count += 1;
            running += usize::from(state == State::Running);
            next = match (next, wake) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        };
        for e in self.0.chambers.read().expect("registry lock").values() {
            let snap = e.handle.snapshot.borrow();
            add(snap.view.state, snap.view.next_wake);
        }
        for r in self.0.remote.read().expect("registry lock").values() {
            add(remote_state(r), r.mirror.as_ref().and_then(|m| m.next_wake));
        }
        (count, running, next)
    }

    /// Every chamber (of every node of a fleet), by name.
    pub fn list(&self) -> Vec<ChamberView> {
        let mut all: Vec<_> = self.0.chambers.read().expect("registry lock").values().map(Entry::view).collect();
        all.extend(self.0.remote.read().expect("registry lock").values().map(remote_view));
        all.sort_by(|a, b| a.record.name.cmp(&b.record.name));
        all
    }

    /// The chambers a list shows: archived ones only when asked for.
    pub fn listed(&self, archived: bool) -> Vec<ChamberView> {
        let mut all = self.list();
        all.retain(|v| archived || !v.snap.view.archived);
        all
    }

    /// One chamber, by name or by a path inside it.
    pub fn resolve(&self, r: &ChamberRef) -> Result<ChamberView> {
        // Only the match is copied out (a status call must not cost a copy
        // of every chamber).
        let local = self.0.chambers.read().expect("registry lock");
        let remote = self.0.remote.read().expect("registry lock");
        let mut all = local.values().map(|e| (&e.record, Some(e))).chain(remote.values().map(|r| (r, None)));
        let hit = match r {
            ChamberRef::Name(n) => all.find(|(rec, _)| &rec.name == n),
            ChamberRef::Path(p) => {
                let p = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                // The deepest registered chamber containing the path.
                all.filter(|(rec, _)| p.starts_with(&rec.path)).max_by_key(|(rec, _)| rec.path.len())
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

    /// Asks the chamber's supervisor on this node, where the caller cannot
    /// follow a hand-over (see [`Daemon::ask_here`]).
    async fn ask<T>(&self, id: i64, make: impl FnOnce(oneshot::Sender<T>) -> Event) -> Result<T> {
        self.ask_here(id, make).await?.ok_or_else(|| {
            Error::Unavailable(
                "the chamber was handed to another node of the fleet meanwhile: run the command again".into(),
            )
        })
    }

    /// Asks the chamber's supervisor on this node. `None`: the chamber was
    /// handed on to another node of the fleet under the call (a balancing
    /// round, a move), so the caller follows it there with
    /// [`Daemon::forward`].
    async fn ask_here<T>(&self, id: i64, make: impl FnOnce(oneshot::Sender<T>) -> Event) -> Result<Option<T>> {
        let handed_on = || self.0.shared.store.fleet().is_some() && (self.leaving(id) || !self.runs(id));
        let handle = match self.handle_of(id) {
            Err(_) if handed_on() => return Ok(None),
            h => h?,
        };
        let (tx, rx) = oneshot::channel();
        if handle.tx.send(make(tx)).is_err() {
            return if handed_on() {
                Ok(None)
            } else {
                Err(Error::Internal("the chamber's supervisor has stopped".into()))
            };
        }
        match rx.await {
            Ok(answer) => Ok(Some(answer)),
            Err(_) if handed_on() => Ok(None),
            Err(_) => Err(Error::Internal("the chamber's supervisor did not answer".into())),
        }
    }

    /// Unregisters a chamber (ending its session); its files stay.
    pub async fn remove(&self, r: &ChamberRef) -> Result<ChamberView> {
        let v = self.resolve(r)?;
        if self.elsewhere(&v) {
            self.forward(&v, Command::Remove).await?.done()?;
            self.0.remote.write().expect("registry lock").remove(&v.record.id);
            self.0.shared.notify(v.record.id, crate::runtime::NoticeKind::Removed);
            self.note_names();
            return Ok(v);
        }
        let fence = self
            .0
            .chambers
            .read()
            .expect("registry lock")
            .get(&v.record.id)
            .map(|e| e.record.fence())
            .unwrap_or(v.record.fence());
        self.ask(v.record.id, Event::Remove).await?;
        self.0.shared.store.remove_chamber(fence).await?;
        self.0.chambers.write().expect("registry lock").remove(&v.record.id);
        self.0.shared.links.write().expect("links lock").remove(&v.record.name);
        self.0.shared.notify(v.record.id, crate::runtime::NoticeKind::Removed);
        self.note_names();
        tracing::info!(chamber = %v.record.name, "chamber removed from the registry");
        Ok(v)
    }

    /// Starts a chamber. Returns the view and whether it was started already.
    /// With `wait`, returns once a first session's agent has started.
    pub async fn start(&self, r: &ChamberRef, wait: bool) -> Result<(ChamberView, bool)> {
        let v = self.resolve(r)?;
        if !self.elsewhere(&v)
            && let Some(already) = self.ask_here(v.record.id, |reply| Event::Start { wait, reply }).await?
        {
            return Ok((self.view_of(v.record.id).unwrap_or(v), already?));
        }
        let (v, already, _) = self.forward(&v, Command::Start { wait }).await?.flags(&v)?;
        Ok((v, already))
    }

    /// Stops a chamber; returns once a running session has ended.
    /// The flags: it was stopped already; a session was ended.
    pub async fn stop(&self, r: &ChamberRef, wait: bool) -> Result<(ChamberView, bool, bool)> {
        let v = self.resolve(r)?;
        if !self.elsewhere(&v)
            && let Some(answer) = self.ask_here(v.record.id, |reply| Event::Stop { wait, reply }).await?
        {
            let (already, ended) = answer?;
            return Ok((self.view_of(v.record.id).unwrap_or(v), already, ended));
        }
        self.forward(&v, Command::Stop { wait }).await?.flags(&v)
    }

    /// Pauses (or resumes) a chamber; the flag says nothing changed.
    pub async fn pause(&self, r: &ChamberRef, pause: bool) -> Result<(ChamberView, bool)> {
        let v = self.resolve(r)?;
        if !self.elsewhere(&v)
            && let Some(already) = self.ask_here(v.record.id, |tx| Event::Pause(pause, tx)).await?
        {
            return Ok((self.view_of(v.record.id).unwrap_or(v), already?));
        }
        let (v, already, _) = self.forward(&v, Command::Pause { pause }).await?.flags(&v)?;
        Ok((v, already))
    }

    /// The operator accepts a chamber's `cryo.toml` as it is (see
    /// `chamber::trust`): the keys that changed since last accepted.
    /// With an `edit`, the digests of a `cryo.toml` about to be written by
    /// an operator (the hub's settings) are accepted instead.
    pub async fn trust(
        &self,
        r: &ChamberRef,
        edit: Option<crate::supervisor::Edit>,
    ) -> Result<(ChamberView, Vec<String>)> {
        let v = self.resolve(r)?;
        let mine = edit.clone();
        if !self.elsewhere(&v)
            && let Some(keys) = self.ask_here(v.record.id, |reply| Event::Trust { edit: mine, reply }).await?
        {
            return Ok((self.view_of(v.record.id).unwrap_or(v), keys?));
        }
        let (view, keys) = self.forward(&v, Command::Trust { edit }).await?.trusted()?;
        Ok((remote::with_view(&v, view), keys))
    }

    /// Archives a chamber (stopping it first: an archived chamber is never
    /// started) or unarchives it (it stays stopped); the flag says nothing
    /// changed.
    pub async fn archive(&self, r: &ChamberRef, archive: bool) -> Result<(ChamberView, bool)> {
        let v = self.resolve(r)?;
        if self.elsewhere(&v) {
            let (v, already, _) = self.forward(&v, Command::Archive { archive }).await?.flags(&v)?;
            return Ok((v, already));
        }
        if archive && v.snap.view.state != State::Stopped {
            self.ask(v.record.id, |reply| Event::Stop { wait: true, reply }).await??;
        }
        let already = self.ask(v.record.id, |tx| Event::Archive(archive, tx)).await??;
        Ok((self.view_of(v.record.id).unwrap_or(v), already))
    }

    /// Resets a chamber: stops it (ending a session), then moves its
    /// runtime files into `history/TIMESTAMP/`; returns that folder
    /// (relative to the chamber). The chamber stays stopped.
    pub async fn reset(&self, r: &ChamberRef) -> Result<(ChamberView, String)> {
        let v = self.resolve(r)?;
        if self.elsewhere(&v) {
            let (view, dir) = self.forward(&v, Command::Reset).await?.reset()?;
            return Ok((remote::with_view(&v, view), dir));
        }
        if v.snap.view.state != State::Stopped {
            self.ask(v.record.id, |reply| Event::Stop { wait: true, reply }).await??;
        }
        let dir = self.ask(v.record.id, Event::Reset).await??;
        Ok((self.view_of(v.record.id).unwrap_or(v), dir))
    }

    /// Runs a session now; with `replace`, ends a running one first.
    pub async fn wake(
        &self,
        r: &ChamberRef,
        message: Option<String>,
        replace: bool,
    ) -> Result<(ChamberView, supervisor::WakeOutcome)> {
        let v = self.resolve(r)?;
        let mine = message.clone();
        if !self.elsewhere(&v)
            && let Some(out) = self.ask_here(v.record.id, |reply| Event::Wake { message: mine, replace, reply }).await?
        {
            return Ok((self.view_of(v.record.id).unwrap_or(v), out?));
        }
        self.forward(&v, Command::Wake { message, replace }).await?.woken(&v)
    }

    /// Writes a message into a chamber's inbox; returns the file.
    pub async fn send(&self, r: &ChamberRef, from: &str, subject: &str, text: &str) -> Result<supervisor::Delivered> {
        self.send_with(r, from, subject, text, Default::default()).await
    }

    /// [`Daemon::send`], with front matter beyond `from` and `subject`.
    pub async fn send_with(
        &self,
        r: &ChamberRef,
        from: &str,
        subject: &str,
        text: &str,
        meta: std::collections::BTreeMap<String, String>,
    ) -> Result<supervisor::Delivered> {
        let v = self.resolve(r)?;
        let (from, subject, text) = (from.to_string(), subject.to_string(), text.to_string());
        let mine = Box::new((from.clone(), subject.clone(), text.clone(), meta.clone()));
        if !self.elsewhere(&v)
            && let Some(d) = self.ask_here(v.record.id, |reply| Event::Deliver { message: mine, reply }).await?
        {
            return d;
        }
        self.forward(&v, Command::Send { from, subject, text, meta }).await?.delivered()
    }

    /// An operator's TODO call.
    pub async fn todo(&self, r: &ChamberRef, call: supervisor::TodoCall) -> Result<supervisor::AgentReply> {
        let v = self.resolve(r)?;
        let mine = Box::new(call.clone());
        if !self.elsewhere(&v)
            && let Some(answer) = self.ask_here(v.record.id, |reply| Event::Todo { call: mine, reply }).await?
        {
            return answer;
        }
        self.forward(&v, Command::Todo { call }).await?.todos()
    }

    /// Asks a chamber's bridges to pull (or push) now; returns each one's
    /// count or error, and every bridge's status after.
    pub async fn sync(&self, r: &ChamberRef, pull: bool) -> Result<supervisor::SyncOutcome> {
        let v = self.resolve(r)?;
        if !self.elsewhere(&v)
            && let Some(answer) = self.ask_here(v.record.id, |reply| Event::Sync { pull, reply }).await?
        {
            return Ok(answer);
        }
        self.forward(&v, Command::Sync { pull }).await?.synced()
    }

    /// The most recent sessions of a chamber, newest first.
    pub async fn sessions(&self, id: i64, limit: u32) -> Result<Vec<crate::store::SessionRow>> {
        Ok(self.0.shared.store.recent_sessions(id, limit).await?)
    }

    /// How many scheduled slots of a chamber passed without a session, and
    /// the newest of them.
    pub async fn passed(&self, id: i64, limit: u32) -> Result<(u64, Vec<crate::store::PassedSlot>)> {
        Ok(self.0.shared.store.passed(id, limit).await?)
    }

    /// Each budget that applies to the chamber at `dir` (its own and its
    /// provider account's) and what is used of it now; none if its
    /// `cryo.toml` does not load.
    pub async fn budgets(&self, id: i64, dir: &Path) -> Result<Vec<crate::supervisor::budget::BudgetUse>> {
        let shared = &self.0.shared;
        let dir = dir.to_path_buf();
        let loaded = crate::chamber::blocking(move || crate::chamber::config::load(&dir, chrono_tz::UTC)).await?;
        let Ok(loaded) = loaded else { return Ok(Vec::new()) };
        let Some(applying) = crate::supervisor::budget::Applying::to(&loaded.config, &shared.config) else {
            return Ok(Vec::new());
        };
        Ok(applying.measured(&shared.store, shared.clock.now(), id).await?)
    }

    /// Watches the system's time zone; when it changes, every chamber
    /// re-plans in the new zone.
    fn follow_the_system_zone(&self) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        crate::zone::follow(move || {
            let _ = tx.send(());
        });
        let weak = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            while rx.recv().await.is_some() {
                let Some(inner) = weak.upgrade() else { return };
                let zone = crate::clock::system_zone();
                let changed = {
                    let mut z = inner.shared.system_tz.write().expect("zone lock");
                    let changed = *z != zone;
                    *z = zone;
                    changed
                };
                if changed {
                    tracing::info!(zone = zone.name(), "the system's time zone changed");
                    for e in inner.chambers.read().expect("registry lock").values() {
                        let _ = e.handle.tx.send(Event::ZoneChanged);
                    }
                }
            }
        });
    }

    /// Tells every chamber the machine goes to sleep (or woke up).
    pub fn power(&self, sleeping: bool) {
        for e in self.0.chambers.read().expect("registry lock").values() {
            let _ = e.handle.tx.send(Event::Power { sleeping });
        }
    }

    /// An agent's call, for the chamber and session its token belongs to.
    pub async fn agent_call(
        &self,
        chamber: i64,
        session: u64,
        call: supervisor::AgentCall,
    ) -> Result<supervisor::AgentReply> {
        let handle = self.handle_of(chamber)?;
        let (reply, rx) = oneshot::channel();
        handle
            .tx
            .send(Event::Agent { session, call: Box::new(call), reply })
            .map_err(|_| Error::Unavailable("the chamber's supervisor has stopped".into()))?;
        rx.await.map_err(|_| Error::Unavailable("the session ended during the call".into()))?
    }

    /// Ends every running session and stops every supervisor.
    pub async fn shutdown(&self) {
        let handles: Vec<Handle> =
            self.0.chambers.read().expect("registry lock").values().map(|e| e.handle.clone()).collect();
        let mut waits = Vec::new();
        for h in handles {
            let (tx, rx) = oneshot::channel();
            if h.tx.send(Event::Shutdown(tx)).is_ok() {
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
    let processes = crate::agent::group::processes_by_wake();
    let procs: Vec<(i32, i32)> = open.iter().filter_map(|s| processes.get(&s.wake_id)).flatten().copied().collect();
    let grace = std::time::Duration::from_secs(shared.config.stop_grace_seconds.min(3));
    crate::agent::group::end_groups(&procs, grace).await;
    Arc::new(processes)
}

/// A chamber another node runs, as its owner last published it; one no
/// live node runs yet shows its desired state.
fn remote_view(r: &ChamberRecord) -> ChamberView {
    let mut view = r.mirror.clone().unwrap_or_default();
    view.state = remote_state(r);
    if r.owner.is_none() || r.mirror.is_none() {
        view.archived = r.archived;
    }
    ChamberView { record: r.clone(), snap: Snapshot { view, bridges: Vec::new(), sandbox: None } }
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
}
