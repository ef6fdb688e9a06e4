//! `chamber list` and `status`: what each chamber is doing, its sessions, holds and costs.

use cryo_proto::json::{chamber_json, desired_name, session_json, state_name};
use cryo_proto::v1 as pb;

use super::*;
use crate::Ctx;
use crate::client::{self, Result};
use crate::output;

pub(super) async fn list(ctx: &Ctx, archived: bool) -> Result<()> {
    // The list, and for a table today's costs, are asked beside the
    // `Hello` and each other: one wait on cryod.
    let ask = |mut c: cryo_proto::Control| async move {
        let mut u = c.clone();
        let costs =
            async { if ctx.json { Ok(Default::default()) } else { crate::cmd::usage::today_by_chamber(&mut u).await } };
        let (r, today) = tokio::join!(c.chamber_list(pb::ChamberListRequest { archived }), costs);
        Ok::<_, client::Failure>((r?.into_inner(), today))
    };
    let (_, (r, today)) = client::beside_hello(&ctx.socket, ask).await?;
    if ctx.json {
        output::json(&serde_json::Value::Array(r.chambers.iter().map(chamber_json).collect()));
        return Ok(());
    }
    if r.chambers.is_empty() {
        outln!("no chambers registered (add one with `cryoctl chamber add DIR --init`)");
        return Ok(());
    }
    // A fleet's chambers show the node that runs each.
    let fleet = r.chambers.iter().any(|c| !c.node.is_empty());
    let today = today?;
    let rows: Vec<Vec<output::Cell>> = r
        .chambers
        .iter()
        .map(|c| {
            let result = if !c.attention.is_empty() {
                output::colored(format!("! {}", c.attention), "31")
            } else {
                dash(&c.last_result).into()
            };
            vec![
                c.name.as_str().into(),
                if c.archived { output::colored("archived", "2") } else { state_cell(c.state) },
                if c.session == 0 { "-".into() } else { c.session.to_string().into() },
                if c.next_wake.is_empty() { "-".into() } else { output::local_time(&c.next_wake).into() },
                if c.next_wake.is_empty() { "-".into() } else { output::time_left(&c.next_wake).into() },
                result,
                if c.mail_waiting == 0 { "-".into() } else { output::colored(c.mail_waiting.to_string(), "1") },
                if c.open_questions == 0 { "".into() } else { output::colored("?", "33") },
                today.get(&c.name).map(|usd| crate::cmd::usage::cost(*usd)).unwrap_or_else(|| "-".into()).into(),
            ]
            .into_iter()
            .chain(fleet.then(|| dash(&c.node).into()))
            .collect()
        })
        .collect();
    let mut headers = vec!["NAME", "STATE", "SESSION", "NEXT WAKE", "IN", "LAST RESULT", "MAIL", "?", "COST"];
    if fleet {
        headers.push("NODE");
    }
    // One failed chamber's line must not make every row hundreds of
    // characters wide: `status` and `--json` have the whole text.
    output::table_capped(&headers, rows, 5, Some(LAST_RESULT_CAP));
    print_holds(&r.holds);
    if let Some(line) = r.admission.as_ref().and_then(admission_line) {
        outln!("{line}");
    }
    Ok(())
}

/// `12 wakes wait for a session slot: 4 of 4 in use (max_concurrent_sessions)`,
/// when admission is what holds wakes back.
pub fn admission_line(a: &pb::Admission) -> Option<String> {
    (a.waiting > 0).then(|| {
        let whence = if a.derived { "derived from this machine's memory" } else { "set in cryod.toml" };
        format!(
            "{} {} for a session slot: {} of {} in use (max_concurrent_sessions, {whence})",
            a.waiting,
            if a.waiting == 1 { "wake waits" } else { "wakes wait" },
            a.running,
            a.limit
        )
    })
}

/// `claude-3f9a1c2e: limited until Mon 14:05 (2 chambers waiting)`, one line
/// per provider account held at its limit.
pub fn hold_line(h: &pb::ProviderHold) -> String {
    let guessed = if h.default_hold {
        "; the provider named no reset, so this is cryod's default hold (`limit_hold_seconds` in cryod.toml)"
            .to_string()
    } else if !h.source.is_empty() {
        format!("; {}", h.source)
    } else {
        String::new()
    };
    let waiting = match h.chambers.len() {
        0 if h.waiting == 0 => "no chamber waiting".to_string(),
        0 => format!("{} chamber(s) waiting", h.waiting),
        _ => format!("waiting: {}", h.chambers.join(", ")),
    };
    format!("{}: limited until {} ({waiting}){guessed}", h.provider, output::local_time(&h.until))
}

pub(super) fn print_holds(holds: &[pb::ProviderHold]) {
    if !holds.is_empty() {
        outln!();
    }
    for h in holds {
        outln!("{}", hold_line(h));
    }
}

/// One chamber's cost today, over 7 and over 30 days, and its sessions
/// in those 30 days (`usage::windows`).
type Windows = ([f64; 3], u64);

/// `chamber status [NAME]`: the named chamber (or the one whose folder we
/// are in, else every chamber) in detail, with its recent sessions.
pub(super) async fn status(ctx: &Ctx, chamber: Option<String>) -> Result<()> {
    let (_, (r, windows)) = client::beside_hello(&ctx.socket, |c| ask_status(c, chamber)).await?;
    if ctx.json {
        output::json(&status_json(&r, windows));
        return Ok(());
    }
    for ch in &r.chambers {
        print_chamber(ch, &r, windows);
    }
    print_sessions(&r.sessions);
    Ok(())
}

/// The status of `chamber`, or of the chamber whose folder we are in; with
/// neither, every chamber's. With one chamber, its cost over three windows,
/// asked beside its status by the same reference (the daemon resolves both
/// alike), so the command waits on cryod once; a chamber found another way
/// (a name that is only a folder here) has its windows asked afterwards,
/// by its name.
async fn ask_status(
    mut c: cryo_proto::Control,
    chamber: Option<String>,
) -> Result<(pb::ChamberStatusReply, Option<Windows>)> {
    let first = chamber_ref(chamber.as_deref())?;
    let (mut s, mut u) = (c.clone(), c.clone());
    let (one, beside) = tokio::join!(
        s.chamber_status(pb::ChamberStatusRequest { chamber: Some(first.clone()) }),
        crate::cmd::usage::windows(&mut u, first.clone()),
    );
    let r = match one {
        Ok(r) => {
            let r = r.into_inner();
            let windows = if r.chambers.len() == 1 { beside? } else { None };
            return Ok((r, windows));
        }
        Err(s) if s.code() == tonic::Code::NotFound => match as_folder(chamber.as_deref(), &first)? {
            Some(p) => c.chamber_status(pb::ChamberStatusRequest { chamber: Some(p) }).await?,
            // Named none, outside any chamber's folder: every chamber.
            None if chamber.is_none() => c.chamber_status(pb::ChamberStatusRequest { chamber: None }).await?,
            None => return Err(s.into()),
        },
        Err(s) => return Err(s.into()),
    };
    let r = r.into_inner();
    let windows = match r.chambers.as_slice() {
        [one] => {
            let by = pb::ChamberRef { by: Some(pb::chamber_ref::By::Name(one.name.clone())) };
            crate::cmd::usage::windows(&mut c, by).await?
        }
        _ => None,
    };
    Ok((r, windows))
}

/// `chamber status --json`: the chambers, the first with its sessions,
/// passed slots, budgets and costs.
fn status_json(r: &pb::ChamberStatusReply, windows: Option<Windows>) -> serde_json::Value {
    let mut out: Vec<serde_json::Value> = r.chambers.iter().map(chamber_json).collect();
    if let Some(first) = out.first_mut() {
        first["sessions"] = r.sessions.iter().map(session_json).collect();
        first["passed"] = r.passed.iter().map(cryo_proto::json::passed_json).collect();
        first["passed_total"] = r.passed_total.into();
        first["budgets"] = r
            .budgets
            .iter()
            .map(|b| serde_json::json!({ "who": b.who, "key": b.key, "limit": b.limit, "used": b.used, "period": b.period }))
            .collect();
        if let Some(([today, week, month], sessions)) = windows {
            first["cost_usd"] =
                serde_json::json!({ "today": today, "7d": week, "30d": month, "sessions_30d": sessions });
        }
    }
    serde_json::Value::Array(out)
}

/// One chamber's block of `chamber status`: what it is, its wakes, its
/// limits and costs, then what is wrong with it.
fn print_chamber(ch: &pb::Chamber, r: &pb::ChamberStatusReply, windows: Option<Windows>) {
    print_identity(ch);
    if r.passed_total > 0 {
        print_passed(ch, r);
    }
    print_limits(r, windows);
    print_troubles(ch);
}

/// Name, state, path, agent, zone, session, next wake, last result, mail.
fn print_identity(ch: &pb::Chamber) {
    outln!("{}", ch.name);
    outln!("  state     {} (desired: {})", state_name(ch.state), desired_name(ch.desired));
    if !ch.held_by.is_empty() {
        outln!(
            "  held      by account {} until {}: its wakes wait, then run",
            ch.held_by,
            output::local_time(&ch.held_until)
        );
    }
    if !ch.acknowledged_at.is_empty() {
        let until = match ch.snoozed_until.as_str() {
            "" => "until it changes".to_string(),
            t => format!("snoozed until {}", output::local_time(t)),
        };
        outln!("  set aside {} by a person, {until}", output::local_time(&ch.acknowledged_at));
    }
    outln!("  path      {}", ch.path);
    if !ch.agent.is_empty() {
        outln!("  agent     {}", ch.agent);
        if !ch.sandbox.is_empty() {
            outln!("  sandbox   {}", ch.sandbox);
        }
    }
    if !ch.timezone.is_empty() {
        outln!("  timezone  {}", ch.timezone);
    }
    outln!("  added     {}", ch.created_at);
    if ch.session > 0 {
        outln!("  session   {}", ch.session);
    }
    if !ch.next_wake.is_empty() {
        outln!("  next wake {}", ch.next_wake);
    }
    if !ch.last_result.is_empty() {
        outln!("  last      {}", ch.last_result);
    }
    outln!("  mail      {} unread", ch.mail_waiting);
    if let Some(g) = &ch.git {
        let pr = match g.pull_request {
            0 => String::new(),
            n => format!(
                "; pull request #{n}{}",
                if g.pull_request_url.is_empty() { String::new() } else { format!(" {}", g.pull_request_url) }
            ),
        };
        outln!(
            "  git       {}: session {} made {} commit(s), {} file(s), +{} -{}{pr} (cryoctl chamber diff {})",
            g.branch,
            g.session,
            g.commits,
            g.files,
            g.additions,
            g.deletions,
            ch.name
        );
    }
    if !ch.handoffs.is_empty() {
        outln!("  on end    {}", ch.handoffs);
    }
}

/// Sessions against wakes that passed without one, and the last missed.
fn print_passed(ch: &pb::Chamber, r: &pb::ChamberStatusReply) {
    let last = r.passed.first().map(|p| {
        let why = if p.reason.is_empty() { String::new() } else { format!(": {}", p.reason) };
        format!(" (last: TODO {} due {}, {}{why})", p.todo_id, output::local_time(&p.slot_at), p.what)
    });
    outln!(
        "  wakes     {} session(s), {} slot(s) passed by a pre-check or missed{}",
        ch.session,
        r.passed_total,
        last.unwrap_or_default()
    );
    // "Why did it not run at 09:00?"
    for p in r.passed.iter().filter(|p| p.what == "missed").take(3) {
        outln!("  missed    TODO {} due {}: {}", p.todo_id, output::local_time(&p.slot_at), p.reason);
    }
}

/// Provider holds, the cost over three windows, and the budgets.
fn print_limits(r: &pb::ChamberStatusReply, windows: Option<Windows>) {
    for h in &r.holds {
        outln!("  limit     {}", hold_line(h));
    }
    if let Some(line) = r.admission.as_ref().and_then(admission_line) {
        outln!("  slots     {line}");
    }
    if let Some(([today, week, month], sessions)) = windows {
        use crate::cmd::usage::cost;
        outln!(
            "  cost      {} today, {} over 7 days, {} over 30 days ({sessions} sessions)",
            cost(today),
            cost(week),
            cost(month)
        );
    }
    for b in &r.budgets {
        let mark = match b.used / b.limit {
            f if f >= 1.0 => " (reached)",
            f if f >= 0.8 => " (over 80%)",
            _ => "",
        };
        outln!("  budget    {}{mark}", b.line);
    }
}

/// What needs a look: attention, fault, error, lateness, sync bridges.
fn print_troubles(ch: &pb::Chamber) {
    if !ch.attention.is_empty() {
        outln!("  attention {}", ch.attention);
    }
    if !ch.fault.is_empty() {
        outln!("  fault     {}", ch.fault);
    }
    if !ch.error.is_empty() {
        outln!("  error     {}", ch.error);
    }
    for w in &ch.warnings {
        outln!("  warning   {w}");
    }
    if ch.last_lateness_ms >= 0 {
        outln!("  lateness  {} (last session's start after its due time)", ms(ch.last_lateness_ms));
    }
    for b in &ch.bridges {
        let error = if b.last_error.is_empty() { String::new() } else { format!(": {}", b.last_error) };
        outln!("  sync      {} {}{error}", b.name, b.state);
    }
}

/// The table of recent sessions, after a blank line (nothing if none).
fn print_sessions(sessions: &[pb::SessionInfo]) {
    if sessions.is_empty() {
        return;
    }
    outln!();
    let rows: Vec<Vec<output::Cell>> = sessions
        .iter()
        .map(|s| {
            vec![
                s.number.to_string().into(),
                // A session that continued another's conversation says which.
                if s.resumed_from > 0 {
                    format!("{} (cont. {})", s.trigger, s.resumed_from).into()
                } else {
                    s.trigger.as_str().into()
                },
                if s.due_at.is_empty() { "-".into() } else { output::local_time(&s.due_at).into() },
                if s.started_at.is_empty() { "-".into() } else { output::local_time(&s.started_at).into() },
                if s.lateness_ms < 0 { "-".into() } else { ms(s.lateness_ms).into() },
                duration(&s.started_at, &s.ended_at).into(),
                tokens(s).into(),
                if s.cost_usd < 0.0 { "-".into() } else { format!("${:.4}", s.cost_usd).into() },
                dash(&s.account).into(),
                dash(&s.outcome).into(),
            ]
        })
        .collect();
    let head = ["SESSION", "TRIGGER", "DUE", "STARTED", "LATE", "TOOK", "TOKENS", "COST", "ACCOUNT", "OUTCOME"];
    output::table(&head, rows, 9);
}

/// A session's tokens, in / out (`-` when its agent's stream said none).
pub(super) fn tokens(s: &pb::SessionInfo) -> String {
    if s.input_tokens == 0 && s.output_tokens == 0 {
        return "-".into();
    }
    format!("{}/{}", s.input_tokens, s.output_tokens)
}

/// How much of LAST RESULT `chamber list` shows off a terminal.
const LAST_RESULT_CAP: usize = 60;

/// A state, colored for a terminal.
pub(super) fn state_cell(s: i32) -> output::Cell {
    let name = state_name(s);
    match name {
        "running" => output::colored(name, "32"),
        "paused" | "held" => output::colored(name, "33"),
        "awaiting approval" => output::colored(name, "1;33"),
        "faulted" => output::colored(name, "31"),
        "stopped" => output::colored(name, "2"),
        _ => name.into(),
    }
}

/// How long a session took (`-` while it runs).
pub(super) fn duration(start: &str, end: &str) -> String {
    let (Ok(a), Ok(b)) = (chrono::DateTime::parse_from_rfc3339(start), chrono::DateTime::parse_from_rfc3339(end))
    else {
        return "-".into();
    };
    let secs = (b - a).num_seconds().max(0);
    if secs < 60 { format!("{secs}s") } else { format!("{}m {}s", secs / 60, secs % 60) }
}

pub(super) fn dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.to_string() }
}

/// A lateness as people read it: `12ms`, `3.4s`, then minutes, hours, days.
pub(super) fn ms(n: i64) -> String {
    if n < 1000 {
        format!("{n}ms")
    } else if n < 60_000 {
        format!("{:.1}s", n as f64 / 1000.0)
    } else {
        cryo_core::time::humanize(chrono::Duration::milliseconds(n))
    }
}
