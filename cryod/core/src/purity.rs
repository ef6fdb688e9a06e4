//! The core stays free of I/O and runtimes (STYLE.md section 1): a test
//! that reads every source file under `src/` and finds none of what would
//! act or read a clock. A new file is checked without being listed.

use std::path::{Path, PathBuf};

/// What no file of the core may name: runtimes, the store, files, sockets,
/// processes, and the clocks (time comes in as `now`).
const BANNED: &[&str] =
    &["tokio", "tonic", "rusqlite", "std::fs", "std::net", "std::process", "SystemTime::now", "Utc::now"];

/// Files the check skips, under `src/`, each with why.
const EXCEPT: &[(&str, &str)] = &[("purity.rs", "this test: it names what it bans, and reads the sources from disk")];

/// Every `.rs` file under `dir`, at any depth.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments: prose may say what the code
/// must not do ("no tokio").
fn code(text: &str) -> String {
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

#[test]
fn core_imports_no_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    for (name, _) in EXCEPT {
        assert!(root.join(name).is_file(), "the exception {name} names no file: take it out of EXCEPT");
    }
    let mut wrong = Vec::new();
    let mut read = 0;
    for file in &files {
        let rel = file.strip_prefix(&root).expect("under src").to_string_lossy().replace('\\', "/");
        if EXCEPT.iter().any(|(name, _)| *name == rel) {
            continue;
        }
        let text = code(&std::fs::read_to_string(file).expect("read a source file"));
        read += 1;
        for banned in BANNED.iter().filter(|b| text.contains(*b)) {
            wrong.push(format!("cryod/core/src/{rel}: cryo-core must not use {banned}"));
        }
    }
    assert!(read > 40, "read only {read} files: is the walk finding the sources?");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn comments_are_not_code() {
    assert_eq!(code("use a; // no tokio\n//! no std::fs\nb"), "use a; \n\nb");
}
