//! A kind's JSON settings file in the chamber (Gemini CLI's workspace
//! settings): cryod's keys set in it, the rest kept.

use std::path::Path;

use crate::Error;
use cryo_files::{Dir, NewFile};

/// Sets `keys` in the chamber's JSON settings file `rel` (Gemini CLI's
/// workspace settings), keeping the rest of it; written only when that
/// changes it. A file that is not a JSON object is the user's to mend:
/// the session does not start, and nothing is written.
pub(crate) fn merge_settings(dir: &Dir, rel: &Path, keys: &serde_json::Value) -> crate::Result<()> {
    const MAX: u64 = 1024 * 1024;
    let old = match dir.read(rel, MAX) {
        Ok(bytes) => Some(bytes),
        Err(cryo_files::FileError::Missing(_)) => None,
        Err(e) => return Err(Error::File(format!("cannot read {e}"))),
    };
    let mut settings = match &old {
        None => serde_json::json!({}),
        Some(bytes) => {
            serde_json::from_slice::<serde_json::Value>(bytes).ok().filter(|v| v.is_object()).ok_or_else(|| {
                Error::Setting(format!(
                    "{} is not a JSON object (cryod sets its MCP server and API-key auth there): mend it or remove it",
                    rel.display()
                ))
            })?
        }
    };
    super::merge_json(&mut settings, keys);
    let text = format!("{settings:#}\n");
    if old.as_deref() != Some(text.as_bytes()) {
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            dir.make_dirs(parent).map_err(|e| Error::File(format!("cannot make {e}")))?;
        }
        dir.write(rel, text.as_bytes(), NewFile::QUICK).map_err(|e| Error::File(format!("cannot write {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gemini CLI's workspace settings: cryod's keys are set and the user's
    /// kept; a file that is not JSON, or a link the agent planted, stops
    /// the session with nothing written anywhere.
    #[test]
    fn gemini_settings_keep_the_users_keys_and_follow_no_link() {
        let root = tempfile::tempdir().unwrap();
        let dir = Dir::open(root.path()).unwrap();
        let rel = Path::new(super::super::GEMINI_SETTINGS);
        let keys =
            super::super::gemini_settings(Some(&super::super::Mcp { program: "/bin/cryo-agent".into() }), true, None)
                .unwrap();
        merge_settings(&dir, rel, &keys).unwrap();
        let file = root.path().join(rel);
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(v["security"]["auth"]["selectedType"], "gemini-api-key");
        assert_eq!(v["mcpServers"]["cryo"]["env"]["CRYO_SOCKET"], "${CRYO_SOCKET}");
        std::fs::write(&file, r#"{"mcpServers":{"mine":{"command":"x"}},"ui":{"theme":"dark"}}"#).unwrap();
        merge_settings(&dir, rel, &keys).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!((v["mcpServers"]["mine"]["command"].as_str(), v["ui"]["theme"].as_str()), (Some("x"), Some("dark")));
        assert_eq!(v["mcpServers"]["cryo"]["command"], "/bin/cryo-agent");

        let broken = "{ // my comment\n \"ui\": {} }";
        std::fs::write(&file, broken).unwrap();
        let e = merge_settings(&dir, rel, &keys).unwrap_err().to_string();
        assert!(e.contains("is not a JSON object"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), broken, "the user's file is kept as it was");

        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim");
        std::fs::write(&target, "precious").unwrap();
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&target, &file).unwrap();
        assert!(merge_settings(&dir, rel, &keys).is_err(), "a link is not followed");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
    }
}
