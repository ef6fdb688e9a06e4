//! A supervisor's start: the chamber's machine is made from the registry,
//! the ledger and the files, then told what a killed cryod left open.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cryo_core::approvals::request::{self, Newest};
use cryo_core::chamber::{self, Boot, Chamber, Failed, Input, Limits, Listed, OpenBatch, OpenSession, Outgoing};
use cryo_core::message::CRYOCHAMBER;
use cryo_core::todo::Claim;
use tokio::sync::watch;

use super::handle::Accepted;
use super::{Event, Handle, Sup, settings};
use crate::chamber::mailbox::{Folder, Mailbox};
use crate::chamber::{Dir, log, todos};
use crate::services::runtime::Shared;
use crate::store::{ChamberRecord, Desired};

/// What start-up recovery hands a supervisor: the sessions of this chamber
/// that were running when cryod died, the processes still carrying their
/// wake ids (already ended by then, see `Daemon::load`), and the ledger's
/// rows for this start when its boot batch read them.
#[derive(Default)]
pub struct Recovery {
    pub open: Vec<crate::store::OpenSession>,
    pub processes: Arc<HashMap<String, Vec<(i32, i32)>>>,
    /// What the ledger holds for this start, if read with its batch's
    /// (`None`: the start reads it).
    pub rows: Option<crate::store::BootRows>,
    /// The open sessions could not be read (see `Boot::open_unknown`).
    pub open_unknown: bool,
}

/// The conversation the newest session left to resume, as its row keeps it
/// (none if it is still open: recovery ends it as interrupted).
fn thread_of(row: &crate::store::SessionRow) -> Option<cryo_core::session::Thread> {
    let (sessions, tokens) = row.thread?;
    Some(cryo_core::session::Thread {
        conversation: row.usage.provider_session.clone()?,
        session: row.number,
        ended_at: row.ended_at?,
        sessions,
        tokens,
    })
}

/// A paused chamber's newest approval request as the store has it: one
/// that waits, else one a person answered that no session has used (two
/// reads of the store, for the rare chamber that is paused).
async fn newest_request(shared: &Shared, chamber: i64) -> Option<Newest> {
    let read = |all| async move {
        shared.store.approvals(Some(chamber), all, 1).await.map_err(|error| {
            tracing::warn!(chamber, %error, "cannot read the approval requests at start");
        })
    };
    if let Some(a) = read(false).await.ok()?.pop() {
        return Some(Newest::Pending { what: crate::services::approvals::what(&a), id: a.id });
    }
    let a = read(true).await.ok()?.pop().filter(|a| a.state != "pending" && a.used_at.is_none())?;
    let line = crate::services::approvals::decided_line(&a);
    Some(Newest::Decided { what: crate::services::approvals::what(&a), id: a.id, line })
}

/// When a session's wake was recorded (its start, else when it was due).
fn session_began(row: &crate::store::SessionRow) -> Option<chrono::DateTime<chrono::Utc>> {
    row.started_at.or(row.due_at)
}

/// Where a booted supervisor takes its events and shows its look: a new
/// queue and snapshot, or a frozen chamber's (thawed, with what its
/// machine is told of the time it had none).
pub(super) struct Place {
    pub(super) tx: super::queue::Sender<Event>,
    pub(super) rx: super::queue::Receiver<Event>,
    pub(super) snapshot: super::outlets::Shown,
    pub(super) thawed: Option<chamber::Thawed>,
}

impl Place {
    pub(super) fn new() -> Place {
        let (tx, rx) = super::queue::channel();
        Place { tx, rx, snapshot: Default::default(), thawed: None }
    }
}

/// Makes a chamber's supervisor from the registry's record, the ledger and
/// the chamber's files, and starts it on its own task.
pub(super) async fn start(shared: Arc<Shared>, record: ChamberRecord, mut recovery: Recovery, place: Place) -> Handle {
    let Place { tx, rx, snapshot, thawed } = place;
    // A thaw's boot says nothing the chamber shows already.
    let log = thawed.is_none();
    let (said, fault) = {
        let shown = snapshot.borrow();
        (shown.view.warnings.clone(), shown.view.fault.clone())
    };
    let root = PathBuf::from(&record.path);
    let system_tz = shared.system_zone.get();
    let rows = match recovery.rows.take() {
        Some(rows) => rows,
        None => ledger_rows(&shared, record.id).await,
    };
    // The chamber folder, opened once for every look at its files below.
    let dir = crate::chamber::config::open(&root);
    let opened = dir.as_ref().ok();
    let last_session = newest_number(&shared, &record, rows.newest.as_ref(), &root, opened);
    // What the newest session did on a `[git]` branch, for the status.
    let git_last =
        rows.newest.as_ref().and_then(|s| s.git.as_deref()).and_then(|j| serde_json::from_str(j).ok()).map(Arc::new);
    let last = rows.newest;
    let trusted = record.trusted.as_deref().map(crate::chamber::trust::from_json);
    let told = super::Told { warnings: &said, fault: fault.as_deref() };
    let (config, warnings, read) = super::load_config(&shared, &dir, &record.name, trusted.as_ref(), told);
    let trusted = keep_first_read(&shared, &record, trusted.as_ref(), config.is_ok(), read).await;
    let tz = config.as_ref().map(|c| c.timezone).unwrap_or(system_tz);
    let watch_activity = config.as_ref().is_ok_and(|c| c.expect_activity_within.is_some());
    let (past, mailbox) = past(&root, opened, last, tz, watch_activity);
    let last_asked = past.last_result.as_deref().is_some_and(|r| r.starts_with(chamber::approval::AWAITING_APPROVAL));
    // A chamber with nothing to recover may rest from its start.
    let plain = recovery.open.is_empty()
        && rows.claims.is_empty()
        && past.rerun.is_none()
        && !record.paused
        && !last_asked
        && !record.archived;
    let StartList { todos, read: todos_read } = list_at_start(&shared, &record, opened, &config, tz, plain);
    let StartMail { open_questions, unread, inbox } = mail_at_start(&shared, &record, &mailbox, opened, plain);
    if let (Err(e), true) = (&todos, log) {
        tracing::warn!(chamber = %record.name, fault = %e, "chamber is faulted");
    }
    // What a person must do, the back-off, the failed work's next try: as
    // the store kept them (one that does not parse is none).
    let health: Option<chamber::HealthRecord> = record.health.as_deref().and_then(|j| serde_json::from_str(j).ok());
    // A chamber paused for an approval waits for it; an answer that never
    // led to a session is given after the boot.
    let newest = if record.paused || last_asked { newest_request(&shared, record.id).await } else { None };
    let attention = health.as_ref().and_then(|h| h.attention.as_deref());
    let request::AtBoot { awaiting, answered } = request::at_boot(record.paused, last_asked, attention, newest);
    let machine = Chamber::new(
        chamber::Loaded {
            id: record.id,
            name: record.name.clone(),
            started: record.desired == Desired::Started,
            paused: record.paused,
            archived: record.archived,
            // Reset, and no session was recorded since.
            begun_again: past.begun_again,
            last_session,
            last_result: past.last_result,
            last_lateness_ms: past.last_lateness_ms,
            open_questions,
            config: config.as_ref().map(settings).map_err(Clone::clone),
            warnings,
            todos,
            unread,
            system_tz,
            thread: past.thread,
            last_visible: past.last_visible,
            rerun: past.rerun,
            awaiting,
            health,
        },
        Limits { stop_grace: std::time::Duration::from_secs(shared.config.stop_grace_seconds) },
    );
    let watch_dirs = config.as_ref().map(|c| c.watch_dirs.clone()).unwrap_or_default();
    let mut boot = boot_input(rows.claims, &mailbox, recovery);
    boot.thawed = thawed;
    let changed = bridges_changed(tx.clone());
    let mirror = shared.lease.is_fleet().then(|| mirrored(&shared, record.fence()));
    write_fence(&shared, &record, &root);
    let epoch = shared.lease.trust().epoch();
    let sup = Sup {
        shared,
        id: record.id,
        owner: super::owner::Ownership::new(record.fence(), epoch),
        running: None,
        trusted,
        ahead: None,
        fell_back: None,
        last_trace: None,
        root,
        tx: tx.clone(),
        outlets: super::outlets::Outlets::new(snapshot.clone(), mirror),
        machine,
        config,
        callers: Default::default(),
        todos_written: todos_read,
        bridges: crate::services::bridges::Bridges::new(changed),
        git_lock: Default::default(),
        git_last,
        timers: Vec::new(),
        unsaved: false,
    };
    launch(sup, Launch { boot, answered, inbox, dir: dir.ok() }, &watch_dirs, rx, tx, snapshot).await
}

/// What a chamber's mailbox holds at its start: the questions the agent
/// left open and the unread mail, and the inbox's version they stand for
/// (a settled one: while it holds, no message came or went).
struct StartMail {
    open_questions: u32,
    unread: Vec<String>,
    inbox: Option<[i64; 7]>,
}

/// Reads the chamber's mailbox at its start, or, for a `plain` chamber
/// whose four folders are the versions the last start read with an empty
/// inbox, takes back what that read gave (nothing to list).
fn mail_at_start(
    shared: &Shared,
    record: &ChamberRecord,
    mailbox: &Mailbox,
    dir: Option<&Dir>,
    plain: bool,
) -> StartMail {
    let settled = crate::chamber::version::settled(shared.clock.now());
    let key = dir.and_then(|d| mailbox.versions(d, settled));
    let inbox = key.as_ref().and_then(|k| k.inbox());
    if let Some(open_questions) = key.as_ref().filter(|_| plain).and_then(|k| shared.kept.take_mail(record.id, k)) {
        return StartMail { open_questions, unread: Vec::new(), inbox };
    }
    let (open_questions, unread) = (open_questions(mailbox), mailbox.unread());
    shared.kept.keep_mail(record.id, key.filter(|_| unread.is_empty()), open_questions);
    StartMail { open_questions, unread, inbox }
}

/// A chamber's TODO list at its start (or the next due time taken back
/// instead of a read), and the version of `todo.json` it stands for.
struct StartList {
    todos: std::result::Result<Listed, Failed>,
    read: Option<todos::Stamp>,
}

/// Reads the chamber's TODO list at its start. A `plain` chamber (nothing
/// to recover) whose list's files are the versions the last start read
/// rests from its start: what they gave of the next wake is taken back, and
/// the list is not read. An old file's done TODOs past the tail are
/// archived now, once; the machine takes a fault as its line.
fn list_at_start(
    shared: &Shared,
    record: &ChamberRecord,
    dir: Option<&Dir>,
    config: &std::result::Result<crate::chamber::config::ChamberConfig, Failed>,
    tz: chrono_tz::Tz,
    plain: bool,
) -> StartList {
    let root = std::path::Path::new(&record.path);
    // The version read, taken before the read: `launch` reads again only
    // another (an old file of fifty thousand TODOs was parsed twice).
    let settled = crate::chamber::version::settled(shared.clock.now());
    let (mut read, key) = dir.map(|d| todos::versions(d, tz, settled)).unwrap_or_default();
    if let Some(next_due) =
        key.as_ref().filter(|_| plain && config.is_ok()).and_then(|k| shared.kept.take_list(record.id, k))
    {
        return StartList { todos: Ok(Listed::Kept(next_due)), read };
    }
    let todos = match config {
        Ok(c) if !record.archived => {
            let gate = shared.lease.gate(shared.lease.trust().epoch());
            let how =
                todos::How { durable: true, keep_done: c.keep_done, now: shared.clock.now(), journaled: false, gate };
            todos::load_at_start(root, tz, how).map(|(list, written)| {
                match (written, key) {
                    (Some(written), _) => read = Some(written),
                    // A list holding a claim is read again at the next
                    // start: a claim left by a session that is over is
                    // re-queued at a boot that reads it.
                    (None, Some(key)) if !list.items.iter().any(|t| t.claimed_by.is_some()) => {
                        shared.kept.keep_list(record.id, key, list.next_due())
                    }
                    (None, _) => {}
                }
                list
            })
        }
        _ => todos::load(root, tz),
    }
    .map(Listed::Read)
    .map_err(Failed::of);
    StartList { todos, read }
}

/// What the ledger holds for a chamber's start, read for it alone (nothing
/// if the store cannot answer: a start goes on from the files).
async fn ledger_rows(shared: &Shared, id: i64) -> crate::store::BootRows {
    let mut rows = shared.store.boot_rows(vec![id]).await.unwrap_or_default();
    rows.remove(&id).unwrap_or_default()
}

/// The highest session number the ledger (its newest row) or the chamber's
/// log knows (the log's taken back from the last start while it is the
/// version that start read).
fn newest_number(
    shared: &Shared,
    record: &ChamberRecord,
    newest: Option<&crate::store::SessionRow>,
    root: &std::path::Path,
    dir: Option<&Dir>,
) -> u64 {
    let settled = crate::chamber::version::settled(shared.clock.now());
    let key = dir.and_then(|d| log::version(d, settled));
    let logged = key.as_ref().and_then(|k| shared.kept.take_log(record.id, k)).unwrap_or_else(|| {
        let n = log::last_session_number(root);
        shared.kept.keep_log(record.id, key, n);
        n
    });
    newest.map(|s| s.number).unwrap_or(0).max(logged)
}

/// The chamber's accepted settings after this read: those kept, else (none
/// kept, and the `cryo.toml` loaded) those `read`, which are kept now.
async fn keep_first_read(
    shared: &Shared,
    record: &ChamberRecord,
    kept: Option<&super::Trusted>,
    config_ok: bool,
    read: Option<super::Trusted>,
) -> Option<Accepted> {
    if let Some(kept) = kept {
        return Some(Accepted::of(kept));
    }
    // First read since cryod kept what was accepted: what it says is.
    let read = read.filter(|_| config_ok)?;
    let accepted = Accepted::of(&read);
    if let Err(error) = shared.store.set_trusted(record.fence(), crate::chamber::trust::to_json(&read)).await {
        tracing::warn!(chamber = %record.name, %error, "cannot keep the accepted settings");
    }
    Some(accepted)
}

/// What the ledger and the chamber's files say of the sessions before this
/// start, as the machine's `Loaded` takes it.
struct Past {
    begun_again: bool,
    last_result: Option<String>,
    last_lateness_ms: Option<i64>,
    thread: Option<cryo_core::session::Thread>,
    last_visible: Option<chrono::DateTime<chrono::Utc>>,
    rerun: Option<chamber::Rerun>,
}

/// Reads what came before this start: the conversation to resume, unless a
/// reset came after it, the newest visible message when the dead man's
/// switch is on (`watch_activity`), and the work a stop cut short. Also
/// opens the chamber's mailbox, which the outbox is read through.
fn past(
    root: &std::path::Path,
    dir: Option<&Dir>,
    last: Option<crate::store::SessionRow>,
    tz: chrono_tz::Tz,
    watch_activity: bool,
) -> (Past, Mailbox) {
    // A reset begins a new conversation.
    let reset = dir.and_then(crate::chamber::reset::last_reset);
    let thread = last.as_ref().and_then(thread_of).filter(|t| reset.is_none_or(|r| t.ended_at > r));
    // The dead man's switch counts from the newest visible message.
    let last_visible = if watch_activity { newest_message(root) } else { None };
    let mailbox = Mailbox::new(root, tz);
    let begun_again = reset.is_some_and(|r| last.as_ref().is_none_or(|s| session_began(s) < Some(r)));
    // The newest session was cut short by a stop of cryod (this node's or
    // another's): its work runs again. The outbox is read only then.
    let rerun = (last.as_ref().filter(|_| !begun_again))
        .and_then(|s| chamber::Rerun::after(s.number, s.outcome.as_deref(), || outgoing(&mailbox)));
    let last_result = last.as_ref().and_then(|s| s.outcome.clone());
    let last_lateness_ms = last.and_then(|s| s.lateness_ms);
    (Past { begun_again, last_result, last_lateness_ms, thread, last_visible, rerun }, mailbox)
}

/// What the bridges call when theirs change: an event to the supervisor.
fn bridges_changed(tx: super::queue::Sender<Event>) -> Arc<dyn Fn() + Send + Sync> {
    Arc::new(move || {
        let _ = tx.send(Event::BridgesChanged);
    })
}

/// In a fleet, stamps `.cryo/fence` in the chamber with the record's fence
/// and this node's id.
fn write_fence(shared: &Shared, record: &ChamberRecord, root: &std::path::Path) {
    if let Some(pg) = shared.store.fleet() {
        // Whoever reads the folder can tell which owner wrote it last.
        let stamp = format!("{} {}\n", record.fence, pg.node_id());
        let fence = std::path::Path::new(".cryo/fence");
        let written = crate::chamber::Dir::open(root)
            .and_then(|d| d.write(fence, stamp.as_bytes(), crate::chamber::NewFile::DURABLE));
        if let Err(e) = written {
            tracing::warn!(chamber = %record.name, error = %e, "cannot write .cryo/fence");
        }
    }
}

/// What a made supervisor is told as it starts: what recovery found, an
/// answer no session used, and the inbox's settled version its unread mail
/// was read at, and the chamber folder its boot opened.
struct Launch {
    boot: Boot,
    answered: Option<(String, String)>,
    inbox: Option<[i64; 7]>,
    dir: Option<Dir>,
}

/// Starts a made supervisor: it watches the chamber, takes what recovery
/// found, catches up on what changed before the watch, and runs on its own
/// task; the handle is how the daemon reaches it.
async fn launch(
    mut sup: Sup,
    Launch { boot, answered, inbox, dir }: Launch,
    watch_dirs: &[PathBuf],
    rx: super::queue::Receiver<Event>,
    tx: super::queue::Sender<Event>,
    snapshot: super::outlets::Shown,
) -> Handle {
    sup.shared.watcher.watch(sup.id, &sup.root, dir.as_ref(), watch_dirs, sup.watch_sink());
    sup.feed(Input::Boot(boot)).await;
    super::test_panic("boot", sup.machine.name());
    if let Some((id, line)) = answered {
        let req = sup.own_req();
        sup.feed(Input::Answered { req, id, line }).await;
    }
    // What changed between the files' first reading and the watch (a hand
    // edit of todo.json, mail) raised no event: read them again now (the
    // list only if its file is another version than the one read).
    if sup.todos_written.is_none() || dir.as_ref().and_then(todos::stamp) != sup.todos_written {
        sup.reload_todos().await;
    }
    // The inbox is listed again unless it is the settled version read.
    if inbox.is_none() || dir.as_ref().and_then(|d| sup.mailbox().inbox_version(d)) != inbox {
        sup.observe_inbox().await;
    }
    sup.publish();
    tokio::spawn(run_caught(Box::new(sup), rx));
    Handle { tx, snapshot }
}

/// Runs the supervisor; a panic in it is caught and handed to the daemon,
/// which ends what the chamber left running and starts it again, so one
/// chamber's bug never leaves it silently without a supervisor.
async fn run_caught(sup: Box<Sup>, rx: super::queue::Receiver<Event>) {
    let (shared, chamber) = (sup.shared.clone(), sup.id);
    // The supervisor is dropped when `caught` returns: its permit and door
    // are back before the daemon hears of the fall.
    if let Err(why) = caught(sup.run(rx)).await {
        let _ = shared.fallen.send(crate::services::runtime::Fallen { chamber, why });
    }
}

/// Polls `fut` to its end; a panic in it is caught, and its message given
/// back. `fut` is dropped before this returns.
pub(super) async fn caught<T>(fut: impl std::future::Future<Output = T>) -> Result<T, String> {
    let mut fut = std::pin::pin!(fut);
    let polled = std::future::poll_fn(|cx| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(poll) => poll.map(Ok),
            Err(payload) => std::task::Poll::Ready(Err(payload)),
        }
    });
    polled.await.map_err(|payload| {
        (payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into())
    })
}

/// The writer of a chamber's mirror: the latest view, in order, until the
/// supervisor ends (a fenced write ends it too).
fn mirrored(shared: &Arc<Shared>, fence: crate::store::Fence) -> watch::Sender<cryo_core::chamber::View> {
    let (tx, mut rx) = watch::channel(cryo_core::chamber::View::default());
    let store = shared.store.clone();
    tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let m = rx.borrow_and_update().clone();
            if let Err(e) = store.set_mirror(fence, m).await {
                if e.is_fenced() {
                    return;
                }
                tracing::debug!(error = %e, "cannot publish a chamber's mirror");
            }
        }
    });
    tx
}

/// The ledger's open sessions and batches, and (only if there are any) what
/// the outbox says about them.
fn boot_input(batches: Vec<crate::store::OpenClaim>, mailbox: &Mailbox, r: Recovery) -> Boot {
    if r.open.is_empty() && batches.is_empty() {
        return Boot { open_unknown: r.open_unknown, ..Boot::default() };
    }
    let archive = std::path::Path::new(Folder::InboxArchive.rel());
    let dir = crate::chamber::Dir::open(mailbox.root()).ok();
    let archived = |f: &String| dir.as_ref().is_some_and(|d| d.kind(&archive.join(f)).is_ok_and(|k| k.is_some()));
    let outgoing = outgoing(mailbox);
    Boot {
        open_unknown: r.open_unknown,
        open: r
            .open
            .iter()
            .map(|s| OpenSession {
                number: s.number,
                wake_id: s.wake_id.clone(),
                claims: claims_from_json(&s.claimed),
                groups_ended: r.processes.get(&s.wake_id).map(Vec::len).unwrap_or(0),
            })
            .collect(),
        batches: batches
            .into_iter()
            .map(|c| OpenBatch {
                archived: c.files.iter().filter(|f| archived(f)).cloned().collect(),
                id: c.id,
                session: c.session,
                files: c.files,
            })
            .collect(),
        outgoing,
        thawed: None,
    }
}

/// What the chamber sent (outbox and its archive), as recovery needs it.
fn outgoing(mailbox: &Mailbox) -> Vec<Outgoing> {
    [Folder::Outbox, Folder::OutboxArchive]
        .into_iter()
        .flat_map(|f| mailbox.read(f).unwrap_or_default())
        .map(|s| Outgoing {
            session: s.message.meta.get("session").and_then(|n| n.parse().ok()),
            by_agent: s.message.from != CRYOCHAMBER,
            in_reply_to: s
                .message
                .meta
                .get("in_reply_to")
                .map(|r| r.split(' ').map(str::to_string).collect())
                .unwrap_or_default(),
        })
        .collect()
}

/// Questions the agent asked after the last message it was sent, read
/// back from the newest (a page at a time, at most [`QUESTION_PAGES`]): a
/// start reads what is recent, not every message a chamber ever had.
fn open_questions(mb: &Mailbox) -> u32 {
    // The incoming folders are listed only if the chamber ever sent anything.
    let last_in = std::cell::OnceCell::new();
    let last_in =
        || *last_in.get_or_init(|| mb.newest(&[Folder::Inbox, Folder::InboxArchive], None, 1).pop().map(|m| m.when));
    let (mut count, mut before) = (0, None::<String>);
    for _ in 0..QUESTION_PAGES {
        let page = mb.newest(&[Folder::Outbox, Folder::OutboxArchive], before.as_deref(), 50);
        let Some(oldest) = page.first() else { break };
        let last_in = last_in();
        let after_last = |m: &crate::chamber::mailbox::Stored| last_in.is_none_or(|t| m.when > t);
        count += page.iter().filter(|m| m.message.question && after_last(m)).count() as u32;
        if !after_last(oldest) {
            break;
        }
        before = Some(oldest.name.clone());
    }
    count
}

/// Pages of 50 outgoing messages [`open_questions`] reads back at most.
const QUESTION_PAGES: usize = 20;

/// When the newest message in the outbox (or its archive) was written.
fn newest_message(root: &std::path::Path) -> Option<chrono::DateTime<chrono::Utc>> {
    let d = crate::chamber::Dir::open(root).ok()?;
    let mut newest = None;
    for folder in [Folder::Outbox, Folder::OutboxArchive] {
        let folder = std::path::Path::new(folder.rel());
        for e in d.list(folder).unwrap_or_default() {
            if e.name.to_string_lossy().ends_with(".md")
                && let Ok(Some(st)) = d.stat(&folder.join(&e.name))
            {
                newest = newest.max(chrono::DateTime::<chrono::Utc>::from_timestamp(st.st_mtime, 0));
            }
        }
    }
    newest
}

/// The claims as the wake ledger stores them (enough to settle them after a
/// crash of cryod itself).
pub(super) fn claims_json(claims: &[Claim]) -> String {
    let v: Vec<serde_json::Value> = claims
        .iter()
        .map(|c| {
            serde_json::json!({
                "id": c.id, "text": c.text, "due": crate::base::clock::rfc3339(c.due), "slots": c.slots, "attempt": c.attempt,
            })
        })
        .collect();
    serde_json::Value::Array(v).to_string()
}

/// The claims back from the ledger.
pub fn claims_from_json(s: &str) -> Vec<Claim> {
    let v: Vec<serde_json::Value> = serde_json::from_str(s).unwrap_or_default();
    v.iter()
        .filter_map(|c| {
            Some(Claim {
                id: c.get("id")?.as_u64()?,
                text: c.get("text")?.as_str()?.to_string(),
                due: chrono::DateTime::parse_from_rfc3339(c.get("due")?.as_str()?).ok()?.with_timezone(&chrono::Utc),
                slots: c.get("slots").and_then(|s| s.as_u64()).unwrap_or(1) as u32,
                attempt: c.get("attempt").and_then(|s| s.as_u64()).unwrap_or(0) as u32,
                skipped: None,
            })
        })
        .collect()
}
