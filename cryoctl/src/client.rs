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
    let path = socket.clone().unwrap_or_else(cryo_proto::socket_path);
    Ok(cryo_proto::control(&path, "cryoctl").await?)
}
