//! The build's identity, `CRYO_SESSION_BUILD`: a digest of this crate's
//! sources, those of the workspace's crates it links (`cryo-files` opens
//! the paths Landlock's rules name, `cryo-core` and `cryo-proto` give it
//! types) and the workspace's lock file (the versions of landlock,
//! seccompiler and caps). cryod and `cryod-launch` link
//! this crate from one build, so they share it; a launcher from another
//! build (an upgrade half done, a copy of one binary alone) is told apart
//! before it confines anything (`paths::BUILD`).

use std::hash::Hasher;
use std::path::{Path, PathBuf};

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for code in ["src", "../files/src", "../core/src", "../../proto"] {
        if dir.join(code).is_dir() {
            println!("cargo:rerun-if-changed={code}");
            walk(&dir.join(code), &mut files);
        }
    }
    files.sort();
    let lock = dir.join("../../Cargo.lock");
    if lock.is_file() {
        println!("cargo:rerun-if-changed=../../Cargo.lock");
        files.push(lock);
    }
    // Not for secrecy: the same sources give the same digest, and any
    // change to them a new one.
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    for f in &files {
        digest.write(f.strip_prefix(&dir).unwrap_or(f).to_string_lossy().as_bytes());
        digest.write(&std::fs::read(f).unwrap_or_default());
    }
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rustc-env=CRYO_SESSION_BUILD={version}-{:016x}", digest.finish());
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}
