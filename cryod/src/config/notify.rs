//! `[[notify]]`: one notifier's table, and what a person must fix in it
//! ([`NotifyConfigError`], one line each).

use serde::Deserialize;

/// `[[notify]]`: one notifier. `kind` says how it delivers; `events` and
/// `chambers` (default: all) say what it hears of.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NotifierConfig {
    /// Shown in `cryoctl notify log` and named by `notify test NAME`
    /// (default: the kind and its place in the list).
    pub name: Option<String>,
    /// `webhook`, `ntfy` or `command`.
    pub kind: String,
    #[serde(default)]
    pub events: Vec<String>,
    #[serde(default)]
    pub chambers: Vec<String>,
    /// `webhook`: where the JSON goes; `ntfy`: the topic's URL.
    pub url: Option<String>,
    /// `webhook`: the HMAC-SHA256 key (a 0600 file).
    pub secret_file: Option<String>,
    /// `ntfy`: a bearer token (a 0600 file).
    pub token_file: Option<String>,
    /// `command`: run with `sh -c`, the event in its environment and as
    /// JSON on its standard input.
    pub command: Option<String>,
    /// `email`: the SMTP server, `host:port` (587 with STARTTLS, 465 with TLS).
    pub smtp: Option<String>,
    /// `email`: `starttls` (default), `tls`, or `none` (a server on this
    /// machine only).
    pub tls: Option<String>,
    /// `email`: the sender and the recipients.
    pub from: Option<String>,
    #[serde(default)]
    pub to: Vec<String>,
    /// `email`: `user` and `password` on two lines (a 0600 file); none: no
    /// login.
    pub credentials_file: Option<String>,
    /// `webpush`: who runs this cryod, for push services (VAPID's `sub`,
    /// `mailto:` or `https:`; default `mailto:cryo@localhost`).
    pub contact: Option<String>,
    /// `"22:00-07:00"` in the system's zone: all but `question` and
    /// `daemon` wait until it ends.
    pub quiet_hours: Option<String>,
    /// Notices per chamber per hour (default 20); more are dropped, and
    /// `notify log` says so.
    pub max_per_hour: Option<u32>,
    /// Attempts after the first, with back-off from `retry_seconds`
    /// (default 5 and 2: 2, 4, 8, 16, 32 s).
    pub retries: Option<u32>,
    pub retry_seconds: Option<u64>,
}

impl NotifierConfig {
    pub const KINDS: &'static [&'static str] = &["webhook", "ntfy", "command", "email", "webpush"];

    pub fn name(&self, index: usize) -> String {
        self.name.clone().unwrap_or_else(|| format!("{}-{}", self.kind, index + 1))
    }

    /// `email`: the SMTP server's host (without brackets) and port.
    pub fn smtp_addr(&self) -> Result<(&str, u16), NotifyConfigError> {
        let smtp = self.smtp.as_deref().ok_or(NotifyConfigError::NoSmtp)?;
        let bad = || NotifyConfigError::Smtp(smtp.to_string());
        let (host, port) = smtp.rsplit_once(':').ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match port.parse::<u16>() {
            Ok(port) if !host.is_empty() => Ok((host, port)),
            _ => Err(bad()),
        }
    }

    /// What only a person can fix, in one line.
    pub fn check(&self) -> Result<(), NotifyConfigError> {
        if !Self::KINDS.contains(&self.kind.as_str()) {
            return Err(NotifyConfigError::Kind(self.kind.clone()));
        }
        if let Some(bad) = self.events.iter().find(|e| !cryo_core::chamber::notice::KINDS.contains(&e.as_str())) {
            return Err(NotifyConfigError::Event(bad.clone()));
        }
        match self.kind.as_str() {
            "webhook" => {
                self.check_url("webhook")?;
                if self.secret_file.is_none() {
                    return Err(NotifyConfigError::NoSecretFile);
                }
            }
            "ntfy" => self.check_url("ntfy notifier")?,
            "email" => self.check_email()?,
            "webpush" => {
                if let Some(c) = &self.contact
                    && !(c.starts_with("mailto:") || c.starts_with("https://"))
                {
                    return Err(NotifyConfigError::Contact(c.clone()));
                }
            }
            _ => {
                if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    return Err(NotifyConfigError::NoCommand);
                }
            }
        }
        if let Some(q) = &self.quiet_hours {
            parse_quiet_hours(q).ok_or_else(|| NotifyConfigError::QuietHours(q.clone()))?;
        }
        if self.max_per_hour == Some(0) {
            return Err(NotifyConfigError::NoneAnHour);
        }
        Ok(())
    }

    /// `url`, which a `what` needs, is http(s).
    fn check_url(&self, what: &'static str) -> Result<(), NotifyConfigError> {
        match self.url.as_deref() {
            Some(u) if u.starts_with("http://") || u.starts_with("https://") => Ok(()),
            Some(u) => Err(NotifyConfigError::Url(u.to_string())),
            None => Err(NotifyConfigError::NoUrl(what)),
        }
    }

    /// `smtp`, `tls`, `from` and `to` of an email notifier.
    fn check_email(&self) -> Result<(), NotifyConfigError> {
        let (host, _) = self.smtp_addr()?;
        match self.tls.as_deref().unwrap_or("starttls") {
            "starttls" | "tls" => {}
            "none" if matches!(host, "127.0.0.1" | "localhost" | "::1") => {}
            "none" => return Err(NotifyConfigError::PlainRemote),
            other => return Err(NotifyConfigError::Tls(other.to_string())),
        }
        let from = self.from.as_deref().ok_or(NotifyConfigError::NoFrom)?;
        if !from.contains('@') || self.to.is_empty() || self.to.iter().any(|t| !t.contains('@')) {
            return Err(NotifyConfigError::Addresses);
        }
        Ok(())
    }
}

/// What is wrong with one `[[notify]]` table: one line a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum NotifyConfigError {
    /// `kind` is not one cryod knows.
    #[error("`kind`: {0:?} is none of {kinds}", kinds = NotifierConfig::KINDS.join(", "))]
    Kind(String),
    /// `events` names one that is not an event.
    #[error("`events`: {0:?} is not an event (use {kinds})", kinds = cryo_core::chamber::notice::KINDS.join(", "))]
    Event(String),
    /// `url` is not http(s).
    #[error("`url`: {0:?} is not an http(s) URL")]
    Url(String),
    /// A webhook or ntfy notifier without `url`.
    #[error("a {0} needs `url`")]
    NoUrl(&'static str),
    /// A webhook without its key.
    #[error("a webhook needs `secret_file` (its HMAC-SHA256 key, mode 0600)")]
    NoSecretFile,
    /// An email notifier without `smtp`.
    #[error("an email notifier needs `smtp` (host:port)")]
    NoSmtp,
    /// `smtp` is not `host:port`.
    #[error("`smtp`: {0:?} is not host:port")]
    Smtp(String),
    /// `tls = "none"` to a server elsewhere.
    #[error("`tls = \"none\"` is for a server on this machine only")]
    PlainRemote,
    /// `tls` is not one cryod knows.
    #[error("`tls`: {0:?} is none of starttls, tls, none")]
    Tls(String),
    /// An email notifier without `from`.
    #[error("an email notifier needs `from`")]
    NoFrom,
    /// `from` or `to` is not an address, or `to` is empty.
    #[error("an email notifier needs `from` and `to` (a list) as addresses")]
    Addresses,
    /// `contact` is neither mailto: nor https:.
    #[error("`contact`: {0:?} is neither a mailto: nor an https: URL")]
    Contact(String),
    /// A command notifier without `command`.
    #[error("a command notifier needs `command`")]
    NoCommand,
    /// `quiet_hours` is not `HH:MM-HH:MM`.
    #[error("`quiet_hours`: {0:?} is not like \"22:00-07:00\"")]
    QuietHours(String),
    /// `max_per_hour = 0`.
    #[error("`max_per_hour`: 0 would drop every notice")]
    NoneAnHour,
}

/// `"22:00-07:00"`: the start and end of quiet hours (wall clock).
pub fn parse_quiet_hours(s: &str) -> Option<(chrono::NaiveTime, chrono::NaiveTime)> {
    let (a, b) = s.split_once('-')?;
    let t = |x: &str| chrono::NaiveTime::parse_from_str(x.trim(), "%H:%M").ok();
    Some((t(a)?, t(b)?))
}
