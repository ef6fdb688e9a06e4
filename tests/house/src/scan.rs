//! The text scan the layers are checked with: what a source file names
//! through `crate::` and `super::` (groups and chains included, `super`
//! from an inline module too), made absolute from its crate's root.
//! Comments, strings and character literals are taken out first, so prose
//! and text name nothing; `self::` names a module's own children, which are
//! always its to use.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, at any depth, but under the folders
/// `skip` names (a binary's crate of its own).
pub fn sources(dir: &Path, skip: &[PathBuf], out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            if !skip.contains(&path) {
                sources(&path, skip, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a source file is, from its path under `src`: `a/b.rs` and
/// `a/b/mod.rs` are `a::b`; `lib.rs` and `main.rs` are the crate's root.
pub fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
        parts.push(stem.to_string());
    }
    parts
}

/// The code of a file with its comments, strings and character literals
/// taken out (a string becomes `""`), its lines kept.
pub fn code(text: &str) -> String {
    let s: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let word = |i: usize| i > 0 && (s[i - 1].is_alphanumeric() || s[i - 1] == '_');
    while i < s.len() {
        let rest = |k: usize| s.get(i + k).copied();
        if s[i] == '/' && rest(1) == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if s[i] == '/' && rest(1) == Some('*') {
            // Block comments nest.
            let start = i;
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            newlines(&s[start..i.min(s.len())], &mut out);
        } else if let Some(end) = raw_string(&s, i).filter(|_| !word(i) || s[i - 1] == 'b') {
            out.push_str("\"\"");
            newlines(&s[i..end.min(s.len())], &mut out);
            i = end;
        } else if s[i] == '"' {
            let start = i;
            i += 1;
            while i < s.len() && s[i] != '"' {
                i += if s[i] == '\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            newlines(&s[start..i.min(s.len())], &mut out);
            i += 1;
        } else if s[i] == '\'' && rest(1) == Some('\\') {
            // An escape: '\n', '\'', '\u{1F600}'.
            i += 3;
            while i < s.len() && s[i] != '\'' {
                i += 1;
            }
            out.push_str("' '");
            i += 1;
        } else if s[i] == '\'' && rest(2) == Some('\'') {
            out.push_str("' '");
            i += 3;
        } else {
            // A lifetime's quote stays: nothing follows it to take out.
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// The line breaks of a stretch taken out, kept so lines stay lines.
fn newlines(taken: &[char], out: &mut String) {
    out.extend(taken.iter().filter(|c| **c == '\n'));
}

/// Where a raw string starting at `i` (`r"…"`, `r#"…"#`) ends, if one does.
fn raw_string(s: &[char], i: usize) -> Option<usize> {
    if s[i] != 'r' {
        return None;
    }
    let hashes = s[i + 1..].iter().take_while(|c| **c == '#').count();
    if s.get(i + 1 + hashes) != Some(&'"') {
        return None;
    }
    let mut j = i + 2 + hashes;
    while j < s.len() {
        if s[j] == '"' && s[j + 1..].iter().take(hashes).filter(|c| **c == '#').count() == hashes {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(s.len())
}

/// Every path `code` (taken out by [`code`]) names through `crate::` or
/// `super::`, absolute from the crate's root; `module` is the file's.
/// An inline `mod name { … }` is a module of its own for `super::`.
pub fn uses(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let s: Vec<char> = code.chars().collect();
    let mut here: Vec<String> = module.to_vec();
    // The brace depth each inline module opened at.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0;
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            '{' => {
                depth += 1;
                i += 1;
                continue;
            }
            '}' => {
                if inline.last() == Some(&depth) {
                    inline.pop();
                    here.pop();
                }
                depth -= 1;
                i += 1;
                continue;
            }
            c if (c.is_alphabetic() || c == '_') && !ident_char(&s, i.wrapping_sub(1)) => {}
            _ => {
                i += 1;
                continue;
            }
        }
        let (word, end) = ident(&s, i);
        let after_path = i >= 2 && s[i - 2] == ':' && s[i - 1] == ':';
        i = end;
        if word == "mod" {
            let (name, end) = ident(&s, skip_ws(&s, i));
            let brace = skip_ws(&s, end);
            if !name.is_empty() && s.get(brace) == Some(&'{') {
                depth += 1;
                inline.push(depth);
                here.push(name);
                i = brace + 1;
            }
            continue;
        }
        if after_path || !(word == "crate" || word == "super") {
            continue;
        }
        // `super::super::…` climbs once per `super`.
        let mut up = usize::from(word == "super");
        let mut at = i;
        let mut rest = None;
        while let Some(next) = colons(&s, at) {
            let (w, end) = ident(&s, next);
            if w == "super" {
                up += 1;
                at = end;
            } else {
                rest = Some(next);
                break;
            }
        }
        let Some(start) = rest else { continue };
        let base = if word == "crate" {
            Vec::new()
        } else if up <= here.len() {
            here[..here.len() - up].to_vec()
        } else {
            continue;
        };
        let (trees, end) = tree(&s, start);
        for t in trees {
            let mut path = base.clone();
            path.extend(t);
            out.push(path);
        }
        i = end;
    }
    out
}

/// A use tree at `i`: `a::b`, `a::{b, c::d}`, `*`; the paths it names
/// (`self` and what cannot be a module, like `*` or `<T>`, left out).
fn tree(s: &[char], i: usize) -> (Vec<Vec<String>>, usize) {
    let i = skip_ws(s, i);
    if s.get(i) == Some(&'{') {
        let mut paths = Vec::new();
        let mut j = i + 1;
        loop {
            while j < s.len() && (s[j].is_whitespace() || s[j] == ',') {
                j += 1;
            }
            if j >= s.len() || s[j] == '}' {
                return (paths, j + 1);
            }
            let (more, end) = tree(s, j);
            paths.extend(more);
            // A name that is no path (`as x`): step over it.
            j = if end > j { end } else { j + 1 };
            while j < s.len() && !matches!(s[j], ',' | '}') {
                j += 1;
            }
        }
    }
    let (word, end) = ident(s, i);
    if word.is_empty() {
        return (vec![Vec::new()], i);
    }
    let seg: Vec<String> = if word == "self" { Vec::new() } else { vec![word] };
    match colons(s, end) {
        Some(next) if s.get(next).is_some_and(|c| *c == '{' || c.is_alphabetic() || *c == '_') => {
            let (subs, end) = tree(s, next);
            (subs.into_iter().map(|t| seg.iter().cloned().chain(t).collect()).collect(), end)
        }
        _ => (vec![seg], end),
    }
}

fn ident_char(s: &[char], i: usize) -> bool {
    s.get(i).is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// The identifier at `i` and where it ends (empty if none starts there).
fn ident(s: &[char], i: usize) -> (String, usize) {
    let mut j = i;
    while ident_char(s, j) {
        j += 1;
    }
    (s.get(i..j).map(|w| w.iter().collect()).unwrap_or_default(), j)
}

fn skip_ws(s: &[char], mut i: usize) -> usize {
    while s.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

/// Where what follows a `::` at `i` (spaces allowed around it) starts.
fn colons(s: &[char], i: usize) -> Option<usize> {
    let i = skip_ws(s, i);
    (s.get(i) == Some(&':') && s.get(i + 1) == Some(&':')).then(|| skip_ws(s, i + 2))
}
