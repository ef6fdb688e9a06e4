//! cryo's agent sessions, from the command line to the exit: the wing of
//! cryod that starts what cryo does not trust. It knows nothing of
//! chambers' supervisors or cryod's runtime: what it needs comes in as
//! values ([`Setup`], [`Session`], [`Places`]) and traits cryod implements
//! ([`Gateway`], [`Ticket`], [`Trace`]); what it learns goes out through
//! callbacks ([`Tell`], [`Exit`]).
//!
//! Its public face, by what cryod does with it:
//! - **start a session**: [`start`] a [`Session`] in its [`Jail`], with the
//!   agent's [`Turn`], maybe a [`Keeper`] and a way [`Through`] the
//!   gateway; it gives back [`Started`], then an [`Exit`]. Its stream's
//!   findings are told at once ([`Tell`], a [`Watch`] for stalls and
//!   loops); what it used is a [`Usage`], a provider's refusal a
//!   [`Limited`], priced by [`Prices`];
//! - **run a short command confined** (a pre-check, a notifier's command,
//!   a jailed git command): a [`Jail`] prepares a [`Run`] (or
//!   [`Prepared::shell`] makes one unconfined), then [`Prepared::check`] or
//!   [`Prepared::run`] runs it ([`Ran`]);
//! - **the kinds**: [`Kind`] (each known CLI, and the event format it
//!   writes), [`agent_words`], [`agent_file_upstream`] (the upstream a CLI's
//!   own file names, part of what the operator accepts), [`Auth`];
//! - **the sandbox**: [`Sandbox`] (the strongest here, why one is
//!   unavailable), [`Network`], [`Limits`], and what this machine offers
//!   a session ([`Offer`]);
//! - **processes**: a session's door ([`Doors`], [`Door`], [`DoorKey`]),
//!   process groups ([`Live`] and whose a process is, [`signal_group`],
//!   [`end_groups`], [`processes_by_wake`], [`pid_running`]), trees
//!   ([`Cgroups`], [`Trees`]), the keeper's clock ([`keeper_until`]), and
//!   [`intercept`]: cryod's own binary run as a session's launcher
//!   ([`intercept_launchers`] in the small `cryod-launch`, [`LAUNCHER`]);
//! - **what cryod shares with it**: the spawn gate ([`receive`]), stock
//!   gRPC clients let in ([`Mended`]), [`find_program`].
//!
//! Inside, one room each; each uses only rooms of the lines before it:
//! - `hpack` (a header block's Huffman-coded strings made raw);
//! - `paths` (finding programs), `fds` (the spawn gate), `authority` (a
//!   client's `:authority` mended), `setup`, `acp` (the client of an Agent
//!   Client Protocol agent, `cryod __acp`), `group` (process groups),
//!   `forward` (the way out of a bubblewrap session's network, `cryod
//!   __forward`);
//! - `door` (a session's own socket), `sandbox` (the modes, bubblewrap's
//!   arguments, systemd scopes), `kinds` (each [`Kind`] and its command
//!   line, `kinds/kinds-mcp.md`);
//! - `events` (each kind's stream read: transcript and usage,
//!   `agent-events.md`), `tree` (a session's whole tree and its end,
//!   `cryod-launch __sandbox`), `upstream` (where a session's model calls go, and
//!   each kind pointed at the gateway), `precheck` (short commands run
//!   confined);
//! - `watch` (stalls and loops), `harden` (Landlock, no capability, the
//!   seccomp filter: `cryod-launch __confine`), `keeper` (a fleet node's agent,
//!   killed when cryod stops vouching for it: `cryod __keep`);
//! - `stream` (a known kind's output read as it comes), `confine` (the
//!   chain of launchers around a program);
//! - `launch` (a session's start).

// One door: what lib.rs re-exports is the crate's API; an item of a room
// that it does not is the crate's own (`pub(crate)`), so the rooms stay
// private and this list stays whole.
#![warn(unreachable_pub)]

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
    /// One of cryod's own launchers (`cryod-launch __confine`, `__sandbox`,
    /// `__forward`) was not given what it needs, its arguments or its
    /// plan: cryod's own mistake, or a launcher run by hand.
    #[error("{0}")]
    Launcher(String),
}

/// The agent wing's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

mod acp;
mod authority;
mod confine;
mod door;
mod events;
mod fds;
mod forward;
mod group;
mod harden;
mod hpack;
mod keeper;
mod kinds;
mod launch;
mod paths;
mod precheck;
mod sandbox;
mod setup;
mod stream;
mod tree;
mod upstream;
mod watch;

pub use authority::Mended;
pub use confine::{Jail, Places, Run};
pub use door::{Door, DoorConn, DoorKey, Doors, Incoming};
pub use events::{Limited, Price, Prices, ToolCall, Usage};
pub use fds::receive;
pub use group::{Live, end_groups, pid_running, processes_by_wake, signal_group};
pub use harden::Offer;
pub use keeper::until as keeper_until;
pub use kinds::{Kind, Turn, agent_bin_dir, agent_words};
pub use launch::{AGENT_LOG, Exit, Gateway, Keeper, PROMPT_FILE, Session, Started, Through, Ticket, start};
pub use paths::{BUILD, LAUNCHER, find_program};
pub use precheck::{Prepared, Ran};
pub use sandbox::PLAN_VAR;
pub use setup::{Limits, NETWORK_LANDLOCK, Network, Sandbox, Setup};
pub use stream::{EVENTS_FILE, Tell, Trace};
pub use tree::{Cgroups, Tree, Trees};
pub use upstream::{Auth, agent_file_upstream};
pub use watch::Watch;

/// Runs cryod's own binary as one of a session's launchers, when it was
/// started as one (`cryod __keep`, `__sandbox`, `__confine`, `__forward`,
/// `__acp`): the call does not return then. cryod's `main` calls it first.
pub fn intercept() {
    // A session's keeper (see `keeper`).
    keeper::intercept();
    intercept_launchers();
    // The way out of a bubblewrap session's network (see `forward`).
    forward::intercept();
    // The client of an Agent Client Protocol agent (see `acp`).
    acp::intercept();
}

/// Runs the launchers every confined run goes through (`__sandbox`, the
/// keeper of its tree, then `__confine`, the last step) when this process
/// was started as one: the call does not return then. The small
/// `cryod-launch` binary, installed beside cryod, is these alone: a
/// session starts them, not cryod's 40 MB (see [`LAUNCHER`]).
pub fn intercept_launchers() {
    // The keeper of a session's tree (see `tree`), which may run the last
    // step in its child.
    tree::intercept(tree::LastStep { arg: harden::ARG, run: harden::here });
    // The last step before a session's program runs (see `harden`).
    harden::intercept();
}
