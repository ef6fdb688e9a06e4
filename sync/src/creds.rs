//! Credential files: read only when no one else can read them, and never
//! echoed.

use std::path::{Path, PathBuf};

/// `~/x` against `home`; other paths as they are (relative ones against the
/// chamber).
pub fn expand(path: &str, home: &Path, chamber: &Path) -> PathBuf {
    if let Some(rest) = path.strip_prefix("~/") {
        return home.join(rest);
    }
    let p = Path::new(path);
    if p.is_absolute() { p.to_path_buf() } else { chamber.join(p) }
}

/// Reads a secret file, refusing one that others may read or write.
pub fn read_secret(path: &Path) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read the credentials file {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("the credentials file {} is not a regular file", path.display()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "the credentials file {} has mode {mode:o}: it holds a secret, so cryo reads it only when no one else can \
             (chmod 600 {})",
            path.display(),
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the credentials file {}: {e}", path.display()))?;
    Ok(text)
}

/// A zuliprc: `[api]` with `email`, `key` and `site`.
#[derive(Debug, Clone, PartialEq)]
pub struct Zuliprc {
    pub email: String,
    pub key: String,
    pub site: Option<String>,
}

impl Zuliprc {
    pub fn parse(text: &str, path: &Path) -> Result<Zuliprc, String> {
        let mut section = String::new();
        let (mut email, mut key, mut site) = (None, None, None);
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(s) = line.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                section = s.trim().to_string();
                continue;
            }
            let Some((k, v)) = line.split_once('=') else { continue };
            if section != "api" {
                continue;
            }
            let v = v.trim().to_string();
            match k.trim() {
                "email" => email = Some(v),
                "key" => key = Some(v),
                "site" => site = Some(v),
                _ => {}
            }
        }
        let missing = |what: &str| format!("{} has no `{what}` in its [api] section", path.display());
        Ok(Zuliprc {
            email: email.filter(|e| !e.is_empty()).ok_or_else(|| missing("email"))?,
            key: key.filter(|k| !k.is_empty()).ok_or_else(|| missing("key"))?,
            site,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn loose_files_are_refused_and_the_secret_is_not_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("zuliprc");
        std::fs::write(&f, "[api]\nemail=bot@x\nkey=SECRETKEY\nsite=https://z\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_secret(&f).unwrap_err();
        assert!(e.contains("mode 644") && e.contains("chmod 600"), "{e}");
        assert!(!e.contains("SECRETKEY"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let rc = Zuliprc::parse(&read_secret(&f).unwrap(), &f).unwrap();
        assert_eq!(rc, Zuliprc { email: "bot@x".into(), key: "SECRETKEY".into(), site: Some("https://z".into()) });
        let e = Zuliprc::parse("[api]\nemail=a\n", &f).unwrap_err();
        assert!(e.contains("no `key`"), "{e}");
    }

    #[test]
    fn paths_expand() {
        let (h, c) = (Path::new("/home/u"), Path::new("/c"));
        assert_eq!(expand("~/z", h, c), Path::new("/home/u/z"));
        assert_eq!(expand("/etc/z", h, c), Path::new("/etc/z"));
        assert_eq!(expand("secrets/z", h, c), Path::new("/c/secrets/z"));
    }
}
