//! `todo.json`'s format: reading it (checked, item by item, as it streams
//! past, so that a long-lived chamber's file is never held whole as TODOs),
//! writing it, and the lines of the journal and of the archive.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDateTime, Timelike, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use super::{ATTEMPT_ROOM, FileError, MAX_TEXT, MAX_TODOS, Missed, Repeat, Todo, TodoError, TodoList, parse_repeat};
use crate::time;

#[derive(Serialize, Deserialize)]
struct Record {
    id: u64,
    text: String,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    claimed: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    at: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    created: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    every: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    missed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claimed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    precheck: Option<String>,
    #[serde(flatten)]
    extra: BTreeMap<String, serde_json::Value>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A time in `todo.json` (RFC 3339, or the seed system's naive local time),
/// within [`time::YEARS`].
fn parse_file_time(s: &str, tz: Tz) -> Option<DateTime<Utc>> {
    // Every form starts with the year: an empty `created` (most files) or
    // the seed's "unknown" is not tried against four formats (8% of a
    // start's CPU at 100 TODOs a chamber).
    if !s.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let t = match DateTime::parse_from_rfc3339(s) {
        Ok(t) => t.with_timezone(&Utc),
        Err(_) => ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"]
            .iter()
            .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
            .map(|n| time::resolve_local(&n, tz))?,
    };
    time::YEARS.contains(&chrono::Datelike::year(&t)).then_some(t)
}

/// Reads `todo.json`. An empty file is an empty list. `high_water` comes from
/// the chamber's state (ids handed out before).
pub fn parse_file(text: &str, tz: Tz, high_water: u64) -> Result<TodoList, FileError> {
    parse_file_keeping(text, tz, high_water, usize::MAX).map(|(list, _)| list)
}

/// Reads `todo.json` as [`parse_file`] does (every item checked), but
/// leaves out the done TODOs that [`TodoList::retire`] with `keep` would
/// take, without ever holding them: their ids come back instead, in the
/// file's order, for [`archive_from_file`]. A chamber's file of fifty
/// thousand done TODOs costs what it keeps, not what it holds.
pub fn parse_file_keeping(text: &str, tz: Tz, high_water: u64, keep: usize) -> Result<(TodoList, Vec<u64>), FileError> {
    if text.trim().is_empty() {
        return Ok((TodoList { items: Vec::new(), high_water }, Vec::new()));
    }
    // Open ones, and the newest `keep` done ones, each with its place.
    let (mut open, mut done) = (Vec::new(), std::collections::VecDeque::new());
    let (mut retired, mut seen) = (Vec::new(), std::collections::HashSet::new());
    let (mut open_count, mut max, mut first_error) = (0, 0, None);
    each_record(text, |index, r| {
        max = max.max(r.id);
        // Done ones do not count (the file's size bounds them): a long
        // life is no fault.
        open_count += usize::from(!r.done);
        if first_error.is_some() || open_count > MAX_TODOS {
            return;
        }
        if !seen.insert(r.id) {
            first_error = Some(FileError::DuplicateId(r.id));
            return;
        }
        match from_record(r, tz) {
            Ok(t) if !t.done => open.push((index, t)),
            Ok(t) => {
                done.push_back((index, t));
                if done.len() > keep {
                    retired.extend(done.pop_front().map(|(_, t)| t.id));
                }
            }
            Err(error) => first_error = Some(FileError::Item { index, error }),
        }
    })?;
    if open_count > MAX_TODOS {
        return Err(FileError::TooMany(open_count));
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    // The two kept runs, each in the file's order, merged back into it.
    let mut items = Vec::with_capacity(open.len() + done.len());
    let (mut open, mut done) = (open.into_iter().peekable(), done.into_iter().peekable());
    loop {
        let from_open = match (open.peek(), done.peek()) {
            (Some((a, _)), Some((b, _))) => a < b,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if from_open { open.next() } else { done.next() };
        items.extend(next.map(|(_, t)| t));
    }
    Ok((TodoList { items, high_water: high_water.max(max) }, retired))
}

/// Hands each record of `todo.json` to `each`, with its index, as it is
/// parsed (none is kept).
fn each_record(text: &str, each: impl FnMut(usize, Record)) -> Result<(), FileError> {
    use serde::de::{DeserializeSeed, SeqAccess, Visitor};
    struct Each<F>(F);
    impl<'de, F: FnMut(usize, Record)> DeserializeSeed<'de> for Each<F> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }
    impl<'de, F: FnMut(usize, Record)> Visitor<'de> for Each<F> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of TODOs")
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
            let mut index = 0;
            while let Some(r) = seq.next_element::<Record>()? {
                (self.0)(index, r);
                index += 1;
            }
            Ok(())
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    Each(each).deserialize(&mut de).and_then(|()| de.end()).map_err(|e| FileError::Json(e.to_string()))
}

/// The archive's lines for the TODOs of `todo.json`'s `text` whose ids are
/// in `ids`, retired at `at`, handed to `out` one at a time in the file's
/// order (the second pass after [`parse_file_keeping`]).
pub fn archive_from_file(
    text: &str,
    ids: &std::collections::HashSet<u64>,
    at: DateTime<Utc>,
    tz: Tz,
    mut out: impl FnMut(&str) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut result = Ok(());
    each_record(text, |_, r| {
        if result.is_ok() && ids.contains(&r.id) {
            // Read and checked before, by the first pass.
            if let Ok(t) = from_record(r, tz) {
                result = out(&render_archived(std::slice::from_ref(&t), at, tz));
            }
        }
    })
    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    result
}

/// Why one item of `todo.json` (or of its archive) is not a TODO cryo
/// takes: one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ItemError {
    #[error("TODO {id}: its text is {chars} characters, over the limit of {MAX_TEXT}")]
    TextTooLong { id: u64, chars: usize },
    #[error("TODO {id}: its precheck is over the limit of {MAX_TEXT} characters")]
    PrecheckTooLong { id: u64 },
    /// Its `at`, as written.
    #[error("`at` {0:?} is not a time")]
    At(String),
    /// Its `every` or `cron`.
    #[error(transparent)]
    Repeat(TodoError),
    /// Its `missed`, as written.
    #[error("`missed` must be \"once\" or \"skip\", not {0:?}")]
    Missed(String),
}

/// One item of `todo.json` (or of its archive), checked.
fn from_record(r: Record, tz: Tz) -> Result<Todo, ItemError> {
    // Held to what `todo add` takes (with room for a retry's
    // " (attempt N)"): a file is no way around the limit.
    let chars = r.text.chars().count();
    if chars > MAX_TEXT + ATTEMPT_ROOM {
        return Err(ItemError::TextTooLong { id: r.id, chars });
    }
    if r.precheck.as_ref().is_some_and(|p| p.chars().count() > MAX_TEXT) {
        return Err(ItemError::PrecheckTooLong { id: r.id });
    }
    let at = match r.at.trim() {
        "" => None,
        s => Some(parse_file_time(s, tz).ok_or_else(|| ItemError::At(s.to_string()))?),
    };
    // The seed system wrote "unknown" for a missing creation time.
    let created = parse_file_time(r.created.trim(), tz);
    let repeat = parse_repeat(r.every.as_deref(), r.cron.as_deref()).map_err(ItemError::Repeat)?;
    let missed = match r.missed.as_deref() {
        None | Some("once") => Missed::Once,
        Some("skip") => Missed::Skip,
        Some(other) => return Err(ItemError::Missed(other.to_string())),
    };
    let mut extra = r.extra;
    if !r.created.is_empty() && created.is_none() {
        extra.insert("created".into(), serde_json::Value::String(r.created.clone()));
    }
    Ok(Todo {
        id: r.id,
        text: r.text,
        done: r.done,
        claimed: r.claimed,
        at,
        created,
        attempt: r.attempt,
        repeat,
        missed,
        claimed_by: r.claimed_by,
        precheck: r.precheck.filter(|p| !p.trim().is_empty()),
        extra,
    })
}

/// A time for the file: RFC 3339 in `tz`, with a fraction only if it has one
/// (so a time written by hand to the millisecond survives a rewrite).
fn file_time(t: DateTime<Utc>, tz: Tz) -> String {
    let local = t.with_timezone(&tz);
    // RFC 3339 offsets have no seconds; a zone whose offset had some
    // (Monrovia until 1972) is written in UTC, so the time survives.
    if chrono::Offset::fix(local.offset()).local_minus_utc() % 60 != 0 {
        return t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    }
    local.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false)
}

/// Writes `todo.json` (pretty, one item per block, times in `tz`).
pub fn render_file(list: &TodoList, tz: Tz) -> String {
    let records: Vec<Record> = list.items.iter().map(|t| record(t, tz)).collect();
    let mut s = serde_json::to_string_pretty(&records).expect("TODO records always serialize");
    s.push('\n');
    s
}

/// `todo.json` as the seed system (cryochamber 0.2.x) reads it: `id`,
/// `text`, `done`, `claimed`, `at` (naive local time in `tz`,
/// `%Y-%m-%dT%H:%M`, the only form it takes) and `created`. What it cannot
/// hold comes back as one line each: a recurrence (the seed runs the next
/// slot once), a pre-check, a TODO with no time (the seed skips it).
pub fn render_seed_file(list: &TodoList, tz: Tz) -> (String, Vec<String>) {
    let naive = |t: DateTime<Utc>| t.with_timezone(&tz).format("%Y-%m-%dT%H:%M").to_string();
    let mut lost = Vec::new();
    let items: Vec<serde_json::Value> = list
        .items
        .iter()
        .map(|t| {
            if !t.done {
                if let Some(r) = &t.repeat {
                    let what = match r {
                        Repeat::Every(d) => format!("every {}", time::format_duration(*d)),
                        Repeat::Cron(c) => format!("cron {c}"),
                    };
                    lost.push(format!("TODO {} repeats ({what}): the seed runs its next time once", t.id));
                }
                if t.precheck.is_some() {
                    lost.push(format!("TODO {}'s pre-check: the seed runs no pre-checks", t.id));
                }
                if t.missed == super::Missed::Skip {
                    lost.push(format!("TODO {}'s missed = \"skip\": the seed runs a missed TODO once", t.id));
                }
                if t.at.is_none() {
                    lost.push(format!("TODO {} has no time: the seed skips it", t.id));
                }
            }
            serde_json::json!({
                "id": t.id,
                "text": t.text,
                "done": t.done,
                "claimed": false,
                "at": t.at.map(naive).unwrap_or_default(),
                "created": t.created.map(naive).unwrap_or_else(|| "unknown".into()),
            })
        })
        .collect();
    let mut s = serde_json::to_string_pretty(&items).expect("plain JSON always serializes");
    s.push('\n');
    (s, lost)
}

/// One TODO as one line of JSON (`todo.json`'s fields), for the journal
/// of adds beside the file.
pub fn render_line(t: &Todo, tz: Tz) -> String {
    let mut s = serde_json::to_string(&record(t, tz)).expect("TODO records always serialize");
    s.push('\n');
    s
}

/// A line [`render_line`] wrote (`None` for one that is not, such as the
/// torn end of a write cut short).
pub fn parse_line(line: &str, tz: Tz) -> Option<Todo> {
    from_record(serde_json::from_str(line).ok()?, tz).ok()
}

/// The key each archived TODO carries: when it left `todo.json`.
const ARCHIVED: &str = "archived";

/// The archive's lines for `items`, retired together at `at`: one JSON
/// object per line, `todo.json`'s fields and `archived`.
pub fn render_archived(items: &[Todo], at: DateTime<Utc>, tz: Tz) -> String {
    let at = at.with_nanosecond(0).unwrap_or(at);
    let mut s = String::new();
    for t in items {
        let mut r = record(t, tz);
        r.extra.insert(ARCHIVED.into(), serde_json::Value::String(file_time(at, tz)));
        s.push_str(&serde_json::to_string(&r).expect("TODO records always serialize"));
        s.push('\n');
    }
    s
}

/// One line of the archive: the TODO and when it was archived (`None` for
/// a line that is not one, such as the torn end of a write cut short).
pub fn parse_archived(line: &str, tz: Tz) -> Option<(Todo, String)> {
    let mut r: Record = serde_json::from_str(line).ok()?;
    let at = match r.extra.remove(ARCHIVED) {
        Some(serde_json::Value::String(s)) => s,
        _ => return None,
    };
    Some((from_record(r, tz).ok()?, at))
}

fn record(t: &Todo, tz: Tz) -> Record {
    let mut extra = t.extra.clone();
    let created = match t.created {
        Some(c) => file_time(c, tz),
        None => match extra.remove("created") {
            Some(serde_json::Value::String(s)) => s,
            _ => String::new(),
        },
    };
    Record {
        id: t.id,
        text: t.text.clone(),
        done: t.done,
        claimed: t.claimed,
        at: t.at.map(|a| file_time(a, tz)).unwrap_or_default(),
        created,
        attempt: t.attempt,
        every: match &t.repeat {
            Some(Repeat::Every(d)) => Some(time::format_duration(*d)),
            _ => None,
        },
        cron: match &t.repeat {
            Some(Repeat::Cron(c)) => Some(c.clone()),
            _ => None,
        },
        missed: (t.missed == Missed::Skip).then(|| "skip".to_string()),
        claimed_by: t.claimed_by.clone(),
        precheck: t.precheck.clone(),
        extra,
    }
}
