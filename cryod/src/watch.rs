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
                let old = routes.insert(dir.clone(), Route { chamber, role: *role, sink: sink.clone() });
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

    pub fn unwatch(&self, chamber: i64) {
        let dirs: Vec<PathBuf> = {
            let mut routes = self.routes.write().expect("routes lock");
            let dirs: Vec<PathBuf> =
                routes.iter().filter(|(_, r)| r.chamber == chamber).map(|(d, _)| d.clone()).collect();
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
