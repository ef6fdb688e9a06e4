//! One scripted scenario run twice: through the simulator (the chamber's
//! machine with a simulated shell, `cryo_core::sim`) and through the real
//! `cryod` with a shell-script agent calling the real `cryo-agent`. The files
//! they leave (the outbox, `todo.json`, the `cryo.log` blocks) must be the
//! same once times, pids, wake ids and file names are normalised: the proof
//! that what the simulator checks is what the real daemon does.

use cryo_core::chamber::{Call, LogLine, TodoCall};
use cryo_core::sim::agent::Act;
use cryo_core::sim::{ScriptStep, World};
use cryo_tests::Env;

const MAX_ATTEMPTS: u32 = 3;

fn send(text: &str, question: bool) -> Act {
    Act::Call(Call::Send { text: text.into(), question, subject: String::new() })
}

fn hibernate(summary: &str, complete: bool) -> Act {
    Act::Call(Call::Hibernate { summary: summary.into(), complete, exit_code: 0, linger_secs: 0 })
}

/// Session 1 answers the mail and schedules session 2 a second later;
/// session 2 says something and crashes (a retry is queued); an operator's
/// wake brings session 3, which drops the retry, asks a question and
/// completes the plan.
fn scenario() -> (Vec<ScriptStep>, Vec<Vec<Act>>) {
    let steps = vec![
        ScriptStep::Mail("hello from the operator".into()),
        ScriptStep::Start,
        ScriptStep::Ended(2),
        ScriptStep::Wake,
        ScriptStep::Ended(3),
    ];
    let sessions = vec![
        vec![
            Act::Call(Call::Receive),
            send("got it", false),
            Act::Call(Call::Todo(TodoCall::Add {
                text: "next step".into(),
                at: "+1s".into(),
                every: String::new(),
                cron: String::new(),
                missed: String::new(),
                precheck: String::new(),
            })),
            hibernate("first", false),
        ],
        vec![send("working on it", false), Act::Exit(3)],
        vec![Act::Call(Call::Todo(TodoCall::Done(2))), send("should I go on?", true), hibernate("all done", true)],
    ];
    (steps, sessions)
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The same plans as a shell script for the real agent.
fn script(sessions: &[Vec<Act>]) -> String {
    let mut sh = String::from("case \"$CRYO_SESSION\" in\n");
    for (i, plan) in sessions.iter().enumerate() {
        sh.push_str(&format!("{})\n", i + 1));
        for act in plan {
            let line = match act {
                Act::Exit(code) => format!("exit {code}"),
                Act::Hang => "sleep 100000".into(),
                Act::Call(Call::Receive) => "cryo-agent receive".into(),
                Act::Call(Call::Dialog { last, .. }) => format!("cryo-agent dialog --last {last}"),
                Act::Call(Call::Send { text, question, .. }) => {
                    format!("cryo-agent send {}{}", if *question { "--question " } else { "" }, quote(text))
                }
                Act::Call(Call::Hibernate { summary, complete, exit_code, linger_secs }) => {
                    let mut l = format!("cryo-agent hibernate --summary {}", quote(summary));
                    if *complete {
                        l.push_str(" --complete");
                    }
                    if *exit_code != 0 {
                        l.push_str(&format!(" --exit {exit_code}"));
                    }
                    if *linger_secs != 0 {
                        l.push_str(&format!(" --linger {linger_secs}"));
                    }
                    l
                }
                Act::Call(Call::Todo(TodoCall::Add { text, at, .. })) => {
                    format!("cryo-agent todo add {} --at {}", quote(text), quote(at))
                }
                Act::Call(Call::Todo(TodoCall::Done(id))) => format!("cryo-agent todo done {id}"),
                Act::Call(Call::Todo(TodoCall::Remove(id))) => format!("cryo-agent todo remove {id}"),
                Act::Call(Call::Todo(TodoCall::List)) => "cryo-agent todo list".into(),
                // A plain command has no CLI that asks about its tool calls.
                Act::Ask { .. } => panic!("the twin's scenarios ask no approvals"),
            };
            // Quiet: cryo-agent.log stays empty, as the simulator's does.
            sh.push_str(&format!("  {line} >/dev/null 2>&1\n"));
        }
        sh.push_str("  exit 0 ;;\n");
    }
    sh + "esac\n"
}

/// Times, pids, wake ids, message file names and the chamber's name, made
/// comparable.
fn normalise(text: &str, chamber: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let sep = |c: char| c.is_whitespace() || matches!(c, '(' | ')' | ',' | '"');
    for word in text.split_inclusive(sep) {
        let (core, tail) = match word.char_indices().last() {
            Some((i, c)) if sep(c) => (&word[..i], &word[i..]),
            _ => (word, ""),
        };
        let digits = core.chars().filter(|c| c.is_ascii_digit()).count();
        let token = if core.ends_with(".md") {
            "<file>".to_string()
        } else if core.starts_with('w') && core.matches('-').count() == 2 && digits > 1 {
            "<wake>".to_string()
        } else if digits >= 4 && core.chars().any(|c| c == ':' || c == 'T') && !core.chars().any(char::is_alphabetic)
            || is_timestamp(core)
        {
            "<time>".to_string()
        } else if core == chamber {
            "<chamber>".to_string()
        } else {
            core.to_string()
        };
        out.push_str(&token);
        out.push_str(tail);
    }
    // "(pid 1234)" and lateness figures differ by nature, and so does the
    // seal of cryod's own messages (a keyed digest; the simulator has none).
    let mut lines = Vec::new();
    for line in out.lines().filter(|l| !l.starts_with("seal: ")) {
        let line = match line.find("pid ") {
            Some(i) => {
                format!("{}pid <n>{}", &line[..i], line[i + 4..].trim_start_matches(|c: char| c.is_ascii_digit()))
            }
            None => line.to_string(),
        };
        lines.push(line);
    }
    lines.join("\n")
}

/// `2026-11-23T09:00:00Z`, `2026-11-23T09:00:00+00:00`, `…Z:` and the like.
fn is_timestamp(s: &str) -> bool {
    let s = s.trim_end_matches([':', '.', ';']);
    s.len() >= 19 && s.as_bytes()[4] == b'-' && s.as_bytes()[10] == b'T' && s[..4].bytes().all(|b| b.is_ascii_digit())
}

/// A `cryo.log` as blocks of event lines (the `[HH:MM:SS]` stamps dropped).
fn blocks_of_file(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    for line in text.lines() {
        if line.starts_with("--- CRYO SESSION ") {
            blocks.push(Vec::new());
        } else if line == "--- CRYO END ---" {
            blocks.push(vec!["<end>".to_string()]);
        } else if let Some((_, event)) = line.split_once("] ")
            && let Some(b) = blocks.last_mut()
        {
            b.push(event.to_string());
        }
    }
    merge(blocks)
}

fn blocks_of_sim(log: &[LogLine]) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    for l in log {
        match l {
            LogLine::Begin(_) => blocks.push(Vec::new()),
            LogLine::End => blocks.push(vec!["<end>".to_string()]),
            LogLine::Event(e) => {
                if let Some(b) = blocks.last_mut() {
                    b.push(cryod::chamber::log::one_line(e));
                }
            }
        }
    }
    merge(blocks)
}

/// Folds the `<end>` markers (and what follows them up to the next block) into their block.
fn merge(raw: Vec<Vec<String>>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    for b in raw {
        if b.first().is_some_and(|l| l == "<end>")
            && let Some(last) = out.last_mut()
        {
            last.extend(b);
            continue;
        }
        out.push(b);
    }
    out
}

#[test]
fn the_simulator_and_the_real_daemon_leave_the_same_files() {
    let (steps, sessions) = scenario();
    let sim = World::scripted(&steps, sessions.clone(), MAX_ATTEMPTS).unwrap_or_else(|f| panic!("{f}"));

    let env = Env::new();
    let _d = env.start_daemon();
    let toml = format!("timezone = \"UTC\"\nmax_attempts = {MAX_ATTEMPTS}\nmax_session_duration = 1800");
    // Mail before the start is in the inbox when the chamber is added (so
    // cryod has seen it, as the simulator's step promises).
    let early = steps.iter().take_while(|s| matches!(s, ScriptStep::Mail(_))).count();
    let inbox = env.path("twin/messages/inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    for (i, step) in steps[..early].iter().enumerate() {
        let ScriptStep::Mail(text) = step else { unreachable!() };
        let name = format!("2026-01-01T00-00-{i:02}.000Z_test_{i:04}.md");
        std::fs::write(inbox.join(name), format!("---\nfrom: tester\nsubject: {text}\n---\n\n{text}\n")).unwrap();
    }
    let c = env.chamber("twin", &script(&sessions), &toml);
    for step in &steps[early..] {
        match step {
            // (Mail during the run would race the watcher against the next step.)
            ScriptStep::Mail(_) => panic!("this scenario writes its mail before the start"),
            ScriptStep::Start => {
                env.cryoctl(&["chamber", "start", "twin"]).ok();
            }
            ScriptStep::Wake => {
                env.cryoctl(&["chamber", "wake", "twin"]).ok();
            }
            ScriptStep::Ended(n) => c.wait_ended(*n),
        }
    }

    // The sim's chamber is "c0"; the real one "twin".
    let sim_outbox: Vec<String> =
        sim.outbox.iter().map(|m| normalise(&cryo_core::message::render(m, chrono_tz::UTC), "c0")).collect();
    let real_outbox: Vec<String> = c.outbox().iter().map(|t| normalise(t, "twin")).collect();
    assert_eq!(real_outbox, sim_outbox, "the outbox differs (real, then simulated)");

    let sim_todos = normalise(&cryo_core::todo::render_file(&sim.todos, chrono_tz::UTC), "c0");
    let real_todos = normalise(&c.read("todo.json"), "twin");
    assert_eq!(real_todos.trim(), sim_todos.trim(), "todo.json differs (real, then simulated)");

    let norm = |blocks: Vec<Vec<String>>, name: &str| -> Vec<Vec<String>> {
        blocks.into_iter().map(|b| b.iter().map(|l| normalise(l, name)).collect()).collect()
    };
    let real_log = norm(blocks_of_file(&c.cryo_log()), "twin");
    let sim_log = norm(blocks_of_sim(&sim.log), "c0");
    assert_eq!(real_log.len(), 3, "three sessions: {real_log:#?}");
    assert_eq!(real_log, sim_log, "cryo.log differs (real, then simulated)");
}

#[test]
fn normalising_keeps_words_and_drops_what_differs_by_nature() {
    let s = "agent started (pid 4242) at 2026-11-23T09:00:00Z: w1-2-abc123 read 20261123090000-000001.md, twin";
    assert_eq!(normalise(s, "twin"), "agent started (pid <n>) at <time> <wake> read <file>, <chamber>");
}
