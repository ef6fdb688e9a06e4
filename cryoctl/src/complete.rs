//! Shell completions. The scripts are clap_complete's dynamic ones: the shell
//! calls `COMPLETE=SHELL cryoctl ...` as you type, so chamber names come from
//! the running daemon (and nothing is stale after an upgrade).

use std::process::ExitCode;

use clap_complete::{ArgValueCandidates, CompletionCandidate};

/// Completes a CHAMBER argument with the registered names.
pub fn chambers() -> ArgValueCandidates {
    ArgValueCandidates::new(names)
}

fn names() -> Vec<CompletionCandidate> {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return Vec::new() };
    rt.block_on(async {
        let path = std::env::var_os("CRYO_SOCKET").map(Into::into).unwrap_or_else(cryo_proto::socket_path);
        let Ok(mut c) = cryo_proto::control(&path, "cryoctl").await else { return Vec::new() };
        let Ok(list) = c.chamber_list(cryo_proto::v1::ChamberListRequest { archived: false }).await else {
            return Vec::new();
        };
        list.into_inner()
            .chambers
            .into_iter()
            .map(|c| CompletionCandidate::new(c.name).help(Some(c.path.into())))
            .collect()
    })
}

/// The registration script for `shell`, as `COMPLETE=SHELL cryoctl`
/// prints it.
pub fn registration(shell: &str) -> Option<Vec<u8>> {
    let exe = std::env::current_exe().ok()?;
    let out = std::process::Command::new(exe).env("COMPLETE", shell).output().ok()?;
    (out.status.success() && !out.stdout.is_empty()).then_some(out.stdout)
}

/// `cryoctl completions SHELL`: the registration script.
pub fn script(shell: &str) -> ExitCode {
    match registration(shell) {
        Some(bytes) => {
            use std::io::Write;
            let _ = std::io::stdout().write_all(&bytes);
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("cryoctl: cannot produce the {shell} completion script");
            ExitCode::from(cryo_proto::exit::REFUSED)
        }
    }
}
