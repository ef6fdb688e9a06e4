//! `chamber::todos`: the file, its archive, the journal and the lock, on disk.

use super::*;
use cryo_core::todo::NewTodo;

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339("2026-03-05T12:00:00Z").unwrap().with_timezone(&chrono::Utc)
}

const LAZY: How = How {
    durable: false,
    keep_done: todo::DEFAULT_KEEP_DONE,
    now: chrono::DateTime::UNIX_EPOCH,
    journaled: false,
    gate: None,
};

fn update<T, E>(
    dir: &Path,
    tz: Tz,
    change: impl FnMut(&mut TodoList) -> Result<T, E>,
) -> Result<(T, TodoList), UpdateError<E>> {
    update_with(dir, tz, How { durable: true, ..LAZY }, change).map(|(v, list, _)| (v, list))
}

fn add(text: &str) -> impl FnMut(&mut TodoList) -> Result<u64, todo::TodoError> + '_ {
    move |l| l.add(NewTodo { text: text.into(), at: Some(now()), ..NewTodo::default() }, now(), chrono_tz::UTC)
}

#[test]
fn an_edit_made_while_updating_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    update(d, chrono_tz::UTC, add("first")).unwrap();
    // The "editor" rewrites the file while our change is being computed
    // (the first time only).
    let mut edited = false;
    let (_, list) = update(d, chrono_tz::UTC, |l| {
        if !edited {
            edited = true;
            std::fs::write(
                todo_path(d),
                r#"[{"id":1,"text":"first","done":false,"at":"2026-03-05T12:00:00Z"},{"id":7,"text":"by hand","done":false,"at":"2026-03-06T12:00:00Z"}]"#,
            )
            .unwrap();
        }
        add("second")(l)
    })
    .unwrap();
    let texts: Vec<_> = list.items.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(texts, ["first", "by hand", "second"]);
    assert_eq!(list.items[2].id, 8, "ids continue after the editor's");
    assert_eq!(load(d, chrono_tz::UTC).unwrap(), list);
}

#[test]
fn a_corrupt_file_is_a_fault_and_stays_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(todo_path(dir.path()), "[{oops").unwrap();
    let r = update(dir.path(), chrono_tz::UTC, add("x"));
    assert!(matches!(r, Err(UpdateError::Fault(ref m)) if m.contains("todo.json")), "{r:?}");
    assert_eq!(std::fs::read_to_string(todo_path(dir.path())).unwrap(), "[{oops");
    std::fs::remove_file(todo_path(dir.path())).unwrap();
    std::fs::create_dir_all(dir.path().join(".cryo")).unwrap();
    std::fs::write(dir.path().join(".cryo/state.json"), "garbage").unwrap();
    let e = load(dir.path(), chrono_tz::UTC).unwrap_err();
    assert!(matches!(e, TodosError::StateJson { .. }) && e.to_string().contains("state.json"), "{e}");
    assert!(matches!(update(dir.path(), chrono_tz::UTC, add("x")), Err(UpdateError::Fault(_))));
    assert_eq!(std::fs::read_to_string(dir.path().join(".cryo/state.json")).unwrap(), "garbage");
}

/// The stamp of what cryod wrote tells its own version from any other:
/// a hand edit in place or a replacement.
#[test]
fn the_stamp_of_a_write_is_its_own_version_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_, _, stamp) = update_with(d, chrono_tz::UTC, LAZY, add("first")).unwrap();
    assert!(stamp.is_some() && stamp == super::stamp(&Dir::open(d).unwrap()), "the version written is on disk");
    let (_, _, unchanged) = update_with(d, chrono_tz::UTC, LAZY, |_| Ok::<_, ()>(())).unwrap();
    assert_eq!(unchanged, None, "nothing written, no new version");
    // In place (the same inode).
    let text = std::fs::read_to_string(todo_path(d)).unwrap();
    std::fs::write(todo_path(d), text.replace("first", "first!")).unwrap();
    assert_ne!(super::stamp(&Dir::open(d).unwrap()), stamp);
    let (_, _, again) = update_with(d, chrono_tz::UTC, How { durable: true, ..LAZY }, add("second")).unwrap();
    std::fs::write(d.join("other"), "[]").unwrap();
    std::fs::rename(d.join("other"), todo_path(d)).unwrap();
    assert_ne!(super::stamp(&Dir::open(d).unwrap()), again);
}

fn archived_ids(d: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(d.join(ARCHIVE)).unwrap_or_default();
    text.lines().filter_map(|l| todo::parse_archived(l, chrono_tz::UTC)).map(|(t, _)| t.id).collect()
}

fn done_file(done: u64) -> String {
    let mut items: Vec<String> = (1..=done).map(|i| format!(r#"{{"id":{i},"text":"job {i}","done":true}}"#)).collect();
    items.push(format!(r#"{{"id":{},"text":"open","at":"2026-03-06T09:00:00Z"}}"#, done + 1));
    format!("[{}]", items.join(",\n"))
}

/// A folder whose `todo.json` holds one TODO ("first"), and that file's bytes.
fn one_todo() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    update(dir.path(), chrono_tz::UTC, add("first")).unwrap();
    let bytes = std::fs::read(todo_path(dir.path())).unwrap();
    (dir, bytes)
}

/// `d` with an old `todo.json`: 300 done TODOs and one open.
fn old_file(d: &Path) {
    std::fs::write(todo_path(d), done_file(300)).unwrap();
    std::fs::create_dir_all(d.join(".cryo")).unwrap();
}

/// `d` as a crash left it: `todo.json` with 300 done TODOs and one
/// open, and the archive holding the first `archived` of them, then `torn`.
fn crashed_after(d: &Path, archived: usize, torn: &str) {
    let file = done_file(300);
    std::fs::write(todo_path(d), &file).unwrap();
    let whole = todo::parse_file(&file, chrono_tz::UTC, 0).unwrap();
    let mut lines = todo::render_archived(&whole.items[..archived], now(), chrono_tz::UTC);
    lines.push_str(torn);
    std::fs::create_dir_all(d.join(".cryo")).unwrap();
    std::fs::write(d.join(ARCHIVE), lines).unwrap();
}

/// A file holding more done TODOs than the tail (the seed system keeps
/// fifty thousand) is archived at the first start, from its text, in
/// order; the next start reads what is kept and writes nothing.
#[test]
fn a_start_archives_an_old_files_done_todos_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(todo_path(d), done_file(300)).unwrap();
    let how = How { durable: true, keep_done: 100, now: now(), journaled: false, gate: None };
    let (list, written) = load_at_start(d, chrono_tz::UTC, how.clone()).unwrap();
    assert_eq!(list.items.len(), 101, "the newest hundred done and the open one");
    assert_eq!(list.items[0].id, 201);
    assert!(written.is_some() && written == stamp(&Dir::open(d).unwrap()), "the version written");
    assert_eq!(archived_ids(d), (1..=200).collect::<Vec<_>>());
    assert_eq!(load(d, chrono_tz::UTC).unwrap(), list);
    let (again, written) = load_at_start(d, chrono_tz::UTC, how.clone()).unwrap();
    assert_eq!((again, written), (list, None), "nothing more to archive");
    assert_eq!(archived_ids(d).len(), 200);
}

/// A crash after the archive's append and before `todo.json`'s write
/// (here: after the first 50 lines and half a line): the next archive
/// writes the rest once each, after closing the torn line.
#[test]
fn an_archive_cut_short_is_finished_without_doubles() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crashed_after(d, 50, r#"{"id":51,"te"#);
    let how = How { durable: true, keep_done: 100, now: now(), journaled: false, gate: None };
    update_with(d, chrono_tz::UTC, how, |_| Ok::<_, ()>(())).unwrap();
    assert_eq!(archived_ids(d), (1..=200).collect::<Vec<_>>(), "each once, in order");
    assert_eq!(load(d, chrono_tz::UTC).unwrap().items.len(), 101);
}

/// A journal past its limit (cryod folds it at 64 KiB; only a hand, or
/// a hostile agent, makes one of 33 MiB) is refused in one line naming
/// it: the list does not load, a change is refused, and neither file is
/// touched.
#[test]
fn a_journal_past_its_limit_is_refused_and_nothing_is_changed() {
    let (dir, before) = one_todo();
    let d = dir.path();
    let journal = std::fs::File::create(d.join(journal::JOURNAL)).unwrap();
    journal.set_len(33 * 1024 * 1024).unwrap();
    let e = load(d, chrono_tz::UTC).unwrap_err().to_string();
    assert!(e.contains("todo-journal.jsonl") && !e.contains('\n'), "{e}");
    let refused = update(d, chrono_tz::UTC, add("second")).map(|_| ()).unwrap_err();
    assert!(matches!(refused, UpdateError::Fault(ref m) if m.contains("todo-journal.jsonl")), "{refused:?}");
    assert_eq!(std::fs::read(todo_path(d)).unwrap(), before);
    assert_eq!(std::fs::metadata(d.join(journal::JOURNAL)).unwrap().len(), 33 * 1024 * 1024);
}

/// A start does not wait for a lock someone else holds (the agent can
/// take it): the whole list is read, nothing is written, and the
/// archive is left to the first change.
#[test]
fn a_start_does_not_wait_for_a_held_lock() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    old_file(d);
    let held = std::fs::File::create(d.join(".cryo/todo.lock")).unwrap();
    held.lock().unwrap();
    let how = How { durable: true, keep_done: 100, now: now(), journaled: false, gate: None };
    let (list, written) = load_at_start(d, chrono_tz::UTC, how.clone()).unwrap();
    assert_eq!((list.items.len(), written), (301, None), "read whole, not written");
    assert!(archived_ids(d).is_empty());
    drop(held);
    let (list, written) = load_at_start(d, chrono_tz::UTC, how.clone()).unwrap();
    assert_eq!((list.items.len(), written.is_some()), (101, true));
}

#[test]
fn an_archive_ending_with_a_finished_ones_line_is_not_doubled() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crashed_after(d, 201, "");
    let how = How { durable: true, keep_done: 100, now: now(), journaled: false, gate: None };
    let (_, list, _) = update_with(d, chrono_tz::UTC, how, |_| Ok::<_, ()>(())).unwrap();
    assert_eq!(archived_ids(d), (1..=201).collect::<Vec<_>>(), "each once");
    assert_eq!(list.items.first().map(|t| t.id), Some(201), "the newest hundred done and the open one");
}

/// A lock held past the wait refuses the change in one line and leaves
/// the file as it was; one let go during the wait is taken at once (the
/// waiter wakes, it does not poll); the waiter that gave up lets go.
#[test]
fn a_held_lock_is_waited_for_within_a_deadline() {
    let (dir, before) = one_todo();
    let d = dir.path();
    let held = std::fs::File::create(d.join(".cryo/todo.lock")).unwrap();
    held.lock().unwrap();
    let how = How { durable: true, keep_done: 100, now: now(), journaled: false, gate: None };
    let wait = Duration::from_millis(200);
    let Err(UpdateError::Write(line)) = update_locking(d, chrono_tz::UTC, how.clone(), wait, add("second")) else {
        panic!("a held lock refuses the change")
    };
    assert!(line.contains("todo.lock is held by another process") && !line.contains('\n'), "{line}");
    assert_eq!(std::fs::read(todo_path(d)).unwrap(), before, "unchanged");
    // Let go while a change waits (for as long as a test may take).
    let (tx, rx) = std::sync::mpsc::channel();
    let path = d.to_path_buf();
    let waiting = std::thread::spawn(move || {
        tx.send(()).unwrap();
        update_locking(&path, chrono_tz::UTC, how, Duration::from_secs(600), add("third")).map(|_| ())
    });
    rx.recv().unwrap();
    // Both waiters wait: the one given up on and this one.
    wait_for(|| lock::waiting() >= 2);
    drop(held);
    assert!(waiting.join().unwrap().is_ok());
    let texts: Vec<String> = load(d, chrono_tz::UTC).unwrap().items.into_iter().map(|t| t.text).collect();
    assert_eq!(texts, ["first", "third"]);
    // The first change's waiter, given up on, let go of what it took.
    let again = std::fs::File::create(d.join(".cryo/todo.lock")).unwrap();
    wait_for(|| again.try_lock().is_ok());
}

/// Polls `cond` (a test's deadline: a minute).
fn wait_for(mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A journal left by a crash after its fold names a done TODO that is
/// being archived now: it is archived once and does not come back into
/// `todo.json` as new (`Journal::forget`).
#[test]
fn a_stale_journal_does_not_bring_back_an_archived_todo() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    old_file(d);
    std::fs::write(d.join(journal::JOURNAL), "{\"id\":5,\"text\":\"job 5\",\"done\":true}\n").unwrap();
    let how = How { durable: true, keep_done: 100, now: now(), journaled: false, gate: None };
    update_with(d, chrono_tz::UTC, how, |_| Ok::<_, ()>(())).unwrap();
    assert_eq!(archived_ids(d), (1..=200).collect::<Vec<_>>(), "each once");
    let ids: Vec<u64> = load(d, chrono_tz::UTC).unwrap().items.iter().map(|t| t.id).collect();
    assert!(!ids.contains(&5), "job 5 came back: {ids:?}");
    assert_eq!(ids.len(), 101);
}
