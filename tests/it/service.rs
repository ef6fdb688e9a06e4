//! Issue 8: what cryod tells a service manager (sd_notify).

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use cryo_tests::Env;
use nix::sys::signal::Signal;

/// Reads notify datagrams until one contains `want` (or the deadline).
fn wait_for(sock: &UnixDatagram, want: &str, seen: &mut Vec<String>) -> String {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        assert!(start.elapsed() < Duration::from_secs(20), "no {want:?} in {seen:?}");
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            seen.push(msg.clone());
            if msg.contains(want) {
                return msg;
            }
        }
    }
}

#[test]
fn cryod_reports_ready_status_watchdog_and_stopping() {
    let env = Env::new();
    let path = env.path("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut d = env.spawn_daemon_with(&[], &[("NOTIFY_SOCKET", path.to_str().unwrap()), ("WATCHDOG_USEC", "300000")]);
    let mut seen = Vec::new();
    let ready = wait_for(&sock, "READY=1", &mut seen);
    assert!(ready.contains("STATUS=0 chamber(s), 0 session(s) running, no wake planned"), "{ready}");
    // Ready means serving.
    env.cryoctl(&["chamber", "list"]).ok();
    wait_for(&sock, "WATCHDOG=1", &mut seen);
    let c = env.chamber(
        "c",
        "cryo-agent send hi >/dev/null\ncryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n",
        "",
    );
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let status = wait_for(&sock, "STATUS=1 chamber(s), 0 session(s) running, next wake", &mut seen);
    assert!(status.starts_with("STATUS="), "{status}");
    d.signal_and_wait(Signal::SIGTERM);
    wait_for(&sock, "STOPPING=1", &mut seen);
}

#[test]
fn without_notify_socket_cryod_runs_normally() {
    let env = Env::new();
    let _d = env.start_daemon();
    env.cryoctl(&["chamber", "list"]).ok();
}
