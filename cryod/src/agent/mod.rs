//! An agent's run, from its command line to its exit: the wing of cryod
//! that starts what cryo does not trust.
//!
//! - [`kinds`]: the agent kinds cryo knows and the command line each runs
//!   (`kinds/kinds-mcp.md`: how each reaches cryo's MCP tools);
//! - [`launch`]: a session's start: environment, confinement, limits,
//!   output, and the keeper on a fleet node;
//! - [`sandbox`]: the confinement modes (the Landlock launcher, bubblewrap's
//!   arguments, systemd scopes) and what a session may reach;
//! - [`stream`]: a known kind's output read as it comes (transcript, usage,
//!   the provider's limit);
//! - [`keeper`]: the small parent that kills a fleet node's agent when cryod
//!   stops vouching for it;
//! - [`door`]: a session's own socket, serving the Agent service alone;
//! - [`group`]: process groups, signals, and finding what a killed cryod
//!   left running;
//! - [`tree`]: a session's whole process tree and its end (a cgroup of its
//!   own, and the keeper of the tree, a subreaper);
//! - [`harden`]: the last step before a session's program runs: Landlock,
//!   no capability, the seccomp filter;
//! - [`precheck`]: pre-checks and short commands;
//! - [`upstream`]: where a session's model calls go, and how each known
//!   kind is pointed at cryod's provider gateway to reach it;
//! - [`acp`]: the client that drives an Agent Client Protocol agent
//!   (`agent = "acp:COMMAND"`), run as `cryod __acp`.
//!
//! It knows nothing of supervisors or the runtime: what it needs comes in
//! as values, and what it learns goes out through callbacks.

/// Why an agent, or a pre-check, could not be started as its chamber says.
/// Each reads as one line for the person who gets it; the kind says whose
/// move it is (the chamber's settings, the machine, the kernel, the disk).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The chamber's settings cannot make the command: its `agent` line,
    /// `[provider] env`, a kind's own configuration.
    #[error("{0}")]
    Setting(String),
    /// What the sandbox or the limits need is missing, or does not work here.
    #[error("{0}")]
    Unavailable(String),
    /// The kernel refused the confinement.
    #[error("{0}")]
    Refused(String),
    /// A file in the chamber (the prompt, a kind's config, the agent's log)
    /// could not be written or opened.
    #[error("{0}")]
    File(String),
    /// The program (or its keeper) did not start.
    #[error("{0}")]
    Spawn(String),
}

/// The agent wing's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub mod acp;
pub mod confine;
pub mod door;
pub mod forward;
pub mod group;
pub mod harden;
pub mod keeper;
pub mod kinds;
pub mod launch;
pub mod precheck;
pub mod sandbox;
pub mod stream;
pub mod tree;
pub mod upstream;
pub mod watch;
