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

/// Paths that need each escape: spaces, `%`, `$`, quotes, backslashes.
const ODD: &[&str] = &["plain", "with space", "100%done", "$HOME-like", "quote\"d", "back\\slash", "it's"];

#[test]
fn rendered_units_pass_systemd_analyze_verify() {
    if std::process::Command::new("systemd-analyze").arg("--version").output().is_err() {
        eprintln!("SKIPPED rendered_units_pass_systemd_analyze_verify: systemd-analyze is not installed");
        return;
    }
    let env = Env::new();
    let run = env.path("xdg-run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    for odd in ODD {
        let dir = env.path(&format!("bins/{odd}"));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("cryod");
        std::fs::copy("/bin/true", &exe).unwrap();
        let unit = cryod::service::render_systemd(&exe);
        let unit_dir = env.path(&format!("units/{}", odd.len()));
        std::fs::create_dir_all(&unit_dir).unwrap();
        let path = unit_dir.join("cryod.service");
        std::fs::write(&path, &unit).unwrap();
        for user in [true, false] {
            let mut c = std::process::Command::new("systemd-analyze");
            if user {
                c.arg("--user").env("XDG_RUNTIME_DIR", &run);
            }
            let out = c.arg("verify").arg(&path).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success() && stderr.trim().is_empty(), "{odd:?} (user: {user}): {stderr}\n{unit}");
        }
    }
}

#[test]
fn rendered_plists_are_well_formed_and_keep_the_path() {
    let probe = std::process::Command::new("python3").arg("-c").arg("import plistlib").output();
    if !matches!(probe, Ok(ref o) if o.status.success()) {
        eprintln!("SKIPPED rendered_plists_are_well_formed_and_keep_the_path: python3 with plistlib is not available");
        return;
    }
    let env = Env::new();
    for odd in ODD.iter().chain(&["a&b", "<tag>"]) {
        let exe = std::path::PathBuf::from(format!("/Users/me/{odd}/cryod"));
        let plist = cryod::service::render_launchd(&exe, std::path::Path::new("/Users/me/Library/Logs/cryo"));
        let file = env.path("agent.plist");
        std::fs::write(&file, &plist).unwrap();
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg("import plistlib,sys; d=plistlib.load(open(sys.argv[1],'rb')); print(d['ProgramArguments'][0]); print(d['Label'], d['RunAtLoad'], d['KeepAlive'])")
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{odd:?}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next().unwrap(), exe.to_str().unwrap());
        assert_eq!(lines.next().unwrap(), "dev.cryo.cryod True True");
    }
}
