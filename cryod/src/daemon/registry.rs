//! The registry: chambers added, scaffolded and taken up here, and this
//! node's view of the chambers other nodes of a fleet run.

use std::path::{Path, PathBuf};

use super::*;
use crate::chamber::scaffold;
use crate::error::{Error, Result};
use crate::store::ChamberRecord;
use crate::supervisor::{self, Event};

impl Daemon {
    /// Takes over a chamber this node has just claimed (with its new
    /// fence): what its last owner left open (sessions, claimed mail, the
    /// agents still running on this machine) is recovered first.
    pub async fn adopt(&self, record: ChamberRecord) {
        let _one = self.0.starting.lock().await;
        if self.runs(record.id) {
            return;
        }
        self.take_up(record).await;
    }

    /// Starts again a chamber whose supervisor fell (see `mend`), unless
    /// it was removed, let go or started again meanwhile; its new
    /// supervisor's entry takes the fallen one's place.
    /// `Err`: its record could not be read (to be tried again).
    pub(super) async fn start_again(&self, id: i64) -> Result<()> {
        let _one = self.0.starting.lock().await;
        if !self.chambers().get(&id).is_some_and(|e| e.handle.tx.is_closed()) {
            return Ok(());
        }
        // The store's record, whole: the registry's lacks what only a boot
        // reads (the accepted settings, the health), and its desired state
        // is the one it was added with.
        if let Some(record) = self.0.shared.store.chamber(id).await? {
            self.take_up(record).await;
        }
        Ok(())
    }

    /// What its last supervisor left open is recovered, then it runs here.
    /// Callers hold `starting`.
    async fn take_up(&self, record: ChamberRecord) {
        let shared = &self.0.shared;
        let (open, open_unknown) = match shared.store.open_sessions(Some(record.id)).await {
            Ok(open) => (open, false),
            Err(error) => {
                tracing::error!(chamber = %record.name, %error, "cannot read the sessions its last owner left open");
                (Vec::new(), true)
            }
        };
        if !open.is_empty() {
            tracing::warn!(chamber = %record.name, sessions = open.len(), "recovering sessions its last owner left open");
        }
        let processes = end_leftovers(shared, &open).await;
        self.run_here(record, supervisor::Recovery { open, processes, rows: None, open_unknown }).await;
    }

    /// Starts running a chamber here: its supervisor, its registry entry.
    /// Callers hold `starting` and have checked that it does not run here
    /// yet: a chamber just added is also the database's "owned by this
    /// node, not run here" to the ownership round, and must not get two
    /// supervisors.
    pub(super) async fn run_here(&self, mut record: ChamberRecord, recovery: supervisor::Recovery) {
        let shared = &self.0.shared;
        record.owner_name = shared.store.fleet().map(|pg| pg.node().name.clone());
        let spawned = supervisor::spawn(shared.clone(), record.clone(), recovery).await;
        tracing::info!(chamber = %record.name, fence = record.fence, "chamber runs here");
        let (id, name) = (record.id, record.name.clone());
        self.chambers_mut().insert(id, Entry::new(record, spawned.handle));
        self.fell_at_boot(id, spawned.fell);
        // (A refresh of the fleet's view may have listed it as remote meanwhile.)
        self.remote_mut().remove(&id);
        // Live views (and the service manager's status line) learn of it.
        shared.notify(id, crate::services::runtime::NoticeKind::Status);
        if shared.names.add_known(&name) {
            self.recheck_faulted();
        }
    }

    /// Keeps the names `[[on_end]]` may use the registry's; a chamber
    /// faulted on a name it did not know reads its `cryo.toml` again.
    pub(super) fn note_names(&self) {
        let names: std::collections::HashSet<String> = {
            let (local, remote, waiting) = (self.chambers(), self.remote(), self.0.loading.pending());
            let booted = local.values().map(|e| e.record.name.clone());
            booted.chain(remote.values().chain(waiting.values()).map(|r| r.name.clone())).collect()
        };
        if self.0.shared.names.set_known(names) {
            self.recheck_faulted();
        }
    }

    /// A chamber faulted on a name it did not know reads its `cryo.toml`
    /// again (the names changed).
    fn recheck_faulted(&self) {
        // Most often none: a registration then costs no walk of every chamber.
        let waiting = self.0.shared.names.waiting();
        if waiting.is_empty() {
            return;
        }
        let chambers = self.chambers();
        for e in waiting.iter().filter_map(|name| chambers.named(name)) {
            if e.handle.snapshot.borrow().view.state == State::Faulted {
                let _ = e.handle.tx.send(Event::Watched(crate::services::watch::Change::Config));
            }
        }
    }

    /// Asks a chamber this node runs to read its inbox again (mail written
    /// where the watcher cannot see it).
    pub fn rescan(&self, id: i64) {
        if let Some(e) = self.chambers().get(&id) {
            let _ = e.handle.tx.send(Event::Rescan);
        }
    }

    /// What the database says of the chambers this node does not run.
    pub fn set_remote(&self, records: Vec<ChamberRecord>) {
        let local = self.chambers();
        let mut remote = self.remote_mut();
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
            self.0.shared.notify(id, crate::services::runtime::NoticeKind::Status);
        }
        self.note_names();
    }

    /// On a shared filesystem, another machine's writes reach no watcher of
    /// the owner's: this node watches the inboxes of the chambers others
    /// run in its domain, and tells their owner of new mail (which reads
    /// its inbox again at once).
    pub(super) fn watch_remote_inboxes(&self, inboxes: &[(i64, PathBuf)]) {
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
            let sink: crate::services::watch::Sink = Arc::new(move |c| {
                if let crate::services::watch::Change::Inbox(_) | crate::services::watch::Change::Rescan = c {
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
        let sandbox = sandbox.unwrap_or_else(cryo_session::Sandbox::strongest);
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
        let new = crate::store::NewChamber {
            base_name: base,
            exact_name: exact,
            path: path.to_string(),
            created_at: self.now(),
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
            self.remote_mut().insert(record.id, record.clone());
            self.note_names();
        }
        if existed {
            // The operator adds it again: its settings as they are now are
            // accepted (a new chamber's are when first read). One that does
            // not load is shown as faulted, as before.
            match self.trust(&ChamberRef::Name(record.name.clone()), None, false).await {
                Ok(_) | Err(Error::Precondition(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let view = self.view_of(record.id).ok_or_else(|| Error::Internal("chamber vanished".into()))?;
        Ok(Added { view, already_registered: existed, init: scaffolded })
    }
}
