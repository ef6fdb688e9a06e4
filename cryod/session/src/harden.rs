//! The last step before anything of a chamber runs (its agent, a pre-check,
//! a jailed git command): `cryod-launch __confine -- PROGRAM ARGS` takes from this
//! process what a session must not hold, reads back that the kernel took
//! it, and becomes the program. Whoever runs cryod, root included:
//!
//! - Landlock's rules, under `sandbox = "landlock"` (as [`super::sandbox`]
//!   builds them);
//! - every capability: the effective, permitted, inheritable and ambient
//!   sets emptied and the bounding set cleared, under `no_new_privs`, so
//!   that no exec (a setuid program, file capabilities, root's own) gives
//!   one back;
//! - a seccomp filter that keeps the session's hands off everything above
//!   it (see `filter`).
//!
//! Nothing runs unless each holds: `/proc/self/status` is read back after
//! the filter is in place, and the launch fails closed with one line.
//!
//! What the launcher is told travels in its environment ([`PLAN_VAR`],
//! removed before the program runs), never in its arguments, which any
//! process of the machine may read.

use std::collections::BTreeMap;
use std::ffi::OsString;

use crate::paths::{cannot_run, program_after_dashes};
use crate::{Error, Result};

#[cfg(test)]
use super::sandbox::Policy;
pub(crate) use super::sandbox::{PLAN_VAR, Plan, STDIN_VAR};

/// `cryod-launch __confine -- PROGRAM ARGS` (or cryod's own binary: `LAUNCHER`).
pub(crate) const ARG: &str = "__confine";

/// `cryod-launch __confine --exec ARG0 -- PROGRAM ARGS`: only unblock the signals
/// and become the program (a namespace's init runs the program so).
const EXEC: &str = "--exec";

/// What a confined process holds, as `/proc/self/status` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Held {
    /// `CapInh`, `CapPrm`, `CapEff`, `CapBnd`, `CapAmb`, as hex masks.
    pub caps: BTreeMap<String, u64>,
    pub no_new_privs: bool,
    /// `Seccomp: 2` (a filter).
    pub seccomp: bool,
}

impl Held {
    /// This process's.
    pub(crate) fn now() -> Held {
        Held::parse(&std::fs::read_to_string("/proc/self/status").unwrap_or_default())
    }

    pub(crate) fn parse(status: &str) -> Held {
        let mut held = Held::default();
        for line in status.lines() {
            let Some((key, value)) = line.split_once(':') else { continue };
            let value = value.trim();
            match key {
                "CapInh" | "CapPrm" | "CapEff" | "CapBnd" | "CapAmb" => {
                    held.caps.insert(key.to_string(), u64::from_str_radix(value, 16).unwrap_or(u64::MAX));
                }
                "NoNewPrivs" => held.no_new_privs = value == "1",
                "Seccomp" => held.seccomp = value == "2",
                _ => {}
            }
        }
        held
    }

    /// What is left that a session must not hold, in words (the bounding
    /// set too if `bounding`); `None` when nothing is.
    pub(crate) fn excess(&self, bounding: bool) -> Option<String> {
        let mut left: Vec<String> = ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
            .iter()
            .filter(|k| bounding || **k != "CapBnd")
            .filter_map(|k| match self.caps.get(*k) {
                Some(0) => None,
                Some(m) => Some(format!("{k} {m:016x}")),
                None => Some(format!("{k} unknown")),
            })
            .collect();
        if !self.no_new_privs {
            left.push("no_new_privs unset".into());
        }
        if !self.seccomp {
            left.push("no seccomp filter".into());
        }
        (!left.is_empty()).then(|| left.join(", "))
    }
}

/// `cryod-launch __confine …`: confines this process and becomes the program;
/// returns only if this process is not the launcher.
pub(crate) fn intercept() {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|a| a != ARG) {
        return;
    }
    here(args.collect())
}

/// Confines this process and becomes the program given by `args` (what
/// follows `__confine`); on failure, says why and exits 126. The keeper of
/// the tree runs it in its child, in place of an exec of the launcher
/// (`tree::LastStep`).
pub(crate) fn here(args: Vec<OsString>) -> ! {
    let why = match confine_and_exec(args) {
        Ok(never) => match never {},
        Err(why) => why,
    };
    eprintln!("cryo sandbox: {why}");
    std::process::exit(126)
}

fn confine_and_exec(args: Vec<OsString>) -> Result<std::convert::Infallible> {
    use std::os::unix::process::CommandExt;
    // The keeper of the tree reads its signals from a signalfd, with every
    // one blocked, and a child starts with its parent's mask: what the
    // program runs with is unblocked here.
    let _ = nix::sys::signal::SigSet::all().thread_unblock();
    // A session of its own: no controlling terminal (cryod's, whose input
    // `TIOCSTI` would type into), and a process group of its own that
    // `kill 0` stays in (never its keeper's, nor bubblewrap's).
    let _ = nix::unistd::setsid();
    let mut args = args.into_iter().peekable();
    if args.next_if(|a| a == EXEC).is_some() {
        // A namespace's init runs the program through this: unblocked, as
        // confined as the init made itself.
        let arg0 = args.next().ok_or_else(|| Error::Launcher("no name for the program".into()))?;
        let program = program_after_dashes(&mut args)?;
        let e = std::process::Command::new(&program).arg0(arg0).args(args).exec();
        return Err(cannot_run(&program, e));
    }
    let program = program_after_dashes(&mut args)?;
    let mut plan = Plan::from_env()?;
    if let Some(text) = std::env::var_os(STDIN_VAR) {
        give_stdin(text.as_encoded_bytes())?;
    }
    // The first process of a process namespace of the session's own: its
    // `/proc` shows the session alone, and its terminals are its own (a
    // new `devpts`), which Landlock then lets it open: never the user's.
    let init = nix::unistd::getpid().as_raw() == 1;
    if init {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
            .map_err(|e| Error::Refused(format!("cannot make the session's mount namespace: {e}")))?;
        own_proc()?;
        if let Some(policy) = plan.landlock.as_mut()
            && own_terminals().is_ok()
        {
            policy.writable.extend(["/dev/pts", "/dev/ptmx"].map(std::path::PathBuf::from));
        }
    }
    confine(&plan, init)?;
    if init {
        // A namespace's init ignores the signals it has no handler for: it
        // stays, runs the program as its child (through this launcher
        // again, which unblocks the signals the init blocks), and ends
        // with it.
        let own = crate::paths::own_exe()?;
        let mut command = std::process::Command::new(own);
        command.args([ARG.into(), EXEC.into(), OsString::from(&plan.arg0), "--".into(), program]).args(args);
        command.env_remove(PLAN_VAR).env_remove(STDIN_VAR);
        let grace = std::time::Duration::from_millis(plan.grace_ms);
        super::tree::supervise(command, grace, true, None, None).map(|end| end.exit())
    } else {
        let e = std::process::Command::new(&program)
            .arg0(&plan.arg0)
            .args(args)
            .env_remove(PLAN_VAR)
            .env_remove(STDIN_VAR)
            .exec();
        Err(cannot_run(&program, e))
    }
}

/// Mounts a `devpts` of the session's own over `/dev/pts` (and its `ptmx`
/// over `/dev/ptmx`), in this mount namespace alone: the pseudo-terminals a
/// program opens (a CLI's shell tool) are the session's, and none of the
/// user's terminals is in sight.
fn own_terminals() -> Result<()> {
    use nix::mount::{MsFlags, mount};
    let none: Option<&str> = None;
    mount(
        Some("devpts"),
        "/dev/pts",
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    )
    .and_then(|()| mount(Some("/dev/pts/ptmx"), "/dev/ptmx", none, MsFlags::MS_BIND, none))
    .map_err(|e| Error::Refused(format!("cannot give the session terminals of its own: {e}")))
}

/// Mounts a `/proc` of this process namespace over the machine's, in this
/// process's own mount namespace (made private first, so that nothing
/// propagates back to the machine).
fn own_proc() -> Result<()> {
    use nix::mount::{MsFlags, mount};
    let none: Option<&str> = None;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
        .map_err(|e| Error::Refused(format!("cannot make the session's mounts private: {e}")))?;
    mount(Some("proc"), "/proc", Some("proc"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC, none)
        .map_err(|e| Error::Refused(format!("cannot mount the session's own /proc: {e}")))
}

/// Makes `text` this process's standard input: a memory file holding it,
/// read from its start.
fn give_stdin(text: &[u8]) -> Result<()> {
    use std::io::{Seek, Write};
    let fail = |e: &dyn std::fmt::Display| Error::Refused(format!("cannot give the program its input: {e}"));
    let fd =
        nix::sys::memfd::memfd_create(c"cryo-stdin", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).map_err(|e| fail(&e))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(text).and_then(|()| file.rewind()).map_err(|e| fail(&e))?;
    // dup2 clears close-on-exec on the copy.
    nix::unistd::dup2_stdin(&file).map_err(|e| fail(&e))
}

/// Applies `plan` to this process (`init`: the first of a process
/// namespace of its own): Landlock if it says so, then every capability
/// gone, then the filter; fails unless all of it holds.
pub(crate) fn confine(plan: &Plan, init: bool) -> Result<()> {
    if let Some(policy) = &plan.landlock {
        super::sandbox::restrict(policy)?;
    }
    let bounded = drop_capabilities()?;
    let ancestors = ancestors();
    let own_pids = plan.own_pids || init;
    let program = filter(&ancestors, own_group(), plan, own_pids)?;
    for program in [program, no_clone3()?] {
        seccompiler::apply_filter(&program)
            .map_err(|e| Error::Refused(format!("cannot install the seccomp filter: {e}")))?;
    }
    // A normal user's process cannot clear its bounding set, and under
    // no_new_privs nothing it runs can gain what the set allows.
    match Held::now().excess(bounded) {
        None => Ok(()),
        Some(left) => Err(Error::Refused(format!("the session would still hold: {left}; it is not started"))),
    }
}

/// Empties every capability set and clears the bounding set; whether the
/// bounding set was cleared. That needs `CAP_SETPCAP`, which root has (and
/// a Landlock session's init in its own user namespace); a normal user's
/// process has none, and its set stays as it is (under `no_new_privs`
/// nothing it runs gains from it).
fn drop_capabilities() -> Result<bool> {
    use caps::CapSet;
    let fail =
        |what: &str, e: caps::errors::CapsError| Error::Refused(format!("cannot drop the {what} capabilities: {e}"));
    caps::clear(None, CapSet::Ambient).map_err(|e| fail("ambient", e))?;
    let bounded = caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP).unwrap_or(false);
    if bounded {
        caps::clear(None, CapSet::Bounding).map_err(|e| fail("bounding", e))?;
    }
    caps::clear(None, CapSet::Inheritable).map_err(|e| fail("inheritable", e))?;
    caps::clear(None, CapSet::Permitted).map_err(|e| fail("permitted", e))?;
    nix::sys::prctl::set_no_new_privs().map_err(|e| Error::Refused(format!("cannot set no_new_privs: {e}")))?;
    Ok(bounded || caps::read(None, CapSet::Bounding).is_ok_and(|b| b.is_empty()))
}

/// This process's ancestors (pid and process group), its parent first,
/// up to the first process of its namespace.
fn ancestors() -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    let mut pid = nix::unistd::getppid().as_raw();
    while pid > 0 && out.len() < 32 {
        let Some((ppid, pgid)) = stat(pid) else { break };
        out.push((pid, pgid));
        pid = ppid;
    }
    out
}

fn own_group() -> i32 {
    nix::unistd::getpgrp().as_raw()
}

/// A process's parent and process group.
fn stat(pid: i32) -> Option<(i32, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.rsplit_once(") ")?.1;
    let mut f = rest.split(' ').skip(1).map(|x| x.parse::<i32>().ok());
    Some((f.next()??, f.next()??))
}

/// The seccomp filter: a list of refusals (`EPERM`), everything else
/// allowed. Above the session are its launcher, a fleet node's keeper,
/// cryod, and cryod's own parents (`ancestors`):
///
/// - no signal to any of them, nor to their process groups, nor to every
///   process at once (`kill(-1)`); to the session's own group (which
///   holds its launcher) none that cannot be caught (SIGKILL, SIGSTOP);
///   `tkill` (which names a thread alone) not at all;
/// - no `pidfd_open` of them;
/// - no resource limit set (`prlimit`), priority (`setpriority`,
///   `ioprio_set`), scheduling (`sched_set*`) or page move of any process
///   but the caller's own (pid 0);
/// - where the kernel does not scope them (no Landlock ABI 6 and no
///   process namespace of its own), no `pidfd_send_signal` at all;
/// - no `ptrace`, `process_vm_readv`/`writev` or `pidfd_getfd` at all;
/// - no owner set on a file (`F_SETOWN`, `F_SETOWN_EX`, `FIOSETOWN`,
///   `SIOCSPGRP`), whose `SIGIO` would be a signal sent by proxy.
///
/// On x86-64 the x32 numbers of each are refused alike; a 32-bit call
/// (another architecture in the filter's eyes) kills the process.
fn filter(ancestors: &[(i32, i32)], own_group: i32, plan: &Plan, own_pids: bool) -> Result<seccompiler::BpfProgram> {
    use nix::libc;
    use seccompiler::{SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompFilter, SeccompRule};
    let bad = seccomp_unbuilt;
    let cond = |arg: u8, len: Len, op: Op, value: u64| seccompiler::SeccompCondition::new(arg, len, op, value);
    // A pid as the kernel compares it: its 32 bits.
    let pid = |p: i32| u64::from(p as u32);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut deny = |nr: libc::c_long, conds: Vec<seccompiler::SeccompCondition>| -> Result<()> {
        let entry = rules.entry(nr).or_default();
        if !conds.is_empty() {
            entry.push(SeccompRule::new(conds).map_err(bad)?);
        }
        Ok(())
    };
    let uncatchable = [libc::SIGKILL, libc::SIGSTOP];
    let mut groups: Vec<i32> = ancestors.iter().map(|a| a.1).filter(|g| *g > 0).collect();
    groups.sort_unstable();
    groups.dedup();
    // kill(pid, sig) and rt_sigqueueinfo(pid, sig, info) name their target alike.
    for nr in [libc::SYS_kill, libc::SYS_rt_sigqueueinfo] {
        deny(nr, vec![cond(0, Len::Dword, Op::Eq, pid(-1)).map_err(bad)?])?;
        for (p, _) in ancestors {
            deny(nr, vec![cond(0, Len::Dword, Op::Eq, pid(*p)).map_err(bad)?])?;
        }
        for g in &groups {
            if *g == own_group {
                for sig in uncatchable {
                    for target in [0, -*g] {
                        deny(
                            nr,
                            vec![
                                cond(0, Len::Dword, Op::Eq, pid(target)).map_err(bad)?,
                                cond(1, Len::Dword, Op::Eq, pid(sig)).map_err(bad)?,
                            ],
                        )?;
                    }
                }
            } else {
                deny(nr, vec![cond(0, Len::Dword, Op::Eq, pid(-*g)).map_err(bad)?])?;
            }
        }
    }
    deny(libc::SYS_tkill, Vec::new())?;
    for nr in [libc::SYS_tgkill, libc::SYS_rt_tgsigqueueinfo, libc::SYS_pidfd_open] {
        for (p, _) in ancestors {
            deny(nr, vec![cond(0, Len::Dword, Op::Eq, pid(*p)).map_err(bad)?])?;
        }
    }
    // prlimit64(pid, resource, new, old): setting another's.
    deny(
        libc::SYS_prlimit64,
        vec![cond(0, Len::Dword, Op::Ne, 0).map_err(bad)?, cond(2, Len::Qword, Op::Ne, 0).map_err(bad)?],
    )?;
    // setpriority(which, who, prio): PRIO_PROCESS of itself only.
    deny(libc::SYS_setpriority, vec![cond(0, Len::Dword, Op::Ne, 0).map_err(bad)?])?;
    deny(libc::SYS_setpriority, vec![cond(1, Len::Dword, Op::Ne, 0).map_err(bad)?])?;
    // ioprio_set(which, who, ioprio): IOPRIO_WHO_PROCESS (1) of itself only.
    deny(libc::SYS_ioprio_set, vec![cond(0, Len::Dword, Op::Ne, 1).map_err(bad)?])?;
    deny(libc::SYS_ioprio_set, vec![cond(1, Len::Dword, Op::Ne, 0).map_err(bad)?])?;
    for nr in [
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
        libc::SYS_migrate_pages,
        libc::SYS_move_pages,
    ] {
        deny(nr, vec![cond(0, Len::Dword, Op::Ne, 0).map_err(bad)?])?;
    }
    if !plan.signals_scoped() && !own_pids {
        deny(libc::SYS_pidfd_send_signal, Vec::new())?;
    }
    // No hand inside another process, even the session's own (its init and
    // bubblewrap's, which run outside this filter).
    for nr in [libc::SYS_ptrace, libc::SYS_process_vm_readv, libc::SYS_process_vm_writev, libc::SYS_pidfd_getfd] {
        deny(nr, Vec::new())?;
    }
    // No signal by proxy: a file's owner (`F_SETOWN`, `FIOSETOWN`,
    // `SIOCSPGRP`) gets `SIGIO` (which ends a process that does not handle
    // it) when the file is ready. Only clearing it is left.
    deny(
        libc::SYS_fcntl,
        vec![
            cond(1, Len::Dword, Op::Eq, libc::F_SETOWN as u64).map_err(bad)?,
            cond(2, Len::Qword, Op::Ne, 0).map_err(bad)?,
        ],
    )?;
    // Linux's numbers, the same on every architecture (the C library
    // names them only for some): F_SETOWN_EX, FIOSETOWN, SIOCSPGRP.
    const F_SETOWN_EX: u64 = 15;
    const FIOSETOWN: u64 = 0x8901;
    const SIOCSPGRP: u64 = 0x8902;
    deny(libc::SYS_fcntl, vec![cond(1, Len::Dword, Op::Eq, F_SETOWN_EX).map_err(bad)?])?;
    for request in [FIOSETOWN, SIOCSPGRP] {
        deny(libc::SYS_ioctl, vec![cond(1, Len::Dword, Op::Eq, request).map_err(bad)?])?;
    }
    // x32's numbers: the same calls with bit 30 set.
    if cfg!(target_arch = "x86_64") {
        const X32: i64 = 0x4000_0000;
        let native: Vec<(i64, Vec<SeccompRule>)> = rules.iter().map(|(nr, r)| (*nr | X32, r.clone())).collect();
        rules.extend(native);
    }
    let arch = std::env::consts::ARCH.try_into().map_err(|e| Error::Unavailable(format!("seccomp: {e}")))?;
    let filter =
        SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch).map_err(bad)?;
    filter.try_into().map_err(|e: seccompiler::BackendError| bad(e))
}

/// A seccomp filter this machine's seccompiler cannot build.
fn seccomp_unbuilt(e: seccompiler::BackendError) -> Error {
    Error::Unavailable(format!("cannot build the seccomp filter: {e}"))
}

/// The second filter: `clone3` answers `ENOSYS`, so that the C library
/// falls back to `clone`. Its flags sit behind a pointer no filter reads,
/// and among them `CLONE_INTO_CGROUP` would let root's uid (no capability
/// needed, only the cgroup files' owner) start a process outside the
/// session's cgroup, where ending the session would not reach it.
fn no_clone3() -> Result<seccompiler::BpfProgram> {
    use seccompiler::{SeccompAction, SeccompFilter};
    let bad = seccomp_unbuilt;
    let mut rules = BTreeMap::new();
    rules.insert(nix::libc::SYS_clone3, Vec::new());
    if cfg!(target_arch = "x86_64") {
        rules.insert(nix::libc::SYS_clone3 | 0x4000_0000, Vec::new());
    }
    let arch = std::env::consts::ARCH.try_into().map_err(|e| Error::Unavailable(format!("seccomp: {e}")))?;
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(nix::libc::ENOSYS as u32), arch)
        .map_err(bad)?;
    filter.try_into().map_err(|e: seccompiler::BackendError| bad(e))
}

/// What this machine offers a session, for `cryoctl doctor`: the
/// strongest sandbox, the kernel's Landlock and what it confines, and what
/// a session under that sandbox holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The strongest sandbox this machine provides
    /// ([`crate::Sandbox::strongest`]).
    pub strongest: crate::setup::Sandbox,
    /// The kernel's Landlock ABI, as far as cryo can tell (0: none).
    pub landlock_abi: u32,
    /// What a Landlock sandbox confines at that ABI beyond files, in words.
    pub landlock: String,
    /// What a session under the strongest sandbox holds, in one phrase.
    pub holds: String,
}

impl Offer {
    /// This machine's, where a session's tree ends by `tree` (how cryod's
    /// cgroups describe it).
    pub fn here(tree: &str) -> Offer {
        let strongest = crate::setup::Sandbox::strongest();
        let landlock_abi = super::sandbox::landlock_abi();
        let landlock = super::sandbox::landlock_adds(landlock_abi);
        Offer { strongest, landlock_abi, landlock, holds: holds(strongest, tree) }
    }
}

/// What a session holds, in one phrase, for `cryo-agent.log`'s header and
/// `cryoctl doctor`: its sandbox, and how its tree ends.
pub(crate) fn holds(mode: crate::setup::Sandbox, tree: &str) -> String {
    let sandbox = match mode {
        crate::setup::Sandbox::Off => "no sandbox".to_string(),
        crate::setup::Sandbox::Landlock => {
            format!("Landlock ABI {} and a process namespace of its own", super::sandbox::landlock_abi())
        }
        crate::setup::Sandbox::Bwrap => "bubblewrap (own mounts and process namespace)".to_string(),
    };
    format!("{sandbox}; no capabilities, no_new_privs, seccomp (no hand on cryod); tree ends by {tree}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_with_anything_left_says_what() {
        let clean = "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n\
                     CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n";
        assert_eq!(Held::parse(clean).excess(true), None);
        let root = clean
            .replace("CapBnd:\t0000000000000000", "CapBnd:\t000001ffffffffff")
            .replace("Seccomp:\t2", "Seccomp:\t0");
        assert_eq!(Held::parse(&root).excess(true).as_deref(), Some("CapBnd 000001ffffffffff, no seccomp filter"));
        assert_eq!(Held::parse(&root).excess(false).as_deref(), Some("no seccomp filter"));
        assert!(Held::parse("").excess(true).is_some_and(|e| e.contains("CapEff unknown")));
    }

    #[test]
    fn the_filter_builds_for_a_session_under_each_mode() {
        let ancestors = [(100, 100), (50, 40), (1, 1)];
        for plan in [
            Plan::default(),
            Plan { landlock: Some(Policy::default()), ..Plan::default() },
            Plan { own_pids: true, ..Plan::default() },
        ] {
            let program = filter(&ancestors, 100, &plan, plan.own_pids).unwrap();
            assert!(program.len() > 20 && program.len() < 4096, "{}", program.len());
        }
    }
}
