//! The secrets of webhooks in (`POST /hooks/CHAMBER` on the hub): one per
//! chamber, 0600 in cryod's state folder, never in the chamber (which its
//! agent can read).

use std::path::PathBuf;

use super::{ChamberRef, Daemon};
use crate::error::{Error, Result};

impl Daemon {
    /// Where a chamber's hook secret is kept.
    pub fn hook_secret_path(&self, id: i64) -> PathBuf {
        self.state_dir().join("hooks").join(format!("{id}.key"))
    }

    /// Creates (or replaces) a chamber's hook secret; returns the chamber's
    /// name and the secret, shown once.
    pub async fn rotate_hook(&self, r: &ChamberRef) -> Result<(String, String)> {
        use std::os::unix::fs::PermissionsExt;
        let v = self.resolve(r).await?;
        let path = self.hook_secret_path(v.record.id);
        let dir = path.parent().expect("a file in a folder");
        std::fs::create_dir_all(dir).map_err(|e| Error::Internal(format!("{}: {e}", dir.display())))?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        let secret = crate::base::random::hex(32);
        crate::chamber::write_secret(&path, format!("{secret}\n").as_bytes())
            .map_err(|e| Error::Internal(format!("{}: {e}", path.display())))?;
        Ok((v.record.name, secret))
    }
}
