//! The daemon's shared state and the operations every front end calls.
//!
//! [`Daemon`] is a cheap handle. The gRPC services and the hub call the same
//! methods here, so there is one implementation of each operation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::chamber::{config as chamber_config, scaffold};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{ChamberRecord, Desired, Store};

/// How an operator names a chamber.
#[derive(Debug, Clone)]
pub enum ChamberRef {
    Name(String),
    /// An absolute path: the chamber folder or any folder inside it.
    Path(PathBuf),
}

/// A chamber as cryod sees it now.
#[derive(Debug, Clone)]
pub struct ChamberView {
    pub record: ChamberRecord,
    pub state: State,
    /// Why the chamber is faulted (file and parser message).
    pub fault: Option<String>,
    pub agent: String,
    pub timezone: Tz,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Stopped,
    Idle,
    Running,
    Faulted,
}

struct Entry {
    record: ChamberRecord,
    loaded: std::result::Result<chamber_config::ChamberConfig, String>,
    warnings: Vec<String>,
}

/// The daemon: store, clock, config and the registered chambers.
#[derive(Clone)]
pub struct Daemon(Arc<Inner>);

struct Inner {
    store: Store,
    clock: Clock,
    config: Config,
    system_tz: Tz,
    started_at: DateTime<Utc>,
    chambers: RwLock<BTreeMap<i64, Entry>>,
}

/// What `add` did.
pub struct Added {
    pub view: ChamberView,
    pub already_registered: bool,
    pub init: Option<scaffold::Scaffolded>,
}

impl Daemon {
    /// Loads the registry and every chamber's config.
    pub async fn load(store: Store, clock: Clock, config: Config) -> Result<Daemon> {
        let system_tz = crate::clock::system_zone();
        let started_at = clock.now();
        let records = store.chambers().await?;
        let mut chambers = BTreeMap::new();
        for record in records {
            let entry = load_entry(record, system_tz);
            if let Err(fault) = &entry.loaded {
                tracing::warn!(chamber = %entry.record.name, %fault, "chamber is faulted");
            }
            chambers.insert(entry.record.id, entry);
        }
        tracing::info!(chambers = chambers.len(), "registry loaded");
        Ok(Daemon(Arc::new(Inner { store, clock, config, system_tz, started_at, chambers: RwLock::new(chambers) })))
    }

    pub fn clock(&self) -> &Clock {
        &self.0.clock
    }

    pub fn config(&self) -> &Config {
        &self.0.config
    }

    pub fn started_at(&self) -> DateTime<Utc> {
        self.0.started_at
    }

    pub fn chamber_count(&self) -> usize {
        self.0.chambers.read().expect("registry lock").len()
    }

    /// Scaffolds a chamber folder.
    pub fn init(&self, dir: &Path, agent: Option<&str>) -> Result<scaffold::Scaffolded> {
        let dir = absolute(dir)?;
        if dir.exists() && !dir.is_dir() {
            return Err(Error::Invalid(format!("{} exists and is not a folder", dir.display())));
        }
        scaffold::init(&dir, agent).map_err(|e| Error::Invalid(format!("cannot scaffold {}: {e}", dir.display())))
    }

    /// Registers a chamber folder.
    pub async fn add(&self, dir: &Path, name: Option<&str>, init: bool, agent: Option<&str>) -> Result<Added> {
        let dir = absolute(dir)?;
        let scaffolded = if init { Some(self.init(&dir, agent)?) } else { None };
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
        let created = crate::rfc3339(self.0.clock.now());
        let (record, existed) = self.0.store.add_chamber(base, exact, path.to_string(), created).await?;
        let entry = load_entry(record.clone(), self.0.system_tz);
        let view = view(&entry);
        if !existed {
            tracing::info!(chamber = %record.name, path = %record.path, "chamber registered");
            self.0.chambers.write().expect("registry lock").insert(record.id, entry);
        }
        Ok(Added { view, already_registered: existed, init: scaffolded })
    }

    /// Every chamber, by name.
    pub fn list(&self) -> Vec<ChamberView> {
        let map = self.0.chambers.read().expect("registry lock");
        let mut all: Vec<_> = map.values().map(view).collect();
        all.sort_by(|a, b| a.record.name.cmp(&b.record.name));
        all
    }

    /// One chamber, by name or by a path inside it.
    pub fn resolve(&self, r: &ChamberRef) -> Result<ChamberView> {
        let map = self.0.chambers.read().expect("registry lock");
        let found = match r {
            ChamberRef::Name(n) => map.values().find(|e| &e.record.name == n),
            ChamberRef::Path(p) => {
                let p = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                // The deepest registered chamber containing the path.
                map.values().filter(|e| p.starts_with(&e.record.path)).max_by_key(|e| e.record.path.len())
            }
        };
        found.map(view).ok_or_else(|| match r {
            ChamberRef::Name(n) => Error::NotFound(format!("no chamber named {n:?} (see `cryoctl chamber list`)")),
            ChamberRef::Path(p) => Error::NotFound(format!(
                "{} is not inside a registered chamber (register it with `cryoctl chamber add`)",
                p.display()
            )),
        })
    }

    /// Unregisters a chamber; its files stay.
    pub async fn remove(&self, r: &ChamberRef) -> Result<ChamberView> {
        let v = self.resolve(r)?;
        self.0.store.remove_chamber(v.record.id).await?;
        self.0.chambers.write().expect("registry lock").remove(&v.record.id);
        tracing::info!(chamber = %v.record.name, "chamber removed from the registry");
        Ok(v)
    }
}

fn load_entry(record: ChamberRecord, system_tz: Tz) -> Entry {
    match chamber_config::load(Path::new(&record.path), system_tz) {
        Ok(l) => Entry { record, loaded: Ok(l.config), warnings: l.warnings },
        Err(fault) => Entry { record, loaded: Err(fault), warnings: Vec::new() },
    }
}

fn view(e: &Entry) -> ChamberView {
    let (state, fault, agent, timezone) = match &e.loaded {
        Err(f) => (State::Faulted, Some(f.clone()), String::new(), chrono_tz::UTC),
        Ok(c) => {
            let state = match e.record.desired {
                Desired::Stopped => State::Stopped,
                Desired::Started => State::Idle,
            };
            (state, None, c.agent.clone(), c.timezone)
        }
    };
    ChamberView { record: e.record.clone(), state, fault, agent, timezone, warnings: e.warnings.clone() }
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

/// A valid name from a folder's name.
fn derive_name(dir: &Path) -> String {
    let raw = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut s: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' }).collect();
    s = s.trim_start_matches(['.', '-']).chars().take(64).collect();
    if s.is_empty() { "chamber".to_string() } else { s }
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
