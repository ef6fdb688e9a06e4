//! Links `cryoctl` as a position-dependent executable, as `cryo-agent` is
//! (see its build script): an operator's every command starts this binary,
//! and as a PIE the loader rewrote its relocated tables at each start.
//! `cryoctl daemon run` execs the `cryod` beside it, which keeps its
//! randomized address; cryoctl itself is a short-lived client.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
