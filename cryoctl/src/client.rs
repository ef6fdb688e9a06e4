//! Reaching cryod: connect, say Hello, and turn every failure into one line
//! with the exit code that classifies it.

use std::path::PathBuf;
use std::process::ExitCode;

use cryo_proto::exit;

/// A failure to report: one line and an exit code.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    pub fn refused(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), code: exit::REFUSED }
    }

    pub fn exit(self) -> ExitCode {
        eprintln!("cryoctl: {}", cryo_proto::escape_controls(&self.message));
        ExitCode::from(self.code)
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Failure {
        let (code, message) = exit::for_status(&s);
        Failure { message, code }
    }
}

impl From<cryo_proto::ConnectError> for Failure {
    fn from(e: cryo_proto::ConnectError) -> Failure {
        Failure { message: e.to_string(), code: exit::UNREACHABLE }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::refused(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Failure>;

impl From<cryo_proto::ControlError> for Failure {
    fn from(e: cryo_proto::ControlError) -> Failure {
        match e {
            cryo_proto::ControlError::Connect(e) => e.into(),
            cryo_proto::ControlError::Refused(s) => s.into(),
        }
    }
}

/// A connected Control client (with the operator key) that has said Hello.
pub async fn control(socket: &Option<PathBuf>) -> Result<cryo_proto::Control> {
    Ok(beside_hello(socket, |_| std::future::ready(Ok(()))).await?.0)
}

/// [`control`], with the command's first calls (`first`, given a clone of
/// the client) sent beside the `Hello` rather than after its answer: one
/// round trip to cryod the less, each of which is a wake-up of cryod and of
/// cryoctl that a loaded machine may make wait. What `first` asks must only
/// read: a `Hello` that fails (another protocol) is the failure, whatever
/// `first` got, as if `first` had never been sent.
pub async fn beside_hello<T, F, Fut>(socket: &Option<PathBuf>, first: F) -> Result<(cryo_proto::Control, T)>
where
    F: FnOnce(cryo_proto::Control) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let c = connect(socket).await?;
    let mut said = c.clone();
    let hello = async move {
        let reply = said.hello(cryo_proto::hello_request("cryoctl")).await?.into_inner();
        cryo_proto::hello_reply(reply, "cryoctl")
    };
    let (hello, got) = tokio::join!(hello, first(c.clone()));
    hello?;
    Ok((c, got?))
}

/// A Control client with the operator key, on a connection that has said
/// nothing yet.
async fn connect(socket: &Option<PathBuf>) -> Result<cryo_proto::Control> {
    let path = socket.clone().unwrap_or_else(cryo_proto::socket_path);
    // A cryod that holds its lock but has no socket yet is starting (`cryoctl
    // daemon run &` and the next command at once): wait for it a little.
    let now = std::time::Instant::now();
    let (deadline, grace) = (now + STARTING, now + NOT_YET);
    loop {
        match cryo_proto::control_unchecked(&path).await {
            // Within the grace, even with no sign of a cryod: a shell's
            // `cryoctl daemon run &` may not have exec'd yet when the next
            // command looks (seen on a loaded machine).
            Err(cryo_proto::ConnectError::NoSocket(_))
                if std::time::Instant::now() < grace || (std::time::Instant::now() < deadline && starting(socket)) =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            r => return Ok(r?),
        }
    }
}

/// How long a client waits for a starting cryod's socket.
const STARTING: std::time::Duration = std::time::Duration::from_secs(15);
/// How long a client looks for a cryod that shows no sign of starting yet,
/// before it says none runs.
const NOT_YET: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the cryod these paths are for is starting: it holds its
/// instance lock (we cannot take it), or a process of ours is that cryod
/// before it took it (`cryod`, or `cryoctl daemon run` about to become it,
/// whose environment names the same state folder).
fn starting(socket: &Option<PathBuf>) -> bool {
    let lock = cryo_proto::paths::Paths::from_env(socket.clone()).lock_file();
    if let Ok(f) = std::fs::OpenOptions::new().read(true).write(true).open(&lock)
        && matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock))
    {
        return true;
    }
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::getuid().as_raw();
    let ours = |e: &std::fs::DirEntry| {
        e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            && e.metadata().is_ok_and(|m| m.uid() == me)
    };
    let daemon = |p: &std::path::Path| {
        let cmdline = std::fs::read(p.join("cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let name = args.first().and_then(|a| a.rsplit(|b| *b == b'/').next()).unwrap_or_default();
        name == b"cryod" || (name == b"cryoctl" && args.windows(2).any(|w| w == [&b"daemon"[..], &b"run"[..]]))
    };
    let same_lock = |p: &std::path::Path| {
        let environ = std::fs::read(p.join("environ")).unwrap_or_default();
        let vars: Vec<(&[u8], &[u8])> = environ
            .split(|b| *b == 0)
            .filter_map(|kv| kv.iter().position(|b| *b == b'=').map(|i| (&kv[..i], &kv[i + 1..])))
            .collect();
        let var = |k: &str| {
            use std::os::unix::ffi::OsStrExt;
            vars.iter().find(|(n, _)| *n == k.as_bytes()).map(|(_, v)| std::ffi::OsStr::from_bytes(v).to_os_string())
        };
        cryo_proto::paths::Paths::from_env_with(None, var).lock_file() == lock
    };
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(ours)
        .any(|e| daemon(&e.path()) && same_lock(&e.path()))
}
