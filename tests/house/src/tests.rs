//! The checks: every member of the workspace has a table, every module and
//! room has a rank, and every use runs down the ranks; and the scan reads
//! what Rust writes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::scan::{code, module_of, sources, uses};
use crate::{CRATES, Crate, Ranks};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rank(ranks: Ranks, module: &str) -> Option<usize> {
    ranks.iter().position(|r| r.contains(&module))
}

/// One source file of a crate: its path (for messages), its module, and
/// the module paths it uses.
struct File {
    shown: String,
    module: Vec<String>,
    uses: Vec<Vec<String>>,
}

fn files(c: &Crate) -> Vec<File> {
    let root = workspace().join(c.src);
    let skip: Vec<PathBuf> = c.skip.iter().map(|s| root.join(s)).collect();
    let mut paths = Vec::new();
    sources(&root, &skip, &mut paths);
    paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).expect("under src");
            let module = module_of(rel);
            let text = std::fs::read_to_string(p).expect("read a source file");
            File { shown: format!("{}/{}", c.src, rel.display()), uses: uses(&code(&text), &module), module }
        })
        .collect()
}

/// Checks one table (`ranks`) over the modules one level below `folder`
/// (the crate's root: empty); returns how many uses between them it saw.
fn check(c: &Crate, files: &[File], folder: &[String], ranks: Ranks, wrong: &mut Vec<String>) -> usize {
    let depth = folder.len();
    let inside = |m: &[String]| m.len() > depth && m[..depth] == *folder;
    let place = match folder {
        [] => format!("{}'s layers", c.name),
        _ => format!("{}'s rooms of {}", c.name, folder.join("/")),
    };
    let present: BTreeSet<&str> =
        files.iter().filter(|f| inside(&f.module)).map(|f| f.module[depth].as_str()).collect();
    for m in &present {
        // Test rooms inside a folder use what they test.
        if rank(ranks, m).is_none() && !(depth > 0 && *m == "tests") {
            wrong.push(format!("{}: `{m}` has no rank: place it in {place} (tests/house/src/lib.rs)", c.src));
        }
    }
    for m in ranks.iter().flat_map(|r| r.iter()) {
        if !present.contains(m) {
            wrong.push(format!("{}: {place} name `{m}`, which is no module: take it out", c.src));
        }
    }
    let mut seen = 0;
    for f in files.iter().filter(|f| inside(&f.module)) {
        let from = &f.module[depth];
        let Some(high) = rank(ranks, from) else { continue };
        for used in f.uses.iter().filter(|u| inside(u)) {
            let to = &used[depth];
            let Some(low) = rank(ranks, to).filter(|_| to != from) else { continue };
            seen += 1;
            if low >= high {
                wrong.push(format!(
                    "{}: `{from}` (rank {high}) uses `{to}` (rank {low}); uses run to lower ranks only",
                    f.shown
                ));
            }
        }
    }
    seen
}

#[test]
fn every_crate_depends_one_way() {
    let mut wrong = Vec::new();
    let mut seen = 0;
    for c in CRATES {
        let files = files(c);
        seen += check(c, &files, &[], c.layers, &mut wrong);
        for (folder, ranks) in c.inner {
            let folder: Vec<String> = folder.split('/').map(str::to_string).collect();
            let n = check(c, &files, &folder, ranks, &mut wrong);
            if n == 0 {
                wrong.push(format!("{}: no uses between the rooms of {}: is it a folder?", c.src, folder.join("/")));
            }
            seen += n;
        }
    }
    assert!(seen > 200, "the scan found only {seen} uses: is it reading the sources?");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_member_has_a_table() {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("the workspace's Cargo.toml");
    let list = manifest.split("members = [").nth(1).and_then(|m| m.split(']').next()).expect("its members");
    let members: Vec<&str> = list.split(',').map(|m| m.trim().trim_matches('"')).filter(|m| !m.is_empty()).collect();
    assert!(members.len() > 5, "read only {members:?}");
    let missing: Vec<_> = members.iter().filter(|m| !CRATES.iter().any(|c| c.src == format!("{m}/src"))).collect();
    assert!(missing.is_empty(), "members with no table in tests/house/src/lib.rs: {missing:?}");
}

fn scanned(src: &str, module: &[&str]) -> Vec<String> {
    let module: Vec<String> = module.iter().map(|m| m.to_string()).collect();
    uses(&code(src), &module).iter().map(|p| p.join("::")).collect()
}

#[test]
fn the_scan_reads_groups_chains_and_inline_modules() {
    let src = "use crate::{a, b::c, d::{e, f as g}};\nuse super::super::h::*;\nfn x() { crate::i::j(); }";
    assert_eq!(scanned(src, &["m", "n"]), ["a", "b::c", "d::e", "d::f", "h", "i::j"]);
    // `super` from an inline module climbs out of it first.
    assert_eq!(scanned("mod tests {\n use super::k;\n}\nuse super::l;", &["m", "n"]), ["m::n::k", "m::l"]);
    // `pub(crate)`, `pub(super)` and `self::` name no other module.
    assert_eq!(scanned("pub(crate) fn a() {}\npub(super) struct B;\nuse self::c::D;", &["m"]), Vec::<String>::new());
}

#[test]
fn comments_strings_and_characters_name_nothing() {
    let src = "// crate::a\n/* crate::b /* nested */ crate::c */\nlet s = \"crate::d {\";\nlet r = r#\"crate::e\"#;\nlet c = '{';\nfn f<'a>(x: &'a str) { crate::g::h(x) }";
    assert_eq!(scanned(src, &[]), ["g::h"]);
}

#[test]
fn a_file_is_the_module_its_path_says() {
    let of = |p: &str| module_of(Path::new(p)).join("::");
    assert_eq!([of("lib.rs"), of("main.rs"), of("a.rs"), of("a/mod.rs"), of("a/b.rs")], ["", "", "a", "a", "a::b"]);
}

/// No two sibling modules of any crate use each other, directly or round
/// through others, in folders with a table or without; and the measure
/// finds one planted.
#[test]
fn no_crate_has_a_circle() {
    let mut found = Vec::new();
    for member in crate::measure::members(&workspace()) {
        found.extend(crate::measure::circles(&member.join("src")));
    }
    assert!(found.is_empty(), "modules that use each other: {found:?}");
    let planted = std::env::temp_dir().join(format!("house-circle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&planted);
    std::fs::create_dir_all(planted.join("a")).unwrap();
    for (file, text) in [
        ("lib.rs", "mod a;\nmod d;"),
        ("a/mod.rs", "mod b;\nmod c;"),
        ("a/b.rs", "use super::c::X;"),
        ("a/c.rs", "fn f() { crate::d::g(); }"),
        ("d.rs", "use crate::a::b::Y;"),
    ] {
        std::fs::write(planted.join(file), text).unwrap();
    }
    let seen = crate::measure::circles(&planted);
    std::fs::remove_dir_all(&planted).unwrap();
    assert_eq!(seen, ["crate::{a, d}"], "a uses d (in c) and d uses a (its b); b -> c alone is no circle");
}
