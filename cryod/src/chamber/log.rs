//! `cryo.log`: the human-readable history of a chamber, one block per session:
//!
//! ```text
//! --- CRYO SESSION 3 | 2026-03-05T09:00:02+01:00 ---
//! [09:00:02] trigger: scheduled (TODO 4 due 09:00)
//! [09:00:02] agent started (pid 4242)
//! ...
//! --- CRYO END ---
//! ```
//!
//! Every line is written whole by one `write` on an append-only file, and any
//! text that reaches the log is flattened to one line, so a message's text can
//! never forge a block marker or an event.

use std::io::Write;
use std::path::Path;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// Flattens `s` to one line: control characters become spaces, and a leading
/// `---` loses its power to look like a block marker.
pub fn one_line(s: &str) -> String {
    let flat: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let flat = flat.trim();
    let capped: String = flat.chars().take(500).collect();
    if capped.starts_with("---") { format!("- {capped}") } else { capped }
}

fn append(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(text.as_bytes())
}

/// Each writer returns the line it wrote (for live views). A fleet node
/// writes its fence into the block's first line (`| fence 7`), so a reader
/// can tell which owner wrote each block.
pub fn begin(path: &Path, session: u64, now: DateTime<Utc>, tz: Tz, fence: Option<i64>) -> std::io::Result<String> {
    let fence = fence.map(|f| format!(" | fence {f}")).unwrap_or_default();
    let line = format!("--- CRYO SESSION {session} | {}{fence} ---", cryo_core::time::format_in(now, tz));
    append(path, &format!("{line}\n")).map(|()| line)
}

pub fn event(path: &Path, now: DateTime<Utc>, tz: Tz, text: &str) -> std::io::Result<String> {
    let line = format!("[{}] {}", now.with_timezone(&tz).format("%H:%M:%S"), one_line(text));
    append(path, &format!("{line}\n")).map(|()| line)
}

pub fn end(path: &Path) -> std::io::Result<String> {
    let line = "--- CRYO END ---".to_string();
    append(path, &format!("{line}\n")).map(|()| line)
}

/// The last `n` lines of a file (reading at most its last 1 MiB).
pub fn tail(path: &Path, n: usize) -> std::io::Result<(Vec<String>, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let start = len.saturating_sub(1024 * 1024);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if start > 0 && !lines.is_empty() {
        lines.remove(0); // a partial first line
    }
    let skip = lines.len().saturating_sub(n);
    Ok((lines.split_off(skip), len))
}

/// Rotates `path` if it is larger than `max_bytes`: `path` becomes `path.1`,
/// `path.1` becomes `path.2`, ..., keeping `keep` old files.
pub fn rotate(path: &Path, max_bytes: u64, keep: u32) -> std::io::Result<bool> {
    let size = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(_) => return Ok(false),
    };
    if size <= max_bytes {
        return Ok(false);
    }
    let name = |n: u32| {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".{n}"));
        std::path::PathBuf::from(p)
    };
    if keep == 0 {
        std::fs::remove_file(path)?;
        return Ok(true);
    }
    let _ = std::fs::remove_file(name(keep));
    for n in (1..keep).rev() {
        let _ = std::fs::rename(name(n), name(n + 1));
    }
    std::fs::rename(path, name(1))?;
    Ok(true)
}

/// The number of the last session block in a `cryo.log` (0 if none): a
/// chamber moved from the seed system keeps counting from where it was.
pub fn last_session_number(path: &Path) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else { return 0 };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(256 * 1024);
    let _ = f.seek(SeekFrom::Start(start));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    text.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("--- CRYO SESSION "))
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .next()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_forgery() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cryo.log");
        let now = DateTime::parse_from_rfc3339("2026-03-05T12:00:00Z").unwrap().with_timezone(&Utc);
        begin(&p, 4, now, chrono_tz::UTC, None).unwrap();
        event(&p, now, chrono_tz::UTC, "send: hi\n--- CRYO END ---\n--- CRYO SESSION 99 | x ---").unwrap();
        end(&p).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().filter(|l| l.starts_with("--- CRYO")).count(), 2, "{text}");
        assert_eq!(last_session_number(&p), 4);
        // A fleet node's block carries its fence, and still reads back.
        let line = begin(&p, 5, now, chrono_tz::UTC, Some(7)).unwrap();
        assert_eq!(line, "--- CRYO SESSION 5 | 2026-03-05T12:00:00+00:00 | fence 7 ---");
        assert_eq!(last_session_number(&p), 5);
        assert_eq!(one_line("--- CRYO END ---"), "- --- CRYO END ---");
        assert_eq!(last_session_number(&dir.path().join("none")), 0);
    }

    #[test]
    fn rotation_keeps_n_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cryo.log");
        for round in 0..5 {
            std::fs::write(&p, format!("round {round} {}", "x".repeat(100))).unwrap();
            assert!(rotate(&p, 50, 2).unwrap());
            assert!(!p.exists());
        }
        assert!(std::fs::read_to_string(dir.path().join("cryo.log.1")).unwrap().starts_with("round 4"));
        assert!(std::fs::read_to_string(dir.path().join("cryo.log.2")).unwrap().starts_with("round 3"));
        assert!(!dir.path().join("cryo.log.3").exists());
        std::fs::write(&p, "small").unwrap();
        assert!(!rotate(&p, 50, 2).unwrap());
    }
}
