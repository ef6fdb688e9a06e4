//! Guests: named invite links limited to some chambers.
//!
//! The owner mints an invite (`POST /api/invites` with `{name, chambers}`);
//! its token is shown once, in the answer, and kept only as its SHA-256 in
//! `hub-invites.json` (0600) in the state folder. A guest sees only its
//! chambers' conversations (no log, plan, TODOs or settings), may send
//! (stamped with its name) and upload, and is cut off at once when the
//! invite is revoked: every later request is 401 and its event stream ends.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Who a request comes from.
#[derive(Clone, Debug)]
pub enum Role {
    Owner,
    Guest(Arc<Guest>),
}

impl Role {
    /// The key rate limits count by.
    pub fn credential(&self) -> String {
        match self {
            Role::Owner => "owner".into(),
            Role::Guest(g) => format!("guest:{}", g.name),
        }
    }

    /// Whether this role may see `chamber`.
    pub fn sees(&self, chamber: &str) -> bool {
        match self {
            Role::Owner => true,
            Role::Guest(g) => g.chambers.iter().any(|c| c == chamber),
        }
    }
}

/// A guest, as its invite says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guest {
    pub name: String,
    pub chambers: Vec<String>,
}

/// One invite as kept on disk: never the token, only its digest.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Invite {
    pub name: String,
    pub chambers: Vec<String>,
    /// SHA-256 of the token, hex.
    pub sha256: String,
    /// RFC 3339.
    pub created: String,
}

/// The invites, read once and rewritten on each change; `changed` ticks on
/// each revocation so open event streams can check they still stand.
#[derive(Clone)]
pub struct Invites {
    path: PathBuf,
    list: Arc<RwLock<Vec<Invite>>>,
    changed: tokio::sync::watch::Sender<u64>,
}

fn digest(token: &str) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()))
}

fn valid_name(name: &str) -> bool {
    (1..=40).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_. ".contains(c))
}

impl Invites {
    /// Reads `hub-invites.json` in `state_dir`. A file that cannot be read
    /// leaves no invite valid (and is not rewritten until the owner mints).
    pub fn load(state_dir: &std::path::Path) -> Invites {
        let path = state_dir.join("hub-invites.json");
        let list = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|error| {
                tracing::warn!(%error, file = %path.display(), "the invites file is unreadable: no guest can sign in");
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        Invites { path, list: Arc::new(RwLock::new(list)), changed: tokio::sync::watch::channel(0).0 }
    }

    /// The guest a token belongs to, compared by digest in constant time.
    pub fn guest(&self, token: &str) -> Option<Guest> {
        let given = digest(token);
        let list = self.list.read().expect("invites lock");
        let found = list.iter().find(|i| super::constant_time_eq(i.sha256.as_bytes(), given.as_bytes()))?;
        Some(Guest { name: found.name.clone(), chambers: found.chambers.clone() })
    }

    /// Every invite (names and chambers; the digests stay here).
    pub fn list(&self) -> Vec<Invite> {
        self.list.read().expect("invites lock").clone()
    }

    /// Mints an invite; returns its token, which is never kept.
    pub fn mint(&self, name: &str, chambers: Vec<String>, created: String) -> Result<String, Error> {
        if !valid_name(name) {
            return Err(Error::Invalid(format!(
                "invite name {name:?}: 1 to 40 letters, digits, spaces, '-', '_' or '.'"
            )));
        }
        if chambers.is_empty() {
            return Err(Error::Invalid("an invite names at least one chamber".into()));
        }
        let mut list = self.list.write().expect("invites lock");
        if list.iter().any(|i| i.name == name) {
            return Err(Error::Conflict(format!("an invite named {name:?} exists; revoke it first")));
        }
        let token = crate::base::random::hex(32);
        let mut next = list.clone();
        next.push(Invite { name: name.to_string(), chambers, sha256: digest(&token), created });
        self.save(&next)?;
        *list = next;
        Ok(token)
    }

    /// Revokes the invite `name`: its guest is cut off at once.
    pub fn revoke(&self, name: &str) -> Result<(), Error> {
        let mut list = self.list.write().expect("invites lock");
        let next: Vec<Invite> = list.iter().filter(|i| i.name != name).cloned().collect();
        if next.len() == list.len() {
            return Err(Error::NotFound(format!("no invite named {name:?}")));
        }
        self.save(&next)?;
        *list = next;
        drop(list);
        self.changed.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Ticks on each revocation.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Whether `guest`'s invite still stands.
    pub fn stands(&self, guest: &Guest) -> bool {
        self.list.read().expect("invites lock").iter().any(|i| i.name == guest.name)
    }

    fn save(&self, list: &[Invite]) -> Result<(), Error> {
        let bytes = serde_json::to_vec_pretty(list).map_err(|e| Error::Internal(e.to_string()))?;
        crate::chamber::write_secret(&self.path, &bytes)
            .map_err(|e| Error::Internal(format!("cannot write {}: {e}", self.path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_kept_only_as_its_digest_and_revocation_ends_it() {
        let dir = tempfile::tempdir().unwrap();
        let inv = Invites::load(dir.path());
        let token = inv.mint("ann", vec!["a".into()], "2026-11-24T00:00:00Z".into()).unwrap();
        let file = std::fs::read_to_string(dir.path().join("hub-invites.json")).unwrap();
        assert!(!file.contains(&token) && file.contains(&digest(&token)));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("hub-invites.json")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        // Read back by a new daemon.
        let again = Invites::load(dir.path());
        assert_eq!(again.guest(&token), Some(Guest { name: "ann".into(), chambers: vec!["a".into()] }));
        assert_eq!(again.guest("nope"), None);
        assert!(matches!(again.mint("ann", vec!["b".into()], String::new()), Err(Error::Conflict(_))));
        assert!(matches!(again.mint("a/b", vec!["b".into()], String::new()), Err(Error::Invalid(_))));
        assert!(matches!(again.mint("bob", vec![], String::new()), Err(Error::Invalid(_))));
        let rx = again.watch();
        again.revoke("ann").unwrap();
        assert!(rx.has_changed().unwrap());
        assert_eq!(again.guest(&token), None);
        assert!(matches!(again.revoke("ann"), Err(Error::NotFound(_))));
    }
}
