//! The measures over a workspace's sources, as any checkout has them: the
//! files of every member's `src/`, each function's length, and the circles
//! of `use` between sibling modules. The size tests hold today's tree to
//! them; `house-counts` prints them for any tree (an older commit's too).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::scan::{code, module_of, sources, uses};

/// The members of the workspace at `root` (its `Cargo.toml`'s list).
pub fn members(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace's Cargo.toml");
    let list = manifest.split("members = [").nth(1).and_then(|m| m.split(']').next()).expect("its members");
    list.split(',').map(|m| m.trim().trim_matches('"')).filter(|m| !m.is_empty()).map(|m| root.join(m)).collect()
}

/// Every `.rs` file of every member's `src/`.
pub fn every_file(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for member in members(root) {
        sources(&member.join("src"), &[], &mut files);
    }
    files
}

/// Each function of `text`: its name, first line (1-based) and length in
/// lines, from `fn` to its closing brace. A declaration without a body (a
/// trait's) is none.
pub fn functions(text: &str) -> Vec<(String, usize, usize)> {
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
        let Some(open) = body_at(&s, at + 3) else { continue };
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

/// Where a function's body opens: the first `{` outside the signature's
/// brackets; a `;` first is a declaration (none).
fn body_at(s: &[char], from: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (k, &c) in s.iter().enumerate().skip(from) {
        match c {
            '(' | '[' | '<' => depth += 1,
            ')' | ']' => depth -= 1,
            '>' if s[k - 1] != '-' && s[k - 1] != '=' => depth -= 1,
            ';' if depth <= 0 => return None,
            '{' if depth <= 0 => return Some(k),
            _ => {}
        }
    }
    None
}

/// The circles of one crate (its `src`, binaries' folders aside): each a
/// set of sibling modules (under one parent) that use one another, round
/// and back, directly or through each other; a module counts what any
/// file inside it uses. Each is named `parent::{a, b}`.
pub fn circles(src: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    sources(src, &[src.join("bin")], &mut paths);
    // parent -> child -> the children it uses.
    let mut graph: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for p in &paths {
        let module = module_of(p.strip_prefix(src).expect("under src"));
        let text = std::fs::read_to_string(p).expect("a source file");
        for used in uses(&code(&text), &module) {
            // The deepest parent they share, and the child of it each is in.
            let shared = module.iter().zip(&used).take_while(|(a, b)| a == b).count();
            if shared < module.len() && shared < used.len() {
                let edges = graph.entry(module[..shared].to_vec()).or_default();
                edges.entry(module[shared].clone()).or_default().insert(used[shared].clone());
            }
        }
    }
    let mut found = Vec::new();
    for (parent, edges) in &graph {
        for circle in strongly_connected(edges) {
            let parent = if parent.is_empty() { "crate".to_string() } else { parent.join("::") };
            found.push(format!("{parent}::{{{}}}", circle.join(", ")));
        }
    }
    found
}

/// The strongly connected sets of more than one node (reachability both
/// ways; the graphs are a crate's siblings, a few dozen at most).
fn strongly_connected(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for next in edges.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> = edges.keys().map(|n| (n, reach(n))).collect();
    let mut placed = BTreeSet::new();
    let mut sets = Vec::new();
    for (n, from_n) in &reached {
        if placed.contains(*n) || !from_n.contains(*n) {
            continue;
        }
        let set: Vec<String> =
            from_n.iter().filter(|m| reached.get(m).is_some_and(|r| r.contains(*n))).cloned().collect();
        placed.extend(set.iter().cloned());
        if set.len() > 1 {
            sets.push(set);
        }
    }
    sets
}
