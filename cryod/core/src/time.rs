//! The time grammar agents and operators use, resolved in a chamber's zone.
//!
//! Pure: the current time comes in as a value and nothing here reads a clock.
//! Accepted forms are listed once, in [`ACCEPTED_FORMS`], and every refusal
//! carries that list so an agent can correct itself in one step.
//!
//! Daylight saving: a local time that falls in a gap (clocks jump forward) runs
//! at the end of the gap; an ambiguous local time (clocks fall back) runs once,
//! at its first occurrence.

use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

/// The accepted forms, printed with every refusal.
pub const ACCEPTED_FORMS: &str = "accepted forms: \
+30m, +2 hours, 90 seconds, 1d, 2w (an offset from now; units s, m, h, d, w; also 1h30m); \
2026-03-05T09:00[:SS] or 2026-03-05 09:00 (local time in the chamber's zone); \
2026-03-05T09:00Z or 2026-03-05T09:00+01:00 (with a zone offset); \
2026-03-05 (midnight); 09:00 (its next occurrence); tomorrow [09:00]; now";

/// Why a time expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("empty time expression; {ACCEPTED_FORMS}")]
    Empty,
    #[error("{0:?} lies in the past: offsets must be positive; {ACCEPTED_FORMS}")]
    Negative(String),
    #[error("cannot read {0:?} as a time; {ACCEPTED_FORMS}")]
    Unrecognized(String),
    #[error("{0:?} is out of range (years 1970 to 9999 only)")]
    OutOfRange(String),
}

/// Longest offset accepted (about 100 years): keeps arithmetic far from overflow.
const MAX_OFFSET_SECS: i64 = 100 * 366 * 86_400;

/// Resolves `expr` against `now` in zone `tz`.
pub fn parse_time(expr: &str, now: DateTime<Utc>, tz: Tz) -> Result<DateTime<Utc>, TimeError> {
    // What `cryo-agent time` prints is accepted back as it is:
    // `2026-11-26T17:26:59+00:00 (Etc/UTC), in 1d`.
    let s = printed_time(expr.trim()).unwrap_or(expr.trim());
    if s.is_empty() {
        return Err(TimeError::Empty);
    }
    let lower = s.to_ascii_lowercase();
    if lower == "now" {
        return Ok(now);
    }
    if let Some(rest) = lower.strip_prefix("tomorrow") {
        let rest = rest.trim();
        let time = if rest.is_empty() {
            NaiveTime::MIN
        } else {
            parse_hh_mm(rest).ok_or_else(|| TimeError::Unrecognized(s.to_string()))?
        };
        let today = now.with_timezone(&tz).date_naive();
        let day = today.succ_opt().ok_or_else(|| TimeError::OutOfRange(s.to_string()))?;
        return Ok(resolve_local(&day.and_time(time), tz));
    }
    if let Some(t) = parse_hh_mm(s) {
        return Ok(next_occurrence(t, now, tz));
    }
    if let Some(rest) = s.strip_prefix('-') {
        return match parse_offset(rest) {
            Some(_) => Err(TimeError::Negative(s.to_string())),
            None => Err(TimeError::Unrecognized(s.to_string())),
        };
    }
    if let Some(d) = parse_offset(s.strip_prefix('+').unwrap_or(s)) {
        let t = now.checked_add_signed(d).ok_or_else(|| TimeError::OutOfRange(s.to_string()))?;
        check_year(t.naive_utc(), s)?;
        return Ok(t);
    }
    if looks_like_date(s) {
        return parse_absolute(s, tz);
    }
    Err(TimeError::Unrecognized(s.to_string()))
}

/// The time of `cryo-agent time`'s line (`TIME (ZONE)` with an optional
/// `, in WHEN`), if `s` is one.
fn printed_time(s: &str) -> Option<&str> {
    let s = s.split_once("), in ").map_or(s, |(head, _)| head).trim_end_matches(')');
    let (time, zone) = s.rsplit_once(" (")?;
    let zone_like = !zone.is_empty() && zone.chars().all(|c| c.is_ascii_alphanumeric() || "/_+-".contains(c));
    (zone_like && looks_like_date(time)).then_some(time.trim())
}

/// Parses a duration such as `30m`, `2 hours`, `1h30m` or `90 seconds` (no sign).
/// Used by `--every` as well as by offsets.
pub fn parse_duration(s: &str) -> Option<Duration> {
    parse_offset(s.trim().strip_prefix('+').unwrap_or(s.trim()))
}

fn parse_offset(s: &str) -> Option<Duration> {
    let s = s.trim();
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut total: i64 = 0;
    let mut parts = 0;
    while i < bytes.len() {
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        if i == bytes.len() {
            break;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if start == i || i - start > 12 {
            return None;
        }
        let n: i64 = s[start..i].parse().ok()?;
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        let ustart = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = s[ustart..i].to_ascii_lowercase();
        let secs = match unit.as_str() {
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
            "d" | "day" | "days" => 86_400,
            "w" | "wk" | "wks" | "week" | "weeks" => 7 * 86_400,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(secs)?)?;
        if total > MAX_OFFSET_SECS {
            return None;
        }
        parts += 1;
        // Separators between parts: spaces, or "and"/"," in "1 hour, 30 minutes".
        while i < bytes.len() && (bytes[i] == b' ' || bytes[i] == b',') {
            i += 1;
        }
    }
    (parts > 0).then(|| Duration::seconds(total))
}

fn parse_hh_mm(s: &str) -> Option<NaiveTime> {
    let (h, m) = s.split_once(':')?;
    if h.is_empty() || h.len() > 2 || m.len() != 2 {
        return None;
    }
    if !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    NaiveTime::from_hms_opt(h.parse().ok()?, m.parse().ok()?, 0)
}

fn looks_like_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

fn parse_absolute(s: &str, tz: Tz) -> Result<DateTime<Utc>, TimeError> {
    let refused = || TimeError::Unrecognized(s.to_string());
    if s.len() == 10 {
        let date = NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| refused())?;
        check_year(date.and_time(NaiveTime::MIN), s)?;
        return Ok(resolve_local(&date.and_time(NaiveTime::MIN), tz));
    }
    // With an explicit zone: Z or ±HH:MM (seconds optional).
    let normalized = s.replacen(' ', "T", 1);
    for fmt in ["%Y-%m-%dT%H:%M%#z", "%Y-%m-%dT%H:%M:%S%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"] {
        if let Ok(dt) = DateTime::parse_from_str(&normalized.replace(['Z', 'z'], "+00:00"), fmt) {
            check_year(dt.naive_utc(), s)?;
            return Ok(dt.with_timezone(&Utc));
        }
    }
    for fmt in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(&normalized, fmt) {
            check_year(naive, s)?;
            return Ok(resolve_local(&naive, tz));
        }
    }
    Err(refused())
}

/// The years a cryo time may fall in. Earlier times mean nothing to a
/// scheduler (and bring local mean times with offsets in seconds); later
/// ones do not fit the file formats.
pub const YEARS: std::ops::RangeInclusive<i32> = 1970..=9999;

fn check_year(naive: NaiveDateTime, s: &str) -> Result<(), TimeError> {
    use chrono::Datelike;
    if YEARS.contains(&naive.year()) { Ok(()) } else { Err(TimeError::OutOfRange(s.to_string())) }
}

/// The next time the wall clock in `tz` shows `t`, strictly after `now`.
pub fn next_occurrence(t: NaiveTime, now: DateTime<Utc>, tz: Tz) -> DateTime<Utc> {
    let mut day = now.with_timezone(&tz).date_naive();
    // Two days ahead always suffices; the third guards against a skipped date.
    for _ in 0..3 {
        let at = resolve_local(&day.and_time(t), tz);
        if at > now {
            return at;
        }
        day = day.succ_opt().unwrap_or(day);
    }
    resolve_local(&day.and_time(t), tz)
}

/// A local wall-clock time in `tz` as an instant: the end of a DST gap for a
/// time that does not exist, the first occurrence for one that exists twice.
pub fn resolve_local(naive: &NaiveDateTime, tz: Tz) -> DateTime<Utc> {
    match tz.from_local_datetime(naive) {
        LocalResult::Single(t) => t.with_timezone(&Utc),
        LocalResult::Ambiguous(first, second) => first.min(second).with_timezone(&Utc),
        LocalResult::None => {
            // In a gap: the first minute that exists is where the gap ends. Real
            // gaps are whole minutes long and at most a day (Samoa, 2011).
            use chrono::Timelike;
            let mut probe = naive.with_second(0).and_then(|t| t.with_nanosecond(0)).unwrap_or(*naive);
            for _ in 0..(26 * 60) {
                probe += Duration::minutes(1);
                match tz.from_local_datetime(&probe) {
                    LocalResult::Single(t) => return t.with_timezone(&Utc),
                    LocalResult::Ambiguous(a, b) => return a.min(b).with_timezone(&Utc),
                    LocalResult::None => {}
                }
            }
            // Unreachable for real zones; fall back to reading it as UTC.
            Utc.from_utc_datetime(naive)
        }
    }
}

/// Formats an instant as RFC 3339 in `tz`, to the second.
pub fn format_in(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

/// A duration in the grammar's own terms, exactly: `1d2h30m`, `90s` -> `1m30s`.
pub fn format_duration(d: Duration) -> String {
    let mut secs = d.num_seconds().max(0);
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if out.is_empty() { "0s".to_string() } else { out }
}

/// A short human form of a duration: `45s`, `12m`, `3h 5m`, `2d 4h`.
pub fn humanize(d: Duration) -> String {
    let secs = d.num_seconds();
    let (sign, secs) = if secs < 0 { ("-", -secs) } else { ("", secs) };
    let s = if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        let (m, s) = (secs / 60, secs % 60);
        if s == 0 { format!("{m}m") } else { format!("{m}m {s}s") }
    } else if secs < 86_400 {
        let (h, m) = (secs / 3600, secs % 3600 / 60);
        if m == 0 { format!("{h}h") } else { format!("{h}h {m}m") }
    } else {
        let (d, h) = (secs / 86_400, secs % 86_400 / 3600);
        if h == 0 { format!("{d}d") } else { format!("{d}d {h}h") }
    };
    format!("{sign}{s}")
}

#[cfg(test)]
mod tests;
