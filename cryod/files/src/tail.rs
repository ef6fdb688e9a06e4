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
    let mut buf: Vec<u8> = Vec::new();
    // Read back until n + 1 newlines (the line before the first one ends
    // the page), the file's start, or the budget.
    loop {
        let newlines = buf.iter().filter(|b| **b == b'\n').count();
        if newlines > n || start == floor {
            break;
        }
        let from = start.saturating_sub(STEP).max(floor);
        let mut chunk = vec![0; (start - from) as usize];
        f.seek(SeekFrom::Start(from))?;
        f.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&buf);
        buf = chunk;
        start = from;
    }
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
    let text = String::from_utf8_lossy(&buf[first..]);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let skip = lines.len().saturating_sub(n);
    let skipped: usize = lines[..skip].iter().map(|l| l.len() + 1).sum();
    let lines = lines.split_off(skip);
    Ok((lines, start + (first + skipped) as u64))
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
}
