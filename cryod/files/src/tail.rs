//! Reading a file of lines from its end: the last page of a log, an
//! archive or a journal costs that page, never the whole file.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// Bytes read per step backwards.
const STEP: u64 = 64 * 1024;

/// The last `n` whole lines that end at or before byte `end` of `f` (oldest
/// first), reading at most `max_bytes` back from `end`, and the offset
/// where the first of them starts: the `end` of the page before it (0 when
/// the file's start was reached). A line torn at `end` (no newline yet) is
/// left out; so is a line longer than what `max_bytes` lets it read.
pub fn lines_before(f: &mut File, end: u64, n: usize, max_bytes: u64) -> std::io::Result<(Vec<String>, u64)> {
    let end = end.min(f.metadata()?.len());
    let floor = end.saturating_sub(max_bytes);
    let mut start = end;
    // Read back until n + 1 newlines (the line before the first one ends
    // the page), the file's start, or the budget; each step counted once
    // and the steps joined once (not copied at every step).
    let (mut chunks, mut newlines) = (Vec::new(), 0);
    while newlines <= n && start > floor {
        let from = start.saturating_sub(STEP).max(floor);
        let mut chunk = vec![0; (start - from) as usize];
        f.seek(SeekFrom::Start(from))?;
        f.read_exact(&mut chunk)?;
        newlines += chunk.iter().filter(|b| **b == b'\n').count();
        chunks.push(chunk);
        start = from;
    }
    let mut buf: Vec<u8> = Vec::with_capacity((end - start) as usize);
    for chunk in chunks.iter().rev() {
        buf.extend_from_slice(chunk);
    }
    drop(chunks);
    // Only whole lines: drop a torn tail, and the head unless it begins
    // the file.
    let whole_end = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    buf.truncate(whole_end);
    let mut first = 0;
    if start > 0 {
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => first = i + 1,
            None => return Ok((Vec::new(), start + buf.len() as u64)),
        }
    }
    // The page's first byte is counted in the bytes read, not in the text
    // made of them: an invalid byte or a `\r` changes the text's length.
    let body = &buf[first..];
    let skip = body.iter().filter(|b| **b == b'\n').count().saturating_sub(n);
    let from = match skip {
        0 => 0,
        k => body.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(k - 1).map_or(0, |(i, _)| i + 1),
    };
    let lines = String::from_utf8_lossy(&body[from..]).lines().map(str::to_string).collect();
    Ok((lines, start + (first + from) as u64))
}

/// The bytes of `f` before byte `end` that no newline closes yet (a line
/// still being written), if any, and the offset where they start: where
/// the file's whole lines end. Reads back at most `max_bytes`; when no
/// newline is that near, the torn line is too long to show: none, and the
/// offset `max_bytes` back (nothing before it is a whole line either).
pub fn torn_end(f: &mut File, end: u64, max_bytes: u64) -> std::io::Result<(Option<String>, u64)> {
    let end = end.min(f.metadata()?.len());
    let floor = end.saturating_sub(max_bytes);
    let mut start = end;
    let mut buf: Vec<u8> = Vec::new();
    // Back a step at a time to the last newline or the file's start.
    while start > 0 {
        if start == floor {
            return Ok((None, floor));
        }
        let from = start.saturating_sub(STEP).max(floor);
        let mut chunk = vec![0; (start - from) as usize];
        f.seek(SeekFrom::Start(from))?;
        f.read_exact(&mut chunk)?;
        let newline = chunk.iter().rposition(|b| *b == b'\n');
        if let Some(i) = newline {
            chunk.drain(..=i);
        }
        chunk.extend_from_slice(&buf);
        buf = chunk;
        start = from + newline.map_or(0, |i| i as u64 + 1);
        if newline.is_some() {
            break;
        }
    }
    let torn = (!buf.is_empty()).then(|| String::from_utf8_lossy(&buf).into_owned());
    Ok((torn, start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn pages_back_through_a_file_and_skip_a_torn_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut w = File::create(&path).unwrap();
        for i in 0..100_000 {
            writeln!(w, "line {i}").unwrap();
        }
        write!(w, "torn").unwrap();
        let mut f = File::open(&path).unwrap();
        let len = f.metadata().unwrap().len();
        let (page, next) = lines_before(&mut f, len, 3, 1 << 20).unwrap();
        assert_eq!(page, ["line 99997", "line 99998", "line 99999"]);
        let (page, next) = lines_before(&mut f, next, 2, 1 << 20).unwrap();
        assert_eq!(page, ["line 99995", "line 99996"]);
        // Every line, paged, once each.
        let (mut end, mut seen) = (next, 99_995);
        while end > 0 {
            let (page, n) = lines_before(&mut f, end, 7_000, 1 << 20).unwrap();
            seen -= page.len();
            assert_eq!(page.last().unwrap(), &format!("line {}", seen + page.len() - 1));
            end = n;
        }
        assert_eq!(seen, 0);
        // A budget too small for a line: nothing, and a cursor that moves on.
        let (page, _) = lines_before(&mut f, len, 1, 3).unwrap();
        assert!(page.is_empty());
    }

    #[test]
    fn the_cursor_counts_bytes_not_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"one\r\nt\xffo\r\nthree\n").unwrap();
        let mut f = File::open(&path).unwrap();
        let (page, next) = lines_before(&mut f, 16, 1, 1 << 20).unwrap();
        assert_eq!((page, next), (vec!["three".to_string()], 10));
        let (page, next) = lines_before(&mut f, next, 1, 1 << 20).unwrap();
        assert_eq!((page, next), (vec!["t\u{fffd}o".to_string()], 5));
        let (page, next) = lines_before(&mut f, next, 5, 1 << 20).unwrap();
        assert_eq!((page, next), (vec!["one".to_string()], 0));
    }

    #[test]
    fn the_torn_end_is_what_no_newline_closes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let write = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            let mut f = File::open(&path).unwrap();
            let len = f.metadata().unwrap().len();
            (torn_end(&mut f, len, 1 << 20).unwrap(), len)
        };
        assert_eq!(write(b"a\nb\n"), ((None, 4), 4));
        assert_eq!(write(b"a\nb\nhalf"), ((Some("half".into()), 4), 8));
        assert_eq!(write(b"no newline yet"), ((Some("no newline yet".into()), 0), 14));
        assert_eq!(write(b""), ((None, 0), 0));
        // Torn past a step: the whole of it.
        let long = format!("x\n{}", "y".repeat(200_000));
        assert_eq!(write(long.as_bytes()), ((Some("y".repeat(200_000)), 2), 200_002));
        // Longer than the budget: none, and the cursor at the budget.
        let mut f = File::open(&path).unwrap();
        assert_eq!(torn_end(&mut f, 200_002, 1000).unwrap(), (None, 199_002));
        // Then the whole lines before a torn end, as a tail reads them.
        std::fs::write(&path, "1\n2\n3\nhalf").unwrap();
        let mut f = File::open(&path).unwrap();
        let (torn, whole) = torn_end(&mut f, 10, 1 << 20).unwrap();
        assert_eq!((torn.as_deref(), whole), (Some("half"), 6));
        assert_eq!(lines_before(&mut f, whole, 2, 1 << 20).unwrap(), (vec!["2".to_string(), "3".to_string()], 2));
    }
}
