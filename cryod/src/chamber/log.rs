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

use super::Dir;

/// The log's name in a chamber.
pub const LOG: &str = "cryo.log";

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

/// Appends to the chamber's `cryo.log`: only a plain file of its own, never
/// through a link or into a FIFO.
fn append(root: &Path, text: &str) -> std::io::Result<()> {
    let mut f = Dir::open(root)?.append(Path::new(LOG))?;
    f.write_all(text.as_bytes())
}

/// Each writer returns the line it wrote (for live views). A fleet node
/// writes its fence into the block's first line (`| fence 7`), so a reader
/// can tell which owner wrote each block.
pub fn begin(root: &Path, session: u64, now: DateTime<Utc>, tz: Tz, fence: Option<i64>) -> std::io::Result<String> {
    let fence = fence.map(|f| format!(" | fence {f}")).unwrap_or_default();
    let line = format!("--- CRYO SESSION {session} | {}{fence} ---", cryo_core::time::format_in(now, tz));
    append(root, &format!("{line}\n")).map(|()| line)
}

pub fn event(root: &Path, now: DateTime<Utc>, tz: Tz, text: &str) -> std::io::Result<String> {
    let line = format!("[{}] {}", now.with_timezone(&tz).format("%H:%M:%S"), one_line(text));
    append(root, &format!("{line}\n")).map(|()| line)
}

pub fn end(root: &Path) -> std::io::Result<String> {
    let line = "--- CRYO END ---".to_string();
    append(root, &format!("{line}\n")).map(|()| line)
}

/// The most of a file's end its last lines are looked for in.
const TAIL_MAX: u64 = 1024 * 1024;

/// The lines of session `number`'s block among `lines` (a log's tail):
/// from its `--- CRYO SESSION N` (or the agent log's `--- cryo session N`)
/// line to the next session's. `None` if its start is not among them.
/// With `wake`, the start line must name it (the agent log's do: a line
/// the agent forged with the number alone is not taken for the run's).
pub fn session_block(lines: &[String], number: u64, wake: Option<&str>) -> Option<Vec<String>> {
    let starts = |l: &str| l.starts_with("--- CRYO SESSION ") || l.starts_with("--- cryo session ");
    let number_of =
        |l: &str| l.get(17..).and_then(|rest| rest.split([' ', '|']).next()).and_then(|n| n.parse::<u64>().ok());
    let named = |l: &str| wake.is_none_or(|w| l.contains(&format!("(wake {w}")));
    let at = lines.iter().rposition(|l| starts(l) && number_of(l) == Some(number) && named(l))?;
    let end = lines[at + 1..].iter().position(|l| starts(l)).map_or(lines.len(), |e| at + 1 + e);
    Some(lines[at..end].to_vec())
}

/// The last `n` lines of the chamber's file `rel`, a last line still being
/// written among them, and the file's length. Read from the end, a step at
/// a time, until the `n` lines are found (never more than the last 1 MiB):
/// fifty lines of a log of gigabytes cost those lines.
pub fn tail(root: &Path, rel: &str, n: usize) -> std::io::Result<(Vec<String>, u64)> {
    let mut f = Dir::open(root)?.open_read(Path::new(rel), None)?;
    let len = f.metadata()?.len();
    if n == 0 {
        return Ok((Vec::new(), len));
    }
    let (torn, whole) = cryo_files::torn_end(&mut f, len, TAIL_MAX)?;
    let wanted = n - usize::from(torn.is_some());
    let (mut lines, _) = cryo_files::lines_before(&mut f, whole, wanted, TAIL_MAX.saturating_sub(len - whole))?;
    lines.extend(torn);
    Ok((lines, len))
}

/// Rotates the chamber's file `rel` if it is larger than `max_bytes`: `rel`
/// becomes `rel.1`, `rel.1` becomes `rel.2`, ..., keeping `keep` old
/// files. Whatever stands at those names (a link included) is renamed or
/// removed itself, never followed.
pub fn rotate(root: &Path, rel: &str, max_bytes: u64, keep: u32) -> std::io::Result<bool> {
    let d = Dir::open(root)?;
    let size = match d.stat(Path::new(rel))? {
        Some(m) => m.st_size as u64,
        None => return Ok(false),
    };
    if size <= max_bytes {
        return Ok(false);
    }
    let name = |n: u32| std::path::PathBuf::from(format!("{rel}.{n}"));
    if keep == 0 {
        d.remove(Path::new(rel))?;
        return Ok(true);
    }
    let _ = d.remove(&name(keep));
    for n in (1..keep).rev() {
        let _ = d.rename(&name(n), &name(n + 1), true);
    }
    d.rename(Path::new(rel), &name(1), true)?;
    Ok(true)
}

/// The number of the last session block in a `cryo.log` (0 if none): a
/// chamber moved from the seed system keeps counting from where it was.
/// Reads back from the end: the last session's block is usually in the
/// last few KiB (a start reads that of every chamber), at most 256 KiB.
pub fn last_session_number(root: &Path) -> u64 {
    let Ok(mut f) = Dir::open(root).and_then(|d| d.open_read(Path::new(LOG), None)) else { return 0 };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    for budget in [16 * 1024, 256 * 1024] {
        let Ok((lines, start)) = cryo_files::lines_before(&mut f, len, usize::MAX, budget) else { return 0 };
        // The agent can write this file: a number past any real chamber's
        // is not taken (it would run the count into its limits).
        let found = lines
            .iter()
            .rev()
            .filter_map(|l| l.strip_prefix("--- CRYO SESSION "))
            .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u64>().ok())
            .find(|n| *n <= MAX_SESSION_NUMBER);
        if let Some(n) = found {
            return n;
        }
        if start == 0 {
            return 0;
        }
    }
    0
}

/// `cryo.log`'s version (as [`crate::chamber::version::of`] tells it), if
/// it is a plain file that did not change after `settled`; `d` is the
/// chamber folder.
pub fn version(d: &Dir, settled: std::time::SystemTime) -> Option<[i64; 7]> {
    let st = d.stat(Path::new(LOG)).ok()??;
    let plain = cryo_files::Kind::of(&st) == cryo_files::Kind::File;
    (plain && !crate::chamber::version::unsettled(&st, settled)).then(|| crate::chamber::version::of(&st))
}

/// The largest session number read from a `cryo.log`: a session an hour
/// for a hundred thousand years.
pub const MAX_SESSION_NUMBER: u64 = 1_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    /// A `cryo.log` that is a link or a FIFO has no version (it is read as
    /// any start reads it, which refuses it); a plain one has, once settled.
    #[test]
    fn only_a_plain_settled_log_has_a_version() {
        let t = tempfile::tempdir().unwrap();
        let (root, log) = (t.path(), t.path().join(LOG));
        let version = |root, settled| version(&Dir::open(root).unwrap(), settled);
        std::fs::write(&log, "--- CRYO SESSION 3 ---\n").unwrap();
        let later = std::fs::metadata(&log).unwrap().modified().unwrap() + std::time::Duration::from_secs(3600);
        assert!(version(root, later).is_some());
        assert_eq!(version(root, std::fs::metadata(&log).unwrap().modified().unwrap()), None, "just written");
        std::fs::rename(&log, root.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), &log).unwrap();
        assert_eq!(version(root, later), None);
        assert_eq!(last_session_number(root), 0, "a link is not read");
        std::fs::remove_file(&log).unwrap();
        nix::unistd::mkfifo(&log, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(version(root, later), None);
        assert_eq!(last_session_number(root), 0, "a FIFO is not opened");
    }

    #[test]
    fn blocks_and_forgery() {
        let dir = tempfile::tempdir().unwrap();
        let (p, log) = (dir.path(), dir.path().join("cryo.log"));
        let now = DateTime::parse_from_rfc3339("2026-03-05T12:00:00Z").unwrap().with_timezone(&Utc);
        begin(p, 4, now, chrono_tz::UTC, None).unwrap();
        event(p, now, chrono_tz::UTC, "send: hi\n--- CRYO END ---\n--- CRYO SESSION 99 | x ---").unwrap();
        end(p).unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.lines().filter(|l| l.starts_with("--- CRYO")).count(), 2, "{text}");
        assert_eq!(last_session_number(p), 4);
        // A fleet node's block carries its fence, and still reads back.
        let line = begin(p, 5, now, chrono_tz::UTC, Some(7)).unwrap();
        assert_eq!(line, "--- CRYO SESSION 5 | 2026-03-05T12:00:00+00:00 | fence 7 ---");
        assert_eq!(last_session_number(p), 5);
        assert_eq!(one_line("--- CRYO END ---"), "- --- CRYO END ---");
        assert_eq!(last_session_number(&dir.path().join("none")), 0);
        // A number no chamber reaches (planted by an agent) is not taken.
        begin(p, u64::MAX, now, chrono_tz::UTC, None).unwrap();
        assert_eq!(last_session_number(p), 5);
        // A long session's block is found further back (and not past 256 KiB).
        for _ in 0..1000 {
            event(p, now, chrono_tz::UTC, &"x".repeat(100)).unwrap();
        }
        assert_eq!(last_session_number(p), 5);
        for _ in 0..2000 {
            event(p, now, chrono_tz::UTC, &"x".repeat(100)).unwrap();
        }
        assert_eq!(last_session_number(p), 0, "no block in the last 256 KiB");
        // A link planted as the log is refused, its target untouched.
        std::fs::remove_file(&log).unwrap();
        std::fs::write(dir.path().join("bashrc"), "keep").unwrap();
        std::os::unix::fs::symlink(dir.path().join("bashrc"), &log).unwrap();
        assert!(event(p, now, chrono_tz::UTC, "x").is_err());
        assert_eq!(std::fs::read_to_string(dir.path().join("bashrc")).unwrap(), "keep");
    }

    #[test]
    fn the_tail_reads_back_to_its_lines_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cryo.log");
        let mut text: String = (0..200_000).map(|i| format!("[00:00:00] line {i}\n")).collect();
        std::fs::write(&p, &text).unwrap();
        let (lines, len) = tail(dir.path(), "cryo.log", 3).unwrap();
        assert_eq!(lines, ["[00:00:00] line 199997", "[00:00:00] line 199998", "[00:00:00] line 199999"]);
        assert_eq!(len, text.len() as u64);
        // A last line still being written shows, as the last.
        text.push_str("half a li");
        std::fs::write(&p, &text).unwrap();
        let (lines, _) = tail(dir.path(), "cryo.log", 2).unwrap();
        assert_eq!(lines, ["[00:00:00] line 199999", "half a li"]);
        // More lines than the last 1 MiB holds: what it holds.
        let (lines, _) = tail(dir.path(), "cryo.log", 1_000_000).unwrap();
        assert!(lines.len() < 60_000 && lines.len() > 40_000, "{}", lines.len());
        assert!(lines[0].starts_with("[00:00:00] line 1"), "{}", lines[0]);
        assert!(tail(dir.path(), "cryo.log", 0).unwrap().0.is_empty());
        std::fs::write(&p, "").unwrap();
        assert!(tail(dir.path(), "cryo.log", 5).unwrap().0.is_empty());
        // A link at the log's name is not read.
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &p).unwrap();
        assert!(tail(dir.path(), "cryo.log", 5).is_err());
    }

    #[test]
    fn rotation_keeps_n_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cryo.log");
        for round in 0..5 {
            std::fs::write(&p, format!("round {round} {}", "x".repeat(100))).unwrap();
            assert!(rotate(dir.path(), "cryo.log", 50, 2).unwrap());
            assert!(!p.exists());
        }
        assert!(std::fs::read_to_string(dir.path().join("cryo.log.1")).unwrap().starts_with("round 4"));
        assert!(std::fs::read_to_string(dir.path().join("cryo.log.2")).unwrap().starts_with("round 3"));
        assert!(!dir.path().join("cryo.log.3").exists());
        std::fs::write(&p, "small").unwrap();
        assert!(!rotate(dir.path(), "cryo.log", 50, 2).unwrap());
    }

    #[test]
    fn a_sessions_block_is_found_in_either_log() {
        let lines: Vec<String> = [
            "--- CRYO SESSION 9 | 2026-03-05T09:00:02+01:00 ---",
            "nine",
            "--- CRYO SESSION 10 | 2026-03-05T10:00:02+01:00 ---",
            "ten",
            "ten again",
            "--- cryo session 11 (wake w) at x ---",
            "eleven",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(session_block(&lines, 10, None).unwrap(), lines[2..5]);
        assert_eq!(session_block(&lines, 11, None).unwrap(), lines[5..]);
        assert_eq!(session_block(&lines, 11, Some("w")).unwrap(), lines[5..]);
        assert_eq!(session_block(&lines, 11, Some("other")), None, "a line naming another wake is not the run's");
        assert_eq!(session_block(&lines, 1, None), None, "not 10 nor 11");
    }
}
