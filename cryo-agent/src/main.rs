//! `cryo-agent`: what an agent calls from inside a cryo session.
//!
//! Every verb but `time` talks to cryod with the session's token
//! (`CRYO_SESSION_TOKEN`) and chamber (`CRYO_CHAMBER`); outside a session they
//! fail with one line. Output is short and plain, for a language model to read.
//! `cryo-agent mcp` offers the same verbs as MCP tools over stdio
//! ([`mcp`]); both faces call [`verbs`].

mod mcp;
mod verbs;

use std::io::Read;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cryo_proto::exit;
use verbs::{Done, Fail, Session};

/// Talk to cryo from inside a session.
#[derive(Parser)]
#[command(name = "cryo-agent", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// End this session (the last thing you do).
    Hibernate(verbs::Hibernate),
    /// Send a message to the operator.
    Send {
        /// The text (or use --stdin).
        text: Option<String>,
        /// You need an answer or a decision.
        #[arg(long)]
        question: bool,
        /// Read the text from standard input, exactly.
        #[arg(long)]
        stdin: bool,
        #[arg(long, default_value = "")]
        subject: String,
    },
    /// Claim and print unread messages.
    Receive,
    /// The conversation so far.
    Dialog(verbs::Dialog),
    /// The current time, or when EXPR falls.
    Time { expr: Vec<String> },
    /// Your TODOs: the schedule of your wakes.
    #[command(subcommand)]
    Todo(TodoCmd),
    /// Serve these verbs as MCP tools on standard input and output (cryod
    /// wires this into the agent CLIs it knows).
    Mcp,
    /// May this tool call run, by the approvals policy of the chamber? Prints
    /// `{"behavior":"allow",…}` or `{"behavior":"deny","message":…}`; a call
    /// that needs a person waits for their answer (up to approval_wait).
    Approval {
        /// The tool, as the agent's CLI names it.
        #[arg(long, default_value = "")]
        tool: String,
        /// Its arguments, as a JSON object.
        #[arg(long, default_value = "{}")]
        input: String,
        /// Why, for the person asked.
        #[arg(long, default_value = "")]
        reason: String,
        /// Run as a CLI's pre-tool hook: the call is read from standard
        /// input (`tool_name`, `tool_input`); allowed exits 0 saying
        /// nothing, refused prints why on standard error and exits 2.
        #[arg(long)]
        hook: bool,
        /// Wait in the session at most this many seconds (a CLI that gives
        /// its hook less time than approval_wait).
        #[arg(long)]
        wait_at_most: Option<u32>,
    },
}

#[derive(Subcommand)]
enum TodoCmd {
    /// Schedule work: `todo add "check CI" --at +2h`.
    Add(verbs::TodoAdd),
    List,
    Done(verbs::TodoId),
    Remove(verbs::TodoId),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let done = match cli.command {
        Cmd::Time { expr } => verbs::time(verbs::Time { expr: expr.join(" ") }).map(Some),
        cmd => match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt.block_on(run(cmd)),
            Err(e) => Err(Fail(e.to_string(), exit::REFUSED)),
        },
    };
    match done {
        Ok(Some(d)) => {
            exit::print("cryo-agent", format_args!("{}", d.text), true);
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(Fail(m, code)) => {
            eprintln!("cryo-agent: {m}");
            ExitCode::from(code)
        }
    }
}

async fn run(cmd: Cmd) -> Result<Option<Done>, Fail> {
    if let Cmd::Mcp = cmd {
        return mcp::serve().await.map(|()| None);
    }
    // Usage errors before a connection.
    let send = match &cmd {
        Cmd::Send { text, stdin, question, subject } => {
            Some(verbs::Send { text: send_text(text.clone(), *stdin)?, question: *question, subject: subject.clone() })
        }
        _ => None,
    };
    if let Cmd::Approval { tool, input, reason, hook, wait_at_most } = cmd {
        if hook {
            return verbs::hook(wait_at_most).await.map(|()| None);
        }
        let input = match serde_json::from_str(&input) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => return Err(Fail("--input must be a JSON object".into(), exit::USAGE)),
        };
        let a = verbs::Approval { tool_name: tool, input, reason: (!reason.is_empty()).then_some(reason) };
        let asked = async { Session::connect().await?.approve(&a, wait_at_most).await }.await;
        let answer = verbs::permission_answer(asked, &a);
        return Ok(Some(Done { text: answer.to_string(), facts: answer }));
    }
    let s = Session::connect().await?;
    let done = match cmd {
        Cmd::Hibernate(a) => s.hibernate(a).await,
        Cmd::Send { .. } => s.send(send.expect("read above")).await,
        Cmd::Receive => s.receive().await,
        Cmd::Dialog(a) => s.dialog(a).await,
        Cmd::Todo(TodoCmd::Add(a)) => s.todo_add(a).await,
        Cmd::Todo(TodoCmd::List) => s.todo_list().await,
        Cmd::Todo(TodoCmd::Done(a)) => s.todo_done(a).await,
        Cmd::Todo(TodoCmd::Remove(a)) => s.todo_remove(a).await,
        Cmd::Time { .. } | Cmd::Mcp | Cmd::Approval { .. } => unreachable!("handled above"),
    };
    done.map(Some)
}

/// The text of `send`: the argument, or standard input read exactly.
fn send_text(text: Option<String>, stdin: bool) -> Result<String, Fail> {
    match (text, stdin) {
        (Some(t), false) => Ok(t),
        (None, true) => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Fail(format!("cannot read standard input: {e}"), exit::REFUSED))?;
            Ok(s)
        }
        (Some(_), true) => Err(Fail("give the text or --stdin, not both".into(), exit::USAGE)),
        (None, false) => Err(Fail("nothing to send: give the text or --stdin".into(), exit::USAGE)),
    }
}
