//! Folders looked at without a watcher: every [`POLL`](super::POLL), each
//! routed folder's chamber is told of what changed in it since the last
//! look, as its events would have told it: the inbox folder (a message
//! renamed in or out moves its times), `cryo.toml` and `todo.json`.
//!
//! A look compares stamps (inode, size, modification and change times,
//! without following a link), not contents, and tells nothing of what did
//! not change: telling every chamber to read everything again at each look
//! cost every chamber a read of its folder every few seconds, and woke
//! every frozen chamber (`supervisor::freeze`), so none stayed frozen. A
//! file seen for the first time is told of if it changed about when its
//! folder was routed or later (the chamber's boot read what was there
//! before); a stamp that is still recent is told of again at the next look
//! (a second write within the clock's tick may leave it as it was).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Change, Role, Routes, Sink};

/// A stamp this close to the look is told of again at the next look.
const RECENT: Duration = Duration::from_secs(2);

/// A folder's stamps: the inbox folder's, or the chamber folder's
/// `cryo.toml` and `todo.json`. `None`: missing or unreadable.
type Stamps = [Option<Stamp>; 2];

/// What a look compares; a `recent` stamp is told of at the next look too.
#[derive(Clone, Copy)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    /// The change time (ctime), as the wall clock's.
    changed: SystemTime,
    recent: bool,
}

impl Stamp {
    fn of(path: &Path, now: SystemTime) -> Option<Stamp> {
        let m = std::fs::symlink_metadata(path).ok()?;
        let changed = UNIX_EPOCH + Duration::new(m.ctime().max(0) as u64, m.ctime_nsec().clamp(0, 999_999_999) as u32);
        let recent = now.duration_since(changed).map_or(true, |d| d < RECENT);
        Some(Stamp { ino: m.ino(), size: m.size(), mtime: (m.mtime(), m.mtime_nsec()), changed, recent })
    }

    /// Whether a file first seen by a look tells of a change: it changed
    /// about when its folder was routed (`since`), or later.
    fn new_since(now: Option<Stamp>, since: SystemTime) -> bool {
        now.is_some_and(|n| n.changed + RECENT >= since)
    }
}

/// What a look keeps of a file until the next: a digest of its stamp (0:
/// missing or unreadable), and whether the stamp was recent. (Whole stamps
/// kept were about 190 bytes a folder, with the map made anew each look:
/// 78 MB at 100,000 chambers.)
#[derive(Clone, Copy, Default)]
struct Kept {
    digest: u64,
    recent: bool,
}

impl Kept {
    fn of(stamp: Option<Stamp>) -> Kept {
        stamp.map_or_else(Kept::default, |s| {
            let mut h = std::hash::DefaultHasher::new();
            (s.ino, s.size, s.mtime, s.changed).hash(&mut h);
            Kept { digest: h.finish().max(1), recent: s.recent }
        })
    }

    /// Whether `now` tells of a change from what was kept.
    fn moved(self, now: Kept) -> bool {
        self.recent || self.digest != now.digest
    }
}

/// The poller's memory between looks: each folder's files as last seen,
/// and which look saw them (a folder the last look did not see is no
/// longer routed, and is forgotten).
#[derive(Default)]
pub(super) struct Looks {
    seen: HashMap<Arc<Path>, ([Kept; 2], bool)>,
    /// Flips at each look.
    this: bool,
}

impl Looks {
    /// One look at every routed folder: each chamber is told of what
    /// changed since the last look (a folder not looked at before: of what
    /// changed since it was routed).
    pub(super) fn look(&mut self, routes: &Routes, now: SystemTime) {
        self.this = !self.this;
        let mut told = 0;
        for (dir, role, sink, since) in every_route(routes) {
            let stamps = stamps(&dir, role, now);
            let kept = stamps.map(Kept::of);
            told += match self.seen.get_mut(&dir) {
                Some((before, seen)) => {
                    let (was, this) = (*before, self.this);
                    (*before, *seen) = (kept, this);
                    tell(role, &sink, |i| was[i].moved(kept[i]))
                }
                None => {
                    self.seen.insert(dir, (kept, self.this));
                    tell(role, &sink, |i| Stamp::new_since(stamps[i], since))
                }
            };
        }
        let this = self.this;
        self.seen.retain(|_, (_, seen)| *seen == this);
        tracing::debug!(folders = self.seen.len(), told, "the folders looked at");
    }
}

/// Events were lost, the kernel's queue of them full, at some time after
/// `quiet` (when the queue was last seen empty): each chamber is told of
/// what changed about then or later, by its files' stamps, as a first look
/// tells. (Telling every chamber to read everything again thawed every
/// frozen chamber at once.) Returns how many changes were told.
pub(super) fn lost_since(routes: &Routes, quiet: SystemTime) -> usize {
    let routed = every_route(routes);
    let folders = routed.len();
    let told: usize = routed
        .into_iter()
        .map(|(dir, role, sink, _)| {
            // (Their `recent` is not asked for here.)
            let stamps = stamps(&dir, role, quiet);
            // A file removed then leaves its folder changed.
            let emptied = role == Role::Root && Stamp::new_since(Stamp::of(&dir, quiet), quiet);
            tell(role, &sink, |i| Stamp::new_since(stamps[i], quiet) || (stamps[i].is_none() && emptied))
        })
        .sum();
    tracing::warn!(folders, told, "file events were lost (inotify's queue overflowed): the folders were looked at");
    told
}

/// Every routed folder, taken out of the table first: the stats are not
/// made under its lock.
fn every_route(routes: &Routes) -> Vec<(Arc<Path>, Role, Sink, SystemTime)> {
    let routes = routes.read().expect("routes lock");
    routes.by_dir.iter().map(|(dir, r)| (dir.clone(), r.role, r.sink.clone(), r.since)).collect()
}

/// A routed folder's stamps: the inbox folder's, or its chamber's files'.
fn stamps(dir: &Path, role: Role, now: SystemTime) -> Stamps {
    match role {
        Role::Inbox => [Stamp::of(dir, now), None],
        Role::Root => [Stamp::of(&dir.join("cryo.toml"), now), Stamp::of(&dir.join("todo.json"), now)],
    }
}

/// Tells `sink` of each of a folder's stamps that `moved`; how many.
fn tell(role: Role, sink: &Sink, moved: impl Fn(usize) -> bool) -> usize {
    let changes = match role {
        Role::Inbox => [moved(0).then_some(Change::Rescan), None],
        Role::Root => [moved(0).then_some(Change::Config), moved(1).then_some(Change::Todos)],
    };
    let mut told = 0;
    for change in changes.into_iter().flatten() {
        told += 1;
        sink(change);
    }
    told
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the files' times are the wall clock's
mod tests {
    use super::super::{Route, Table};
    use super::*;
    use std::sync::{Mutex, RwLock};

    /// A chamber folder with an inbox, routed; what its sink was told.
    fn rig() -> (tempfile::TempDir, Routes, Arc<Mutex<Vec<Change>>>) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("messages/inbox")).unwrap();
        std::fs::write(root.join("cryo.toml"), "agent = \"a\"\n").unwrap();
        std::fs::write(root.join("todo.json"), "[]").unwrap();
        let told = Arc::new(Mutex::new(Vec::new()));
        let sink: Sink = {
            let told = told.clone();
            Arc::new(move |c| told.lock().unwrap().push(c))
        };
        let mut t = Table::default();
        let since = SystemTime::now();
        let route = |role| Route { chamber: 1, role, sink: sink.clone(), for_owner: false, since };
        t.insert(Arc::from(root), route(Role::Root));
        t.insert(Arc::from(root.join("messages/inbox").as_path()), route(Role::Inbox));
        (dir, Arc::new(RwLock::new(t)), told)
    }

    fn taken(told: &Mutex<Vec<Change>>) -> Vec<Change> {
        let mut v = std::mem::take(&mut *told.lock().unwrap());
        v.sort_by_key(|c| format!("{c:?}"));
        v
    }

    /// A first look tells nothing of files older than their folder's route
    /// (the chamber's boot read them).
    #[test]
    fn a_first_look_passes_over_what_the_boot_read() {
        let (_dir, routes, told) = rig();
        for route in routes.write().unwrap().by_dir.values_mut() {
            route.since += RECENT * 5;
        }
        let mut looks = Looks::default();
        looks.look(&routes, SystemTime::now() + RECENT * 2);
        assert_eq!(taken(&told), []);
    }

    /// The first look tells of what changed since the route (here, all of
    /// the rig's new files); a look at nothing changed tells nothing; each kind of change tells its chamber of that change alone,
    /// once the stamp is no longer recent.
    #[test]
    fn a_look_tells_only_what_changed() {
        let (dir, routes, told) = rig();
        let root = dir.path();
        let mut looks = Looks::default();
        let later = SystemTime::now() + RECENT * 2;
        looks.look(&routes, later);
        assert_eq!(taken(&told), [Change::Config, Change::Rescan, Change::Todos]);
        looks.look(&routes, later);
        assert_eq!(taken(&told), [], "nothing changed");

        // A message renamed in; todo.json rewritten in place; cryo.toml
        // swapped for a link.
        std::fs::write(root.join("messages/inbox/a.md"), "x").unwrap();
        let later = SystemTime::now() + RECENT * 2;
        looks.look(&routes, later);
        assert_eq!(taken(&told), [Change::Rescan]);
        std::fs::write(root.join("todo.json"), "[ ]").unwrap();
        looks.look(&routes, later);
        assert_eq!(taken(&told), [Change::Todos]);
        std::fs::remove_file(root.join("cryo.toml")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("cryo.toml")).unwrap();
        looks.look(&routes, later);
        assert_eq!(taken(&told), [Change::Config]);
        std::fs::remove_file(root.join("cryo.toml")).unwrap();
        looks.look(&routes, later);
        assert_eq!(taken(&told), [Change::Config], "a removed file is a change");
        looks.look(&routes, later);
        assert_eq!(taken(&told), []);
    }

    /// A change whose stamp is recent is told again at the next look: a
    /// second write within the clock's tick may leave the stamp unchanged.
    /// (The rig's files are all recent at `now`: each is told again.)
    #[test]
    fn a_recent_change_is_told_again() {
        let (dir, routes, told) = rig();
        let mut looks = Looks::default();
        looks.look(&routes, SystemTime::now() + RECENT * 2);
        taken(&told);
        std::fs::write(dir.path().join("todo.json"), "[  ]").unwrap();
        let now = SystemTime::now();
        looks.look(&routes, now);
        assert_eq!(taken(&told), [Change::Todos], "the change alone");
        looks.look(&routes, now);
        assert_eq!(taken(&told), [Change::Config, Change::Rescan, Change::Todos], "recent stamps: told again");
        looks.look(&routes, now + RECENT * 2);
        assert_eq!(taken(&told), [Change::Config, Change::Rescan, Change::Todos], "the last look's were recent");
        looks.look(&routes, now + RECENT * 2);
        assert_eq!(taken(&told), [], "none recent, none changed");
    }

    /// Lost events tell each chamber only of what changed about when they
    /// were lost, or later (a file removed too): what is older is told
    /// nothing.
    #[test]
    fn lost_events_tell_only_what_changed_since_the_queue_was_quiet() {
        let (dir, routes, told) = rig();
        assert_eq!(lost_since(&routes, SystemTime::now() + RECENT * 5), 0);
        assert_eq!(taken(&told), [], "nothing changed since");
        std::fs::remove_file(dir.path().join("todo.json")).unwrap();
        assert_eq!(lost_since(&routes, SystemTime::now() - RECENT * 5), 3);
        assert_eq!(taken(&told), [Change::Config, Change::Rescan, Change::Todos], "a removal too");
    }
}
