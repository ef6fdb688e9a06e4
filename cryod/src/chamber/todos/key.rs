//! The versions of the files a chamber's TODO list is read from: what a
//! start keeps beside the next due time the list gave ([`crate::chamber::rest`]).

use std::path::Path;
use std::time::SystemTime;

use chrono_tz::Tz;

use super::{Dir, STATE, Stamp, TODO, journal::JOURNAL};
use crate::chamber::version::{self, unsettled};

/// The versions of the files a chamber's list is read from (the state
/// file too: one that became unreadable faults the chamber at its start),
/// and its zone.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Key {
    todo: Option<[i64; 7]>,
    journal: Option<[i64; 7]>,
    state: Option<[i64; 7]>,
    tz: String,
}

/// `todo.json`'s [`Stamp`] now, and the key of the list's files now: none
/// when a version cannot be told, or a file changed after `settled` (the
/// list is then read, as it always was, and not kept). Taken before the
/// files are read: a change after it makes a later key differ.
pub fn versions(d: &Dir, tz: Tz, settled: SystemTime) -> (Option<Stamp>, Option<Key>) {
    let Ok(todo) = d.stat(Path::new(TODO)) else { return (None, None) };
    let stamp = todo.as_ref().map(Stamp::of);
    // Both in `.cryo`, looked at from it, opened once (a chamber without it
    // has neither; a link in its place has no version).
    let Ok(cryo) = d.sub_if(Path::new(".cryo")) else { return (stamp, None) };
    let in_cryo = |rel: &str| {
        let name = Path::new(rel).strip_prefix(".cryo").expect("the list's own files are in .cryo");
        cryo.as_ref().map_or(Ok(None), |c| c.stat(name))
    };
    let (Ok(journal), Ok(state)) = (in_cryo(JOURNAL), in_cryo(STATE)) else {
        return (stamp, None);
    };
    if todo.iter().chain(&journal).chain(&state).any(|m| unsettled(m, settled)) {
        return (stamp, None);
    }
    let [todo, journal, state] = [todo, journal, state].map(|m| m.as_ref().map(version::of));
    (stamp, Some(Key { todo, journal, state, tz: tz.name().into() }))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::chamber::version::SETTLING;

    /// The versions of the list in the chamber `dir`.
    fn versions(dir: &Path, tz: Tz, settled: SystemTime) -> (Option<Stamp>, Option<Key>) {
        super::versions(&Dir::open(dir).unwrap(), tz, settled)
    }

    /// An hour after the list's last change: it has settled.
    pub(crate) fn settled_after(dir: &Path) -> SystemTime {
        std::fs::metadata(dir.join(TODO)).unwrap().modified().unwrap() + Duration::from_secs(3600)
    }

    pub(crate) fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    /// A key matches while neither file changes and the zone is the same;
    /// an edit in place of the same size, a new journal, or another zone
    /// each make it differ.
    #[test]
    fn a_key_holds_while_the_files_and_the_zone_do() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        write(dir, TODO, "[]");
        let written = std::fs::metadata(dir.join(TODO)).unwrap().modified().unwrap();
        assert_eq!(versions(dir, chrono_tz::UTC, written - SETTLING).1, None, "written a moment ago");
        let key = || versions(dir, chrono_tz::UTC, settled_after(dir)).1.unwrap();
        let first = key();
        assert_eq!(key(), first);
        assert_ne!(versions(dir, chrono_tz::Europe::Berlin, settled_after(dir)).1.unwrap(), first);
        // Written in place with the same bytes, its times set back: the
        // ctime alone tells.
        let before = std::fs::metadata(dir.join(TODO)).unwrap();
        write(dir, TODO, "[]");
        let (atime, mtime) = (before.accessed().unwrap(), before.modified().unwrap());
        std::fs::File::options()
            .write(true)
            .open(dir.join(TODO))
            .unwrap()
            .set_times(std::fs::FileTimes::new().set_accessed(atime).set_modified(mtime))
            .unwrap();
        assert_eq!(std::fs::metadata(dir.join(TODO)).unwrap().modified().unwrap(), mtime);
        assert_ne!(key(), first);
        let second = key();
        write(dir, JOURNAL, "{}\n");
        assert_ne!(key(), second);
        let third = key();
        write(dir, STATE, "{}");
        assert_ne!(key(), third);
        // `.cryo` a link to a folder elsewhere: no key.
        std::fs::rename(dir.join(".cryo"), dir.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join(".cryo")).unwrap();
        assert_eq!(versions(dir, chrono_tz::UTC, settled_after(dir)).1, None);
    }

    /// A link or a FIFO put where `todo.json` was has a version of its own:
    /// an entry kept for the file does not match it (the list's read then
    /// faults the chamber, as it always did).
    #[test]
    fn a_link_in_the_lists_place_matches_no_entry() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        write(dir, TODO, "[]");
        let file = versions(dir, chrono_tz::UTC, settled_after(dir)).1.unwrap();
        std::fs::rename(dir.join(TODO), dir.join("elsewhere.json")).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere.json"), dir.join(TODO)).unwrap();
        assert_ne!(versions(dir, chrono_tz::UTC, settled_after(dir)).1, Some(file));
    }
}
