//! Message files: YAML-like front matter between `---` lines, then the body.
//!
//! ```text
//! ---
//! from: alice
//! subject: status?
//! timestamp: 2026-03-05T09:00:00+01:00
//! question: true        (optional)
//! zulip_id: 1234        (any other key is kept as metadata)
//! ---
//!
//! How far along is the migration?
//! ```
//!
//! Header values are rendered on one line with control characters removed, so
//! text from a sender can never add a header or forge a line elsewhere.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDateTime, Utc};
use chrono_tz::Tz;

/// Largest message file accepted (bytes). A message is a note to an agent, not
/// a file transfer: attachments go to `messages/attachments/`.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// The sender name cryod uses for its own messages.
pub const CRYOCHAMBER: &str = "cryochamber";

/// One message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    pub from: String,
    pub subject: String,
    /// When it was written; `None` if the file carried no readable time.
    pub timestamp: Option<DateTime<Utc>>,
    /// The agent asks the operator something and waits for an answer.
    pub question: bool,
    /// Other header keys, kept as they were (bridge ids and the like).
    pub meta: BTreeMap<String, String>,
    pub body: String,
}

/// Why a message file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("message is {0} bytes, over the limit of {MAX_MESSAGE_BYTES}")]
    TooLarge(usize),
    #[error("front matter opened with `---` is never closed")]
    Unterminated,
    #[error("front matter line {0} is not `key: value`: {1:?}")]
    BadHeader(usize, String),
    #[error("front matter repeats the key {0:?}")]
    DuplicateKey(String),
    #[error("message is not UTF-8 text")]
    NotText,
}

/// Parses a message file. Times without an offset (files written by the seed
/// system) are read in `tz`. A file without front matter is a message whose
/// whole text is the body, from an unnamed sender.
pub fn parse(bytes: &[u8], tz: Tz) -> Result<Message, MessageError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(MessageError::TooLarge(bytes.len()));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| MessageError::NotText)?;
    if text.contains('\0') {
        return Err(MessageError::NotText);
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = text.lines().next().unwrap_or("");
    if first.trim_end() != "---" {
        return Ok(Message { body: text.trim().to_string(), ..Message::default() });
    }
    lines.next();
    let mut msg = Message::default();
    let mut seen = std::collections::BTreeSet::new();
    let mut consumed = first.len() + 1;
    let mut closed = false;
    for (n, raw) in lines.by_ref().enumerate() {
        consumed += raw.len();
        let line = raw.trim_end_matches(['\n', '\r']);
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(MessageError::BadHeader(n + 2, line.chars().take(80).collect()));
        };
        let key = key.trim().to_ascii_lowercase();
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return Err(MessageError::BadHeader(n + 2, line.chars().take(80).collect()));
        }
        if !seen.insert(key.clone()) {
            return Err(MessageError::DuplicateKey(key));
        }
        let value = unquote(value.trim()).to_string();
        match key.as_str() {
            "from" => msg.from = value,
            "subject" => msg.subject = value,
            "timestamp" => msg.timestamp = parse_stamp(&value, tz),
            "question" => msg.question = matches!(value.as_str(), "true" | "yes" | "1"),
            _ => {
                msg.meta.insert(key, value);
            }
        }
    }
    if !closed {
        return Err(MessageError::Unterminated);
    }
    let body = text.get(consumed.min(text.len())..).unwrap_or("");
    msg.body = body.trim().to_string();
    Ok(msg)
}

fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    v
}

fn parse_stamp(v: &str, tz: Tz) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Some(t.with_timezone(&Utc));
    }
    ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(v, f).ok())
        .map(|n| crate::time::resolve_local(&n, tz))
}

/// One header value on one line: control characters (newlines included) become
/// spaces, so a value can never start a new header or end the front matter.
pub fn sanitize_header(v: &str) -> String {
    let s: String = v.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    s.trim().to_string()
}

/// A header value as written: sanitized, and quoted when the reader would
/// otherwise take its own quotes off (`'x'` stays `'x'`).
fn header_value(v: &str) -> String {
    let v = sanitize_header(v);
    if unquote(&v) != v { format!("\"{v}\"") } else { v }
}

/// Renders a message file; `timestamp` is written in `tz`.
pub fn render(msg: &Message, tz: Tz) -> String {
    let mut out = String::from("---\n");
    out.push_str(&format!("from: {}\n", header_value(&msg.from)));
    out.push_str(&format!("subject: {}\n", header_value(&msg.subject)));
    if let Some(t) = msg.timestamp {
        let local = t.with_timezone(&tz).to_rfc3339_opts(chrono::SecondsFormat::Millis, false);
        out.push_str(&format!("timestamp: {local}\n"));
    }
    if msg.question {
        out.push_str("question: true\n");
    }
    for (k, v) in &msg.meta {
        let k: String = k.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').collect();
        if k.is_empty() || matches!(k.as_str(), "from" | "subject" | "timestamp" | "question") {
            continue;
        }
        out.push_str(&format!("{k}: {}\n", header_value(v)));
    }
    out.push_str("---\n\n");
    out.push_str(msg.body.trim_end());
    out.push('\n');
    out
}

/// A file name that sorts in time order: `2026-03-05T09-00-00.123Z_slug_uniq.md`.
/// `unique` comes from the caller (a counter and random bits) so two messages
/// written in the same millisecond never collide.
pub fn file_name(at: DateTime<Utc>, subject: &str, unique: &str) -> String {
    let slug = slug(subject);
    let slug = if slug.is_empty() { "message".to_string() } else { slug };
    format!("{}_{}_{}.md", at.format("%Y-%m-%dT%H-%M-%S%.3fZ"), slug, unique)
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 40 {
            break;
        }
    }
    out.trim_end_matches('-').to_string()
}

/// The time a name made by [`file_name`] starts with. Read by hand, not by
/// a format string: a page of mail reads the time of every name in a
/// folder that may hold a hundred thousand.
pub fn time_of_name(name: &str) -> Option<DateTime<Utc>> {
    // YYYY-MM-DDTHH-MM-SS.mmmZ
    let b = name.as_bytes().get(..24)?;
    let num = |from: usize, to: usize| {
        b[from..to].iter().try_fold(0u32, |n, d| d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0')))
    };
    let marks = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b'-'), (16, b'-'), (19, b'.'), (23, b'Z')];
    if marks.iter().any(|(i, c)| b[*i] != *c) {
        return None;
    }
    let date = chrono::NaiveDate::from_ymd_opt(num(0, 4)? as i32, num(5, 7)?, num(8, 10)?)?;
    let time = chrono::NaiveTime::from_hms_milli_opt(num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?)?;
    Some(date.and_time(time).and_utc())
}

/// Whether a directory entry is a message file readers should look at: not a
/// dot file (a writer's temporary), and ending in `.md`.
pub fn is_message_name(name: &str) -> bool {
    !name.starts_with('.') && name.ends_with(".md") && name.len() > 3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_name_gives_back_its_time() {
        let at = t("2026-11-24T09:08:07.654Z");
        assert_eq!(time_of_name(&file_name(at, "Hi there", "ab12")), Some(at));
        assert_eq!(time_of_name("notes.md"), None);
        assert_eq!(time_of_name("2026-13-24T09-08-07.654Z_x.md"), None);
        assert_eq!(time_of_name("2026-02-30T09-08-07.654Z_x.md"), None);
        assert_eq!(time_of_name("2026-11-24T24-08-07.654Z_x.md"), None);
        assert_eq!(time_of_name("2026-11-24T09:08:07.654Z_x.md"), None);
        assert_eq!(time_of_name("2026-11-24T09-08-07.65xZ_x.md"), None);
        assert_eq!(time_of_name("+026-11-24T09-08-07.654Z_x.md"), None);
        assert_eq!(time_of_name("2026-11-24T09-08-07.654Z"), Some(t("2026-11-24T09:08:07.654Z")));
        assert_eq!(time_of_name("2026-11-24T09-08-07.654"), None);
    }

    #[test]
    fn round_trip() {
        let mut meta = BTreeMap::new();
        meta.insert("zulip_id".to_string(), "42".to_string());
        let m = Message {
            from: "alice".into(),
            subject: "status?".into(),
            timestamp: Some(t("2026-03-05T08:00:00Z")),
            question: true,
            meta,
            body: "How far along?\n\n---\nnot a header".into(),
        };
        let text = render(&m, chrono_tz::Europe::Berlin);
        assert!(text.contains("timestamp: 2026-03-05T09:00:00.000+01:00"), "{text}");
        assert_eq!(parse(text.as_bytes(), chrono_tz::UTC).unwrap(), m);
    }

    #[test]
    fn reads_seed_files() {
        let seed = "---\nfrom: operator\nsubject: Hi\ntimestamp: 2026-03-05T09:00:00\n---\n\nhello\n";
        let m = parse(seed.as_bytes(), chrono_tz::Europe::Berlin).unwrap();
        assert_eq!(m.from, "operator");
        assert_eq!(m.timestamp, Some(t("2026-03-05T08:00:00Z")));
        assert_eq!(m.body, "hello");
    }

    #[test]
    fn plain_text_is_a_body() {
        let m = parse(b"just a note", chrono_tz::UTC).unwrap();
        assert_eq!(m.body, "just a note");
        assert_eq!(m.from, "");
    }

    #[test]
    fn refusals() {
        assert_eq!(parse(b"---\nfrom: a\nsubject: no end", chrono_tz::UTC), Err(MessageError::Unterminated));
        assert!(matches!(
            parse(b"---\nthis is not a header\n---\n", chrono_tz::UTC),
            Err(MessageError::BadHeader(2, _))
        ));
        assert!(matches!(parse(b"---\nfrom: a\nfrom: b\n---\n", chrono_tz::UTC), Err(MessageError::DuplicateKey(_))));
        assert_eq!(parse(&[0xff, 0xfe], chrono_tz::UTC), Err(MessageError::NotText));
        assert!(matches!(parse(&vec![b'a'; MAX_MESSAGE_BYTES + 1], chrono_tz::UTC), Err(MessageError::TooLarge(_))));
    }

    #[test]
    fn headers_cannot_be_forged() {
        let m = Message {
            from: "mallory\nfrom: cryochamber".into(),
            subject: "x\n---\nquestion: true".into(),
            ..Message::default()
        };
        let back = parse(render(&m, chrono_tz::UTC).as_bytes(), chrono_tz::UTC).unwrap();
        assert_eq!(back.from, "mallory from: cryochamber");
        assert!(!back.question);
        assert_eq!(back.body, "");
    }

    #[test]
    fn names_sort_in_time_order() {
        let a = file_name(t("2026-03-05T08:00:00.001Z"), "Hello, World!", "0001");
        let b = file_name(t("2026-03-05T08:00:00.010Z"), "", "0000");
        assert_eq!(a, "2026-03-05T08-00-00.001Z_hello-world_0001.md");
        assert!(a < b);
        assert!(is_message_name(&a));
        assert!(!is_message_name(".tmp.md"));
        assert!(!is_message_name("notes.txt"));
    }
}
