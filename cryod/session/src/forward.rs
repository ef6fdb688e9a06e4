//! `network = "gateway"` under bubblewrap: the session runs in a network
//! namespace of its own, whose only interface is its loopback. Inside it,
//! cryod's own binary (`cryod __forward PORT SOCKET -- PROGRAM ARGS`)
//! listens on `127.0.0.1:PORT`, the gateway's port, and relays each
//! connection to the gateway's Unix socket, bound into the sandbox; then it
//! starts the agent and ends with it. The agent's base URL is the same as
//! outside; nothing else on the machine, or beyond it, can be reached.
//!
//! A SIGTERM to the session's group reaches the agent, which ends as it
//! would; the forwarder, in a group of its own once the agent runs, waits
//! for it (a forwarder that died first would end the sandbox, and the agent
//! with it, at once).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::Error;

/// The forwarder's first argument.
pub(crate) const ARG: &str = "__forward";

/// The forwarder's arguments for `program ARGS` (the program is the
/// launcher, `cryod-launch __confine`).
pub(crate) fn args(port: u16, socket: &Path, program: &Path, args: &[String]) -> Vec<String> {
    let mut out = vec![ARG.to_string(), port.to_string(), socket.to_string_lossy().into_owned(), "--".into()];
    out.push(program.to_string_lossy().into_owned());
    out.extend(args.iter().cloned());
    out
}

/// `cryod __forward …`: relays, runs the agent, and exits with its
/// status; returns only if this process is not the forwarder.
pub(crate) fn intercept() {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|a| a != ARG) {
        return;
    }
    let code = match run(args.collect()) {
        Ok(code) => code,
        Err(why) => {
            eprintln!("cryo network forwarder: {why}");
            126
        }
    };
    std::process::exit(code)
}

fn run(args: Vec<OsString>) -> crate::Result<i32> {
    let mut args = args.into_iter();
    let port: u16 =
        args.next().and_then(|p| p.to_str()?.parse().ok()).ok_or_else(|| Error::Launcher("no port".into()))?;
    let socket = PathBuf::from(args.next().ok_or_else(|| Error::Launcher("no socket".into()))?);
    if args.next().is_none_or(|a| a != "--") {
        return Err(Error::Launcher("no `--` before the program".into()));
    }
    let program = args.next().ok_or_else(|| Error::Launcher("no program".into()))?;
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| Error::Refused(format!("cannot listen on 127.0.0.1:{port} inside the sandbox: {e}")))?;
    let mut child = std::process::Command::new(&program)
        .args(args)
        .spawn()
        .map_err(|e| Error::Spawn(format!("cannot run {}: {e}", Path::new(&program).display())))?;
    // The agent, started in the session's group, ends on its SIGTERM; the
    // forwarder leaves the group, so that it outlives the agent and ends
    // with it.
    let _ = nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0));
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let socket = socket.clone();
            std::thread::spawn(move || relay(tcp, &socket));
        }
    });
    let status = loop {
        match child.wait() {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::Spawn(format!("waiting for the agent: {e}"))),
        }
    };
    use std::os::unix::process::ExitStatusExt;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(9)))
}

/// One connection, both ways, until either side closes.
fn relay(mut tcp: std::net::TcpStream, socket: &Path) {
    let Ok(mut unix) = std::os::unix::net::UnixStream::connect(socket) else { return };
    let (Ok(mut tcp_in), Ok(mut unix_out)) = (tcp.try_clone(), unix.try_clone()) else { return };
    let up = std::thread::spawn(move || {
        let _ = copy(&mut tcp_in, &mut unix_out);
        let _ = unix_out.shutdown(std::net::Shutdown::Write);
    });
    let _ = copy(&mut unix, &mut tcp);
    let _ = tcp.shutdown(std::net::Shutdown::Both);
    let _ = up.join();
}

fn copy(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n])?;
    }
}
