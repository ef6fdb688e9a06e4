//! Issue 39: what a new user, a standard client and a second machine trip
//! over. Each test is named after the item it pins.

use std::time::Duration;

use cryo_tests::{ANSWERING_AGENT, Env, wait_until};

/// Item 1: cryod whose standard error is a pipe that closed (`cryod 2>&1 |
/// head -c 64`) goes on: mail is answered, and SIGTERM stops it.
#[test]
fn a_closed_stderr_neither_stops_nor_hangs_cryod() {
    let env = Env::new();
    let mut child = env
        .command(cryo_tests::bin("cryod"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader reads a little, then goes.
    let mut err = child.stderr.take().unwrap();
    let mut first = [0u8; 64];
    let _ = std::io::Read::read(&mut err, &mut first);
    drop(err);
    drop(child.stdout.take());
    wait_until("cryod to answer", || std::os::unix::net::UnixStream::connect(env.socket()).is_ok());
    let c = env.chamber("c", ANSWERING_AGENT, "");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    c.write_inbox(1, "are you there");
    c.wait_ended(2);
    assert!(c.outbox().iter().any(|m| m.contains("got: are you there")), "{:?}", c.outbox());
    env.cryoctl(&["chamber", "list"]).ok();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "cryod ended with {status:?}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "SIGTERM did not stop cryod");
        std::thread::sleep(Duration::from_millis(20));
    }
}
