//! The Control service (cryoctl and the hub).

use std::path::Path;

use cryo_proto::v1 as pb;
use cryo_proto::v1::control_server::Control;
use tonic::{Request, Response, Status};

use super::convert::{self, opt};
use crate::daemon::Daemon;

pub struct ControlService {
    pub daemon: Daemon,
}

type R<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl Control for ControlService {
    async fn hello(&self, req: Request<pb::HelloRequest>) -> R<pb::HelloReply> {
        super::hello(&self.daemon, req.get_ref()).map(Response::new)
    }

    async fn chamber_init(&self, req: Request<pb::ChamberInitRequest>) -> R<pb::ChamberInitReply> {
        let req = req.into_inner();
        let s = self.daemon.init(Path::new(&req.dir), opt(&req.agent))?;
        Ok(Response::new(convert::init_reply(req.dir, s)))
    }

    async fn chamber_add(&self, req: Request<pb::ChamberAddRequest>) -> R<pb::ChamberAddReply> {
        let req = req.into_inner();
        let added = self.daemon.add(Path::new(&req.dir), opt(&req.name), req.init, opt(&req.agent)).await?;
        let mut view = added.view;
        if req.start {
            let r = crate::daemon::ChamberRef::Name(view.record.name.clone());
            view = self.daemon.start(&r).await?.0;
        }
        Ok(Response::new(pb::ChamberAddReply {
            chamber: Some(convert::chamber(&view)),
            already_registered: added.already_registered,
            init: added.init.map(|s| convert::init_reply(view.record.path.clone(), s)),
            warnings: view.snap.warnings.clone(),
        }))
    }

    async fn chamber_list(&self, _req: Request<pb::ChamberListRequest>) -> R<pb::ChamberListReply> {
        let chambers = self.daemon.list().iter().map(convert::chamber).collect();
        Ok(Response::new(pb::ChamberListReply { chambers }))
    }

    async fn chamber_status(&self, req: Request<pb::ChamberStatusRequest>) -> R<pb::ChamberStatusReply> {
        let req = req.into_inner();
        let views = match req.chamber {
            None => self.daemon.list(),
            Some(r) => vec![self.daemon.resolve(&convert::chamber_ref(Some(r))?)?],
        };
        Ok(Response::new(pb::ChamberStatusReply { chambers: views.iter().map(convert::chamber).collect() }))
    }

    async fn chamber_remove(&self, req: Request<pb::ChamberRemoveRequest>) -> R<pb::ChamberRemoveReply> {
        let r = convert::chamber_ref(req.into_inner().chamber)?;
        let v = self.daemon.remove(&r).await?;
        Ok(Response::new(pb::ChamberRemoveReply { chamber: Some(convert::chamber(&v)) }))
    }

    async fn chamber_start(&self, req: Request<pb::ChamberStartRequest>) -> R<pb::ChamberStartReply> {
        let r = convert::chamber_ref(req.into_inner().chamber)?;
        let (v, already) = self.daemon.start(&r).await?;
        Ok(Response::new(pb::ChamberStartReply { chamber: Some(convert::chamber(&v)), already }))
    }

    async fn chamber_stop(&self, req: Request<pb::ChamberStopRequest>) -> R<pb::ChamberStopReply> {
        let r = convert::chamber_ref(req.into_inner().chamber)?;
        let (v, already, ended_session) = self.daemon.stop(&r).await?;
        Ok(Response::new(pb::ChamberStopReply { chamber: Some(convert::chamber(&v)), already, ended_session }))
    }
}
