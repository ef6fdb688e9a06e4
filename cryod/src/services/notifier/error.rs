//! Why a notice was not delivered, or a device not subscribed: one kind
//! per cause, so a caller decides by kind (a person's mistake, a name not
//! found, cryod's own fault) and prints the one line `Display` gives.

use std::path::PathBuf;

/// What `reqwest::Url::parse` refuses (the `url` crate's error, named
/// through reqwest).
pub type UrlError = <reqwest::Url as std::str::FromStr>::Err;

/// A notifier's failure, or a Web Push subscription refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `notify test` named a notifier `cryod.toml` does not have.
    #[error("no notifier named {0:?} in cryod.toml")]
    NoNotifier(String),
    /// `notify test` with no notifier in `cryod.toml` at all.
    #[error("no [[notify]] in cryod.toml")]
    NoNotifiers,
    /// The notifier's table is incomplete (checked at start; seen again here).
    #[error(transparent)]
    Config(#[from] crate::config::NotifyConfigError),
    /// The HTTP request did not get an answer (the URL left out).
    #[error("{0}")]
    Http(reqwest::Error),
    /// The answer was not a success.
    #[error("HTTP {0}")]
    Status(u16),
    /// The event could not be written as JSON.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A secret file (`secret_file`, `token_file`, `credentials_file`)
    /// could not be read, or is readable by others.
    #[error("{0}")]
    Secret(cryo_sync::creds::CredentialsError),
    /// The command exited other than 0 (its own words), or did not run.
    #[error("{0}")]
    Command(String),
    /// An address in `from` is not one.
    #[error("`from`: {0}")]
    From(lettre::address::AddressError),
    /// An address in `to` is not one.
    #[error("`to` {to:?}: {error}")]
    To { to: String, error: lettre::address::AddressError },
    /// The message could not be built.
    #[error("{0}")]
    Message(#[from] lettre::error::Error),
    /// The SMTP server could not be reached, or refused the message.
    #[error("{0}")]
    Smtp(#[from] lettre::transport::smtp::Error),
    /// `webpush` with no device subscribed.
    #[error("no device is subscribed (the hub's \"notify this device\")")]
    NoDevice,
    /// Every device's push service refused (or was not reached): one
    /// `name: why` for each.
    #[error("{}", .0.join("; "))]
    Devices(Vec<String>),
    /// A subscription the hub was given is not one cryod sends to.
    #[error("{0}")]
    Subscription(Refused),
    /// A push's endpoint is not a URL.
    #[error("the endpoint: {0}")]
    Endpoint(UrlError),
    /// Encrypting or signing a push failed (a malformed key, no randomness).
    #[error("{0}")]
    Crypto(&'static str),
    /// The VAPID key in the state folder is not a P-256 key.
    #[error("{}: not a P-256 key: {error}", .path.display())]
    Key { path: PathBuf, error: ring::error::KeyRejected },
    /// A file in the state folder (the VAPID key, the subscriptions) could
    /// not be read or written.
    #[error("{}: {error}", .path.display())]
    Io { path: PathBuf, error: std::io::Error },
}

/// Why a page's push subscription is refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// `endpoint` is not a URL.
    #[error("`endpoint`: {0}")]
    Endpoint(UrlError),
    /// `endpoint` is neither https nor on this machine.
    #[error("`endpoint` must be an https URL")]
    NotHttps,
    /// The keys are not a P-256 key and a 16-byte secret.
    #[error("`keys`: p256dh must be a 65-byte P-256 key and auth 16 bytes, base64url")]
    Keys,
    /// The device's name is too long.
    #[error("`name` is over 100 characters")]
    Name,
}

impl Error {
    /// `Io` for `path`.
    pub(super) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |error| Error::Io { path: path.to_path_buf(), error }
    }
}

impl From<Error> for crate::error::Error {
    /// A notifier that is not there is not found, a subscription refused is
    /// the request's fault; anything else is cryod's (or its state folder's).
    fn from(e: Error) -> Self {
        match e {
            Error::NoNotifier(_) | Error::NoNotifiers => crate::error::Error::NotFound(e.to_string()),
            Error::Subscription(_) => crate::error::Error::Invalid(e.to_string()),
            e => crate::error::Error::Internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The caller decides by kind; the line stays the one users saw.
    #[test]
    fn each_kind_has_its_status_and_its_line() {
        let e: crate::error::Error = Error::NoNotifier("pager".into()).into();
        assert!(matches!(&e, crate::error::Error::NotFound(m) if m == "no notifier named \"pager\" in cryod.toml"));
        let e: crate::error::Error = Error::Subscription(Refused::NotHttps).into();
        assert!(matches!(&e, crate::error::Error::Invalid(m) if m == "`endpoint` must be an https URL"));
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e: crate::error::Error = Error::io(std::path::Path::new("/s/vapid.pk8"))(io).into();
        assert!(matches!(&e, crate::error::Error::Internal(m) if m == "/s/vapid.pk8: denied"));
        assert_eq!(
            Error::Devices(vec!["a: HTTP 500".into(), "b: HTTP 502".into()]).to_string(),
            "a: HTTP 500; b: HTTP 502"
        );
    }
}
