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
    root.join(".cryo").join(format!("sync-{bridge}.json"))
}

impl<C: Serialize + serde::de::DeserializeOwned + Default> State<C> {
    /// Loads the state; a missing file is a fresh start, a corrupt one an
    /// error (the file is kept for a person to look at).
    pub fn load(root: &Path, bridge: &str) -> Result<State<C>, String> {
        let p = path(root, bridge);
        match std::fs::read(&p) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{} is corrupt ({e}); move it away to start the bridge afresh", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
            Err(e) => Err(format!("cannot read {}: {e}", p.display())),
        }
    }

    pub fn save(&self, root: &Path, bridge: &str) -> std::io::Result<()> {
        let p = path(root, bridge);
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        write_atomic(&p, &bytes)
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
        std::fs::read(path(root, b))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .is_some_and(|v| v["posted"].get(name).is_some())
    })
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().ok_or_else(|| std::io::Error::other("no parent folder"))?;
    std::fs::create_dir_all(dir)?;
    let tmp =
        dir.join(format!(".{}.tmp", path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
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
        assert!(State::<u64>::load(dir.path(), "zulip").unwrap_err().contains("corrupt"));
    }
}
