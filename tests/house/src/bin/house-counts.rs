//! `house-counts [TREE]`: the house's measures for a checkout (this one by
//! default): its files and lines, the files over 600 and 700 lines, the
//! functions over 120, and every circle of `use` between sibling modules.
//! Run on two trees (`git worktree add /tmp/old COMMIT`), it gives a
//! change's before and after.

use std::path::{Path, PathBuf};

use cryo_house::measure::{circles, every_file, functions, members};

fn main() {
    let root = std::env::args_os().nth(1).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    if !root.join("Cargo.toml").is_file() {
        eprintln!("house-counts: {} has no Cargo.toml: name a workspace's folder", root.display());
        std::process::exit(2);
    }
    let shown = |p: &Path| p.strip_prefix(&root).unwrap_or(p).display().to_string();
    let (mut lines, mut over600, mut over700, mut long) = (0, Vec::new(), Vec::new(), Vec::new());
    let files = every_file(&root);
    for p in &files {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        let n = text.lines().count();
        lines += n;
        if n > 700 {
            over700.push(format!("{} ({n})", shown(p)));
        } else if n > 600 {
            over600.push(format!("{} ({n})", shown(p)));
        }
        for (name, at, len) in functions(&text) {
            if len > 120 {
                long.push(format!("{}:{at} fn {name} ({len})", shown(p)));
            }
        }
    }
    println!("files {} with {lines} lines, in the src/ of {} crates", files.len(), members(&root).len());
    for (title, list) in
        [("over 700 lines", &over700), ("600-700 lines", &over600), ("functions over 120 lines", &long)]
    {
        println!("{title}: {}", list.len());
        list.iter().for_each(|l| println!("  {l}"));
    }
    let mut all = Vec::new();
    for member in members(&root) {
        let src = member.join("src");
        if src.is_dir() {
            all.extend(circles(&src).into_iter().map(|c| format!("{}: {c}", shown(&member))));
        }
    }
    println!("circles: {}", all.len());
    all.iter().for_each(|c| println!("  {c}"));
}
