//! The layers of `cryod/src`, as a test: every top-level module has a rank,
//! and a module may use only modules of a lower rank, so no import circle
//! can come back. `ARCHITECTURE.md` ("Layers") draws the same table.

use std::collections::BTreeSet;
use std::path::Path;

/// Lowest first. A new module must be placed here (the test says so).
const LAYERS: &[&[&str]] = &[
    // What knows nothing of chambers: the clock, random names, log lines,
    // the metrics registry, bounded TCP connections, the wall-clock
    // scheduler, traces over OTLP (INNER ranks its rooms).
    &["base"],
    // The store (SQLite or PostgreSQL).
    &["store"],
    // Errors (wrapping the store's), `cryod.toml`.
    &["error", "config"],
    // The provider gateway (it reads the wire, knows nothing of chambers).
    &["gateway"],
    // A chamber's files (mailbox, config, TODO file I/O).
    &["chamber"],
    // The services the shell uses, and the runtime that holds them. (An
    // agent's run is the crate cryo-session, below every module here.)
    &["services"],
    // The chamber shell around cryo_core's machine.
    &["supervisor"],
    // Operations on the set of chambers.
    &["daemon"],
    // The fronts: the socket, gRPC, the hub, the service manager, the
    // fleet's loops.
    &["fronts"],
    // Test support that drives a whole daemon.
    &["fuzzing"],
];

/// The modules inside the folders with rooms of their own, lowest first: a
/// module may use its lower siblings only. The folder's `mod.rs`
/// holds the folder's own types and is above them all.
const INNER: &[(&str, &[&[&str]])] = &[
    // The clock and the leaves; then what runs on the clock: the scheduler's
    // timers, the traces' times.
    ("base", &[&["clock", "random", "logline", "metrics", "conn"], &["scheduler", "otlp"]]),
    (
        "services",
        &[
            // Admission, watchers, sync bridges, the zone, approval requests
            // waiting in a session.
            &["admission", "watch", "bridges", "zone", "approvals"],
            // The node's trust in its fleet lease (it signals agents' groups).
            // The notifiers (their command runs through cryo-session's runner).
            // Git-aware chambers (their worktree's commands run jailed, the same way).
            &["lease", "notifier", "git"],
            // What every chamber task shares.
            &["runtime"],
        ],
    ),
    (
        "fronts",
        &[
            // A fleet node's lease and ownership loops.
            &["fleet"],
            // What the adapters share (conversions to the wire).
            &["convert"],
            // Adapters: gRPC, the service manager.
            &["rpc", "system"],
            // Adapters that serve the others: the hub (with `/mcp`), the socket.
            &["hub", "server"],
        ],
    ),
    // The two stores know nothing of each other; both read their history
    // (rollups and pruning) from the same statements.
    ("store", &[&["history"], &["sqlite", "postgres"]]),
    // The fleet's store: its tables' rooms; the fleet's ownership rounds
    // read chambers as the registry does.
    ("store/postgres", &[&["migrations", "registry", "sessions", "approvals", "commands"], &["fleet"]]),
    // `cryod.toml`: its tables, then the keys they make up, then the reading.
    ("config", &[&["providers", "notify"], &["keys"], &["parse"]]),
    // What the gateway reads of the wire, then a session's route, then one
    // call forwarded.
    ("gateway", &[&["wire", "redact", "kept"], &["route"], &["forward"]]),
    // What the operator accepts knows nothing of `cryo.toml`'s reading,
    // which digests it; a new chamber's files and resets read the config.
    ("chamber", &[&["trust", "log", "mailbox", "todos"], &["config"], &["scaffold", "seed"], &["reset"]]),
    (
        "supervisor",
        &[
            &["budget", "queue", "running", "owner", "outlets"],
            &["trust", "limits", "replies", "files", "approve", "git"],
            // What the rest of cryod holds of a supervisor, and sends it.
            &["handle"],
            &["boot"],
            &["ledger"],
            &["effects"],
        ],
    ),
    (
        "fronts/hub",
        &[
            &["markdown", "history", "guard"],
            &["attachments", "invites", "hooks"],
            &["events", "api"],
            &["approvals", "settings"],
        ],
    ),
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The sibling modules one file inside `folder` names: through
/// `crate::folder::`, or through `super::` from the folder's direct children
/// (`super::super::` from a grandchild).
fn inner_uses(src: &str, folder: &str, depth: usize) -> BTreeSet<String> {
    let code: String = src.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let up = "super::".repeat(depth);
    let as_crate = code.replace(&format!("crate::{}::", folder.replace('/', "::")), "crate::");
    let as_super = if depth == 0 { String::new() } else { code.replace(&up, "crate::") };
    let mut out = uses(&as_crate);
    out.extend(uses(&as_super));
    out
}

/// The top-level modules one source file names through `crate::`.
fn uses(src: &str) -> BTreeSet<String> {
    let code: String = src.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a, b::c, d::{e, f}}`: the names at depth one.
            let mut depth = 0;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && (c.is_alphanumeric() || c == '_') => {
                        out.insert(ident(&group[j..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read cryod/src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn dependencies_run_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|f| f.strip_prefix(&root).ok())
        .filter_map(|rel| rel.components().next())
        .map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string())
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut wrong = Vec::new();
    for m in &modules {
        if rank(m).is_none() && m != "layers" {
            wrong.push(format!("`{m}` has no layer: place it in cryod/src/layers.rs and ARCHITECTURE.md"));
        }
    }
    let mut edges = 0;
    for file in &files {
        let rel = file.strip_prefix(&root).expect("under src");
        let top = rel.components().next().expect("a path").as_os_str().to_string_lossy();
        let top = top.trim_end_matches(".rs");
        let Some(from) = rank(top) else { continue };
        let src = std::fs::read_to_string(file).expect("read a source file");
        for used in uses(&src) {
            let Some(to) = rank(&used).filter(|_| used != top) else { continue };
            edges += 1;
            if to >= from {
                wrong.push(format!(
                    "cryod/src/{}: `{top}` (layer {from}) uses `{used}` (layer {to}); dependencies run downward only",
                    rel.display()
                ));
            }
        }
    }
    assert!(edges > 40, "the scan found only {edges} uses: is it reading the sources?");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn rooms_inside_a_folder_depend_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut edges = 0;
    for (folder, layers) in INNER {
        let root = src.join(folder);
        let rank = |m: &str| layers.iter().position(|l| l.contains(&m));
        let mut files = Vec::new();
        sources(&root, &mut files);
        for file in &files {
            let rel = file.strip_prefix(&root).expect("under the folder");
            let parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            let top = parts[0].trim_end_matches(".rs").to_string();
            if top == "mod" || top == "tests" {
                continue;
            }
            let Some(from) = rank(&top) else {
                wrong.push(format!("`{folder}::{top}` has no layer: place it in INNER in cryod/src/layers.rs"));
                continue;
            };
            // `a.rs` and `a/mod.rs` are one level down; `a/b.rs` two.
            let depth = if parts.len() > 1 && parts.last().is_some_and(|p| p != "mod.rs") { 2 } else { 1 };
            let text = std::fs::read_to_string(file).expect("read a source file");
            for used in inner_uses(&text, folder, depth) {
                let Some(to) = rank(&used).filter(|_| used != top) else { continue };
                edges += 1;
                if to >= from {
                    wrong.push(format!(
                        "cryod/src/{folder}/{}: `{top}` uses its sibling `{used}` of the same layer or above",
                        rel.display()
                    ));
                }
            }
        }
    }
    assert!(edges >= 6, "the scan found only {edges} uses between rooms: is it reading them?");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_scan_reads_groups_and_paths() {
    let src = "use crate::{a, b::c, d::{e, f}};\nfn x() { crate::g::h(); } // crate::comment";
    let found: Vec<_> = uses(src).into_iter().collect();
    assert_eq!(found, ["a", "b", "d", "g"]);
}
