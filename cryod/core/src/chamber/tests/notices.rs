//! What a chamber tells beyond its conversation: its ends handed on to
//! other chambers, missed slots with why, silence, a failover's notice.

use chrono::Duration;
use std::time::Duration as StdDuration;

use super::{Rig, add_todo, hibernate, messages, pos, settings, t0};
use crate::chamber::{Call, Effect, Input, LogLine, Settings, Timer, handoff};

/// `[[on_end]]`: a matching end is handed on (with the summary and the
/// session number), others are not, and a link carries at most its rate an
/// hour: the rest wait in order for the timer, and say so.
#[test]
fn session_ends_are_handed_on_at_the_links_rate() {
    use handoff::{HandedOff, OnEnd, When};
    let mut rig = Rig::new(&[0], &[]);
    let on_end = vec![
        OnEnd { chamber: "review".into(), when: When::Hibernated, message: None, max_per_hour: 2 },
        OnEnd {
            chamber: "pager".into(),
            when: When::Failed,
            message: Some("{chamber} broke: {outcome}".into()),
            max_per_hour: 6,
        },
    ];
    rig.feed(Input::ConfigChanged { config: Ok(Settings { on_end, ..settings() }), warnings: Vec::new() });
    let handoffs = |out: &[Effect]| -> Vec<handoff::HandOff> {
        out.iter()
            .filter_map(|e| match e {
                Effect::HandOff(h) => Some(h.clone()),
                _ => None,
            })
            .collect()
    };
    let session = |rig: &mut Rig, crash: bool| {
        let req = rig.req();
        let mut out = rig.feed(Input::Wake { req, message: None, replace: false });
        out.extend(rig.feed(Input::Admitted { nonce: "n".into(), token: "t".into(), fresh: None }));
        if !crash {
            rig.call(add_todo("+9h")).unwrap();
            rig.call(hibernate()).unwrap();
        }
        out.extend(rig.exit(if crash { "exit 1" } else { "exit 0" }));
        rig.now += Duration::minutes(10);
        out
    };
    let out = session(&mut rig, false);
    let sent = handoffs(&out);
    assert_eq!(sent.len(), 1, "{out:#?}");
    assert_eq!((sent[0].to.as_str(), sent[0].session), ("review", 2));
    assert_eq!(sent[0].subject, "c: session 2 hibernated");
    assert_eq!(sent[0].body, "Session 2 of c ended: hibernated.\n\ndone");
    let ended = pos(&out, "SessionEnded", |e| matches!(e, Effect::SessionEnded { .. }));
    let handed = pos(&out, "HandOff", |e| matches!(e, Effect::HandOff(_)));
    assert!(ended < handed, "the ledger has the end before it is handed on");
    let done = HandedOff {
        file: "messages/inbox/x.md".into(),
        waits: None,
        looped: Some(vec!["c".into(), "review".into(), "c".into()]),
    };
    let out = rig.feed(Input::HandedOff { to: "review".into(), session: 2, result: Ok(done) });
    // Kept in the health record, for a restart (or a thaw) to show again.
    assert!(out.iter().any(|e| matches!(e, Effect::SaveHealth)), "{out:#?}");
    let kept = rig.m.health_record();
    assert_eq!(kept.handoff_last.map(|(to, n, _)| (to, n)), Some(("review".to_string(), 2)));
    assert_eq!(kept.handoff_loop.map(|l| l.len()), Some(3));
    let line = rig.m.view().handoffs.expect("a line");
    assert!(line.starts_with("→ review when hibernated, → pager when failed; last: session 2 → review"), "{line}");
    assert!(line.ends_with("loop: c → review → c"), "{line}");

    // A crash goes to the pager only, with its template.
    let sent = handoffs(&session(&mut rig, true));
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].to.as_str(), sent[0].body.as_str()), ("pager", "c broke: crashed: exit 1"));

    // The second hibernate within the hour is sent; the third waits.
    assert_eq!(handoffs(&session(&mut rig, false)).len(), 1);
    let out = session(&mut rig, false);
    assert!(handoffs(&out).is_empty(), "over the link's rate");
    let armed = out.iter().find_map(|e| match e {
        Effect::ArmTimer { timer: Timer::HandOffs, after } => Some(*after),
        _ => None,
    });
    assert_eq!(armed, Some(StdDuration::from_secs(30 * 60)), "the first of the hour was sent 30 minutes ago");
    assert!(rig.m.view().handoffs.unwrap().contains("1 waiting for the rate limit"));
    let logged = out.iter().any(|e| matches!(e, Effect::Log(LogLine::Event(t)) if t.contains("to review waits until")));
    assert!(logged, "{out:#?}");
    rig.now += Duration::minutes(20);
    let sent = handoffs(&rig.feed(Input::Timer(Timer::HandOffs)));
    assert_eq!(sent.iter().map(|h| h.session).collect::<Vec<_>>(), vec![5]);

    // A failed delivery needs a person.
    rig.feed(Input::HandedOff { to: "review".into(), session: 5, result: Err("no chamber named \"review\"".into()) });
    assert!(rig.m.view().attention.unwrap().contains("could not hand session 5 on to review"));
}

/// The last hand-off is kept in the health record: a restart (or a thaw)
/// shows the chamber's hand-off line as it was, and the chamber may be let
/// go at rest once no hand-off was sent within the hour its rate counts
/// (what only memory holds).
#[test]
fn the_last_hand_off_outlives_a_restart_and_an_hour_lets_it_rest() {
    use crate::chamber::{Boot, Chamber, Limits, Loaded};
    use handoff::{HandedOff, OnEnd, When};
    let mut rig = Rig::new(&[0], &[]);
    let on_end = vec![OnEnd { chamber: "review".into(), when: When::Hibernated, message: None, max_per_hour: 6 }];
    let config = Settings { on_end, ..settings() };
    rig.feed(Input::ConfigChanged { config: Ok(config.clone()), warnings: Vec::new() });
    let req = rig.req();
    rig.feed(Input::Wake { req, message: None, replace: false });
    rig.feed(Input::Admitted { nonce: "n".into(), token: "t".into(), fresh: None });
    rig.call(add_todo("+9h")).unwrap();
    rig.call(hibernate()).unwrap();
    rig.exit("exit 0");
    let done = HandedOff { file: "messages/inbox/x.md".into(), waits: None, looped: None };
    rig.feed(Input::HandedOff { to: "review".into(), session: 2, result: Ok(done) });
    assert!(!rig.m.may_sleep(), "a hand-off sent within the hour is counted in memory only");
    rig.now += Duration::minutes(61);
    rig.feed(Input::Timer(Timer::HandOffs));
    assert!(rig.m.may_sleep(), "an hour on, nothing but the kept line remains");

    let loaded =
        Loaded { health: Some(rig.m.health_record()), config: Ok(config), ..super::loaded(&rig.todos, &[], 2) };
    let mut again = Chamber::new(loaded, Limits { stop_grace: StdDuration::from_secs(10) });
    again.handle(Input::Boot(Boot::default()), rig.now);
    let line = again.view().handoffs.expect("a line after a restart");
    assert!(line.contains("last: session 2 → review"), "{line}");
    assert!(again.may_sleep(), "booted from the store, it may rest again");
}

/// A slot that runs late is recorded as missed, with the span that held it:
/// here a pause; before the first boot, cryod not running.
#[test]
fn a_late_slot_is_recorded_with_why() {
    let mut rig = Rig::new(&[30], &[]);
    rig.feed(Input::Pause { req: 1, pause: true });
    rig.now += Duration::hours(2);
    rig.feed(Input::Pause { req: 2, pause: false });
    let out = rig.feed(Input::Admitted { nonce: "n".into(), token: "t".into(), fresh: None });
    let rows = out
        .iter()
        .find_map(|e| match e {
            Effect::RecordPassed(rows) => Some(rows.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no missed slot among {out:#?}"));
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].todo, rows[0].what), (1, "missed"));
    assert_eq!(rows[0].reason, "ran 1h 30m late in session 2: the chamber was paused");

    // Slots before this cryod started: it was not running.
    let mut rig = Rig::new(&[-90], &[]);
    let out = rig.feed(Input::Due);
    let mut out2 = rig.feed(Input::Admitted { nonce: "n".into(), token: "t".into(), fresh: None });
    out2.extend(out);
    let reason = out2.iter().find_map(|e| match e {
        Effect::RecordPassed(rows) => Some(rows[0].reason.clone()),
        _ => None,
    });
    assert_eq!(
        reason.as_deref(),
        Some("ran 1h 30m late in session 2: cryod was not running (it started at 2026-11-23T09:00:00+00:00)")
    );
}

/// The dead man's switch: `silent` only after a whole window without a
/// visible message while started, once per silence; a message ends it.
#[test]
fn silent_is_raised_once_after_a_whole_quiet_window() {
    let mut rig = Rig::new(&[60 * 24], &[]);
    let window = Duration::hours(1);
    let settings = Settings { expect_activity_within: Some(window), ..settings() };
    rig.feed(Input::ConfigChanged { config: Ok(settings), warnings: Vec::new() });
    let silent = |out: &[Effect]| out.iter().filter(|e| matches!(e, Effect::Notify(n) if n.kind == "silent")).count();
    // The agent talks 30 minutes in: the timer at the hour finds it recent.
    rig.now += Duration::minutes(30);
    let req = rig.req();
    rig.feed(Input::Wake { req, message: None, replace: false });
    rig.feed(Input::Admitted { nonce: "n".into(), token: "t".into(), fresh: None });
    rig.call(add_todo("+9h")).unwrap();
    rig.call(Call::Send { text: "still here".into(), question: false, subject: String::new() }).unwrap();
    rig.call(hibernate()).unwrap();
    rig.exit("exit 0");
    rig.now = t0() + Duration::hours(1);
    let out = rig.feed(Input::Timer(Timer::Silence));
    assert_eq!(silent(&out), 0, "the agent spoke half an hour ago");
    let rearmed = out.iter().any(|e| matches!(e, Effect::ArmTimer { timer: Timer::Silence, .. }));
    assert!(rearmed, "armed again for what is left: {out:#?}");
    // A whole window of nothing: once.
    rig.now = t0() + Duration::minutes(91);
    let out = rig.feed(Input::Timer(Timer::Silence));
    assert_eq!(silent(&out), 1);
    let n = out
        .iter()
        .find_map(|e| match e {
            Effect::Notify(n) => Some(n.clone()),
            _ => None,
        })
        .unwrap();
    assert!(n.title.starts_with("c has been silent for 1h"), "{n:?}");
    rig.now += Duration::hours(5);
    assert_eq!(silent(&rig.feed(Input::Timer(Timer::Silence))), 0, "once per silence");
}

/// The shell's news of a provider's limit (its wakes gone to a fallback
/// account) is a message in the conversation and a `limited` event for the
/// notifiers.
#[test]
fn a_failover_notice_reaches_the_conversation_and_the_notifiers() {
    let mut rig = Rig::new(&[60], &[]);
    let subject = "claude-1234 is at its limit: sessions go to spare".to_string();
    let out = rig.feed(Input::Notice { subject: subject.clone(), body: "The next sessions go to spare too.".into() });
    assert!(messages(&out).iter().any(|m| m.subject == subject), "{out:#?}");
    let told = out.iter().any(|e| matches!(e, Effect::Notify(n) if n.kind == "limited" && n.title.contains(&subject)));
    assert!(told, "{out:#?}");
}
