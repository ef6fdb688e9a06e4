//! Compiles `cryo/v1/*.proto` with protox (a pure-Rust protobuf compiler, so no
//! system `protoc` is needed) and generates the tonic clients and servers.

use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new("cryo/v1");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=cryo");
    let mut files: Vec<_> = std::fs::read_dir(root)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "proto"))
        .collect();
    files.sort();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = protox::compile(&files, ["."])?;
    // The same definitions, encoded, for cryod's server reflection.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("cryo_descriptor.bin"), prost::Message::encode_to_vec(&fds))?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
