//! `cryoctl demo`: the whole product on a fresh machine, with nothing set up
//! by hand. It starts a private cryod (its own socket, database and config
//! under a temporary folder), creates and registers an example chamber,
//! prints what to try, and stops and cleans up on Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cryo_proto::v1 as pb;

use crate::Ctx;
use crate::client::{self, Failure, Result};

/// A private daemon that is stopped (and its folder removed) on drop.
struct DemoDaemon {
    child: Child,
    root: PathBuf,
}

impl Drop for DemoDaemon {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn sibling(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let p = exe.parent().map(|d| d.join(name)).filter(|p| p.exists());
    p.ok_or_else(|| {
        Failure::refused(format!("{name} is not next to cryoctl: build the workspace first (`cargo build --release`)"))
    })
}

pub async fn run(_ctx: Ctx) -> Result<()> {
    let root = std::env::temp_dir().join(format!("cryo-demo-{}", std::process::id()));
    std::fs::create_dir_all(&root)?;
    let socket = root.join("cryod.sock");
    let log = std::fs::File::create(root.join("cryod.log"))?;
    let child = Command::new(sibling("cryod")?)
        .env("CRYO_SOCKET", &socket)
        .env("XDG_STATE_HOME", root.join("state"))
        .env("XDG_CONFIG_HOME", root.join("config"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let daemon = DemoDaemon { child, root: root.clone() };
    let socket_opt = Some(socket.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut control = loop {
        match client::control(&socket_opt).await {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    let chamber = root.join("demo-chamber");
    let added = control
        .chamber_add(pb::ChamberAddRequest {
            dir: path_str(&chamber)?,
            name: "demo".into(),
            init: true,
            agent: String::new(),
            start: false,
        })
        .await?
        .into_inner();
    let ch = added.chamber.unwrap_or_default();
    println!("cryo demo: a private cryod is running (pid {}).", daemon.child.id());
    println!("  socket   {}", socket.display());
    println!("  chamber  {} in {}", ch.name, ch.path);
    println!();
    println!("Try, in another terminal:");
    println!("  export CRYO_SOCKET={}", socket.display());
    println!("  {} chamber list", sibling("cryoctl")?.display());
    println!("  {} chamber status demo", sibling("cryoctl")?.display());
    println!();
    println!("Press Ctrl-C to stop the demo; it removes {} on the way out.", root.display());
    tokio::signal::ctrl_c().await?;
    println!("\nstopping the demo daemon and cleaning up");
    drop(daemon);
    Ok(())
}

fn path_str(p: &Path) -> Result<String> {
    p.to_str().map(str::to_string).ok_or_else(|| Failure::refused(format!("{} is not UTF-8", p.display())))
}
