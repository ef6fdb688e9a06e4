//! A bridge's state in the chamber: `.cryo/sync-NAME.json`, written
//! atomically (temp file, fsync, rename) after every change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How many of our own posts' ids are remembered for echo protection.
const OWN_IDS_KEPT: usize = 1000;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound = "C: Serialize + serde::de::DeserializeOwned + Default")]
pub struct State<C> {
    /// Where the last pull ended; `None` before the first.
    pub cursor: Option<C>,
    /// Outbox messages posted, by file name, with the id the service gave
    /// them: recorded before the file is archived.
    #[serde(default)]
    pub posted: BTreeMap<String, String>,
    /// Ids of messages we posted, newest last: what comes back with one of
    /// these is our own echo.
    #[serde(default)]
    pub own: Vec<String>,
}

impl<C> Default for State<C> {
    fn default() -> Self {
        State { cursor: None, posted: BTreeMap::new(), own: Vec::new() }
    }
}

pub fn path(root: &Path, bridge: &str) -> PathBuf {
    root.join(rel(bridge))
}

fn rel(bridge: &str) -> PathBuf {
    Path::new(".cryo").join(format!("sync-{bridge}.json"))
}

/// The largest state file read (a cursor and the ids of recent posts).
const MAX_STATE_BYTES: u64 = 4 * 1024 * 1024;

/// The state file's bytes, if there is one: never through a link, never a
/// FIFO, within [`MAX_STATE_BYTES`].
fn read(root: &Path, bridge: &str) -> Result<Option<Vec<u8>>, cryo_files::FileError> {
    cryo_files::Dir::open(root)?.read_if(&rel(bridge), MAX_STATE_BYTES)
}

/// Why a bridge's state was not loaded: the bridge stops, and the file is
/// kept for a person to look at.
#[derive(Debug)]
pub enum StateError {
    /// The file is there but could not be read (a link, a FIFO, too large,
    /// an I/O error).
    Unreadable(cryo_files::FileError),
    /// The file is not the JSON the bridge wrote.
    Corrupt { path: PathBuf, error: serde_json::Error },
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::Unreadable(e) => write!(f, "cannot read {e}"),
            StateError::Corrupt { path, error } => {
                write!(f, "{} is corrupt ({error}); move it away to start the bridge afresh", path.display())
            }
        }
    }
}

impl std::error::Error for StateError {}

impl<C: Serialize + serde::de::DeserializeOwned + Default> State<C> {
    /// Loads the state; a missing file is a fresh start, a corrupt one an
    /// error (the file is kept for a person to look at).
    pub fn load(root: &Path, bridge: &str) -> Result<State<C>, StateError> {
        match read(root, bridge) {
            Ok(Some(bytes)) => {
                serde_json::from_slice(&bytes).map_err(|error| StateError::Corrupt { path: path(root, bridge), error })
            }
            Ok(None) => Ok(State::default()),
            Err(e) => Err(StateError::Unreadable(e)),
        }
    }

    pub fn save(&self, root: &Path, bridge: &str) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        let d = cryo_files::Dir::open(root)?;
        d.write(&rel(bridge), &bytes, cryo_files::NewFile::DURABLE)?;
        Ok(())
    }

    pub fn remember_own(&mut self, id: String) {
        self.own.push(id);
        if self.own.len() > OWN_IDS_KEPT {
            let extra = self.own.len() - OWN_IDS_KEPT;
            self.own.drain(..extra);
        }
    }
}

/// Whether every bridge in `bridges` recorded `name` as posted.
pub fn posted_by_all(root: &Path, bridges: &[&str], name: &str) -> bool {
    bridges.iter().all(|b| {
        read(root, b)
            .ok()
            .flatten()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .is_some_and(|v| v["posted"].get(name).is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut s: State<u64> = State::load(dir.path(), "zulip").unwrap();
        assert!(s.cursor.is_none());
        s.cursor = Some(42);
        s.posted.insert("a.md".into(), "7".into());
        for i in 0..1005 {
            s.remember_own(i.to_string());
        }
        s.save(dir.path(), "zulip").unwrap();
        let back: State<u64> = State::load(dir.path(), "zulip").unwrap();
        assert_eq!(back.cursor, Some(42));
        assert_eq!(back.own.len(), OWN_IDS_KEPT);
        assert_eq!(back.own.last().unwrap(), "1004");
        assert!(posted_by_all(dir.path(), &["zulip"], "a.md"));
        assert!(!posted_by_all(dir.path(), &["zulip", "github"], "a.md"));
        std::fs::write(path(dir.path(), "zulip"), "{not json").unwrap();
        let e = State::<u64>::load(dir.path(), "zulip").unwrap_err();
        assert!(matches!(e, StateError::Corrupt { .. }), "{e}");
        let p = path(dir.path(), "zulip");
        assert!(e.to_string().starts_with(&format!("{} is corrupt (", p.display())), "{e}");
        assert!(e.to_string().ends_with("); move it away to start the bridge afresh"), "{e}");
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &p).unwrap();
        let e = State::<u64>::load(dir.path(), "zulip").unwrap_err();
        assert!(matches!(&e, StateError::Unreadable(f) if f.is_planted()), "{e}");
        assert!(e.to_string().starts_with(&format!("cannot read {}", p.display())), "{e}");
    }
}
