//! The rooms' sizes, as tests: no file of any crate's `src/` over 700
//! lines and no function over 120 (STYLE.md, 7). A room that grows past
//! them is split at a seam; a function, given steps of its own.

use std::path::{Path, PathBuf};

use crate::measure::{self, functions};

const MAX_FILE_LINES: usize = 700;
const MAX_FN_LINES: usize = 120;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file of every member's `src/` (read from the workspace's
/// `Cargo.toml`, so a new crate is measured too).
fn every_file() -> Vec<PathBuf> {
    let files = measure::every_file(&workspace());
    assert!(files.len() > 200, "found only {} files", files.len());
    files
}

fn shown(p: &Path) -> String {
    p.strip_prefix(workspace()).unwrap_or(p).display().to_string()
}

#[test]
fn no_file_is_over_700_lines() {
    let mut long: Vec<String> = every_file()
        .into_iter()
        .filter_map(|p| {
            let n = std::fs::read_to_string(&p).expect("a source file").lines().count();
            (n > MAX_FILE_LINES).then(|| format!("{} ({n} lines)", shown(&p)))
        })
        .collect();
    long.sort();
    assert!(long.is_empty(), "over {MAX_FILE_LINES} lines: split at a seam:\n{}", long.join("\n"));
}

#[test]
fn no_function_is_over_120_lines() {
    let mut long = Vec::new();
    for p in every_file() {
        let text = std::fs::read_to_string(&p).expect("a source file");
        for (name, line, n) in functions(&text) {
            if n > MAX_FN_LINES {
                long.push(format!("{}:{line} fn {name} ({n} lines)", shown(&p)));
            }
        }
    }
    assert!(long.is_empty(), "over {MAX_FN_LINES} lines: give them steps of their own:\n{}", long.join("\n"));
}

/// The measure reads Rust as Rust: braces in strings, comments and
/// characters are not code, a lifetime is not a character, `->` closes no
/// bracket, and a declaration has no body.
#[test]
fn the_measure_reads_rust_as_rust() {
    let text = "fn a() {\n    let s = \"}}{\";\n    let c = '}';\n}\n\
                // fn b() { \n\
                fn c<'x>(v: &'x str) -> Vec<u8> where u8: Copy {\n    let r = r#\"\n}\"#;\n    /* } */\n    vec![]\n}\n\
                trait T { fn d(&self); }\n";
    let found = functions(text);
    assert_eq!(found, [("a".into(), 1, 4), ("c".into(), 6, 6)], "{found:?}");
}
