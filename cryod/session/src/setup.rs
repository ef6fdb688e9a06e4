//! What a chamber's `cryo.toml` says of whatever runs for it, as this
//! crate reads it: how it is confined (its sandbox, where it may connect,
//! its resource limits), which `cryod.toml` and `cryo.toml` parse, and the
//! rest of a session's settings ([`Setup`]), which cryod hands in.

use std::path::PathBuf;

use serde::Deserialize;

/// A chamber's settings for whatever runs for it, as cryod read them from
/// its `cryo.toml` (defaults applied).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Setup {
    /// The `agent` line.
    pub agent: String,
    /// `network`: where its processes may connect.
    pub network: Network,
    /// `memory_max` and `cpu_weight`.
    pub limits: Limits,
    /// `writable` and `readable`: folders a sandboxed process may also
    /// write, or read (absolute).
    pub writable: Vec<PathBuf>,
    pub readable: Vec<PathBuf>,
    /// `mcp`: offer `cryo-agent mcp` to a known kind.
    pub mcp: bool,
    /// `[provider] gateway`: a known kind reaches its provider through
    /// cryod's gateway.
    pub gateway: bool,
    /// The upstream the agent's CLI named in its own config file when the
    /// operator accepted `cryo.toml` (see [`crate::agent_file_upstream`]).
    pub file_upstream: Option<String>,
    /// `keep_exchanges`: the session's exchanges with its provider are
    /// kept, redacted, in the chamber.
    pub keep_exchanges: bool,
    /// `timezone`, when the file names one: the agent's `TZ`.
    pub timezone: Option<String>,
}

/// Where a session's processes may connect (`network` in `cryo.toml`).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Anywhere the machine reaches.
    #[default]
    Open,
    /// cryod's provider gateway only: under bubblewrap, a network of the
    /// session's own whose one way out is the gateway (never Landlock's
    /// port rules, see [`NETWORK_LANDLOCK`]).
    Gateway,
}

/// How an agent's session is confined (`sandbox` in `cryo.toml`, its
/// default in `cryod.toml`).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Sandbox {
    /// Unconfined: the agent reaches what the user does.
    #[default]
    Off,
    /// Linux's Landlock (see `sandbox`).
    Landlock,
    /// Bubblewrap: private mount, process and IPC namespaces (see `sandbox`).
    Bwrap,
}

impl Sandbox {
    /// Its name in `cryo.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Sandbox::Off => "off",
            Sandbox::Landlock => "landlock",
            Sandbox::Bwrap => "bwrap",
        }
    }

    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<Sandbox> {
        [Sandbox::Off, Sandbox::Landlock, Sandbox::Bwrap].into_iter().find(|m| m.as_str() == s)
    }
}

/// Why `network = "gateway"` is refused under Landlock.
pub const NETWORK_LANDLOCK: &str = "network = \"gateway\" needs sandbox = \"bwrap\": Landlock limits the ports a \
                                    session connects to, not the addresses, so any host on the gateway's port (and any \
                                    over MPTCP) would be reachable";

/// A session's resource limits (`memory_max`, `cpu_weight` in
/// `cryo.toml`), applied through a transient systemd scope when cryod runs
/// under systemd (see `sandbox::scope_args`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// systemd's `MemoryMax=`: bytes with an optional K, M, G or T, a
    /// percentage of the machine's memory, or `infinity`.
    pub memory_max: Option<String>,
    /// systemd's `CPUWeight=`: 1 to 10000 (100 is everyone's default).
    pub cpu_weight: Option<u32>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.memory_max.is_none() && self.cpu_weight.is_none()
    }

    /// The key that is wrong, and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(m) = &self.memory_max {
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            let ok = m == "infinity"
                || m.strip_suffix('%').is_some_and(|p| digits(p) && p.parse::<u32>().is_ok_and(|p| p <= 100))
                || digits(m.strip_suffix(['K', 'M', 'G', 'T']).unwrap_or(m));
            if !ok {
                return Err((
                    "memory_max",
                    format!("{m:?}: expected bytes with K, M, G or T (\"2G\"), a percentage or \"infinity\""),
                ));
            }
        }
        if let Some(w) = self.cpu_weight
            && !(1..=10_000).contains(&w)
        {
            return Err(("cpu_weight", format!("{w} is outside 1..=10000 (100 is the default weight)")));
        }
        Ok(())
    }
}
