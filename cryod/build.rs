//! Packs cryod's relative relocations (`DT_RELR`, glibc 2.36 and binutils
//! 2.38 or later). cryod keeps its randomized address (it reads the network),
//! so the loader must relocate every pointer in its read-only-after-start
//! tables at each start. As classic `RELA` entries (24 bytes each) those were
//! 1.8 MB, read whole at start and resident from then on; packed, they are a
//! few kilobytes of bitmaps. The relocated tables themselves are the same.
//! A linker without the option ignores it with a warning; a glibc older than
//! 2.36 refuses to load the binary with a clear version error.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
