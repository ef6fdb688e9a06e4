//! The seed system (cryochamber 0.2.x), which cryo grew from: a chamber it
//! made, the per-chamber daemon that may still run it, and the way over
//! (`chamber adopt`, or `add` meeting one) and back (`chamber release`).
//!
//! Its files, as 0.2.8 writes them: `timer.json` (its state: `pid` of its
//! daemon, `agent_override` and `max_session_duration_override` from
//! `cryo start --agent …`), its daemon's socket `.cryo/cryo.sock`, and
//! `todo.json` with times in one form only, naive local `%Y-%m-%dT%H:%M`
//! (any other it skips as invalid). Its `cryo.toml` takes `agent`,
//! `max_session_duration`, `watch_dirs`, `[provider]` (`name`, required, and
//! `env` of strings) or the older `[[providers]]` (the first is used), and
//! ignores any other key.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use cryo_files::{Dir, Kind, NewFile};

/// Why a chamber cannot move over from the seed system, or back to it: one
/// line for the person who asked; the kind says how far the move got.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveError {
    /// The chamber is not as the move needs it (a link, a file too large,
    /// `cryo.toml` not TOML, a TODO id too large): nothing was changed.
    #[error("{0}")]
    Unfit(String),
    /// The seed's daemon could not be stopped, or still runs.
    #[error("{0}")]
    Daemon(String),
    /// A file could not be kept, written or moved aside, midway.
    #[error("{0}")]
    Write(String),
}

type Result<T> = std::result::Result<T, MoveError>;

/// The seed's `timer.json` (the parts cryo carries; `session_number`, which
/// it always writes, tells it from another tool's file of that name).
#[derive(Debug, Default, serde::Deserialize)]
pub struct Timer {
    #[allow(dead_code)]
    session_number: u64,
    pub pid: Option<u32>,
    pub agent_override: Option<String>,
    pub max_session_duration_override: Option<u64>,
}

/// A chamber of the seed system.
#[derive(Debug)]
pub struct Found {
    pub timer: Option<Timer>,
    /// Its daemons that still run: processes of the seed's `cryo` working
    /// in the folder, whatever `timer.json` says (an agent can write it).
    pub running: Vec<u32>,
    /// Its daemon's socket answers.
    pub answers: bool,
}

impl Found {
    /// Whether a seed daemon still serves the chamber.
    pub fn serves(&self) -> bool {
        !self.running.is_empty() || self.answers
    }
}

/// The seed's daemon socket in a chamber.
const SOCKET: &str = ".cryo/cryo.sock";
const TIMER: &str = "timer.json";
/// cryo's journal of TODO adds beside `todo.json`.
const JOURNAL: &str = ".cryo/todo-journal.jsonl";

/// Whether `dir` (canonical) is a chamber of the seed system (a
/// `timer.json` it wrote, or its daemon's socket), and what of its daemon
/// still runs.
pub fn find(dir: &Path) -> Option<Found> {
    let d = Dir::open(dir).ok()?;
    let timer = d
        .read_if(Path::new(TIMER), 64 * 1024)
        .ok()
        .flatten()
        .and_then(|bytes| serde_json::from_slice::<Timer>(&bytes).ok());
    let is_socket = matches!(d.kind(Path::new(SOCKET)), Ok(Some(Kind::Other(_))));
    if timer.is_none() && !is_socket {
        return None;
    }
    let answers = is_socket && std::os::unix::net::UnixStream::connect(dir.join(SOCKET)).is_ok();
    Some(Found { running: daemons_in(dir), answers, timer })
}

/// The processes of the seed's `cryo` program whose working folder is
/// `dir` (its daemon runs in its chamber), from `/proc`.
fn daemons_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let me = std::process::id();
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me && is_seed_daemon(*pid, dir))
        .collect()
}

/// Whether `pid` runs the seed's `cryo` program in `dir` (a zombie, or a
/// pid reused by another program, does not).
fn is_seed_daemon(pid: u32, dir: &Path) -> bool {
    if std::fs::read_link(format!("/proc/{pid}/cwd")).ok().as_deref() != Some(dir) {
        return false;
    }
    let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let program = cmd.split(|b| *b == 0).next().unwrap_or_default();
    let program: &std::ffi::OsStr = std::os::unix::ffi::OsStrExt::from_bytes(program);
    Path::new(program).file_name().is_some_and(|n| n == "cryo")
}

/// What must hold before anything is stopped or rewritten: the chamber's
/// files are plain files under 16 MiB (no link, no FIFO), `cryo.toml` is
/// UTF-8 TOML, and `history` is a folder or absent.
pub fn check(dir: &Path) -> Result<()> {
    let d = open(dir)?;
    for f in ["todo.json", TIMER] {
        read(&d, f)?;
    }
    if let Some(b) = read(&d, "cryo.toml")? {
        toml_doc(b)?;
    }
    match d.kind(Path::new("history")) {
        Ok(None | Some(Kind::Folder)) => Ok(()),
        _ => Err(MoveError::Unfit(
            "history is not a folder (a link, a file?): move it aside; nothing was changed".into(),
        )),
    }
}

/// The chamber's folder, opened.
fn open(dir: &Path) -> Result<Dir> {
    Dir::open(dir).map_err(|e| MoveError::Unfit(format!("{}: {e}", dir.display())))
}

/// `cryo.toml`'s bytes, as a document to edit.
fn toml_doc(bytes: Vec<u8>) -> Result<toml_edit::DocumentMut> {
    let text =
        String::from_utf8(bytes).map_err(|_| MoveError::Unfit("cryo.toml is not UTF-8; nothing was changed".into()))?;
    text.parse().map_err(|e| MoveError::Unfit(format!("cryo.toml does not parse, so nothing was changed: {e}")))
}

/// Stops the seed's daemon for `dir` (canonical) as `cryo cancel` does:
/// its service (a systemd user unit or launchd agent it installed so the
/// daemon comes back at login) disabled and removed first, then SIGTERM to
/// each of its processes, and SIGKILL to any still there after 7 s. It must
/// then be gone: no process of it, no answer on its socket. Returns what it
/// did, one line each.
pub fn stop(found: &Found, dir: &Path, home: Option<&Path>) -> Result<Vec<String>> {
    if found.running.is_empty() {
        return Err(MoveError::Daemon(format!(
            "the seed system's daemon answers on {}/{SOCKET}, but no process of it was found: stop it with `cryo \
             cancel` in that folder",
            dir.display()
        )));
    }
    let mut done = Vec::new();
    for (label, file) in home.map(|h| services(h, dir)).unwrap_or_default() {
        let (program, args): (&str, Vec<&str>) = if file.extension().is_some_and(|e| e == "plist") {
            ("launchctl", vec!["unload", "-w"])
        } else {
            ("systemctl", vec!["--user", "disable", "--now"])
        };
        let target = if program == "launchctl" { file.to_string_lossy().into_owned() } else { label.clone() };
        // Best effort: without a service manager running, removing the file
        // is what keeps it from starting again.
        let _ = std::process::Command::new(program)
            .args(&args)
            .arg(&target)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        std::fs::remove_file(&file)
            .map_err(|e| MoveError::Daemon(format!("cannot remove the seed's service {}: {e}", file.display())))?;
        done.push(format!("the seed's service {label} disabled and removed ({})", file.display()));
    }
    let signal = |sig| {
        for pid in &found.running {
            if let Ok(p) = i32::try_from(*pid) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), sig);
            }
        }
    };
    let gone = |within: std::time::Duration| {
        let deadline = std::time::Instant::now() + within;
        loop {
            if found.running.iter().all(|p| !is_seed_daemon(*p, dir)) {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    signal(nix::sys::signal::Signal::SIGTERM);
    let pids = found.running.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    if gone(std::time::Duration::from_secs(7)) {
        done.push(format!("the seed's daemon (pid {pids}) stopped"));
    } else {
        signal(nix::sys::signal::Signal::SIGKILL);
        gone(std::time::Duration::from_secs(1));
        done.push(format!("the seed's daemon (pid {pids}) ignored SIGTERM for 7 s and was killed"));
    }
    let left = daemons_in(dir);
    let answers = std::os::unix::net::UnixStream::connect(dir.join(SOCKET)).is_ok();
    if !left.is_empty() || answers {
        return Err(MoveError::Daemon(format!(
            "the seed system's daemon still runs {} after it was stopped{}: stop it with `cryo cancel` there",
            dir.display(),
            if left.is_empty() { String::new() } else { format!(" (pid {left:?})") }
        )));
    }
    Ok(done)
}

/// The services the seed installed for `dir` under `home`: systemd user
/// units `com.cryo.daemon.*.service` whose `WorkingDirectory` is `dir`, and
/// launchd agents `com.cryo.daemon.*.plist` naming it. (label, file)
pub fn services(home: &Path, dir: &Path) -> Vec<(String, PathBuf)> {
    let dir = dir.to_string_lossy();
    let mut found = Vec::new();
    for (folder, ext) in [(".config/systemd/user", "service"), ("Library/LaunchAgents", "plist")] {
        let Ok(entries) = std::fs::read_dir(home.join(folder)) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let label = name.strip_suffix(&format!(".{ext}")).filter(|l| l.starts_with("com.cryo.daemon."));
            let Some(label) = label else { continue };
            let Ok(text) = Dir::open(&home.join(folder)).and_then(|d| d.read(Path::new(&name), 64 * 1024)) else {
                continue;
            };
            let text = String::from_utf8_lossy(&text);
            let names_dir = if ext == "service" {
                text.lines().any(|l| l.strip_prefix("WorkingDirectory=").is_some_and(|d| d.replace("%%", "%") == dir))
            } else {
                let escaped = dir.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
                text.contains("WorkingDirectory") && text.contains(&format!("<string>{escaped}</string>"))
            };
            if names_dir {
                found.push((label.to_string(), e.path()));
            }
        }
    }
    found
}

/// What a move over or back did: what it carried, what it could not, and
/// where the files it rewrote were kept as they were.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub carried: Vec<String>,
    pub left: Vec<String>,
    pub backup: Option<PathBuf>,
}

/// A file of the chamber that is read: at most 16 MiB, a plain file (a
/// link or a FIFO is refused), `None` if absent.
fn read(d: &Dir, name: &str) -> Result<Option<Vec<u8>>> {
    d.read_if(Path::new(name), 16 * 1024 * 1024)
        .map_err(|e| MoveError::Unfit(format!("{name}: {e}; nothing was changed")))
}

/// Keeps each of `files` that exists in `history/KIND-YYYYMMDDTHHMMSSZ/`,
/// as it is, before anything is rewritten; returns that folder.
fn keep(d: &Dir, kind: &str, files: &[(&str, Option<&Vec<u8>>)], now: DateTime<Utc>) -> Result<PathBuf> {
    let rel = PathBuf::from("history").join(format!("{kind}-{}", now.format("%Y%m%dT%H%M%SZ")));
    d.make_dirs(&rel)
        .map_err(|e| MoveError::Write(format!("cannot make {}: {e}; nothing was changed", rel.display())))?;
    for (name, bytes) in files {
        if let Some(b) = bytes {
            d.write(&rel.join(name), b, NewFile::DURABLE)
                .map_err(|e| MoveError::Write(format!("cannot keep {name}: {e}; nothing was changed")))?;
        }
    }
    Ok(d.path().join(rel))
}

/// Writes `text` to the chamber's `name` (a new file renamed over it).
fn replace(d: &Dir, name: &str, text: &str) -> Result<()> {
    d.write(Path::new(name), text.as_bytes(), NewFile::DURABLE)
        .map(drop)
        .map_err(|e| MoveError::Write(format!("cannot write {name}: {e}")))
}

/// Moves a stopped seed chamber's files over to cryo's reading of them,
/// keeping every file it rewrites in `history/seed-…/`:
/// - `[[providers]]` becomes `[provider]` (its first entry, which the seed
///   used; the others are named as not carried);
/// - `timer.json`'s agent and session-length overrides become `agent` and
///   `max_session_duration` (the seed's effective settings), and
///   `timer.json` itself goes to the backup;
/// - with no `agent` at all, the seed's default (`opencode`) is written;
/// - a TODO the seed had claimed for a session it never finished is open
///   again;
/// - the seed's keys cryo does not use are named (kept, ignored).
pub fn adopt(dir: &Path, found: &Found, now: DateTime<Utc>) -> Result<Report> {
    let mut report = Report::default();
    let d = open(dir)?;
    let (toml_bytes, todo_bytes, timer_bytes) = (read(&d, "cryo.toml")?, read(&d, "todo.json")?, read(&d, TIMER)?);
    check(dir)?;
    let mut doc = toml_doc(toml_bytes.clone().unwrap_or_default())?;
    let files = [("cryo.toml", toml_bytes.as_ref()), ("todo.json", todo_bytes.as_ref()), (TIMER, timer_bytes.as_ref())];
    report.backup = Some(keep(&d, "seed", &files, now)?);

    if !doc.contains_key("provider")
        && let Some(list) = doc.get("providers").and_then(|p| p.as_array_of_tables()).cloned()
    {
        if let Some(first) = list.iter().next() {
            let name = first.get("name").and_then(|n| n.as_str()).unwrap_or("?").to_string();
            let envs = first.get("env").and_then(|e| e.as_table_like()).map_or(0, |t| t.len());
            doc.insert("provider", toml_edit::Item::Table(first.clone()));
            report.carried.push(format!("[[providers]] \"{name}\" → [provider] ({envs} env value(s))"));
            if list.len() > 1 {
                report.left.push(format!(
                    "{} more [[providers]] entries: the seed used only the first (they are in the backup)",
                    list.len() - 1
                ));
            }
        }
        doc.remove("providers");
    }
    let timer = found.timer.as_ref();
    if let Some(agent) = timer.and_then(|t| t.agent_override.as_deref()).filter(|a| !a.trim().is_empty()) {
        doc.insert("agent", toml_edit::value(agent));
        report.carried.push(format!("timer.json's agent override → agent = {agent:?}"));
    } else if !doc.contains_key("agent") {
        doc.insert("agent", toml_edit::value("opencode"));
        report.carried.push("agent: the seed's default, \"opencode\", written out".into());
    }
    match timer.and_then(|t| t.max_session_duration_override) {
        Some(secs) if (1..=i64::MAX as u64).contains(&secs) => {
            doc.insert("max_session_duration", toml_edit::value(secs as i64));
            report.carried.push(format!("timer.json's session-length override → max_session_duration = {secs}"));
        }
        Some(secs) => report.left.push(format!("timer.json's session-length override ({secs}) is not one cryo takes")),
        None => {}
    }
    for key in crate::config::LEGACY_KEYS.iter().filter(|k| **k != "providers") {
        if doc.contains_key(key) {
            report.left.push(format!("`{key}`: the seed's, kept in cryo.toml and ignored by cryo"));
        }
    }
    if let Some(todo) = &todo_bytes {
        report.carried.push(reopen_claimed(&d, todo)?);
    }
    let new_toml = doc.to_string();
    // What cryo will make of it, said now rather than found later.
    if let Err(e) = crate::chamber::config::parse(&dir.join("cryo.toml"), &new_toml, dir, chrono_tz::UTC) {
        report.left.push(format!("cryo.toml does not load in cryo as it is ({e}): mend it, and the chamber runs"));
    }
    if let Some(todo) = &todo_bytes
        && let Err(e) = cryo_core::todo::parse_file(&String::from_utf8_lossy(todo), chrono_tz::UTC, 0)
    {
        report.left.push(format!("todo.json does not load in cryo as it is ({e}): mend it, and the chamber runs"));
    }
    replace(&d, "cryo.toml", &new_toml)?;
    if timer_bytes.is_some() {
        d.remove(Path::new(TIMER)).map_err(|e| MoveError::Write(format!("cannot move {TIMER} aside: {e}")))?;
        report.left.push(format!("{TIMER} (the seed's state): in the backup only; cryo keeps its own"));
    }
    report.carried.push("plan.md, notes, messages: as they are (the same layout)".into());
    Ok(report)
}

/// Opens again the TODOs the seed had claimed and not finished (its
/// session was cut short), and says how many TODOs came over.
fn reopen_claimed(d: &Dir, bytes: &[u8]) -> Result<String> {
    let Ok(serde_json::Value::Array(mut items)) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Ok("todo.json: as it was (it is not a list the seed wrote)".into());
    };
    let mut reopened = 0;
    for item in &mut items {
        let claimed = item.get("claimed").and_then(|c| c.as_bool()) == Some(true);
        let done = item.get("done").and_then(|d| d.as_bool()) == Some(true);
        if claimed && !done {
            item["claimed"] = serde_json::Value::Bool(false);
            reopened += 1;
        }
    }
    let open = items.iter().filter(|i| i.get("done").and_then(|d| d.as_bool()) != Some(true)).count();
    if reopened > 0 {
        // A list of JSON values always serializes.
        let text = serde_json::to_string_pretty(&items).expect("JSON values serialize") + "\n";
        replace(d, "todo.json", &text)?;
    }
    let again = if reopened > 0 { format!(", {reopened} the seed had claimed open again") } else { String::new() };
    Ok(format!("todo.json: {} TODO(s), {open} open{again}; their times are read in the chamber's zone", items.len()))
}

/// Writes a stopped chamber's files as the seed reads them, keeping each
/// rewritten file in `history/release-…/`: `todo.json` in its one time form
/// ([`cryo_core::todo::render_seed_file`]), and a `[provider]` it can
/// load (a `name`, which it requires; env values kept in files left out,
/// as it takes only strings).
/// Why a chamber cannot go back to the seed as it is, if it cannot:
/// [`check`]'s conditions, and TODO ids the seed can hold (it reads them
/// as 32-bit numbers, and one larger makes it skip the whole list).
pub fn check_release(dir: &Path, list: &cryo_core::todo::TodoList) -> Result<()> {
    check(dir)?;
    let big: Vec<String> = list.items.iter().filter(|t| t.id > u64::from(u32::MAX)).map(|t| t.id.to_string()).collect();
    if !big.is_empty() {
        return Err(MoveError::Unfit(format!(
            "TODO ids {} are larger than the seed reads (up to {}): it would skip every TODO; nothing was changed",
            big.join(", "),
            u32::MAX
        )));
    }
    Ok(())
}

/// `tz`: the zone the seed reads times in (the machine's: it has none of
/// its own); `chamber_tz`: the chamber's.
pub fn release(
    dir: &Path,
    list: &cryo_core::todo::TodoList,
    (tz, chamber_tz): (Tz, Tz),
    now: DateTime<Utc>,
) -> Result<Report> {
    let mut report = Report::default();
    check_release(dir, list)?;
    let d = open(dir)?;
    let (toml_bytes, todo_bytes) = (read(&d, "cryo.toml")?, read(&d, "todo.json")?);
    let journal = read(&d, JOURNAL)?;
    let mut doc = toml_doc(toml_bytes.clone().unwrap_or_default())?;
    let files = [
        ("cryo.toml", toml_bytes.as_ref()),
        ("todo.json", todo_bytes.as_ref()),
        ("todo-journal.jsonl", journal.as_ref()),
    ];
    report.backup = Some(keep(&d, "release", &files, now)?);
    if chamber_tz != tz {
        report.left.push(format!(
            "the chamber's zone ({chamber_tz}): the seed has none; its TODO times are written in this machine's ({tz})"
        ));
    }

    let (todos, lost) = cryo_core::todo::render_seed_file(list, tz);
    let open = list.items.iter().filter(|t| !t.done).count();
    report.carried.push(format!(
        "todo.json: {} TODO(s), {open} open, times as the seed reads them (%Y-%m-%dT%H:%M, {tz})",
        list.items.len()
    ));
    report.left.extend(lost);
    let mut toml_changed = false;
    if let Some(p) = doc.get_mut("provider").and_then(|p| p.as_table_like_mut()) {
        if !p.contains_key("name") {
            p.insert("name", toml_edit::value("cryo"));
            toml_changed = true;
            report.carried.push("[provider] name = \"cryo\" (the seed requires one)".into());
        }
        if let Some(env) = p.get_mut("env").and_then(|e| e.as_table_like_mut()) {
            let in_files: Vec<String> =
                env.iter().filter(|(_, v)| v.as_str().is_none()).map(|(k, _)| k.to_string()).collect();
            for k in in_files {
                env.remove(&k);
                toml_changed = true;
                report.left.push(format!(
                    "[provider].env.{k} is kept in a file: the seed takes only values written in cryo.toml"
                ));
            }
        }
    }
    replace(&d, "todo.json", &todos)?;
    // Its adds are in the list now: the journal goes with the backup.
    if journal.is_some() {
        d.remove(Path::new(JOURNAL)).map_err(|e| MoveError::Write(format!("cannot move {JOURNAL} aside: {e}")))?;
    }
    if toml_changed {
        replace(&d, "cryo.toml", &doc.to_string())?;
    }
    report.left.push("cryo's other keys stay in cryo.toml: the seed ignores them".into());
    report.carried.push(format!("to run it with the seed again: cd {} && cryo start", dir.display()));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chamber(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(d.path().join(name), text).unwrap();
        }
        d
    }

    fn now() -> DateTime<Utc> {
        "2026-11-28T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_seed_chamber_comes_over_with_what_it_ran_with() {
        let d = chamber(&[
            (
                "cryo.toml",
                "max_session_duration = 600\nwait_timeout = 30\n\n[[providers]]\nname = \"main\"\nenv = { \
                 ANTHROPIC_API_KEY = \"k\" }\n\n[[providers]]\nname = \"spare\"\n",
            ),
            ("timer.json", r#"{"session_number": 4, "pid": null, "agent_override": "claude"}"#),
            ("todo.json", r#"[{"id":1,"text":"a","done":false,"claimed":true,"at":"2026-12-01T09:00","created":"x"}]"#),
        ]);
        let found = find(d.path()).expect("a seed chamber");
        assert!(!found.serves());
        let r = adopt(d.path(), &found, now()).unwrap();
        let toml = std::fs::read_to_string(d.path().join("cryo.toml")).unwrap();
        let parsed: toml::Table = toml::from_str(&toml).unwrap();
        assert_eq!(parsed["agent"].as_str(), Some("claude"), "{toml}");
        assert_eq!(parsed["provider"]["name"].as_str(), Some("main"), "{toml}");
        assert_eq!(parsed["provider"]["env"]["ANTHROPIC_API_KEY"].as_str(), Some("k"), "{toml}");
        assert!(parsed.get("providers").is_none(), "{toml}");
        assert!(toml.contains("wait_timeout = 30"), "the rest is kept as it was: {toml}");
        assert!(r.left.iter().any(|l| l.contains("1 more [[providers]]")), "{r:?}");
        assert!(r.left.iter().any(|l| l.contains("`wait_timeout`")), "{r:?}");
        assert!(!d.path().join("timer.json").exists());
        let todo = std::fs::read_to_string(d.path().join("todo.json")).unwrap();
        assert!(todo.contains("\"claimed\": false"), "{todo}");
        // Every rewritten file is kept as it was.
        let backup = r.backup.unwrap();
        for f in ["cryo.toml", "timer.json", "todo.json"] {
            assert!(backup.join(f).is_file(), "{f} kept");
        }
        assert!(std::fs::read_to_string(backup.join("cryo.toml")).unwrap().contains("[[providers]]"));
        // cryo reads what it wrote.
        let c = crate::chamber::config::parse(&d.path().join("cryo.toml"), &toml, d.path(), chrono_tz::UTC).unwrap();
        assert_eq!(c.config.provider_name.as_deref(), Some("main"));
    }

    #[test]
    fn the_seeds_service_for_a_chamber_is_found_by_its_folder() {
        let home = tempfile::tempdir().unwrap();
        let units = home.path().join(".config/systemd/user");
        std::fs::create_dir_all(&units).unwrap();
        let unit =
            |dir: &str| format!("[Service]\nExecStart=/bin/cryo daemon\nWorkingDirectory={dir}\nRestart=on-failure\n");
        std::fs::write(units.join("com.cryo.daemon.aaaa.service"), unit("/home/u/100%%done")).unwrap();
        std::fs::write(units.join("com.cryo.daemon.bbbb.service"), unit("/home/u/other")).unwrap();
        std::fs::write(units.join("com.cryo.hub.cccc.service"), unit("/home/u/100%%done")).unwrap();
        let found = services(home.path(), Path::new("/home/u/100%done"));
        assert_eq!(found.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(), ["com.cryo.daemon.aaaa"]);
    }

    #[test]
    fn another_tools_timer_json_is_not_the_seeds() {
        let d = chamber(&[("cryo.toml", "agent = \"sh a.sh\"\n"), ("timer.json", r#"{"duration": 25}"#)]);
        assert!(find(d.path()).is_none());
    }

    #[test]
    fn a_link_is_never_followed_or_rewritten() {
        let d = chamber(&[("cryo.toml", "agent = \"sh a.sh\"\n"), ("timer.json", r#"{"session_number": 1}"#)]);
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("todo.json")).unwrap();
        let found = find(d.path()).unwrap();
        let e = adopt(d.path(), &found, now()).unwrap_err();
        assert!(matches!(&e, MoveError::Unfit(m) if m.contains("nothing was changed")), "{e}");
        assert_eq!(std::fs::read_to_string(d.path().join("cryo.toml")).unwrap(), "agent = \"sh a.sh\"\n");
    }

    #[test]
    fn a_released_chamber_is_one_the_seed_reads() {
        let d =
            chamber(&[("cryo.toml", "agent = \"sh a.sh\"\n[provider]\nenv = { K = { file = \"/k\" }, L = \"l\" }\n")]);
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        let text = r#"[{"id":1,"text":"once","done":false,"claimed":false,"at":"2026-12-01T09:00:00+01:00"},
            {"id":2,"text":"daily","done":false,"claimed":false,"at":"2026-12-02T08:30:00+01:00","every":"1d"}]"#;
        let list = cryo_core::todo::parse_file(text, tz, 0).unwrap();
        let r = release(d.path(), &list, (tz, tz), now()).unwrap();
        let todo: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.path().join("todo.json")).unwrap()).unwrap();
        assert_eq!(todo[0]["at"], "2026-12-01T09:00");
        assert_eq!(todo[1]["at"], "2026-12-02T08:30");
        assert!(todo[1].get("every").is_none());
        assert!(r.left.iter().any(|l| l.contains("TODO 2 repeats (every 1d)")), "{r:?}");
        let toml: toml::Table = toml::from_str(&std::fs::read_to_string(d.path().join("cryo.toml")).unwrap()).unwrap();
        assert_eq!(toml["provider"]["name"].as_str(), Some("cryo"));
        assert!(toml["provider"]["env"].get("K").is_none() && toml["provider"]["env"]["L"].as_str() == Some("l"));
        assert!(r.left.iter().any(|l| l.contains("[provider].env.K")), "{r:?}");
    }
}
