use super::super::Store;
use super::*;

fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

fn new(name: &str, exact: bool, path: &str) -> NewChamber {
    NewChamber { base_name: name.into(), exact_name: exact, path: path.into(), created_at: at("2026-01-01T00:00:00Z") }
}

/// A request is decided once (the second answer names the first), and
/// its answer is taken once, by the same call of the same chamber,
/// while it is fresh.
#[tokio::test]
async fn an_approval_is_decided_once_and_taken_once() {
    let s = Store::open_in_memory().unwrap();
    let (a, _) = s.add_chamber(new("a", false, "/a")).await.unwrap();
    let (b, _) = s.add_chamber(new("b", false, "/b")).await.unwrap();
    let request = |id: &str, chamber: i64| crate::store::ApprovalRecord {
        id: id.into(),
        chamber_id: chamber,
        session: 1,
        tool: "Bash".into(),
        input: r#"{"command":"git push"}"#.into(),
        subject: "git push".into(),
        reason: String::new(),
        rule: "the default (ask)".into(),
        created_at: at("2026-11-27T10:00:00.000Z"),
        state: "pending".into(),
        decided_at: None,
        decided_by: None,
        answer: None,
        used_at: None,
    };
    s.approval_add(a.fence(), request("a1", a.id)).await.unwrap();
    s.approval_add(b.fence(), request("b1", b.id)).await.unwrap();
    assert_eq!(s.approvals(None, false, 10).await.unwrap().len(), 2);
    let t = |h: u32| at(&format!("2026-11-27T{h}:00:00.000Z"));
    let take = |fence, since: DateTime<Utc>| {
        s.approval_take(fence, "Bash".into(), r#"{"command":"git push"}"#.into(), since, t(13))
    };
    assert!(take(a.fence(), t(0)).await.unwrap().is_none(), "a pending request is not an answer");
    let done = s.approval_decide("a1".into(), true, "operator".into(), None, t(11)).await.unwrap();
    assert_eq!((done.state.as_str(), done.decided_by.as_deref()), ("approved", Some("operator")));
    let again = s.approval_decide("a1".into(), false, "hub".into(), None, t(12)).await.unwrap_err().to_string();
    assert!(again.contains("was approved already (by operator at 2026-11-27T11"), "{again}");
    assert!(take(a.fence(), t(12)).await.unwrap().is_none(), "an answer older than `since` is not taken");
    let taken = take(a.fence(), t(10)).await.unwrap().expect("the answer");
    assert_eq!(taken.id, "a1");
    assert!(take(a.fence(), t(10)).await.unwrap().is_none(), "taken once");
    assert!(take(b.fence(), t(0)).await.unwrap().is_none(), "another chamber's request is not this one's");
    assert_eq!(s.approvals(Some(b.id), true, 10).await.unwrap().len(), 1);
    assert!(s.approval_decide("zz".into(), true, "x".into(), None, t(12)).await.is_err());
}

#[tokio::test]
async fn names_are_made_unique_and_paths_dedupe() {
    let s = Store::open_in_memory().unwrap();
    let (a, existed) = s.add_chamber(new("work", false, "/a/work")).await.unwrap();
    assert!(!existed);
    let (b, _) = s.add_chamber(new("work", false, "/b/work")).await.unwrap();
    assert_eq!((a.name.as_str(), b.name.as_str()), ("work", "work-2"));
    let (again, existed) = s.add_chamber(new("other", false, "/a/work")).await.unwrap();
    assert!(existed);
    assert_eq!(again.id, a.id);
    let e = s.add_chamber(new("work", true, "/c/work")).await.unwrap_err();
    assert!(e.to_string().contains("taken"), "{e}");
    s.set_desired(a.fence(), Desired::Started).await.unwrap();
    s.remove_chamber(b.fence()).await.unwrap();
    let all = s.chambers().await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].desired, Desired::Started);
}

/// The jobs waiting together commit together, yet one that fails undoes
/// only its own writes (its savepoint), and none is answered before the
/// group's commit.
#[tokio::test]
async fn a_group_commits_together_and_a_failing_job_undoes_only_itself() {
    let s = Sqlite::open_in_memory().unwrap();
    let (a, _) = s.call(|c| registry::add_chamber(c, new("a", false, "/a"))).await.unwrap();
    // Hold the thread so that the next three jobs wait as one group.
    let (release, held) = std::sync::mpsc::channel::<()>();
    s.tx.send(Job {
        durable: false,
        run: Box::new(move |_| {
            let _ = held.recv();
            Box::new(|_| {})
        }),
    })
    .unwrap();
    // A job that writes, then fails: its write must not commit with the group.
    let refused = s.fenced(a.fence(), |c| {
        c.execute("UPDATE chambers SET paused = 1", [])?;
        Err::<(), _>(StoreError::Conflict("refused after writing".into()))
    });
    let kept = s.fenced_with(true, a.fence(), move |c| {
        c.execute("UPDATE chambers SET desired = 'started' WHERE id = ?1", [a.id])?;
        Ok(())
    });
    let seen = s.call(|c| {
        Ok(c.query_row("SELECT desired, paused FROM chambers", [], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?)
    });
    let all = async { tokio::join!(refused, kept, seen) };
    tokio::pin!(all);
    // Polled once, each has sent its job; none is answered while the
    // group has not run.
    let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(all.as_mut().poll(cx).is_pending())).await;
    assert!(pending);
    release.send(()).unwrap();
    let (refused, kept, seen) = all.await;
    assert!(refused.unwrap_err().to_string().contains("refused after writing"));
    kept.unwrap();
    assert_eq!(seen.unwrap(), ("started".to_string(), 0), "the failed job's write was undone, the other's kept");
}

/// Session `number`'s wake, due now, from a TODO.
fn wake(number: u64) -> WakeRecord {
    WakeRecord {
        number,
        wake_id: format!("w{number}"),
        trigger: "todo".into(),
        reasons: "[]".into(),
        claimed: "[]".into(),
        due_at: None,
        created_at: at("2026-01-01T00:00:00Z"),
        resumed_from: None,
    }
}

/// A writer holding an old fence changes nothing; reopening the file
/// takes every chamber anew.
#[tokio::test]
async fn an_old_fence_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let s = Store::open(&path).unwrap();
    let (a, _) = s.add_chamber(new("a", false, "/a")).await.unwrap();
    let old = a.fence();
    drop(s);
    let s = Store::open(&path).unwrap();
    let fresh = s.chambers().await.unwrap()[0].fence();
    assert_eq!(fresh.token, old.token + 1);
    let wake = wake(1);
    let e = s.record_wake(old, wake.clone()).await.unwrap_err();
    assert!(e.is_fenced(), "{e}");
    assert!(s.set_desired(old, Desired::Started).await.unwrap_err().is_fenced());
    assert!(s.remove_chamber(old).await.unwrap_err().is_fenced());
    assert_eq!(s.last_session_number(a.id).await.unwrap(), 0);
    assert_eq!(s.chambers().await.unwrap()[0].desired, Desired::Stopped);
    s.record_wake(fresh, wake).await.unwrap();
    assert_eq!(s.open_sessions(Some(a.id)).await.unwrap().len(), 1);
    assert_eq!(s.open_sessions(Some(a.id + 1)).await.unwrap().len(), 0);
    // A chamber added after the newest was removed never takes its id: the
    // removed one's late writes, under the same fence, reach nothing.
    let (b, _) = s.add_chamber(new("b", false, "/b")).await.unwrap();
    s.remove_chamber(b.fence()).await.unwrap();
    let (c, _) = s.add_chamber(new("c", false, "/c")).await.unwrap();
    assert_ne!(c.id, b.id);
    assert!(s.set_desired(b.fence(), Desired::Started).await.unwrap_err().is_fenced());
    assert_eq!(s.chambers().await.unwrap().iter().find(|r| r.id == c.id).unwrap().desired, Desired::Stopped);
}

/// A start's batched read gives each chamber what its own two reads
/// give: its newest session and its open claims.
#[tokio::test]
async fn boot_rows_are_each_chambers_newest_session_and_open_claims() {
    let s = Store::open_in_memory().unwrap();
    let (a, _) = s.add_chamber(new("a", false, "/a")).await.unwrap();
    let (b, _) = s.add_chamber(new("b", false, "/b")).await.unwrap();
    for number in 1..=3 {
        s.record_wake(a.fence(), wake(number)).await.unwrap();
    }
    s.journal_claim(a.fence(), 3, vec!["m.md".into()], at("2026-01-01T00:00:00Z")).await.unwrap();
    let mut rows = s.boot_rows(vec![a.id, b.id]).await.unwrap();
    let ra = rows.remove(&a.id).unwrap();
    assert_eq!(ra.newest.as_ref().map(|r| r.number), Some(3));
    assert_eq!(ra.newest, s.recent_sessions(a.id, 1).await.unwrap().pop());
    assert_eq!(ra.claims.len(), 1);
    assert_eq!(ra.claims[0].files, vec!["m.md".to_string()]);
    let rb = rows.remove(&b.id).unwrap();
    assert!(rb.newest.is_none() && rb.claims.is_empty());
    assert!(rows.is_empty());
}

/// Commits never wait for a checkpoint (SQLite's own is off), and the
/// checkpointer still moves the log into the database file by itself.
#[tokio::test]
async fn the_log_reaches_the_database_file_without_a_commit_waiting_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let s = Store::open(&path).unwrap();
    let before = std::fs::metadata(&path).unwrap().len();
    for i in 0..300 {
        s.add_chamber(new(&format!("c{i}"), false, &format!("/c/{i}"))).await.unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::metadata(&path).unwrap().len() <= before {
        assert!(std::time::Instant::now() < deadline, "the database file never grew: no checkpoint ran");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(s.chambers().await.unwrap().len(), 300);
}

/// Times go in as `DateTime<Utc>` and are kept as the same text as ever:
/// RFC 3339 in UTC to the second, an approval request's to the
/// millisecond (what is finer is cut, not rounded).
#[tokio::test]
async fn times_are_kept_as_rfc3339_text() {
    let s = Sqlite::open_in_memory().unwrap();
    let t = at("2026-11-27T10:00:00.123456789Z");
    let (a, _) = s.add_chamber(NewChamber { created_at: t, ..new("a", false, "/a") }).await.unwrap();
    let f = a.fence();
    s.record_wake(f, WakeRecord { due_at: Some(t), created_at: t, ..wake(1) }).await.unwrap();
    s.session_started(f, SessionStart { number: 1, pid: 7, started_at: t, lateness_ms: None }).await.unwrap();
    let usage = Default::default();
    let end = SessionEnd { number: 1, ended_at: t, outcome: "ok".into(), detail: String::new(), usage, thread: None };
    s.session_ended(f, end).await.unwrap();
    s.journal_claim(f, 1, Vec::new(), t).await.unwrap();
    s.journal_answer(f, 1, t).await.unwrap();
    let slot =
        PassedSlot { slot_at: t, todo_id: None, todo_text: None, what: "missed".into(), reason: "r".into(), at: t };
    s.record_passed(f, vec![slot]).await.unwrap();
    let hold = crate::store::HoldRecord { account: "x".into(), until: t, source: String::new(), guessed: true };
    s.set_hold(hold).await.unwrap();
    let request = ApprovalRecord {
        id: "a1".into(),
        chamber_id: a.id,
        session: 1,
        tool: "Bash".into(),
        input: "{}".into(),
        subject: "ls".into(),
        reason: String::new(),
        rule: "ask".into(),
        created_at: t,
        state: "pending".into(),
        decided_at: None,
        decided_by: None,
        answer: None,
        used_at: None,
    };
    s.approval_add(f, request).await.unwrap();
    s.approval_decide("a1".into(), true, "operator".into(), None, t).await.unwrap();
    let taken = s.approval_take(f, "Bash".into(), "{}".into(), t - chrono::Duration::hours(1), t).await.unwrap();
    assert_eq!(taken.and_then(|a| a.used_at), Some(at("2026-11-27T10:00:00.123Z")), "as kept");
    let kept = s
        .call(|c| {
            let mut texts = Vec::new();
            for sql in [
                "SELECT created_at FROM chambers",
                "SELECT due_at FROM sessions",
                "SELECT created_at FROM sessions",
                "SELECT started_at FROM sessions",
                "SELECT ended_at FROM sessions",
                "SELECT claimed_at FROM claims",
                "SELECT answered_at FROM claims",
                "SELECT slot_at FROM passed",
                "SELECT at FROM passed",
                "SELECT until FROM provider_holds",
                "SELECT created_at FROM approvals",
                "SELECT decided_at FROM approvals",
                "SELECT used_at FROM approvals",
            ] {
                texts.push(c.query_row(sql, [], |r| r.get::<_, String>(0))?);
            }
            Ok(texts)
        })
        .await
        .unwrap();
    let (secs, millis) = ("2026-11-27T10:00:00Z", "2026-11-27T10:00:00.123Z");
    assert_eq!(kept[..10], [secs; 10]);
    assert_eq!(kept[10..], [millis; 3]);
    let row = s.recent_sessions(a.id, 1).await.unwrap().pop().unwrap();
    assert_eq!((row.due_at, row.started_at, row.ended_at), (Some(at(secs)), Some(at(secs)), Some(at(secs))));
    assert_eq!(s.chambers().await.unwrap()[0].created_at, at(secs));
}
