//! `cryod-launch`: the launchers of a session, and nothing else. cryod
//! starts it for every confined run: as the keeper of the run's tree
//! (`__sandbox`), then as the last step before the program (`__confine`),
//! which takes every capability, applies Landlock and the seccomp filter,
//! and runs the program. It is cryod's own code
//! ([`cryo_session::intercept_launchers`]), in a binary small enough to
//! start in a fraction of cryod's time; cryod runs its own binary instead
//! where this one is not installed beside it.

fn main() {
    cryo_session::intercept_launchers();
    eprintln!(
        "cryod-launch: cryod starts this for a session (`{} __sandbox` or `__confine`); run alone it does nothing",
        cryo_session::LAUNCHER
    );
    std::process::exit(2)
}
