//! The layers of every crate of the workspace, as a test, so no import
//! circle can come back: each crate's top-level modules have ranks, lowest
//! first, and a module may use only modules of a lower rank; so may the
//! rooms of the folders a crate names (the folder's own `mod.rs` is above
//! them all). A module, room or crate with no rank fails the test, and so
//! does a rank naming a module that is gone.
//!
//! Every crate's table is here, cryod's too, with the one scan they are
//! all checked by ([`scan`]: what a file names through `crate::` and
//! `super::`). ARCHITECTURE.md ("Layers") draws cryod's and lists the
//! others.
//!
//! Beside them, the rooms' sizes (`sizes`): no file of any crate's `src/`
//! over 700 lines, no function over 120. `house-counts [TREE]` prints the
//! measures ([`measure`]) for any checkout, an older commit's too.

pub mod measure;
pub mod scan;
#[cfg(test)]
mod sizes;
#[cfg(test)]
mod tests;

/// Ranks, lowest first: each a list of modules (or rooms).
pub type Ranks = &'static [&'static [&'static str]];

/// One crate's sources and their layers.
pub struct Crate {
    /// The crate's name, for messages.
    pub name: &'static str,
    /// Its sources' folder, from the workspace's root.
    pub src: &'static str,
    /// Folders under `src` that are crates of their own (a binary's).
    pub skip: &'static [&'static str],
    /// Its top-level modules.
    pub layers: Ranks,
    /// Folders (module paths, `a/b`) whose rooms have ranks of their own.
    pub inner: &'static [(&'static str, Ranks)],
}

/// Every crate of the workspace.
pub const CRATES: &[Crate] = &[
    Crate {
        name: "cryo-proto",
        src: "proto/src",
        skip: &[],
        layers: &[
            // Where a cryod's files are; the JSON forms of the protocol's
            // objects (the generated code is `lib.rs`'s).
            &["paths", "json"],
        ],
        inner: &[],
    },
    Crate {
        name: "cryo-core",
        src: "cryod/core/src",
        skip: &[],
        layers: &[
            // The time grammar, in a chamber's zone: the rest reads time through it.
            &["time"],
            // The hibernate gate; `todo.json`; message files; the approval policy and its requests.
            &["hibernate", "todo", "message", "approvals"],
            // How a session ended and what cryod writes of it; the coming wakes.
            &["session", "schedule"],
            // Budgets and provider holds; the prompt a session's agent is given.
            &["limits", "prompt"],
            // The chamber machine, on all of the above.
            &["chamber"],
            // The simulator, which runs chamber machines.
            &["sim"],
            // The test that the core does no I/O.
            &["purity"],
        ],
        inner: &[
            (
                "chamber",
                &[
                    // The state's parts: the session under way, the standing wishes, the files as
                    // read, health, the dead man's switch, the spans that held slots back.
                    &["waking", "wishes", "files", "health", "silence", "missed"],
                    // Rules around sessions: parked for an approval, handed on, told to people.
                    &["approval", "handoff", "notice"],
                    // The closed sets of inputs and effects (carrying hand-offs and notices).
                    &["io"],
                    // The rules by phase.
                    &["plan", "wake", "calls", "end", "operator", "recovery"],
                ],
            ),
            (
                "chamber/io",
                &[
                    // Callers' answers, and the shell's line when an effect failed.
                    &["reply"],
                    // Effects, and what they carry: continuation tags, TODO changes, timers.
                    &["effect"],
                    // Inputs, which carry effects' results back with their tags.
                    &["input"],
                ],
            ),
            (
                "sim",
                &[
                    // Scripted agents.
                    &["agent"],
                    // What outlives cryod: the chambers' files, the ledger, the process table.
                    &["durable"],
                    // The invariants, read from the durable half.
                    &["check"],
                    // The world: the daemon, the people, the clock.
                    &["world"],
                ],
            ),
            (
                "sim/world",
                &[
                    // What a run tells: its counts, a failure and its trace.
                    &["report"],
                    // Approval requests and the policy of a chamber with `[approvals]`.
                    &["approvals"],
                    // The volatile daemon and its shell around each machine.
                    &["daemon"],
                    // The effects it performs.
                    &["effects"],
                    // What drives it from outside: agents, people, a fixed script.
                    &["agents", "people", "script"],
                ],
            ),
        ],
    },
    Crate {
        name: "cryo-files",
        src: "cryod/files/src",
        skip: &[],
        layers: &[
            // A chamber's folder held open, and the walk to a name in it.
            &["dir"],
            // Reading and writing through that walk; a file of lines read from its end.
            &["read", "write", "tail"],
        ],
        inner: &[],
    },
    Crate {
        name: "cryo-session",
        src: "cryod/session/src",
        skip: &[],
        layers: &[
            // A header block's strings made raw (HPACK).
            &["hpack"],
            // Finding programs, the spawn gate, a client's `:authority`, what a chamber
            // asks of its session, an ACP agent's client, process groups, the way out
            // of a bubblewrap session's network.
            &["paths", "fds", "authority", "setup", "acp", "group", "forward"],
            // A session's own socket, the sandbox's modes, each kind and its command line.
            &["door", "sandbox", "kinds"],
            // Each kind's stream read, a session's whole tree, where its model calls go,
            // short commands run confined.
            &["events", "tree", "upstream", "precheck"],
            // Stalls and loops; Landlock, capabilities and seccomp; a fleet node's keeper.
            &["watch", "harden", "keeper"],
            // Output read as it comes; the chain of launchers around a program.
            &["stream", "confine"],
            // A session's start.
            &["launch"],
        ],
        inner: &[],
    },
    Crate {
        name: "cryod",
        src: "cryod/src",
        // `cryod-launch`: a session's launchers, cryo-session's code alone.
        skip: &["bin"],
        layers: &[
            // What knows nothing of chambers: the clock, random names, log lines, the metrics
            // registry, bounded TCP connections, the wall-clock scheduler, traces over OTLP.
            &["base"],
            // The store (SQLite or PostgreSQL).
            &["store"],
            // Errors (wrapping the store's), `cryod.toml`.
            &["error", "config"],
            // The provider gateway (it reads the wire, knows nothing of chambers).
            &["gateway"],
            // A chamber's files (mailbox, config, TODO file I/O).
            &["chamber"],
            // The services the shell uses, and the runtime that holds them. (An agent's run is
            // the crate cryo-session, below every module here.)
            &["services"],
            // The chamber shell around cryo_core's machine.
            &["supervisor"],
            // Operations on the set of chambers.
            &["daemon"],
            // The fronts: the socket, gRPC, the hub, the service manager, the fleet's loops.
            &["fronts"],
            // Test support that drives a whole daemon.
            &["fuzzing"],
        ],
        inner: &[
            // The clock and the leaves; then what runs on the clock: the scheduler's timers, the
            // traces' times.
            ("base", &[&["clock", "random", "logline", "metrics", "conn", "memory"], &["scheduler", "otlp"]]),
            (
                "services",
                &[
                    // Admission, watchers, sync bridges, the zone, approval requests waiting in a
                    // session.
                    &["admission", "watch", "bridges", "zone", "approvals"],
                    // The node's trust in its fleet lease (it signals agents' groups). The
                    // notifiers (their command runs through cryo-session's runner). Git-aware
                    // chambers (their worktree's commands run jailed, the same way).
                    &["lease", "notifier", "git"],
                    // What every chamber task shares.
                    &["runtime"],
                ],
            ),
            (
                "fronts",
                &[
                    // A fleet node's lease and ownership loops.
                    &["fleet"],
                    // What the adapters share (conversions to the wire).
                    &["convert"],
                    // Adapters: gRPC, the service manager.
                    &["rpc", "system"],
                    // Adapters that serve the others: the hub (with `/mcp`), the socket.
                    &["hub", "server"],
                ],
            ),
            // The two stores know nothing of each other; both read their history (rollups and
            // pruning) from the same statements.
            ("store", &[&["history"], &["sqlite", "postgres"]]),
            // The fleet's store: its tables' rooms; the fleet's ownership rounds read chambers as
            // the registry does.
            ("store/postgres", &[&["migrations", "registry", "sessions", "approvals", "commands"], &["fleet"]]),
            // `cryod.toml`: its tables, then the keys they make up, then the reading.
            ("config", &[&["providers", "notify"], &["keys"], &["parse"]]),
            // What the gateway reads of the wire, then a session's route, then one call forwarded.
            ("gateway", &[&["wire", "redact", "kept"], &["route"], &["forward"]]),
            // What the operator accepts knows nothing of `cryo.toml`'s reading, which digests it;
            // a new chamber's files and resets read the config.
            (
                "chamber",
                &[
                    &["version"],
                    &["trust", "log", "mailbox", "todos"],
                    &["config", "rest"],
                    &["scaffold", "seed"],
                    &["reset"],
                ],
            ),
            (
                "supervisor",
                &[
                    &["budget", "queue", "running", "owner", "outlets"],
                    &["trust", "limits", "replies", "files", "approve", "git", "freeze"],
                    // What the rest of cryod holds of a supervisor, and sends it.
                    &["handle"],
                    &["boot"],
                    &["ledger"],
                    &["effects"],
                ],
            ),
            (
                "fronts/hub",
                &[
                    &["markdown", "history", "guard"],
                    &["attachments", "invites", "hooks"],
                    &["events", "api"],
                    &["approvals", "settings"],
                ],
            ),
        ],
    },
    Crate {
        name: "cryo-mcp",
        src: "cryod/mcp/src",
        skip: &[],
        // One file: the operator's tools and their server.
        layers: &[],
        inner: &[],
    },
    Crate {
        name: "cryoctl",
        src: "cryoctl/src",
        skip: &[],
        layers: &[
            // Reaching cryod (a failure is one line and an exit code); human and JSON output;
            // shell completions.
            &["client", "output", "complete"],
            // What an install puts beside the binaries: man pages, completion scripts.
            &["extras"],
            // The commands, a room each.
            &["cmd"],
            // The commonest reads taken from the command line without clap's tree.
            &["quick"],
        ],
        inner: &[
            (
                "cmd",
                &[
                    // Commands that stand alone (`chamber status` shows the schedule and usage).
                    &["schedule", "usage", "daemon", "demo", "metrics", "notify"],
                    // `chamber`: its verbs in rooms of their own.
                    &["chamber"],
                    // Commands that name chambers as `chamber` does.
                    &["approvals", "doctor"],
                ],
            ),
            (
                "cmd/chamber",
                &[
                    // Making a chamber, its life verbs, its conversation and logs, its
                    // status, what a `[git]` branch changed.
                    &["add", "life", "mail", "status", "diff"],
                    // Its bridges and TODO list (their lines read as the status's).
                    &["work"],
                ],
            ),
        ],
    },
    Crate {
        name: "cryo-agent",
        src: "cryo-agent/src",
        skip: &[],
        layers: &[
            // The session's verbs, once for both faces.
            &["verbs"],
            // The MCP face (the command line's is `main.rs`).
            &["mcp"],
        ],
        inner: &[],
    },
    Crate {
        name: "cryo-sync",
        src: "sync/src",
        skip: &[],
        layers: &[
            // What the services' HTTP answers mean for a bridge; credential files.
            &["http", "creds"],
            // A bridge's state file; attachments.
            &["state", "attach"],
            // The two remotes.
            &["zulip", "github"],
            // The bridge loop.
            &["bridge"],
        ],
        inner: &[],
    },
    Crate {
        name: "cryo-tests",
        src: "tests/src",
        skip: &["bin"],
        layers: &[
            // Stand-ins for the world around cryod: a model, Zulip, GitHub, SMTP, an HTTP
            // receiver, PostgreSQL; an MCP client; the book's examples.
            &["model", "fake_zulip", "fake_github", "smtp", "receiver", "pg", "mcp", "examples"],
        ],
        inner: &[],
    },
    Crate {
        name: "cryo-bench",
        src: "tests/src/bin/cryo-bench",
        skip: &[],
        layers: &[
            // What both systems' scenarios share: clocks, readings, figures; the agents' scripts.
            &["measure", "scripts"],
            // The scenarios on cryo: wakes, the gateway's cost, a `[git]` worktree's.
            &["cryo", "gateway", "git"],
            // The same scenarios on the seed system (reading their results as cryo's); a
            // fleet of cryod nodes and the hub in a browser, built on cryo's.
            &["seed", "fleet", "hub"],
            // The growth curve of one world (it asks the seed at its size).
            &["scale"],
        ],
        inner: &[],
    },
    Crate {
        name: "cryo-house",
        src: "tests/house/src",
        skip: &["bin"],
        layers: &[
            // The text scan.
            &["scan"],
            // The measures over any tree.
            &["measure"],
            // The checks, over every table; the rooms' sizes.
            &["tests", "sizes"],
        ],
        inner: &[],
    },
];
