//! Conversions between daemon types and `cryo.v1` messages, in one place.

use std::path::PathBuf;

use cryo_proto::v1 as pb;

use crate::chamber::scaffold::Scaffolded;
use crate::daemon::{ChamberRef, ChamberView, State};
use crate::error::Error;
use crate::store::Desired;

pub fn chamber_ref(r: Option<pb::ChamberRef>) -> Result<ChamberRef, Error> {
    match r.and_then(|r| r.by) {
        Some(pb::chamber_ref::By::Name(n)) if !n.is_empty() => Ok(ChamberRef::Name(n)),
        Some(pb::chamber_ref::By::Path(p)) if !p.is_empty() => Ok(ChamberRef::Path(PathBuf::from(p))),
        _ => Err(Error::Invalid("no chamber named: give a name or a path".into())),
    }
}

pub fn chamber(v: &ChamberView) -> pb::Chamber {
    pb::Chamber {
        id: v.record.id,
        name: v.record.name.clone(),
        path: v.record.path.clone(),
        desired: match v.record.desired {
            Desired::Stopped => pb::DesiredState::Stopped,
            Desired::Started => pb::DesiredState::Started,
        } as i32,
        state: match v.state {
            State::Stopped => pb::ChamberState::Stopped,
            State::Idle => pb::ChamberState::Idle,
            State::Running => pb::ChamberState::Running,
            State::Faulted => pb::ChamberState::Faulted,
        } as i32,
        created_at: v.record.created_at.clone(),
        fault: v.fault.clone().unwrap_or_default(),
        agent: v.agent.clone(),
        timezone: v.timezone.name().to_string(),
    }
}

pub fn init_reply(path: String, s: Scaffolded) -> pb::ChamberInitReply {
    pb::ChamberInitReply { path, created: s.created, kept: s.kept }
}

/// An optional string field: empty means unset.
pub fn opt(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}
