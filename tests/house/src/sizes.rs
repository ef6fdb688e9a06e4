//! The rooms' sizes, as tests: no file of any crate's `src/` over 700
//! lines and no function over 120 (STYLE.md, 7). A room that grows past
//! them is split at a seam; a function, given steps of its own.

use std::path::{Path, PathBuf};

use crate::scan::{code, sources};

const MAX_FILE_LINES: usize = 700;
const MAX_FN_LINES: usize = 120;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file of every member's `src/` (read from the workspace's
/// `Cargo.toml`, so a new crate is measured too).
fn every_file() -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("the workspace's Cargo.toml");
    let list = manifest.split("members = [").nth(1).and_then(|m| m.split(']').next()).expect("its members");
    let mut files = Vec::new();
    for member in list.split(',').map(|m| m.trim().trim_matches('"')).filter(|m| !m.is_empty()) {
        sources(&workspace().join(member).join("src"), &[], &mut files);
    }
    assert!(files.len() > 200, "found only {} files", files.len());
    files
}

fn shown(p: &Path) -> String {
    p.strip_prefix(workspace()).unwrap_or(p).display().to_string()
}

/// Each function of `text`: its name, first line (1-based) and length in
/// lines, from `fn` to its closing brace. A declaration without a body (a
/// trait's) is none.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let code = code(text);
    let s: Vec<char> = code.chars().collect();
    let line_at = |i: usize| s[..i].iter().filter(|&&c| c == '\n').count() + 1;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    let mut i = 0;
    while i + 3 < s.len() {
        let at = i;
        i += 1;
        if !(s[at] == 'f' && s[at + 1] == 'n' && s[at + 2] == ' ') || (at > 0 && ident(s[at - 1])) {
            continue;
        }
        let name: String = s[at + 3..].iter().take_while(|&&c| ident(c)).collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` outside the signature's brackets;
        // a `;` first is a declaration.
        let mut depth = 0i32;
        let mut open = None;
        for (k, &c) in s.iter().enumerate().skip(at + 3) {
            match c {
                '(' | '[' | '<' => depth += 1,
                ')' | ']' => depth -= 1,
                '>' if s[k - 1] != '-' && s[k - 1] != '=' => depth -= 1,
                ';' if depth <= 0 => break,
                '{' if depth <= 0 => {
                    open = Some(k);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut level = 0;
        let close = s[open..].iter().position(|&c| {
            level += match c {
                '{' => 1,
                '}' => -1,
                _ => 0,
            };
            level == 0
        });
        if let Some(close) = close {
            found.push((name, line_at(at), line_at(open + close) - line_at(at) + 1));
        }
    }
    found
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
