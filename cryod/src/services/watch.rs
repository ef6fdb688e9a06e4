//! One file watcher for every chamber: inbox folders (new messages wake the
//! agent) and the chamber folder itself (`todo.json` and `cryo.toml` edited by
//! hand are re-read). An event is only a hint: supervisors re-read the folder
//! and decide from what is there.
//!
//! On Linux the watch is our own inotify, asking only for what can matter: a
//! file closed after writing, created, renamed in or out, or deleted. A
//! general watcher (notify's) also asks for every open, modification and
//! change of attributes, and a chamber's folder is the working directory of
//! its agent, so every file an agent opens and every line it logs was an
//! event to read and drop (an eighth of cryod's time while wakes ran).
//! Elsewhere notify's recommended watcher does the job.
//!
//! Without a watcher (the user's inotify instances or watches used up:
//! `EMFILE`, `ENOSPC`), the folders are looked at every [`POLL`] and each
//! chamber is told of what changed in its own (`poll`): new mail is seen
//! seconds late rather than at the next wake, and [`Watcher::degraded`]
//! says why (in `cryoctl doctor`).

mod poll;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// What the watcher saw in a chamber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A message file appeared in a watched inbox folder (its name).
    Inbox(String),
    /// `todo.json` changed.
    Todos,
    /// `cryo.toml` changed.
    Config,
    /// Events were lost: an inbox folder is to be read again.
    Rescan,
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
    /// When it was routed: a look without a watcher tells of a file it
    /// sees first only if it changed about then or later (before, the
    /// chamber's boot read it).
    since: std::time::SystemTime,
}

/// Which chamber each watched folder belongs to, and each chamber's folders
/// (so what one chamber watches is found without reading every chamber's
/// routes: with ten thousand chambers, a start or a stop that walked the
/// whole table for each of them was quadratic).
#[derive(Default)]
struct Table {
    /// Each folder's path is one allocation shared by both maps (at
    /// 100,000 chambers their copies were 300 bytes a chamber).
    by_dir: HashMap<Arc<Path>, Route>,
    by_chamber: HashMap<i64, Vec<Arc<Path>>>,
}

impl Table {
    fn get(&self, dir: &Path) -> Option<&Route> {
        self.by_dir.get(dir)
    }

    fn contains(&self, dir: &Path) -> bool {
        self.by_dir.contains_key(dir)
    }

    /// Routes `dir` to `route`; returns the route it replaces.
    fn insert(&mut self, dir: Arc<Path>, route: Route) -> Option<Route> {
        let chamber = route.chamber;
        let old = self.by_dir.insert(dir.clone(), route);
        match &old {
            Some(o) if o.chamber == chamber => {}
            Some(o) => {
                let before = o.chamber;
                self.forget(before, &dir);
                self.by_chamber.entry(chamber).or_default().push(dir);
            }
            None => self.by_chamber.entry(chamber).or_default().push(dir),
        }
        old
    }

    fn remove(&mut self, dir: &Path) -> Option<Route> {
        let route = self.by_dir.remove(dir)?;
        self.forget(route.chamber, dir);
        Some(route)
    }

    fn forget(&mut self, chamber: i64, dir: &Path) {
        if let Some(dirs) = self.by_chamber.get_mut(&chamber) {
            dirs.retain(|d| **d != *dir);
            if dirs.is_empty() {
                self.by_chamber.remove(&chamber);
            }
        }
    }

    /// The folders routed to `chamber`.
    fn of(&self, chamber: i64) -> &[Arc<Path>] {
        self.by_chamber.get(&chamber).map(Vec::as_slice).unwrap_or_default()
    }
}

type Routes = Arc<RwLock<Table>>;

/// The wall clock's time, for what is compared with files' times (a
/// route's, the inotify queue's last quiet, a look's).
fn wall_clock() -> std::time::SystemTime {
    #[allow(clippy::disallowed_methods)] // compared with files' times
    std::time::SystemTime::now()
}

/// What happened to a name in a watched folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Created, written or renamed in.
    Written,
    /// Deleted or renamed away.
    Removed,
}

#[derive(Clone)]
pub struct Watcher {
    inner: Arc<Mutex<Option<backend::Backend>>>,
    routes: Routes,
    /// Why folders are polled rather than watched, once they are.
    degraded: Arc<std::sync::OnceLock<String>>,
}

/// How often folders are looked at again without a watcher.
pub const POLL: std::time::Duration = cryo_proto::WATCH_POLL;

impl Watcher {
    pub fn start() -> Watcher {
        let routes: Routes = Arc::default();
        // A test's way to start without inotify, as when the user's
        // instances are used up.
        let started = match std::env::var_os("CRYO_TEST_NO_INOTIFY") {
            Some(_) => Err(std::io::Error::from_raw_os_error(24)),
            None => backend::Backend::start(routes.clone()).map_err(std::io::Error::other),
        };
        let w = Watcher { inner: Arc::new(Mutex::new(None)), routes, degraded: Arc::default() };
        match started {
            Ok(b) => *w.inner.lock().expect("watcher lock") = Some(b),
            Err(error) => w.degrade(format!("no file watcher ({error})")),
        }
        w
    }

    /// Why folders are polled every [`POLL`] rather than watched, if they are.
    pub fn degraded(&self) -> Option<&str> {
        self.degraded.get().map(String::as_str)
    }

    /// Falls back to polling every folder, once, saying why.
    fn degrade(&self, why: String) {
        if self.degraded.set(why.clone()).is_err() {
            return;
        }
        tracing::error!(
            why = %why,
            "folders are polled every {}s instead: new mail is seen that late (free inotify instances or watches: \
             sysctl fs.inotify.max_user_instances / max_user_watches)",
            POLL.as_secs()
        );
        let routes = self.routes.clone();
        let spawned = std::thread::Builder::new().name("cryo-poll".into()).spawn(move || {
            let mut looks = poll::Looks::default();
            loop {
                std::thread::sleep(POLL);
                looks.look(&routes, wall_clock());
            }
        });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot poll either: new mail is seen only at the next wake");
        }
    }

    /// Watches the chamber folder `root` and `inboxes` for `chamber`;
    /// called again when the chamber's `watch_dirs` change. A missing inbox
    /// is made in `opened` (the chamber folder, held open), if it could be
    /// opened; the folders are routed either way (a chamber whose folder
    /// comes back is then seen, by its events or by the polls).
    /// Folders that stay watched are never unwatched in between, so no
    /// event is lost while `cryo.toml` is being rewritten.
    ///
    /// The routing table is never locked while the backend is called: the
    /// backend's thread may be inside `dispatch` (which reads the table)
    /// while it answers our request, and would wait for us forever.
    pub fn watch(
        &self,
        chamber: i64,
        root: &Path,
        opened: Option<&crate::chamber::Dir>,
        inboxes: &[PathBuf],
        sink: Sink,
    ) {
        let mut dirs: Vec<(Arc<Path>, Role)> = vec![(root.into(), Role::Root)];
        dirs.extend(inboxes.iter().map(|d| (Arc::from(d.as_path()), Role::Inbox)));
        // Route first, so no event of a new watch is dropped; then drop the
        // routes this chamber no longer needs.
        let (added, stale): (Vec<Arc<Path>>, Vec<Arc<Path>>) = {
            let mut routes = self.routes.write().expect("routes lock");
            let mut added = Vec::new();
            for (dir, role) in &dirs {
                let old = routes.insert(
                    dir.clone(),
                    Route { chamber, role: *role, sink: sink.clone(), for_owner: false, since: wall_clock() },
                );
                if old.is_none_or(|o| o.chamber != chamber) {
                    added.push(dir.clone());
                }
            }
            let stale: Vec<Arc<Path>> =
                routes.of(chamber).iter().filter(|d| !dirs.iter().any(|(w, _)| w == *d)).cloned().collect();
            for d in &stale {
                routes.remove(d);
            }
            (added, stale)
        };
        // A folder is made where it is missing once, when it is first routed.
        if let Some(opened) = opened {
            for d in added.iter().filter(|d| inboxes.iter().any(|i| **i == ***d)) {
                let _ = crate::chamber::make_dir_in(opened, d);
            }
        }
        let mut guard = self.inner.lock().expect("watcher lock");
        let Some(b) = guard.as_mut() else { return };
        let mut failed = None;
        for dir in &added {
            if let Err(error) = b.watch(dir) {
                tracing::warn!(dir = %dir.display(), %error, "cannot watch");
                if backend::at_limit(&error) {
                    failed = Some(format!("cannot watch {}: {error}", dir.display()));
                }
            }
        }
        for dir in &stale {
            b.unwatch(dir);
        }
        drop(guard);
        if let Some(why) = failed {
            self.degrade(why);
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
            if routes.contains(inbox) {
                return;
            }
            routes
                .insert(inbox.into(), Route { chamber, role: Role::Inbox, sink, for_owner: true, since: wall_clock() });
        }
        let mut guard = self.inner.lock().expect("watcher lock");
        if let Some(b) = guard.as_mut()
            && let Err(error) = b.watch(inbox)
        {
            tracing::warn!(dir = %inbox.display(), %error, "cannot watch");
        }
    }

    pub fn unwatch(&self, chamber: i64) {
        self.unwatch_where(chamber, |_| true);
    }

    /// Ends a [`Watcher::watch_for_owner`] of `chamber`.
    pub fn unwatch_for_owner(&self, chamber: i64) {
        self.unwatch_where(chamber, |r| r.for_owner);
    }

    /// Unwatches the folders of `chamber` whose route is `which`.
    fn unwatch_where(&self, chamber: i64, which: impl Fn(&Route) -> bool) {
        let dirs: Vec<Arc<Path>> = {
            let mut routes = self.routes.write().expect("routes lock");
            let dirs: Vec<Arc<Path>> =
                routes.of(chamber).iter().filter(|d| routes.get(d).is_some_and(&which)).cloned().collect();
            for d in &dirs {
                routes.remove(d);
            }
            dirs
        };
        let mut guard = self.inner.lock().expect("watcher lock");
        if let Some(b) = guard.as_mut() {
            for d in dirs {
                b.unwatch(&d);
            }
        }
    }
}

/// Tells the chamber that watches `dir` what happened to `name` in it.
fn dispatch(routes: &Routes, dir: &Path, name: &str, seen: Seen) {
    if name.starts_with('.') {
        return;
    }
    let routes = routes.read().expect("routes lock");
    let Some(route) = routes.get(dir) else { return };
    let change = match route.role {
        Role::Inbox if name.ends_with(".md") && seen == Seen::Written => Change::Inbox(name.to_string()),
        Role::Root if name == "todo.json" => Change::Todos,
        Role::Root if name == "cryo.toml" => Change::Config,
        _ => return,
    };
    (route.sink)(change);
}

#[cfg(target_os = "linux")]
mod backend {
    //! inotify, read by a thread of its own.

    use std::collections::HashMap;
    use std::ffi::OsStr;
    use std::os::fd::AsFd;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

    use super::{Routes, Seen};

    /// Written (closed after writing, created, renamed in) or gone.
    fn mask() -> AddWatchFlags {
        AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
    }

    pub struct Backend {
        ino: Arc<Inotify>,
        /// Each watch's folder, for the reading thread.
        dirs: Arc<Mutex<HashMap<WatchDescriptor, Arc<Path>>>>,
        wds: HashMap<Arc<Path>, WatchDescriptor>,
    }

    /// The user's inotify watches or instances are used up.
    pub fn at_limit(e: &nix::errno::Errno) -> bool {
        matches!(e, nix::errno::Errno::ENOSPC | nix::errno::Errno::EMFILE)
    }

    impl Backend {
        pub fn start(routes: Routes) -> std::io::Result<Backend> {
            let ino = Arc::new(Inotify::init(InitFlags::IN_CLOEXEC)?);
            let dirs: Arc<Mutex<HashMap<WatchDescriptor, Arc<Path>>>> = Arc::default();
            let (reader, names) = (ino.clone(), dirs.clone());
            std::thread::Builder::new().name("cryod-watch".into()).spawn(move || read(&reader, &names, &routes))?;
            Ok(Backend { ino, dirs, wds: HashMap::new() })
        }

        pub fn watch(&mut self, dir: &Path) -> nix::Result<()> {
            // Named under the lock, so the reader never sees an unknown watch.
            let mut dirs = self.dirs.lock().expect("watch names lock");
            // A folder that is a link is not watched through (its reads
            // refuse it too).
            let flags = mask() | AddWatchFlags::IN_DONT_FOLLOW | AddWatchFlags::IN_ONLYDIR;
            let wd = self.ino.add_watch(dir, flags)?;
            let dir: Arc<Path> = dir.into();
            dirs.insert(wd, dir.clone());
            self.wds.insert(dir, wd);
            Ok(())
        }

        pub fn unwatch(&mut self, dir: &Path) {
            if let Some(wd) = self.wds.remove(dir) {
                self.dirs.lock().expect("watch names lock").remove(&wd);
                let _ = self.ino.rm_watch(wd);
            }
        }
    }

    /// Whether the queue of events holds none now.
    fn empty(ino: &Inotify) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds = [PollFd::new(ino.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::ZERO).is_ok_and(|ready| ready == 0)
    }

    fn read(ino: &Inotify, dirs: &Mutex<HashMap<WatchDescriptor, Arc<Path>>>, routes: &Routes) {
        // When the queue was last seen empty: events lost to its overflow
        // were sent later.
        let mut quiet = super::wall_clock();
        loop {
            if empty(ino) {
                quiet = super::wall_clock();
            }
            let events = match ino.read_events() {
                Ok(e) => e,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(error) => {
                    tracing::error!(%error, "the file watcher failed: new mail is seen only at the next wake");
                    return;
                }
            };
            for ev in events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    super::poll::lost_since(routes, quiet);
                    continue;
                }
                let Some(name) = ev.name.as_deref().and_then(|n| OsStr::from_bytes(n.as_bytes()).to_str()) else {
                    continue;
                };
                let seen = if ev.mask.intersects(AddWatchFlags::IN_DELETE | AddWatchFlags::IN_MOVED_FROM) {
                    Seen::Removed
                } else {
                    Seen::Written
                };
                let Some(dir) = dirs.lock().expect("watch names lock").get(&ev.wd).cloned() else { continue };
                super::dispatch(routes, &dir, name, seen);
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod backend {
    //! notify's recommended watcher (FSEvents on macOS).

    use std::path::Path;

    use notify::{EventKind, RecursiveMode, Watcher as _};

    use super::{Routes, Seen};

    pub struct Backend(notify::RecommendedWatcher);

    /// The user's watches are used up.
    pub fn at_limit(e: &notify::Error) -> bool {
        matches!(e.kind, notify::ErrorKind::MaxFilesWatch)
    }

    impl Backend {
        pub fn start(routes: Routes) -> notify::Result<Backend> {
            let w = notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
                Ok(ev) => {
                    let seen = match ev.kind {
                        EventKind::Remove(_) => Seen::Removed,
                        EventKind::Create(_) | EventKind::Modify(_) => Seen::Written,
                        EventKind::Access(notify::event::AccessKind::Close(notify::event::AccessMode::Write)) => {
                            Seen::Written
                        }
                        _ => return,
                    };
                    for path in &ev.paths {
                        if let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) {
                            super::dispatch(&routes, dir, name, seen);
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "file watcher error"),
            })?;
            Ok(Backend(w))
        }

        pub fn watch(&mut self, dir: &Path) -> notify::Result<()> {
            self.0.watch(dir, RecursiveMode::NonRecursive)
        }

        pub fn unwatch(&mut self, dir: &Path) {
            let _ = self.0.unwatch(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chamber::Dir;
    use std::sync::mpsc;
    use std::time::Duration;

    fn sink(tag: &'static str, tx: &mpsc::Sender<(&'static str, Change)>) -> Sink {
        let tx = Mutex::new(tx.clone());
        Arc::new(move |c| {
            let _ = tx.lock().unwrap().send((tag, c));
        })
    }

    type Heard = mpsc::Receiver<(&'static str, Change)>;

    /// A chamber folder with an inbox, a new watcher (watching nothing
    /// yet), and where its sinks report.
    fn rig() -> (tempfile::TempDir, PathBuf, PathBuf, Watcher, mpsc::Sender<(&'static str, Change)>, Heard) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let inbox = root.join("messages/inbox");
        std::fs::create_dir_all(&inbox).unwrap();
        let (tx, rx) = mpsc::channel();
        (dir, root, inbox, Watcher::start(), tx, rx)
    }

    /// The first event heard within a few seconds.
    fn heard(rx: &Heard) -> (&'static str, Change) {
        rx.recv_timeout(Duration::from_secs(10)).expect("an event")
    }

    /// The table finds each chamber's folders by its index, and keeps that
    /// index true as folders are routed, moved to another chamber and
    /// removed.
    #[test]
    fn the_table_knows_each_chambers_folders() {
        let route = |chamber| Route {
            chamber,
            role: Role::Inbox,
            sink: Arc::new(|_| {}),
            for_owner: false,
            since: wall_clock(),
        };
        let mut t = Table::default();
        for chamber in 1..=1000 {
            t.insert(Path::new(&format!("/c/{chamber}")).into(), route(chamber));
            t.insert(Path::new(&format!("/c/{chamber}/inbox")).into(), route(chamber));
        }
        assert_eq!(t.of(7), [Arc::from(Path::new("/c/7")), Arc::from(Path::new("/c/7/inbox"))]);
        // Routed again to its chamber: listed once.
        t.insert(Path::new("/c/7").into(), route(7));
        assert_eq!(t.of(7).len(), 2);
        // Taken by another chamber: listed under it alone.
        t.insert(Path::new("/c/7/inbox").into(), route(8));
        assert_eq!(t.of(7), [Arc::from(Path::new("/c/7"))]);
        assert_eq!(t.of(8).len(), 3);
        t.remove(Path::new("/c/7"));
        assert!(t.of(7).is_empty() && !t.by_chamber.contains_key(&7));
        assert_eq!(t.get(Path::new("/c/7/inbox")).map(|r| r.chamber), Some(8));
        assert_eq!(t.by_dir.len(), 1999);
    }

    /// Unwatching a chamber among thousands leaves every other chamber's
    /// routes.
    #[test]
    fn unwatching_one_chamber_leaves_the_others() {
        let (_dir, root, inbox, w, tx, _rx) = rig();
        let other = tempfile::tempdir().unwrap();
        w.watch(1, &root, Dir::open(&root).ok().as_ref(), std::slice::from_ref(&inbox), sink("a", &tx));
        w.watch(2, other.path(), None, &[], sink("b", &tx));
        w.unwatch(1);
        let routes = w.routes.read().unwrap();
        assert!(routes.of(1).is_empty() && routes.get(&inbox).is_none());
        assert_eq!(routes.of(2), [Arc::from(other.path())]);
    }

    /// A watch held for another node's chamber never takes the place of
    /// this node's own supervisor's (they race when a chamber is added or
    /// taken up while the view of the fleet is refreshed), and ending it
    /// leaves the supervisor's watch alone; a supervisor's watch replaces it.
    #[test]
    fn a_watch_for_the_owner_never_displaces_the_supervisors() {
        let (_dir, root, inbox, w, tx, rx) = rig();
        w.watch(1, &root, Dir::open(&root).ok().as_ref(), std::slice::from_ref(&inbox), sink("supervisor", &tx));
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
        w.watch(1, &root, Dir::open(&root).ok().as_ref(), std::slice::from_ref(&inbox), sink("supervisor", &tx));
        std::fs::write(inbox.join("c.md"), "x").unwrap();
        assert_eq!(heard(&rx), ("supervisor", Change::Inbox("c.md".into())));
    }

    /// Without a watcher (the user's inotify used up), every folder is
    /// looked at again every POLL, and the watcher says why.
    #[test]
    fn without_inotify_folders_are_polled_and_it_says_so() {
        let (_dir, root, inbox, w, tx, rx) = rig();
        assert_eq!(w.degraded(), None);
        let bare = Watcher { inner: Arc::new(Mutex::new(None)), routes: Arc::default(), degraded: Arc::default() };
        bare.degrade("no file watcher (Too many open files (os error 24))".into());
        assert!(bare.degraded().unwrap().contains("os error 24"));
        bare.watch(1, &root, Dir::open(&root).ok().as_ref(), std::slice::from_ref(&inbox), sink("c", &tx));
        std::fs::write(inbox.join("a.md"), "x").unwrap();
        let got = rx.recv_timeout(POLL * 3).expect("a poll");
        assert!(matches!(got, ("c", Change::Rescan | Change::Todos | Change::Config)), "{got:?}");
        drop(w);
    }

    /// What matters is heard however it is written (in place, renamed in,
    /// deleted); what an agent does in its folder besides (opening files,
    /// appending to a log, writing files of its own) is never an event.
    #[test]
    fn only_what_a_chamber_reads_is_heard() {
        use std::io::Write;
        let (_dir, root, inbox, w, tx, rx) = rig();
        std::fs::write(root.join("notes.md"), "x").unwrap();
        w.watch(1, &root, Dir::open(&root).ok().as_ref(), std::slice::from_ref(&inbox), sink("c", &tx));
        // The agent at work: reads, a log kept open and appended to, its own files.
        let _ = std::fs::read(root.join("notes.md")).unwrap();
        let mut log = std::fs::OpenOptions::new().create(true).append(true).open(root.join("cryo-agent.log")).unwrap();
        for _ in 0..100 {
            writeln!(log, "working").unwrap();
        }
        std::fs::write(root.join("scratch.txt"), "y").unwrap();
        std::fs::write(root.join(".todo.json.1.tmp"), "[]").unwrap();
        // Then what a chamber must see, in order.
        std::fs::write(root.join("todo.json"), "[]").unwrap();
        assert_eq!(heard(&rx), ("c", Change::Todos), "in place");
        while rx.recv_timeout(Duration::from_millis(200)).is_ok() {}
        std::fs::rename(root.join(".todo.json.1.tmp"), root.join("todo.json")).unwrap();
        assert_eq!(heard(&rx), ("c", Change::Todos), "renamed in");
        std::fs::remove_file(root.join("todo.json")).unwrap();
        assert_eq!(heard(&rx), ("c", Change::Todos), "deleted");
        std::fs::write(root.join("cryo.toml"), "").unwrap();
        assert_eq!(heard(&rx), ("c", Change::Config));
        while rx.recv_timeout(Duration::from_millis(200)).is_ok() {}
        std::fs::write(inbox.join(".m.tmp"), "hello").unwrap();
        std::fs::rename(inbox.join(".m.tmp"), inbox.join("m.md")).unwrap();
        assert_eq!(heard(&rx), ("c", Change::Inbox("m.md".into())));
        // Nothing else was heard: the agent's own work made no event.
        drop(log);
        std::fs::remove_file(root.join("scratch.txt")).unwrap();
        let rest: Vec<_> = std::iter::from_fn(|| rx.recv_timeout(Duration::from_millis(300)).ok()).collect();
        assert!(rest.iter().all(|(_, c)| matches!(c, Change::Inbox(n) if n == "m.md")), "{rest:?}");
    }
}
