//! The book's output examples, checked by the tests that produce them.
//!
//! An example is a `console` block in a page of `docs/src/` (or
//! `README.md`): each `$ COMMAND` line, then what the command prints. A
//! test that runs the same command in the same scenario hands its output to
//! [`check`], which finds the example by page and command and compares it
//! line by line, with the parts that vary masked as trycmd does: `[..]` in
//! a line stands for any text, and a line `...` for any number of lines.
//! Trailing spaces do not count. Which test checks each example is listed
//! in `it book::EXAMPLES`, and `it book::every_output_example_is_checked`
//! fails for an example no test checks.

use std::path::{Path, PathBuf};

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// Every example of `text`: its command (after `$ `), what it shows, and
/// its line in the page.
pub fn examples(text: &str) -> Vec<(String, Vec<String>, usize)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((_, line)) = lines.next() {
        if line.trim_start().strip_prefix("```").map(str::trim) != Some("console") {
            continue;
        }
        let mut current: Option<(String, Vec<String>, usize)> = None;
        for (n, line) in lines.by_ref() {
            if line.trim_start().starts_with("```") {
                break;
            }
            if let Some(command) = line.strip_prefix("$ ") {
                out.extend(current.take());
                current = Some((command.trim().to_string(), Vec::new(), n + 1));
            } else if let Some((_, shown, _)) = current.as_mut() {
                shown.push(line.to_string());
            }
        }
        out.extend(current);
    }
    out
}

/// Whether `line` is `pattern`, where `[..]` in the pattern stands for any
/// text (trailing spaces ignored on both sides).
pub fn line_matches(pattern: &str, line: &str) -> bool {
    let (pattern, line) = (pattern.trim_end(), line.trim_end());
    let mut parts = pattern.split("[..]");
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = line.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Whether `actual` is what `expected` shows (`...` lines skip any lines).
pub fn matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.iter().all(|l| l.trim().is_empty()),
        Some((first, rest)) if first.trim() == "..." => (0..=actual.len()).any(|k| matches(rest, &actual[k..])),
        Some((first, rest)) => {
            actual.split_first().is_some_and(|(a, more)| line_matches(first, a) && matches(rest, more))
        }
    }
}

/// Checks that `output` of `command` is what the example of `command` in
/// `page` (relative to the repository: `docs/src/cost.md`) shows; panics
/// with both when it is not, or when the page has no such example.
pub fn check(page: &str, command: &str, output: &str) {
    let path = repo().join(page);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let all = examples(&text);
    let Some((_, shown, line)) = all.iter().find(|(c, _, _)| c == command) else {
        panic!("{page} has no example of `{command}` (it has: {:?})", all.iter().map(|e| &e.0).collect::<Vec<_>>())
    };
    let actual: Vec<&str> = output.trim_end().lines().collect();
    let expected: Vec<String> = {
        let mut e = shown.clone();
        while e.last().is_some_and(|l| l.trim().is_empty()) {
            e.pop();
        }
        e
    };
    assert!(
        matches(&expected, &actual),
        "{page}:{line}: the example of `{command}` is not what it prints now.\nthe page shows:\n{}\nit prints:\n{}",
        expected.join("\n"),
        actual.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_stand_for_what_varies() {
        assert!(line_matches("Sun [..] 03:00 CEST", "Sun 2027-03-28 03:00 CEST  "));
        assert!(line_matches("[..]", "anything"));
        assert!(line_matches("a[..]b[..]c", "a-b-b-c"));
        assert!(!line_matches("a[..]c", "a-b"));
        assert!(!line_matches("abc", "abcd"));
        let e = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(matches(&e(&["one", "...", "four"]), &["one", "two", "three", "four"]));
        assert!(matches(&e(&["one", "...", "two"]), &["one", "two"]));
        assert!(!matches(&e(&["one", "two"]), &["one", "two", "three"]));
        let page = "text\n```console\n$ cryoctl a\nA\n\n$ cryoctl b\nB\n```\n";
        let found = examples(page);
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].0.as_str(), found[1].1.clone(), found[1].2), ("cryoctl a", vec!["B".to_string()], 6));
    }
}
