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

/// Why a credentials file was not read, or does not parse. Its one line
/// names the file and never holds the secret.
#[derive(Debug)]
pub enum CredentialsError {
    /// It cannot be read (missing, not ours to read).
    Unreadable { path: PathBuf, error: std::io::Error },
    /// A folder, a FIFO, a device.
    NotAFile(PathBuf),
    /// Others may read or write it (its permission bits).
    Loose { path: PathBuf, mode: u32 },
    /// A zuliprc whose `[api]` section has no `email` or no `key`.
    Missing { path: PathBuf, key: &'static str },
}

impl std::fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialsError::Unreadable { path, error } => {
                write!(f, "cannot read the credentials file {}: {error}", path.display())
            }
            CredentialsError::NotAFile(path) => {
                write!(f, "the credentials file {} is not a regular file", path.display())
            }
            CredentialsError::Loose { path, mode } => write!(
                f,
                "the credentials file {} has mode {mode:o}: it holds a secret, so cryo reads it only when no one else \
                 can (chmod 600 {})",
                path.display(),
                path.display()
            ),
            CredentialsError::Missing { path, key } => {
                write!(f, "{} has no `{key}` in its [api] section", path.display())
            }
        }
    }
}

impl std::error::Error for CredentialsError {}

/// Reads a secret file, refusing one that others may read or write.
pub fn read_secret(path: &Path) -> Result<String, CredentialsError> {
    use std::os::unix::fs::PermissionsExt;
    let unreadable = |error| CredentialsError::Unreadable { path: path.to_path_buf(), error };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if !meta.is_file() {
        return Err(CredentialsError::NotAFile(path.to_path_buf()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(CredentialsError::Loose { path: path.to_path_buf(), mode });
    }
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
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
    pub fn parse(text: &str, path: &Path) -> Result<Zuliprc, CredentialsError> {
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
        let missing = |key| CredentialsError::Missing { path: path.to_path_buf(), key };
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
        assert!(matches!(e, CredentialsError::Loose { mode: 0o644, .. }), "{e}");
        let e = e.to_string();
        assert_eq!(
            e,
            format!(
                "the credentials file {} has mode 644: it holds a secret, so cryo reads it only when no one else can \
                 (chmod 600 {})",
                f.display(),
                f.display()
            )
        );
        assert!(!e.contains("SECRETKEY"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let rc = Zuliprc::parse(&read_secret(&f).unwrap(), &f).unwrap();
        assert_eq!(rc, Zuliprc { email: "bot@x".into(), key: "SECRETKEY".into(), site: Some("https://z".into()) });
        let e = Zuliprc::parse("[api]\nemail=a\n", &f).unwrap_err();
        assert_eq!(e.to_string(), format!("{} has no `key` in its [api] section", f.display()));
        let e = read_secret(&dir.path().join("none")).unwrap_err();
        assert!(e.to_string().starts_with("cannot read the credentials file "), "{e}");
        assert!(matches!(read_secret(dir.path()), Err(CredentialsError::NotAFile(_))));
    }

    #[test]
    fn paths_expand() {
        let (h, c) = (Path::new("/home/u"), Path::new("/c"));
        assert_eq!(expand("~/z", h, c), Path::new("/home/u/z"));
        assert_eq!(expand("/etc/z", h, c), Path::new("/etc/z"));
        assert_eq!(expand("secrets/z", h, c), Path::new("/c/secrets/z"));
    }
}
