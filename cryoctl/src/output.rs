//! Human output: tables that fit the terminal, color only where it helps (a
//! terminal, and never with `NO_COLOR`), and JSON.
use std::io::IsTerminal;

/// `print!` and `println!` for cryoctl's output: once its reader has gone
/// (`cryoctl chamber list | head`), cryoctl ends quietly
/// (`cryo_proto::exit::print`).
macro_rules! out {
    ($($arg:tt)*) => { cryo_proto::exit::print("cryoctl", format_args!($($arg)*), false) };
}
macro_rules! outln {
    () => { cryo_proto::exit::print("cryoctl", format_args!(""), true) };
    ($($arg:tt)*) => { cryo_proto::exit::print("cryoctl", format_args!($($arg)*), true) };
}

/// Whether to color stdout.
pub fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The terminal's width, if stdout is one (`COLUMNS` overrides).
fn width() -> Option<usize> {
    if let Some(c) = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()) {
        return Some(c);
    }
    if !std::io::stdout().is_terminal() {
        return None;
    }
    terminal_size::terminal_size().map(|(w, _)| w.0 as usize)
}

/// A cell, with an optional color (an ANSI SGR code like "32").
pub struct Cell {
    pub text: String,
    pub color: Option<&'static str>,
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell { text, color: None }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Cell {
        Cell { text: text.to_string(), color: None }
    }
}

pub fn colored(text: impl Into<String>, color: &'static str) -> Cell {
    Cell { text: text.into(), color: Some(color) }
}

fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Prints rows as an aligned table. When the terminal is narrower than the
/// table, the column `shrink` is cut with an ellipsis (JSON output always has
/// the whole text).
pub fn table(header: &[&str], rows: Vec<Vec<Cell>>, shrink: usize) {
    table_capped(header, rows, shrink, None);
}

/// [`table`], the column `shrink` also cut at `cap` characters where no
/// terminal says how wide a line may be (a pipe, a file).
pub fn table_capped(header: &[&str], mut rows: Vec<Vec<Cell>>, shrink: usize, cap: Option<usize>) {
    // The cells' words (an agent's, often) are shown escaped on a terminal,
    // before cryoctl adds its own styles.
    if std::io::stdout().is_terminal() {
        for cell in rows.iter_mut().flatten() {
            cell.text = cryo_proto::escape_controls(&cell.text);
        }
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.text.chars().count());
        }
    }
    if let Some(total) = width() {
        let used: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
        if used > total {
            let over = used - total;
            widths[shrink] = widths[shrink].saturating_sub(over).max(header[shrink].len()).max(8);
        }
    } else if let Some(cap) = cap {
        widths[shrink] = widths[shrink].min(cap.max(header[shrink].len()));
    }
    let paint = color();
    let line = |cells: Vec<(String, Option<&'static str>)>| {
        let n = cells.len();
        let mut s = String::new();
        for (i, (text, col)) in cells.into_iter().enumerate() {
            let text = cut(&text, widths[i]);
            let pad = widths[i] - text.chars().count();
            let shown = match (paint, col) {
                (true, Some(c)) => format!("\x1b[{c}m{text}\x1b[0m"),
                _ => text,
            };
            s.push_str(&shown);
            if i + 1 < n {
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        cryo_proto::exit::print_styled("cryoctl", s.trim_end());
    };
    line(header.iter().map(|h| (h.to_string(), if paint { Some("1") } else { None })).collect());
    for r in rows {
        line(r.into_iter().map(|c| (c.text, c.color)).collect());
    }
}

pub fn json(v: &serde_json::Value) {
    outln!("{}", serde_json::to_string_pretty(v).expect("JSON values always serialize"));
}

/// An RFC 3339 time in the local zone, short: `Sun 14:05` within a week,
/// else `2026-03-05 14:05`.
pub fn local_time(rfc3339: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(rfc3339) else { return rfc3339.to_string() };
    let local = t.with_timezone(&chrono::Local);
    let now = now();
    let ahead = t.with_timezone(&chrono::Utc) - now;
    if ahead > chrono::Duration::zero() && ahead < chrono::Duration::days(6) {
        local.format("%a %H:%M").to_string()
    } else {
        local.format("%Y-%m-%d %H:%M").to_string()
    }
}

/// Time left until an RFC 3339 time: `12m`, `3h 5m`, `now`, `5m late`.
pub fn time_left(rfc3339: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(rfc3339) else { return String::new() };
    let d = t.with_timezone(&chrono::Utc) - now();
    let secs = d.num_seconds();
    if secs.abs() < 1 {
        return "now".into();
    }
    let h = humanize(secs.unsigned_abs());
    if secs < 0 { format!("{h} late") } else { h }
}

fn humanize(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => {
            let (h, m) = (s / 3600, s % 3600 / 60);
            if m == 0 { format!("{h}h") } else { format!("{h}h {m}m") }
        }
        s => {
            let (d, h) = (s / 86_400, s % 86_400 / 3600);
            if h == 0 { format!("{d}d") } else { format!("{d}d {h}h") }
        }
    }
}

pub fn now() -> chrono::DateTime<chrono::Utc> {
    #[allow(clippy::disallowed_methods)] // a CLI shows times relative to now
    chrono::Utc::now()
}
