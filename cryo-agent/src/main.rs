//! `cryo-agent`: what an agent calls from inside a cryo session.
//!
//! Every verb but `time` talks to cryod with the session's token
//! (`CRYO_SESSION_TOKEN`) and chamber (`CRYO_CHAMBER`); outside a session they
//! fail with one line. Output is short and plain, for a language model to read.

use std::io::Read;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cryo_proto::exit;
use cryo_proto::v1 as pb;
use cryo_proto::v1::agent_client::AgentClient;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

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
    Hibernate {
        /// One line on what this session did.
        #[arg(long, default_value = "")]
        summary: String,
        /// The whole plan is finished: no next wake.
        #[arg(long, conflicts_with = "exit")]
        complete: bool,
        /// The session failed with code N (N != 0); cryo retries later.
        #[arg(long, value_name = "N")]
        exit: Option<i32>,
        /// Wait up to SECS for a quick reply; new mail refuses the hibernate so you can answer.
        #[arg(long, value_name = "SECS")]
        linger: Option<u32>,
    },
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
    Dialog {
        #[arg(long, value_name = "N", conflicts_with = "all")]
        last: Option<u32>,
        #[arg(long)]
        all: bool,
    },
    /// The current time, or when EXPR falls.
    Time { expr: Vec<String> },
    /// Your TODOs: the schedule of your wakes.
    #[command(subcommand)]
    Todo(TodoCmd),
}

#[derive(Subcommand)]
enum TodoCmd {
    /// Schedule work: `todo add "check CI" --at +2h`.
    Add {
        text: String,
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
        /// Repeat every DURATION (6h, 1d).
        #[arg(long, value_name = "DURATION", conflicts_with = "cron")]
        every: Option<String>,
        /// Repeat on a 5-field cron schedule in the chamber's zone.
        #[arg(long, value_name = "\"MIN HOUR DOM MON DOW\"")]
        cron: Option<String>,
        /// Missed slots of a repeating TODO: once (run once for all) or skip.
        #[arg(long, value_name = "once|skip")]
        missed: Option<String>,
    },
    List,
    Done {
        id: u64,
    },
    Remove {
        id: u64,
    },
}

struct Fail(String, u8);

impl From<tonic::Status> for Fail {
    fn from(s: tonic::Status) -> Fail {
        let (code, message) = exit::for_status(&s);
        Fail(message, code)
    }
}

type Client = AgentClient<InterceptedService<Channel, Auth>>;

#[derive(Clone)]
struct Auth {
    token: MetadataValue<tonic::metadata::Ascii>,
    chamber: MetadataValue<tonic::metadata::Ascii>,
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert(cryo_proto::TOKEN_METADATA, self.token.clone());
        req.metadata_mut().insert("x-cryo-chamber", self.chamber.clone());
        Ok(req)
    }
}

async fn client() -> Result<Client, Fail> {
    let token = std::env::var("CRYO_SESSION_TOKEN").unwrap_or_default();
    if token.is_empty() {
        return Err(Fail(
            "not inside a cryo session (CRYO_SESSION_TOKEN is not set): only `cryo-agent time` works here".into(),
            exit::REFUSED,
        ));
    }
    let chamber = std::env::var("CRYO_CHAMBER").unwrap_or_default();
    let bad = |what: &str| Fail(format!("{what} is not valid"), exit::REFUSED);
    let auth = Auth {
        token: token.parse().map_err(|_| bad("CRYO_SESSION_TOKEN"))?,
        chamber: chamber.parse().map_err(|_| bad("CRYO_CHAMBER"))?,
    };
    let path = cryo_proto::socket_path();
    let channel = cryo_proto::connect(&path).await.map_err(|e| Fail(e.to_string(), exit::UNREACHABLE))?;
    cryo_proto::hello(channel.clone(), "cryo-agent").await?;
    Ok(AgentClient::with_interceptor(channel, auth))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::Time { expr } = &cli.command {
        return time(&expr.join(" "));
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cryo-agent: {e}");
            return ExitCode::from(exit::REFUSED);
        }
    };
    match rt.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(m, code)) => {
            eprintln!("cryo-agent: {m}");
            ExitCode::from(code)
        }
    }
}

async fn run(cmd: Cmd) -> Result<(), Fail> {
    let mut c = client().await?;
    match cmd {
        Cmd::Hibernate { summary, complete, exit, linger } => {
            if exit == Some(0) {
                return Err(Fail("--exit takes a non-zero code (a clean end needs no --exit)".into(), exit::USAGE));
            }
            let r = c
                .hibernate(pb::HibernateRequest {
                    summary,
                    complete,
                    exit_code: exit.unwrap_or(0),
                    linger_secs: linger.unwrap_or(0),
                })
                .await?
                .into_inner();
            println!("{}", r.message);
        }
        Cmd::Send { text, question, stdin, subject } => {
            let text = match (text, stdin) {
                (Some(t), false) => t,
                (None, true) => {
                    let mut s = String::new();
                    std::io::stdin()
                        .read_to_string(&mut s)
                        .map_err(|e| Fail(format!("cannot read standard input: {e}"), exit::REFUSED))?;
                    s
                }
                (Some(_), true) => return Err(Fail("give the text or --stdin, not both".into(), exit::USAGE)),
                (None, false) => return Err(Fail("nothing to send: give the text or --stdin".into(), exit::USAGE)),
            };
            let r = c.send(pb::SendRequest { text, question, subject }).await?.into_inner();
            let what = if r.reply { "sent (your reply to the received messages)" } else { "sent" };
            println!("{what}: {}", r.file);
        }
        Cmd::Receive => {
            let r = c.receive(pb::ReceiveRequest {}).await?.into_inner();
            print_mail(&r.messages, "no new messages");
            if !r.messages.is_empty() {
                println!("(received; your next `cryo-agent send` is the reply)");
            }
        }
        Cmd::Dialog { last, all } => {
            let r = c.dialog(pb::DialogRequest { last: last.unwrap_or(0), all }).await?.into_inner();
            print_mail(&r.messages, "no messages yet");
            if r.claimed > 0 {
                println!("({} new message(s) were received by this call; reply with `cryo-agent send`)", r.claimed);
            }
        }
        Cmd::Todo(t) => {
            let list = match t {
                TodoCmd::Add { text, at, every, cron, missed } => {
                    let r = c
                        .todo_add(pb::TodoAddRequest {
                            text,
                            at: at.unwrap_or_default(),
                            every: every.unwrap_or_default(),
                            cron: cron.unwrap_or_default(),
                            missed: missed.unwrap_or_default(),
                        })
                        .await?
                        .into_inner();
                    let t = r.todo.unwrap_or_default();
                    println!("added TODO {}: {} (at {})", t.id, t.text, t.at);
                    return Ok(());
                }
                TodoCmd::List => c.todo_list(pb::TodoListRequest {}).await?.into_inner(),
                TodoCmd::Done { id } => {
                    let r = c.todo_done(pb::TodoIdRequest { id }).await?.into_inner();
                    println!("TODO {id} done");
                    r
                }
                TodoCmd::Remove { id } => {
                    let r = c.todo_remove(pb::TodoIdRequest { id }).await?.into_inner();
                    println!("TODO {id} removed");
                    r
                }
            };
            print_todos(&list);
        }
        Cmd::Time { .. } => unreachable!("handled without a daemon"),
    }
    Ok(())
}

fn print_mail(messages: &[pb::Mail], none: &str) {
    if messages.is_empty() {
        println!("{none}");
        return;
    }
    let n = messages.len();
    for (i, m) in messages.iter().enumerate() {
        let dir = if m.direction == "out" { "to" } else { "from" };
        let who = if m.direction == "out" { "operator (sent by you or cryo)".to_string() } else { m.from.clone() };
        let q = if m.question { ", question" } else { "" };
        println!("--- message {} of {n}: {dir} {who}, {}{q} ---", i + 1, m.timestamp);
        if !m.subject.is_empty() {
            println!("subject: {}", m.subject);
        }
        println!("{}", m.body);
    }
}

fn print_todos(list: &pb::TodoListReply) {
    let open: Vec<_> = list.todos.iter().filter(|t| t.state != "done").collect();
    if open.is_empty() {
        println!("no pending TODOs");
        return;
    }
    for t in open {
        let mark = if t.state == "claimed" { "~" } else { " " };
        let rep = if !t.every.is_empty() {
            format!(", every {}", t.every)
        } else if !t.cron.is_empty() {
            format!(", cron \"{}\"", t.cron)
        } else {
            String::new()
        };
        let at = if t.at.is_empty() { "no time".to_string() } else { t.at.clone() };
        println!("{}. [{mark}] {} (at {at}{rep})", t.id, t.text);
    }
}

/// `time [EXPR]`: works anywhere, in the zone of `TZ` (cryod sets it to the
/// chamber's zone for agents) or the system's.
fn time(expr: &str) -> ExitCode {
    let tz: chrono_tz::Tz = std::env::var("TZ")
        .ok()
        .and_then(|t| t.trim_start_matches(':').parse().ok())
        .or_else(|| iana_time_zone::get_timezone().ok().and_then(|n| n.parse().ok()))
        .unwrap_or(chrono_tz::UTC);
    #[allow(clippy::disallowed_methods)] // a CLI's one read of the clock
    let now = chrono::Utc::now();
    if expr.trim().is_empty() {
        println!("{} ({})", cryo_core::time::format_in(now, tz), tz.name());
        return ExitCode::SUCCESS;
    }
    match cryo_core::time::parse_time(expr, now, tz) {
        Ok(t) => {
            println!(
                "{} ({}), in {}",
                cryo_core::time::format_in(t, tz),
                tz.name(),
                cryo_core::time::humanize(t - now)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cryo-agent: {e}");
            ExitCode::from(exit::USAGE)
        }
    }
}
