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

pub fn begin(path: &Path, session: u64, now: DateTime<Utc>, tz: Tz) -> std::io::Result<()> {
    append(path, &format!("--- CRYO SESSION {session} | {} ---\n", cryo_core::time::format_in(now, tz)))
}

pub fn event(path: &Path, now: DateTime<Utc>, tz: Tz, text: &str) -> std::io::Result<()> {
    append(path, &format!("[{}] {}\n", now.with_timezone(&tz).format("%H:%M:%S"), one_line(text)))
}

pub fn end(path: &Path) -> std::io::Result<()> {
    append(path, "--- CRYO END ---\n")
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
        begin(&p, 4, now, chrono_tz::UTC).unwrap();
        event(&p, now, chrono_tz::UTC, "send: hi\n--- CRYO END ---\n--- CRYO SESSION 99 | x ---").unwrap();
        end(&p).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().filter(|l| l.starts_with("--- CRYO")).count(), 2, "{text}");
        assert_eq!(last_session_number(&p), 4);
        assert_eq!(one_line("--- CRYO END ---"), "- --- CRYO END ---");
        assert_eq!(last_session_number(&dir.path().join("none")), 0);
    }
}
