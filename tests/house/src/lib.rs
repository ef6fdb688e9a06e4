//! The layers of every crate of the workspace, as a test, so no import
//! circle can come back: each crate's top-level modules have ranks, lowest
//! first, and a module may use only modules of a lower rank; so may the
//! rooms of the folders a crate names (the folder's own `mod.rs` is above
//! them all). A module, room or crate with no rank fails the test, and so
//! does a rank naming a module that is gone.
//!
//! cryod keeps its own table beside its modules (`cryod/src/layers.rs`);
//! the other crates' are here, with the scan they are checked by
//! ([`scan`]: what a file names through `crate::` and `super::`).
//! ARCHITECTURE.md ("Layers") says where each table is.
//!
//! Beside them, the rooms' sizes (`sizes`): no file of any crate's `src/`
//! over 700 lines, no function over 120.

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

/// Workspace members whose table is elsewhere, and where.
pub const OWN: &[(&str, &str)] = &[("cryod", "cryod/src/layers.rs")];

/// Every other crate of the workspace.
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
        ],
        inner: &[],
    },
    Crate {
        name: "cryo-house",
        src: "tests/house/src",
        skip: &[],
        layers: &[
            // The text scan.
            &["scan"],
            // The checks, over every table; the rooms' sizes.
            &["tests", "sizes"],
        ],
        inner: &[],
    },
];
