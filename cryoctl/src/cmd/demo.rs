//! `cryoctl demo`: the whole product on a fresh machine, with nothing set up
//! by hand. It starts a private cryod (its own socket, database and config
//! under a temporary folder), creates a chamber whose agent is a small script
//! that ships with cryo and really uses `cryo-agent` (it wakes, reads mail,
//! replies, schedules its next wake ten seconds out and hibernates), prints
//! what to try, and streams the conversation until Ctrl-C, then stops the
//! daemon and removes the folder. `--agent claude|codex|opencode` runs the
//! same chamber with a real agent CLI.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cryo_proto::v1 as pb;

use crate::Ctx;
use crate::client::{self, Failure, Result};

/// The demo agent, shipped inside cryoctl.
const DEMO_AGENT: &str = include_str!("demo-agent.sh");

/// The plan the demo chamber starts with.
const DEMO_PLAN: &str = "# Plan\n\nThis is cryo's demo chamber. Every ten seconds, check in: send the operator a\n\
short status and schedule the next check-in. Answer every message you receive.\n";

/// A private daemon that is stopped (and its folder removed) on drop.
struct DemoDaemon {
    child: Child,
    root: PathBuf,
}

impl Drop for DemoDaemon {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(8);
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

fn on_path(program: &str) -> bool {
    std::env::var("PATH").unwrap_or_default().split(':').any(|d| Path::new(d).join(program).is_file())
}

pub async fn run(_ctx: Ctx, agent: Option<String>) -> Result<()> {
    if let Some(a) = &agent
        && !on_path(a)
    {
        return Err(Failure::refused(format!("{a} is not on PATH: install it, or run the demo without --agent")));
    }
    sibling("cryo-agent")?;
    let root = std::env::temp_dir().join(format!("cryo-demo-{}", std::process::id()));
    std::fs::create_dir_all(&root)?;
    let socket = root.join("cryod.sock");
    // The demo's hub takes a free port, so it never clashes with a real cryod.
    std::fs::create_dir_all(root.join("config/cryo"))?;
    std::fs::write(root.join("config/cryo/cryod.toml"), "[hub]\nbind = \"127.0.0.1:0\"\n")?;
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
    let chamber = root.join("demo");
    std::fs::create_dir_all(&chamber)?;
    std::fs::write(chamber.join("plan.md"), DEMO_PLAN)?;
    std::fs::write(chamber.join("demo-agent.sh"), DEMO_AGENT)?;
    let agent_cmd = agent.clone().unwrap_or_else(|| "sh demo-agent.sh".into());
    let added = control
        .chamber_add(pb::ChamberAddRequest {
            dir: path_str(&chamber)?,
            name: "demo".into(),
            init: true,
            agent: agent_cmd.clone(),
            // The strongest this machine provides, as for any new chamber.
            sandbox: String::new(),
            start: true,
            ..Default::default()
        })
        .await?
        .into_inner();
    let ch = added.chamber.unwrap_or_default();
    let cryoctl = sibling("cryoctl")?;
    let hub = control.hub(pb::HubRequest {}).await?.into_inner();
    outln!("cryo demo: a private cryod is running (pid {}), with one chamber.", daemon.child.id());
    outln!("  chamber  {} in {}", ch.name, ch.path);
    outln!("  agent    {agent_cmd}");
    if let Some(init) = added.init.as_ref().filter(|i| !i.sandbox.is_empty()) {
        outln!("  sandbox  {}", init.sandbox);
    }
    if hub.up {
        outln!("  hub      {}#token={}   (open it in a browser)", hub.url, hub.token);
    }
    outln!();
    outln!("Try, in another terminal:");
    outln!("  export CRYO_SOCKET={}", socket.display());
    outln!("  {} chamber send demo \"hello there\"", cryoctl.display());
    outln!("  {} chamber messages demo --follow", cryoctl.display());
    outln!("  {} chamber status demo", cryoctl.display());
    outln!("  {} chamber log demo --follow", cryoctl.display());
    outln!();
    outln!("The conversation follows. Ctrl-C stops the demo and removes {}.", root.display());
    outln!();
    let r = pb::ChamberRef { by: Some(pb::chamber_ref::By::Name("demo".into())) };
    let req = pb::ChamberMessagesRequest { chamber: Some(r), follow: true, last: 0 };
    let mut stream = control.chamber_messages(req).await?.into_inner();
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            m = stream.message() => match m {
                Ok(Some(m)) => {
                    let who = if m.direction == "out" { format!("{} -> you", m.from) } else { format!("{} -> demo", m.from) };
                    let when = m.timestamp.get(11..19).unwrap_or("");
                    outln!("[{when}] {who}:");
                    for line in m.body.lines() {
                        outln!("    {line}");
                    }
                    use std::io::Write;
                    let _ = std::io::stdout().flush();
                }
                Ok(None) | Err(_) => break,
            },
        }
    }
    outln!("\nstopping the demo daemon and cleaning up");
    drop(daemon);
    Ok(())
}

fn path_str(p: &Path) -> Result<String> {
    p.to_str().map(str::to_string).ok_or_else(|| Failure::refused(format!("{} is not UTF-8", p.display())))
}
