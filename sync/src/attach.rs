//! Attachments: files linked from messages.
//!
//! Incoming: the service's upload links are downloaded into
//! `messages/attachments/` (at most [`MAX_ATTACHMENT_BYTES`] each) and the
//! links rewritten to the local file. Outgoing: links to files in
//! `messages/attachments/` are uploaded and rewritten to the service's link.
//! Only regular files inside that folder are ever read: not a symlink, not a
//! path that climbs out, nothing under `.cryo/`, nothing named `cryo.toml`.

use std::path::Path;

/// The folder, relative to the chamber.
pub const DIR: &str = "messages/attachments";

/// Largest file downloaded or uploaded.
pub const MAX_ATTACHMENT_BYTES: usize = 10 * 1024 * 1024;

/// Markdown link targets in `body`: the `URL` of every `[text](URL)`.
pub fn link_targets(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(|c: char| c == ')' || c.is_whitespace()) else { break };
        let target = &after[..end];
        if !target.is_empty() && !out.iter().any(|t| t == target) {
            out.push(target.to_string());
        }
        rest = &after[end..];
    }
    out
}

/// A file name safe to create in the attachments folder, from the last
/// part of a link: letters, digits, `.`, `-`, `_`; no leading dot; short.
pub fn safe_name(link: &str, prefix: &str) -> String {
    let last = link.rsplit('/').next().unwrap_or("");
    let last = percent_decoded(last.split(['?', '#']).next().unwrap_or(""));
    let mut name: String =
        last.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' }).collect();
    name = name.trim_start_matches('.').to_string();
    if name.is_empty() {
        name = "file".into();
    }
    if name.len() > 80 {
        name = name[name.len() - 80..].to_string();
    }
    format!("{prefix}-{name}")
}

/// `%XX` escapes decoded (bytes that do not make UTF-8 become U+FFFD).
pub fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%' && i + 2 < b.len())
            .then(|| std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()))
            .flatten();
        match hex {
            Some(x) => {
                out.push(x);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The file in the attachments folder a link names, if it is one cryo may
/// upload: its name and its bytes. Only a regular file directly inside
/// `messages/attachments/`, reached without following a link anywhere on
/// the way (so never `.cryo/` nor `cryo.toml`), at most
/// [`MAX_ATTACHMENT_BYTES`]. Links may be written relative to the chamber
/// (`messages/attachments/x.png`) or to the message (`../attachments/x.png`).
pub fn uploadable(root: &Path, link: &str) -> Option<(String, Vec<u8>)> {
    let rel = link.strip_prefix("./").unwrap_or(link);
    let name = match rel.strip_prefix("../attachments/") {
        Some(r) => r,
        None => rel.strip_prefix(&format!("{DIR}/"))?,
    };
    if name.is_empty() || name.contains('/') || name.contains('\0') || name.starts_with('.') {
        return None;
    }
    let bytes = cryo_files::Dir::open(root).ok()?.read(&Path::new(DIR).join(name), MAX_ATTACHMENT_BYTES as u64).ok()?;
    Some((name.to_string(), bytes))
}

/// Stores `bytes` as `name` in the chamber's attachments folder (made if
/// missing; refused if it, or anything on its way, is a link).
pub fn store(root: &Path, name: &str, bytes: &[u8]) -> Result<(), cryo_files::FileError> {
    let d = cryo_files::Dir::open(root)?;
    d.write(&Path::new(DIR).join(name), bytes, cryo_files::NewFile::DURABLE).map(drop)
}

/// Bytes the regular files of the chamber's attachments folder take.
pub fn used(root: &Path) -> Result<u64, cryo_files::FileError> {
    let d = cryo_files::Dir::open(root)?;
    let mut sum = 0;
    for e in d.list(Path::new(DIR))? {
        if e.kind == cryo_files::Kind::File
            && let Some(st) = d.stat(&Path::new(DIR).join(&e.name))?
        {
            sum += st.st_size as u64;
        }
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_found_once() {
        let body =
            "see [a](/user_uploads/1/ab/a.png) and [b](https://x/y) and [a again](/user_uploads/1/ab/a.png) [bad](";
        assert_eq!(link_targets(body), ["/user_uploads/1/ab/a.png", "https://x/y"]);
    }

    #[test]
    fn names_are_made_safe() {
        assert_eq!(safe_name("/user_uploads/1/ab/report final.pdf", "z7"), "z7-report_final.pdf");
        assert_eq!(safe_name("/x/../../.bashrc", "z7"), "z7-bashrc");
        assert_eq!(safe_name("/x/", "z7"), "z7-file");
        assert_eq!(safe_name("/user_uploads/1/ab/plot%201.png", "z7"), "z7-plot_1.png");
        assert_eq!(safe_name("/x/%2e%2e%2fetc%2fpasswd", "z7"), "z7-_etc_passwd");
    }

    #[test]
    fn only_plain_files_in_the_folder_are_uploadable() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(DIR)).unwrap();
        std::fs::create_dir_all(root.join(".cryo")).unwrap();
        std::fs::write(root.join(DIR).join("ok.txt"), "fine").unwrap();
        std::fs::write(root.join("cryo.toml"), "secret").unwrap();
        std::fs::write(root.join(".cryo/sync-zulip.json"), "{}").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join(DIR).join("passwd.txt")).unwrap();
        std::os::unix::fs::symlink(root.join("cryo.toml"), root.join(DIR).join("conf.txt")).unwrap();
        assert_eq!(uploadable(root, "messages/attachments/ok.txt"), Some(("ok.txt".into(), b"fine".to_vec())));
        // A linked folder is not the chamber's own.
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(other.path().join("messages")).unwrap();
        std::fs::write(other.path().join("secret.txt"), "x").unwrap();
        std::os::unix::fs::symlink(other.path(), other.path().join("messages/attachments")).unwrap();
        assert!(uploadable(other.path(), "messages/attachments/secret.txt").is_none());
        assert!(uploadable(root, "../attachments/ok.txt").is_some());
        for bad in [
            "messages/attachments/passwd.txt",
            "messages/attachments/conf.txt",
            "messages/attachments/../../cryo.toml",
            "cryo.toml",
            ".cryo/sync-zulip.json",
            "/etc/passwd",
            "messages/attachments/missing.txt",
        ] {
            assert!(uploadable(root, bad).is_none(), "{bad} must not be uploadable");
        }
    }
}
