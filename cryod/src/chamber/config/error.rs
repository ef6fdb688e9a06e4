//! Why `cryo.toml` does not load, and where in it: the errors of a
//! chamber's config and the lines they name.

use std::path::{Path, PathBuf};

use crate::chamber::FileError;

/// Why `cryo.toml` does not load: one line naming the file (and, for a
/// bad setting, its line and key).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The chamber's folder is gone.
    #[error(
        "the chamber folder {} is missing (moved or deleted?): put it back, or `cryoctl chamber remove` it",
        .0.display()
    )]
    FolderMissing(PathBuf),
    /// Something else stands where the chamber's folder was.
    #[error("{} is not a folder any more (a file or a link took its place)", .0.display())]
    FolderReplaced(PathBuf),
    /// The file could not be read (an I/O error).
    #[error("cannot read {0}")]
    Unreadable(FileError),
    /// The file is not one cryod reads (a link, a FIFO, too large), or the
    /// folder could not be opened.
    #[error("{0}")]
    File(FileError),
    /// The file is not text.
    #[error("{}: not UTF-8 text", .0.display())]
    NotUtf8(PathBuf),
    /// The file is not TOML, or has a key or a type it should not (the
    /// line names the file, line and key).
    #[error("{0}")]
    Toml(String),
    /// A key file of `[provider] env` cannot be used as one (missing, not a
    /// plain file, readable by others, too large, not text).
    #[error("[provider].env.{key}: {}: {why}", .path.display())]
    KeyFile {
        /// The variable it is for.
        key: String,
        path: PathBuf,
        why: String,
    },
    /// A setting's value is wrong: where it is, and why.
    #[error("{at}: {message}")]
    Invalid {
        /// `FILE:LINE`, or the file alone when the key is not found.
        at: String,
        /// What is wrong, naming the key (`key \`timezone\`: …`).
        message: String,
    },
}

/// The text of a `cryo.toml` and its path: where a key stands, for errors.
pub(super) struct Lines<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
}

impl Lines<'_> {
    /// `FILE:LINE` of the first line setting `key` (or opening its table),
    /// or the file alone.
    pub(super) fn at(&self, key: &str) -> String {
        self.text
            .lines()
            .position(|l| {
                let l = l.trim_start();
                l.starts_with(key) || l.trim_start_matches('[').starts_with(key.trim_start_matches('['))
            })
            .map(|i| format!("{}:{}", self.path.display(), i + 1))
            .unwrap_or_else(|| self.path.display().to_string())
    }

    /// `key`'s value is wrong, as `message` says.
    pub(super) fn invalid(&self, key: &str, message: String) -> ConfigError {
        ConfigError::Invalid { at: self.at(key), message }
    }

    /// The file does not parse as `T`.
    pub(super) fn toml<T: serde::de::DeserializeOwned>(&self) -> Result<T, ConfigError> {
        toml::from_str(self.text)
            .map_err(|e| ConfigError::Toml(crate::config::one_line_toml_error(self.path, self.text, &e)))
    }

    /// `table` (this file, parsed) as `T`, without lexing the text again (a
    /// start reads every chamber's file: a second parse was a tenth of a
    /// start). A table that is not a `T` is parsed again from the text, only
    /// to say where. (`T` must hold no `toml::Spanned`: a table has no spans.)
    pub(super) fn toml_of_table<T: serde::de::DeserializeOwned>(&self, table: &toml::Table) -> Result<T, ConfigError> {
        toml::Value::Table(table.clone()).try_into::<T>().map_err(|converted| {
            self.toml::<T>().err().unwrap_or_else(|| {
                ConfigError::Toml(format!("{}: {}", self.path.display(), converted.to_string().trim()))
            })
        })
    }
}

/// Why a path in `cryo.toml` names no file.
#[derive(Debug, thiserror::Error)]
pub(super) enum PathError {
    #[error("an empty file name")]
    Empty,
    #[error("`~` needs HOME, which is not set")]
    NoHome,
}
