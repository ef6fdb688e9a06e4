//! The commonest reads, `chamber status [NAME]` and `chamber list`, taken
//! from the command line by hand, before clap builds its command tree
//! (every command group with its help, at each start: the largest part of
//! cryoctl's own start-up work). Only a command line that clap reads the
//! same way is taken here; anything else (help, `--version`, `--watch`, an
//! unknown or repeated flag, `--`, a value clap would refuse, words that
//! are not UTF-8) is left to clap, which parses, or says what is wrong,
//! exactly as before. The tests hold the two readings together.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::cmd::chamber::ChamberCmd;

/// A command line read here: the global options and the verb.
pub struct Quick {
    pub socket: Option<PathBuf>,
    pub json: bool,
    pub cmd: ChamberCmd,
}

/// Reads `args` (the program's name left out); `env` is the value of
/// `CRYO_SOCKET` (`--socket`'s default). `None`: clap's to read.
pub fn parse(args: &[OsString], env: Option<OsString>) -> Option<Quick> {
    let (mut socket, mut json, mut archived) = (None, false, false);
    // The subcommands' names, then the chamber's.
    let mut words: Vec<&str> = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let arg = arg.to_str()?;
        if let Some(v) = arg.strip_prefix("--socket=") {
            if socket.is_some() {
                return None;
            }
            socket = Some(value(v)?);
            continue;
        }
        match arg {
            // Global: before, between or after the subcommands; once.
            "--json" if !json => json = true,
            "--socket" if socket.is_none() => socket = Some(value(args.next()?.to_str()?)?),
            // `chamber list`'s own flag, after its name.
            "--archived" if !archived && matches!(words[..], ["chamber", "list" | "ls"]) => archived = true,
            a if a.starts_with('-') => return None,
            a => words.push(a),
        }
    }
    let cmd = match words[..] {
        ["chamber", "status"] => ChamberCmd::Status { chamber: None, watch: false },
        ["chamber", "status", name] => ChamberCmd::Status { chamber: Some(name.to_string()), watch: false },
        ["chamber", "list" | "ls"] => ChamberCmd::List { archived },
        _ => return None,
    };
    let socket = match (socket, env) {
        (Some(s), _) => Some(s),
        // clap refuses an empty path, from the environment too.
        (None, Some(e)) if e.is_empty() => return None,
        (None, e) => e.map(PathBuf::from),
    };
    Some(Quick { socket, json, cmd })
}

/// `--socket`'s value, as clap takes it: not empty, and not a flag.
fn value(v: &str) -> Option<PathBuf> {
    (!v.is_empty() && !v.starts_with('-')).then(|| PathBuf::from(v))
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;
    use crate::{Cli, Command};

    /// What a reading says, in a form both readings give.
    type Said = (Option<PathBuf>, bool, &'static str, Option<String>, bool);

    fn said(socket: Option<PathBuf>, json: bool, cmd: ChamberCmd) -> Said {
        match cmd {
            ChamberCmd::Status { chamber, watch } => (socket, json, "status", chamber, watch),
            ChamberCmd::List { archived } => (socket, json, "list", None, archived),
            _ => (socket, json, "other", None, false),
        }
    }

    fn quick(line: &str, env: Option<&str>) -> Option<Said> {
        let args: Vec<OsString> = line.split_whitespace().map(OsString::from).collect();
        parse(&args, env.map(OsString::from)).map(|q| said(q.socket, q.json, q.cmd))
    }

    /// clap's reading, as this process's environment gives it (the test
    /// passes the same `CRYO_SOCKET` to `parse`).
    fn clap(line: &str) -> Result<Said, String> {
        let cli = Cli::try_parse_from(std::iter::once("cryoctl").chain(line.split_whitespace()))
            .map_err(|e| e.kind().to_string())?;
        match cli.command {
            Command::Chamber(c) => Ok(said(cli.socket, cli.json, c)),
            _ => Ok((cli.socket, cli.json, "another command", None, false)),
        }
    }

    const TAKEN: &[&str] = &[
        "chamber status",
        "chamber status b00000",
        "chamber status b00000 --json",
        "--json chamber status b00000",
        "chamber --json status b00000",
        "chamber status --json b00000",
        "chamber status ./b00000",
        "chamber status help",
        "chamber status list",
        "chamber status chamber",
        "--socket /s chamber status x",
        "--socket=/s chamber status x",
        "chamber status x --socket /s --json",
        "chamber --socket=/s status",
        "--socket chamber chamber status x",
        "chamber list",
        "chamber ls",
        "chamber list --json",
        "chamber list --archived",
        "chamber list --archived --json",
        "--json chamber ls --archived",
        "chamber list --socket /s --archived",
    ];

    const LEFT: &[&str] = &[
        "",
        "chamber",
        "status",
        "chamber status a b",
        "chamber status --watch a",
        "chamber status a --watch",
        "chamber status -h",
        "chamber status --help",
        "chamber status --version",
        "chamber status -V",
        "--version",
        "chamber status --json --json a",
        "chamber status --json=true a",
        "chamber status --socket",
        "chamber status --socket= a",
        "chamber status --socket -x a",
        "chamber status --socket /a --socket /b a",
        "--socket=/a chamber status a --socket=/b",
        "chamber status -- a",
        "chamber status -a",
        "chamber status -",
        "chamber status --archived",
        "--archived chamber list",
        "chamber --archived list",
        "chamber list --archived --archived",
        "chamber list a",
        "chamber list --all",
        "chamber stat a",
        "chamber start a",
        "chamber help status",
        "help chamber status",
        "chamber todo a list",
        "Chamber status a",
        "hub",
    ];

    #[test]
    fn a_line_taken_here_is_read_as_clap_reads_it() {
        let env = std::env::var(cryo_proto::SOCKET_ENV).ok();
        for line in TAKEN {
            let mine = quick(line, env.as_deref()).unwrap_or_else(|| panic!("{line:?} is not taken"));
            assert_eq!(Ok(mine), clap(line), "{line:?}");
        }
    }

    #[test]
    fn a_line_not_taken_is_left_to_clap() {
        for line in LEFT {
            assert_eq!(quick(line, None), None, "{line:?} is taken");
        }
        // clap reads some of them (a second positional it does not), says
        // what is wrong with the rest; either way they are its to read.
        assert!(clap("chamber status a b").is_err());
    }

    #[test]
    fn the_socket_comes_from_the_environment_as_clap_takes_it() {
        let from = |env| quick("chamber status a", Some(env)).map(|s| s.0);
        assert_eq!(from("/run/s"), Some(Some(PathBuf::from("/run/s"))));
        assert_eq!(quick("--socket /a chamber status a", Some("/b")).map(|s| s.0), Some(Some(PathBuf::from("/a"))));
        // An empty value is an error of clap's.
        assert_eq!(from(""), None);
        let cli = Cli::command();
        let socket = cli.get_arguments().find(|a| a.get_id() == "socket").and_then(|a| a.get_env());
        assert_eq!(socket, Some(std::ffi::OsStr::new(cryo_proto::SOCKET_ENV)));
    }
}
