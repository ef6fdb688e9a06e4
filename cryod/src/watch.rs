//! One file watcher for every chamber: inbox folders (new messages wake the
//! agent) and the chamber folder itself (`todo.json` and `cryo.toml` edited by
//! hand are re-read). An event is only a hint: supervisors re-read the folder
//! and decide from what is there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use notify::{EventKind, RecursiveMode, Watcher as _};

/// What the watcher saw in a chamber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A message file appeared in a watched inbox folder (its name).
    Inbox(String),
    /// `todo.json` changed.
    Todos,
    /// `cryo.toml` changed.
    Config,
}

/// Where a chamber receives what the watcher saw.
pub type Sink = Arc<dyn Fn(Change) + Send + Sync>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Inbox,
    Root,
}

struct Route {
    chamber: i64,
    role: Role,
    sink: Sink,
    /// Held for another node's chamber ([`Watcher::watch_for_owner`]).
    for_owner: bool,
}

type Routes = Arc<RwLock<HashMap<PathBuf, Route>>>;

#[derive(Clone)]
pub struct Watcher {
    inner: Arc<Mutex<Option<notify::RecommendedWatcher>>>,
    routes: Routes,
}

impl Watcher {
    pub fn start() -> Watcher {
        let routes: Routes = Arc::default();
        let r = routes.clone();
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
            Ok(ev) => dispatch(&r, ev),
            Err(error) => tracing::warn!(%error, "file watcher error"),
        });
        let inner = match watcher {
            Ok(w) => Some(w),
            Err(error) => {
                tracing::error!(%error, "no file watcher: new mail is seen only at the next wake");
                None
            }
        };
        Watcher { inner: Arc::new(Mutex::new(inner)), routes }
    }

    /// Watches `root` and `inboxes` for `chamber`; called again when the
    /// chamber's `watch_dirs` change. Folders that stay watched are never
    /// unwatched in between, so no event is lost while `cryo.toml` is being
    /// rewritten (the reload after its truncation must still see the write
    /// that completes it).
    ///
    /// The routing table is never locked while notify is called: notify's
    /// thread may be inside `dispatch` (which reads the table) while it
    /// answers our request, and would wait for us forever.
    pub fn watch(&self, chamber: i64, root: &Path, inboxes: &[PathBuf], sink: Sink) {
        let mut dirs = vec![(root.to_path_buf(), Role::Root)];
        for d in inboxes {
            let _ = crate::chamber::make_dir_in(root, d);
            dirs.push((d.clone(), Role::Inbox));
        }
        // Route first, so no event of a new watch is dropped; then drop the
        // routes this chamber no longer needs.
        let (added, stale): (Vec<PathBuf>, Vec<PathBuf>) = {
            let mut routes = self.routes.write().expect("routes lock");
            let mut added = Vec::new();
            for (dir, role) in &dirs {
                let old =
                    routes.insert(dir.clone(), Route { chamber, role: *role, sink: sink.clone(), for_owner: false });
                if old.is_none_or(|o| o.chamber != chamber) {
                    added.push(dir.clone());
                }
            }
            let stale: Vec<PathBuf> = routes
                .iter()
                .filter(|(d, r)| r.chamber == chamber && !dirs.iter().any(|(w, _)| w == *d))
                .map(|(d, _)| d.clone())
                .collect();
            for d in &stale {
                routes.remove(d);
            }
            (added, stale)
        };
        let mut guard = self.inner.lock().expect("watcher lock");
        let Some(w) = guard.as_mut() else { return };
        for dir in &added {
            if let Err(error) = w.watch(dir, RecursiveMode::NonRecursive) {
                tracing::warn!(dir = %dir.display(), %error, "cannot watch");
            }
        }
        for dir in &stale {
            let _ = w.unwatch(dir);
        }
    }

    /// Watches the inbox of a chamber another node runs, on its behalf
    /// (`sink` tells the owner), but never in place of a route this node's
    /// own supervisor of that chamber holds: the view of the fleet is
    /// refreshed while chambers are added and taken up here, so a remote
    /// watch may come after the supervisor's own. A supervisor's
    /// [`Watcher::watch`] replaces it; [`Watcher::unwatch_for_owner`]
    /// removes it (and nothing a supervisor holds).
    pub fn watch_for_owner(&self, chamber: i64, inbox: &Path, sink: Sink) {
        {
            let mut routes = self.routes.write().expect("routes lock");
            if routes.contains_key(inbox) {
                return;
            }
            routes.insert(inbox.to_path_buf(), Route { chamber, role: Role::Inbox, sink, for_owner: true });
        }
        let mut guard = self.inner.lock().expect("watcher lock");
        if let Some(w) = guard.as_mut()
            && let Err(error) = w.watch(inbox, RecursiveMode::NonRecursive)
        {
            tracing::warn!(dir = %inbox.display(), %error, "cannot watch");
        }
    }

    pub fn unwatch(&self, chamber: i64) {
        self.unwatch_where(|r| r.chamber == chamber);
    }

    /// Ends a [`Watcher::watch_for_owner`] of `chamber`.
    pub fn unwatch_for_owner(&self, chamber: i64) {
        self.unwatch_where(|r| r.chamber == chamber && r.for_owner);
    }

    fn unwatch_where(&self, which: impl Fn(&Route) -> bool) {
        let dirs: Vec<PathBuf> = {
            let mut routes = self.routes.write().expect("routes lock");
            let dirs: Vec<PathBuf> = routes.iter().filter(|(_, r)| which(r)).map(|(d, _)| d.clone()).collect();
            for d in &dirs {
                routes.remove(d);
            }
            dirs
        };
        let mut guard = self.inner.lock().expect("watcher lock");
        if let Some(w) = guard.as_mut() {
            for d in dirs {
                let _ = w.unwatch(&d);
            }
        }
    }
}

fn dispatch(routes: &Routes, ev: notify::Event) {
    // A file closed after writing is the surest sign a hand edit is complete.
    let closed_written =
        matches!(ev.kind, EventKind::Access(notify::event::AccessKind::Close(notify::event::AccessMode::Write)));
    let relevant =
        closed_written || matches!(ev.kind, EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_));
    if !relevant {
        return;
    }
    let routes = routes.read().expect("routes lock");
    for path in &ev.paths {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else { continue };
        if name.starts_with('.') {
            continue;
        }
        let Some(route) = routes.get(dir) else { continue };
        let change = match route.role {
            Role::Inbox if name.ends_with(".md") && !matches!(ev.kind, EventKind::Remove(_)) => {
                Change::Inbox(name.to_string())
            }
            Role::Root if name == "todo.json" => Change::Todos,
            Role::Root if name == "cryo.toml" => Change::Config,
            _ => continue,
        };
        (route.sink)(change);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn sink(tag: &'static str, tx: &mpsc::Sender<(&'static str, Change)>) -> Sink {
        let tx = Mutex::new(tx.clone());
        Arc::new(move |c| {
            let _ = tx.lock().unwrap().send((tag, c));
        })
    }

    /// The first event heard within a few seconds.
    fn heard(rx: &mpsc::Receiver<(&'static str, Change)>) -> (&'static str, Change) {
        rx.recv_timeout(Duration::from_secs(10)).expect("an event")
    }

    /// A watch held for another node's chamber never takes the place of
    /// this node's own supervisor's (they race when a chamber is added or
    /// taken up while the view of the fleet is refreshed), and ending it
    /// leaves the supervisor's watch alone; a supervisor's watch replaces it.
    #[test]
    fn a_watch_for_the_owner_never_displaces_the_supervisors() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let inbox = root.join("messages/inbox");
        std::fs::create_dir_all(&inbox).unwrap();
        let w = Watcher::start();
        let (tx, rx) = mpsc::channel();
        w.watch(1, &root, std::slice::from_ref(&inbox), sink("supervisor", &tx));
        w.watch_for_owner(1, &inbox, sink("owner", &tx));
        w.unwatch_for_owner(1);
        std::fs::write(inbox.join("a.md"), "x").unwrap();
        assert_eq!(heard(&rx), ("supervisor", Change::Inbox("a.md".into())));
        std::fs::write(root.join("todo.json"), "[]").unwrap();
        while let Ok(e) = rx.recv_timeout(Duration::from_millis(500)) {
            assert_eq!(e.0, "supervisor", "{e:?}");
        }
        // The other way round: the supervisor's watch takes the owner's place.
        w.unwatch(1);
        w.watch_for_owner(1, &inbox, sink("owner", &tx));
        std::fs::write(inbox.join("b.md"), "x").unwrap();
        assert_eq!(heard(&rx), ("owner", Change::Inbox("b.md".into())));
        while rx.recv_timeout(Duration::from_millis(300)).is_ok() {}
        w.watch(1, &root, std::slice::from_ref(&inbox), sink("supervisor", &tx));
        std::fs::write(inbox.join("c.md"), "x").unwrap();
        assert_eq!(heard(&rx), ("supervisor", Change::Inbox("c.md".into())));
    }
}
