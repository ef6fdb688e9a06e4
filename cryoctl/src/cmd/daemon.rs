//! `cryoctl daemon install|uninstall|status|restart`: one service runs one
//! cryod for every chamber. On Linux, a systemd user unit managed through
//! systemd's D-Bus API; on macOS, a LaunchAgent managed with `launchctl`.
//! Uninstalling removes only the service: chambers and their files stay.

use std::path::PathBuf;

use serde_json::json;

use crate::Ctx;
use crate::client::{Failure, Result};
use crate::output;

mod service;

/// `cryoctl daemon run`: becomes the `cryod` beside it (exec, same pid),
/// so cryoctl itself carries no daemon and starts as fast as `cryo-agent`.
pub fn run(ctx: Ctx, config: Option<PathBuf>, store: Option<String>, verbose: u8) -> std::process::ExitCode {
    use std::os::unix::process::CommandExt;
    let (cryod, mut cmd) = match cryod_command(&ctx, config, store, verbose) {
        Ok(c) => c,
        Err(e) => return e.exit(),
    };
    let error = cmd.exec();
    Failure::refused(format!("cannot run {}: {error}", cryod.display())).exit()
}

/// The cryod beside this cryoctl, with `daemon run`'s options.
fn cryod_command(
    ctx: &Ctx,
    config: Option<PathBuf>,
    store: Option<String>,
    verbose: u8,
) -> Result<(PathBuf, std::process::Command)> {
    let cryod = installed_cryod()?;
    let mut cmd = std::process::Command::new(&cryod);
    if let Some(s) = &ctx.socket {
        cmd.arg("--socket").arg(s);
    }
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    if let Some(s) = store {
        cmd.arg("--store").arg(s);
    }
    if verbose > 0 {
        cmd.arg(format!("-{}", "v".repeat(verbose.into())));
    }
    Ok((cryod, cmd))
}

/// How long `daemon run --detach` waits for cryod to answer.
const START_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Past this, a detached cryod's log is moved aside (to `cryod.log.1`,
/// replacing the one before) when cryod next starts: what `log_max_bytes`
/// is to a chamber's logs, by default.
const LOG_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// Moves a long `cryod.log` aside; a failure leaves it where it is.
fn rotate_log(path: &std::path::Path) {
    let long = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() > LOG_MAX_BYTES);
    if long {
        let _ = std::fs::rename(path, path.with_extension("log.1"));
    }
}

/// `cryoctl daemon run --detach`: cryod in the background (a process group
/// of its own, no terminal), its log appended to `STATE/cryod.log`;
/// returns once its socket answers, or with the log's last lines if it
/// ended instead.
pub async fn detach(ctx: Ctx, config: Option<PathBuf>, store: Option<String>, verbose: u8) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let paths = cryo_proto::paths::Paths::from_env(ctx.socket.clone());
    if let Ok((_, h)) = cryo_proto::control_hello(&paths.socket, "cryoctl").await {
        return Err(Failure::refused(format!(
            "cryod is already running (pid {}) on {}; `cryoctl daemon stop` ends it",
            h.pid,
            paths.socket.display()
        )));
    }
    let (_, mut cmd) = cryod_command(&ctx, config, store, verbose)?;
    std::fs::create_dir_all(&paths.state_dir)?;
    let log_path = paths.state_dir.join("cryod.log");
    rotate_log(&log_path);
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| Failure::refused(format!("cannot start cryod: {e}")))?;
    let since = std::time::Instant::now();
    loop {
        if let Ok((_, h)) = cryo_proto::control_hello(&paths.socket, "cryoctl").await {
            if ctx.json {
                output::json(&json!({ "result": "started", "pid": h.pid, "log": log_path.display().to_string() }));
            } else {
                outln!(
                    "cryod started (pid {}) on {}; its log: {}; `cryoctl daemon stop` ends it",
                    h.pid,
                    paths.socket.display(),
                    log_path.display()
                );
            }
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            let text = log_tail(&log_path);
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(Failure::refused(format!(
                "cryod ended at once ({status}): {} (log: {})",
                tail.join(" | "),
                log_path.display()
            )));
        }
        if since.elapsed() > START_WAIT {
            return Err(Failure::refused(format!(
                "cryod (pid {}) does not answer on {} after {} s: see {}",
                child.id(),
                paths.socket.display(),
                START_WAIT.as_secs(),
                log_path.display()
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn installed_cryod() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let p = exe.parent().map(|d| d.join("cryod")).filter(|p| p.is_file()).ok_or_else(|| {
        Failure::refused(
            "cryod is not next to cryoctl: install both binaries in the same folder (cargo install puts them there)",
        )
    })?;
    Ok(std::fs::canonicalize(&p).unwrap_or(p))
}

/// `$XDG_CONFIG_HOME`, else `~/.config`.
pub(crate) fn config_home() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".config"))
}

/// Whether user services of this user survive logout (logind's `Linger`),
/// read from logind's state folder.
fn linger() -> Option<bool> {
    let user = nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten()?;
    Some(std::path::Path::new("/var/lib/systemd/linger").join(&user.name).exists())
}

fn linger_advice() -> Option<String> {
    if !std::path::Path::new("/run/systemd/system").exists() {
        return None;
    }
    match linger() {
        Some(false) => {
            let user =
                nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.name).unwrap_or_default();
            Some(format!(
                "note: user services stop when you log out; `loginctl enable-linger {user}` keeps cryod running"
            ))
        }
        _ => None,
    }
}

#[cfg(target_os = "linux")]
mod systemd {
    //! systemd's Manager, Unit and Service interfaces, as we use them.

    use zbus::OwnedObjectPath;

    #[zbus::proxy(
        interface = "org.freedesktop.systemd1.Manager",
        default_service = "org.freedesktop.systemd1",
        default_path = "/org/freedesktop/systemd1"
    )]
    pub trait Manager {
        fn reload(&self) -> zbus::Result<()>;
        fn enable_unit_files(
            &self,
            files: &[&str],
            runtime: bool,
            force: bool,
        ) -> zbus::Result<(bool, Vec<(String, String, String)>)>;
        fn disable_unit_files(&self, files: &[&str], runtime: bool) -> zbus::Result<Vec<(String, String, String)>>;
        fn start_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
        fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
        fn restart_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
        fn get_unit_file_state(&self, file: &str) -> zbus::Result<String>;
        fn load_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    }

    #[zbus::proxy(interface = "org.freedesktop.systemd1.Unit", default_service = "org.freedesktop.systemd1")]
    pub trait Unit {
        #[zbus(property)]
        fn active_state(&self) -> zbus::Result<String>;
        #[zbus(property)]
        fn sub_state(&self) -> zbus::Result<String>;
    }

    #[zbus::proxy(interface = "org.freedesktop.systemd1.Service", default_service = "org.freedesktop.systemd1")]
    pub trait Service {
        #[zbus(property, name = "MainPID")]
        fn main_pid(&self) -> zbus::Result<u32>;
        #[zbus(property)]
        fn status_text(&self) -> zbus::Result<String>;
    }
}

#[cfg(target_os = "linux")]
const UNIT: &str = service::SYSTEMD_UNIT;

#[cfg(target_os = "linux")]
async fn manager() -> Result<(zbus::Connection, systemd::ManagerProxy<'static>)> {
    let conn = zbus::Connection::session().await.map_err(|e| {
        Failure::refused(format!(
            "no systemd user manager is reachable ({e}): run cryod in the foreground with `cryoctl daemon run`, \
             or log in with a systemd session (DBUS_SESSION_BUS_ADDRESS / $XDG_RUNTIME_DIR/bus)"
        ))
    })?;
    let m = systemd::ManagerProxy::new(&conn).await.map_err(dbus)?;
    Ok((conn, m))
}

#[cfg(target_os = "linux")]
fn dbus(e: zbus::Error) -> Failure {
    Failure::refused(format!("systemd refused: {e}"))
}

#[cfg(target_os = "linux")]
fn unit_path() -> PathBuf {
    config_home().join("systemd/user").join(UNIT)
}

#[cfg(target_os = "linux")]
pub async fn install(ctx: Ctx) -> Result<()> {
    let exe = installed_cryod()?;
    let text = service::render_systemd(&exe);
    let path = unit_path();
    let unchanged = std::fs::read_to_string(&path).is_ok_and(|t| t == text);
    let (conn, m) = manager().await?;
    let enabled = m.get_unit_file_state(UNIT).await.map(|s| s == "enabled").unwrap_or(false);
    let active = unit_state(&conn, &m).await.map(|s| s.active == "active").unwrap_or(false);
    if unchanged && enabled && active {
        report(&ctx, "unchanged", &path, "cryod.service is installed, enabled and running; nothing changed");
        return Ok(());
    }
    if !unchanged {
        std::fs::create_dir_all(path.parent().expect("unit folder"))?;
        cryo_files::write_file(&path, text.as_bytes(), cryo_files::NewFile::DURABLE).map_err(std::io::Error::from)?;
    }
    m.reload().await.map_err(dbus)?;
    m.enable_unit_files(&[UNIT], false, true).await.map_err(dbus)?;
    if active && !unchanged {
        m.restart_unit(UNIT, "replace").await.map_err(dbus)?;
    } else {
        m.start_unit(UNIT, "replace").await.map_err(dbus)?;
    }
    let what = if unchanged { "enabled and started" } else { "installed, enabled and started" };
    report(&ctx, what, &path, &format!("cryod.service {what} ({})", path.display()));
    extras(&ctx);
    if !ctx.json
        && let Some(a) = linger_advice()
    {
        outln!("{a}");
    }
    Ok(())
}

/// The man pages and completion scripts, written beside the service.
fn extras(ctx: &Ctx) {
    let line = crate::extras::install(<crate::Cli as clap::CommandFactory>::command());
    if !ctx.json {
        outln!("{line}");
    }
}

fn report(ctx: &Ctx, what: &str, path: &std::path::Path, line: &str) {
    if ctx.json {
        output::json(&json!({ "result": what, "unit": path.display().to_string(), "linger": linger() }));
    } else {
        outln!("{line}");
    }
}

#[cfg(target_os = "linux")]
pub async fn uninstall(ctx: Ctx) -> Result<()> {
    let path = unit_path();
    if !path.exists() {
        report(&ctx, "absent", &path, "cryod.service is not installed; nothing changed");
        return Ok(());
    }
    let (_conn, m) = manager().await?;
    let _ = m.stop_unit(UNIT, "replace").await;
    let _ = m.disable_unit_files(&[UNIT], false).await;
    std::fs::remove_file(&path)?;
    crate::extras::uninstall();
    m.reload().await.map_err(dbus)?;
    report(
        &ctx,
        "removed",
        &path,
        "cryod.service stopped, disabled and removed; chambers and their files are untouched",
    );
    Ok(())
}

#[cfg(target_os = "linux")]
struct UnitState {
    active: String,
    sub: String,
    pid: u32,
    status: String,
}

#[cfg(target_os = "linux")]
async fn unit_state(conn: &zbus::Connection, m: &systemd::ManagerProxy<'_>) -> Result<UnitState> {
    let obj = m.load_unit(UNIT).await.map_err(dbus)?;
    let unit = systemd::UnitProxy::builder(conn).path(obj.clone()).build().await.map_err(dbus)?;
    let service = systemd::ServiceProxy::builder(conn).path(obj).build().await.map_err(dbus)?;
    Ok(UnitState {
        active: unit.active_state().await.unwrap_or_default(),
        sub: unit.sub_state().await.unwrap_or_default(),
        pid: service.main_pid().await.unwrap_or(0),
        status: service.status_text().await.unwrap_or_default(),
    })
}

#[cfg(target_os = "linux")]
pub async fn status(ctx: Ctx) -> Result<()> {
    // cryod itself, however it runs (the service, `cryoctl daemon run`, by hand).
    let socket = ctx.socket.clone().unwrap_or_else(cryo_proto::socket_path);
    let running = cryo_proto::control_hello(&socket, "cryoctl").await.map(|(_, h)| h);
    let path = unit_path();
    let installed = path.exists();
    let service = match manager().await {
        Ok((conn, m)) => {
            let enabled = m.get_unit_file_state(UNIT).await.unwrap_or_else(|_| "not-found".into());
            unit_state(&conn, &m).await.map(|st| (enabled, st))
        }
        Err(e) => Err(e),
    };
    if let (Err(why), Err(service)) = (&running, &service) {
        // `why` says "cryod is not running (…)" itself, with how to start it.
        return Err(Failure::refused(format!("{why}; the service: {}", service.message)));
    }
    let daemon = running.as_ref().ok();
    if ctx.json {
        let (enabled, st) = service.as_ref().ok().map(|(e, s)| (Some(e.clone()), Some(s))).unwrap_or((None, None));
        output::json(&json!({
            "running": daemon.is_some(),
            "pid": daemon.map(|h| h.pid),
            "version": daemon.map(|h| h.version.clone()),
            "socket": socket.display().to_string(),
            "installed": installed,
            "unit": path.display().to_string(),
            "enabled": enabled,
            "active": st.map(|s| s.active.clone()),
            "sub_state": st.map(|s| s.sub.clone()),
            "main_pid": st.map(|s| s.pid),
            "status": st.map(|s| s.status.clone()),
            "linger": linger(),
        }));
        return Ok(());
    }
    match (daemon, &service) {
        (Some(h), Ok((_, st))) if st.pid == h.pid => {
            outln!("cryod       running as the service (pid {}, {})", h.pid, h.version)
        }
        (Some(h), _) => outln!("cryod       running (pid {}, {}), not as the service", h.pid, h.version),
        (None, _) => outln!("cryod       not running (no answer on {})", socket.display()),
    }
    outln!("unit        {} ({})", path.display(), if installed { "installed" } else { "not installed" });
    match &service {
        Ok((enabled, st)) => {
            outln!("enabled     {enabled}");
            outln!("active      {} ({})", st.active, st.sub);
            if st.pid != 0 {
                outln!("main pid    {}", st.pid);
            }
            if !st.status.is_empty() {
                outln!("status      {}", st.status);
            }
        }
        Err(e) => outln!("service     unknown: {}", e.message),
    }
    if let Some(a) = linger_advice() {
        outln!("{a}");
    }
    Ok(())
}

#[cfg(target_os = "linux")]
pub async fn restart(ctx: Ctx) -> Result<()> {
    let (_conn, m) = manager().await?;
    m.restart_unit(UNIT, "replace").await.map_err(dbus)?;
    report(&ctx, "restarted", &unit_path(), "cryod.service restarted");
    Ok(())
}

#[cfg(target_os = "macos")]
mod launchd {
    //! The same verbs with `launchctl bootstrap/bootout/kickstart`.

    use super::*;

    fn plist_path() -> PathBuf {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join("Library/LaunchAgents")
            .join(format!("{}.plist", service::LAUNCHD_LABEL))
    }

    fn domain() -> String {
        format!("gui/{}", nix::unistd::getuid())
    }

    fn launchctl(args: &[&str]) -> Result<String> {
        let out = std::process::Command::new("launchctl").args(args).output()?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(Failure::refused(format!(
                "launchctl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }

    pub async fn install(ctx: Ctx) -> Result<()> {
        let exe = installed_cryod()?;
        let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
        let logs = home.join("Library/Logs/cryo");
        std::fs::create_dir_all(&logs)?;
        let text = service::render_launchd(&exe, &logs);
        let path = plist_path();
        if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
            report(&ctx, "unchanged", &path, "the LaunchAgent is installed; nothing changed");
            return Ok(());
        }
        std::fs::create_dir_all(path.parent().expect("LaunchAgents"))?;
        let _ = launchctl(&["bootout", &format!("{}/{}", domain(), service::LAUNCHD_LABEL)]);
        cryo_files::write_file(&path, text.as_bytes(), cryo_files::NewFile::DURABLE).map_err(std::io::Error::from)?;
        launchctl(&["bootstrap", &domain(), &path.to_string_lossy()])?;
        report(&ctx, "installed", &path, &format!("LaunchAgent installed and loaded ({})", path.display()));
        extras(&ctx);
        Ok(())
    }

    pub async fn uninstall(ctx: Ctx) -> Result<()> {
        let path = plist_path();
        let _ = launchctl(&["bootout", &format!("{}/{}", domain(), service::LAUNCHD_LABEL)]);
        let _ = std::fs::remove_file(&path);
        crate::extras::uninstall();
        report(&ctx, "removed", &path, "LaunchAgent unloaded and removed; chambers and their files are untouched");
        Ok(())
    }

    pub async fn status(ctx: Ctx) -> Result<()> {
        let path = plist_path();
        let out = launchctl(&["print", &format!("{}/{}", domain(), service::LAUNCHD_LABEL)]).unwrap_or_default();
        if ctx.json {
            output::json(
                &json!({ "installed": path.exists(), "plist": path.display().to_string(), "loaded": !out.is_empty() }),
            );
        } else {
            outln!("plist   {} ({})", path.display(), if path.exists() { "installed" } else { "not installed" });
            outln!("loaded  {}", !out.is_empty());
        }
        Ok(())
    }

    pub async fn restart(ctx: Ctx) -> Result<()> {
        launchctl(&["kickstart", "-k", &format!("{}/{}", domain(), service::LAUNCHD_LABEL)])?;
        report(&ctx, "restarted", &plist_path(), "cryod restarted");
        Ok(())
    }
}

#[cfg(target_os = "macos")]
pub use launchd::{install, restart, status, uninstall};

/// How long `daemon stop` waits for cryod to end: its sessions' grace
/// (`stop_grace_seconds`, 10 s by default) and room for the rest.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `cryoctl daemon stop`: ends cryod however it runs. The service is
/// stopped through its manager (so it stays stopped); a cryod started by
/// hand (`daemon run`, `cryod`) gets SIGTERM. Either way cryod ends its
/// sessions as a stop does (their work runs again at its next start), and
/// this returns once it has gone.
pub async fn stop(ctx: Ctx) -> Result<()> {
    let socket = ctx.socket.clone().unwrap_or_else(cryo_proto::socket_path);
    let Ok((_, hello)) = cryo_proto::control_hello(&socket, "cryoctl").await else {
        if ctx.json {
            output::json(&json!({ "result": "not running", "socket": socket.display().to_string() }));
        } else {
            outln!("cryod is not running (no answer on {}); nothing to stop", socket.display());
        }
        return Ok(());
    };
    let pid = nix::unistd::Pid::from_raw(hello.pid as i32);
    let how = match stop_service(hello.pid).await {
        Some(how) => how,
        None => {
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).map_err(|e| {
                Failure::refused(format!("cannot signal cryod (pid {pid}): {e}; is it another user's?"))
            })?;
            "SIGTERM"
        }
    };
    let since = std::time::Instant::now();
    while nix::sys::signal::kill(pid, None).is_ok() && !zombie(pid) {
        if since.elapsed() > STOP_WAIT {
            return Err(Failure::refused(format!(
                "cryod (pid {pid}) is still running {} s after {how}: see its log, or end it with `kill -KILL {pid}`",
                STOP_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    if ctx.json {
        output::json(&json!({ "result": "stopped", "pid": hello.pid, "by": how }));
    } else {
        outln!(
            "stopped cryod (pid {pid}, by {how}) in {:.1} s; sessions it ended run again at its next start",
            since.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The last 8 KiB of cryod's log (it is appended to across starts).
fn log_tail(path: &std::path::Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(8192)));
    let mut bytes = Vec::new();
    let _ = f.take(8192).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Whether `pid` has ended but is not yet reaped (a zombie of its parent).
fn zombie(pid: nix::unistd::Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit_once(") ").is_none_or(|(_, r)| r.starts_with('Z')))
        .unwrap_or(false)
}

/// Stops the service if `pid` is its main process; how, or `None` when
/// cryod does not run as the service (or no manager answers).
#[cfg(target_os = "linux")]
async fn stop_service(pid: u32) -> Option<&'static str> {
    let (conn, m) = manager().await.ok()?;
    let st = unit_state(&conn, &m).await.ok()?;
    if st.pid != pid {
        return None;
    }
    m.stop_unit(UNIT, "replace").await.ok()?;
    Some("stopping cryod.service")
}

#[cfg(target_os = "macos")]
async fn stop_service(_pid: u32) -> Option<&'static str> {
    // launchd's KeepAlive would start it again: `daemon uninstall` stops it.
    None
}
