//! The Control service (cryoctl and the hub).

use std::path::Path;

use cryo_proto::v1 as pb;
use cryo_proto::v1::control_server::Control;
use tonic::{Request, Response, Status};

use crate::daemon::Daemon;
use crate::fronts::convert::{self, opt};

#[derive(Clone)]
pub struct ControlService {
    pub daemon: Daemon,
}

type R<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl Control for ControlService {
    type ChamberLogStream = super::follow::Streamed<pb::LogLines>;
    type ChamberMessagesStream = super::follow::Streamed<pb::Mail>;
    type ChamberWatchStream = super::follow::Streamed<pb::Chamber>;

    async fn chamber_log(&self, req: Request<pb::ChamberLogRequest>) -> R<Self::ChamberLogStream> {
        let req = req.into_inner();
        let v = self.daemon.resolve(&convert::chamber_ref(req.chamber)?).await?;
        Ok(Response::new(super::follow::log(&self.daemon, v, req.agent, req.follow, req.lines)))
    }

    async fn chamber_messages(&self, req: Request<pb::ChamberMessagesRequest>) -> R<Self::ChamberMessagesStream> {
        let req = req.into_inner();
        let v = self.daemon.resolve(&convert::chamber_ref(req.chamber)?).await?;
        Ok(Response::new(super::follow::messages(&self.daemon, v, req.follow, req.last)))
    }

    async fn hub(&self, _req: Request<pb::HubRequest>) -> R<pb::HubReply> {
        let info = self.daemon.hub();
        Ok(Response::new(pb::HubReply {
            url: info.url,
            token: info.token,
            up: info.up,
            error: info.error.unwrap_or_default(),
            note: info.note.unwrap_or_default(),
        }))
    }

    async fn metrics(&self, _req: Request<pb::MetricsRequest>) -> R<pb::MetricsReply> {
        Ok(Response::new(pb::MetricsReply { text: convert::metrics(&self.daemon) }))
    }

    async fn chamber_file(&self, req: Request<pb::ChamberFileRequest>) -> R<pb::ChamberFileReply> {
        let req = req.into_inner();
        let v = self.daemon.resolve(&convert::chamber_ref(req.chamber)?).await?;
        Ok(Response::new(pb::ChamberFileReply { text: self.daemon.read_chamber_file(&v, &req.name).await? }))
    }

    async fn chamber_diff(&self, req: Request<pb::ChamberDiffRequest>) -> R<pb::ChamberDiffReply> {
        let req = req.into_inner();
        let v = self.daemon.resolve(&convert::chamber_ref(req.chamber)?).await?;
        let d = self.daemon.chamber_diff(&v, (req.session > 0).then_some(req.session)).await?;
        Ok(Response::new(convert::diff(d)))
    }

    async fn usage(&self, req: Request<pb::UsageRequest>) -> R<pb::UsageReply> {
        let req = req.into_inner();
        let only = match req.chamber {
            Some(r) => Some(self.daemon.resolve(&convert::chamber_ref(Some(r))?).await?.record.id),
            None => None,
        };
        let since = match req.since.as_str() {
            "" => None,
            s => Some(
                chrono::DateTime::parse_from_rfc3339(s)
                    .map_err(|e| crate::error::Error::Invalid(format!("since {s:?} is not an RFC 3339 time: {e}")))?,
            ),
        };
        let q = crate::store::UsageQuery { since: since.map(|t| t.to_utc()), chamber: only, account: None };
        let rows = self.daemon.usage(q).await?;
        let names = self.daemon.names(rows.iter().map(|r| r.chamber_id));
        Ok(Response::new(convert::usage(&rows, &names, &req.by)?))
    }

    async fn history_prune(&self, req: Request<pb::HistoryPruneRequest>) -> R<pb::HistoryPruneReply> {
        let (before, n) = self.daemon.prune_history(&req.into_inner().keep).await?;
        Ok(Response::new(pb::HistoryPruneReply { before, sessions: n.sessions, passed: n.passed, claims: n.claims }))
    }

    async fn approvals(&self, req: Request<pb::ApprovalsRequest>) -> R<pb::ApprovalsReply> {
        let req = req.into_inner();
        let only = match req.chamber {
            Some(r) => Some(convert::chamber_ref(Some(r))?),
            None => None,
        };
        let limit = if req.limit == 0 { 50 } else { req.limit.min(1000) };
        let list = self.daemon.approvals(only.as_ref(), req.all, limit).await?;
        Ok(Response::new(pb::ApprovalsReply { approvals: list.iter().map(convert::approval).collect() }))
    }

    async fn approval_decide(&self, req: Request<pb::ApprovalDecideRequest>) -> R<pb::Approval> {
        let req = req.into_inner();
        let reason = Some(req.reason).filter(|r| !r.is_empty());
        let via: String = req.via.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(20).collect();
        let by = if via.is_empty() { "operator".to_string() } else { format!("operator via {via}") };
        let named = self.daemon.decide_approval(&req.id, req.approve, &by, reason).await?;
        Ok(Response::new(convert::approval(&named)))
    }

    async fn schedule(&self, req: Request<pb::ScheduleRequest>) -> R<pb::ScheduleReply> {
        let req = req.into_inner();
        let only = match req.chamber {
            Some(r) => Some(convert::chamber_ref(Some(r))?),
            None => None,
        };
        let count = if req.count == 0 { 10 } else { req.count as usize };
        let (wakes, problems) = self.daemon.schedule(only.as_ref(), count).await?;
        Ok(Response::new(pb::ScheduleReply { wakes: wakes.iter().map(convert::scheduled).collect(), problems }))
    }

    async fn notify_test(&self, req: Request<pb::NotifyTestRequest>) -> R<pb::NotifyLogReply> {
        let name = req.into_inner().name;
        let only = (!name.is_empty()).then_some(name.as_str());
        let done = self.daemon.notify_test(only).await?;
        Ok(Response::new(pb::NotifyLogReply { deliveries: done.iter().map(convert::delivery).collect() }))
    }

    async fn chamber_hook(&self, req: Request<pb::ChamberHookRequest>) -> R<pb::ChamberHookReply> {
        let r = convert::chamber_ref(req.into_inner().chamber)?;
        let (chamber, secret) = self.daemon.rotate_hook(&r).await?;
        let url = self.daemon.hub_link(&format!("hooks/{chamber}"));
        Ok(Response::new(pb::ChamberHookReply { chamber, url, secret }))
    }

    async fn notify_log(&self, req: Request<pb::NotifyLogRequest>) -> R<pb::NotifyLogReply> {
        let limit = match req.into_inner().limit {
            0 => 50,
            n => n as usize,
        };
        let log = self.daemon.notifiers().log(limit);
        Ok(Response::new(pb::NotifyLogReply { deliveries: log.iter().map(convert::delivery).collect() }))
    }

    async fn fleet_status(&self, _req: Request<pb::FleetStatusRequest>) -> R<pb::FleetStatusReply> {
        Ok(Response::new(convert::fleet_status(self.daemon.fleet_status().await?)))
    }

    async fn chamber_move(&self, req: Request<pb::ChamberMoveRequest>) -> R<pb::ChamberMoveReply> {
        let req = req.into_inner();
        let r = convert::chamber_ref(req.chamber)?;
        let (v, node, already) = self.daemon.move_to(&r, &req.to).await?;
        Ok(Response::new(pb::ChamberMoveReply { chamber: Some(convert::chamber(&v)), node, already }))
    }

    async fn fleet_drain(&self, req: Request<pb::FleetDrainRequest>) -> R<pb::FleetDrainReply> {
        let node = self.daemon.drain(&req.into_inner().node).await?;
        Ok(Response::new(pb::FleetDrainReply { node }))
    }

    async fn chamber_watch(&self, req: Request<pb::ChamberWatchRequest>) -> R<Self::ChamberWatchStream> {
        let v = self.daemon.resolve(&convert::chamber_ref(req.into_inner().chamber)?).await?;
        Ok(Response::new(super::follow::watch(&self.daemon, v)))
    }

    async fn hello(&self, req: Request<pb::HelloRequest>) -> R<pb::HelloReply> {
        super::hello(&self.daemon, req.get_ref()).map(Response::new)
    }

    async fn chamber_init(&self, req: Request<pb::ChamberInitRequest>) -> R<pb::ChamberInitReply> {
        let req = req.into_inner();
        let s = self.daemon.init(Path::new(&req.dir), opt(&req.agent), convert::sandbox_mode(&req.sandbox)?)?;
        Ok(Response::new(convert::init_reply(req.dir, s)))
    }

    async fn chamber_add(&self, req: Request<pb::ChamberAddRequest>) -> R<pb::ChamberAddReply> {
        let req = req.into_inner();
        let sandbox = convert::sandbox_mode(&req.sandbox)?;
        let how = (req.init, opt(&req.agent), sandbox);
        let (added, moved) =
            self.daemon.add_or_adopt(Path::new(&req.dir), opt(&req.name), how, req.adopt, req.stop_seed).await?;
        let mut view = added.view;
        let mut not_started = None;
        if req.start {
            let r = crate::daemon::ChamberRef::Name(view.record.name.clone());
            match self.daemon.start(&r, true).await {
                Ok((v, _)) => view = v,
                // Moved over and registered: what was done is said, and why
                // it did not start is one line of it.
                Err(e) if moved.is_some() => {
                    not_started = Some(format!("not started: {}", tonic::Status::from(e).message()))
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut warnings = view.snap.view.warnings.clone();
        warnings.extend(not_started);
        Ok(Response::new(pb::ChamberAddReply {
            chamber: Some(convert::chamber(&view)),
            already_registered: added.already_registered,
            init: added.init.map(|s| convert::init_reply(view.record.path.clone(), s)),
            warnings,
            adopted: moved.map(seed_move),
        }))
    }

    async fn chamber_release(&self, req: Request<pb::ChamberReleaseRequest>) -> R<pb::ChamberReleaseReply> {
        let r = convert::chamber_ref(req.into_inner().chamber)?;
        let (path, report) = self.daemon.release(&r).await?;
        Ok(Response::new(pb::ChamberReleaseReply { path, released: Some(seed_move(report)) }))
    }

    async fn chamber_list(&self, req: Request<pb::ChamberListRequest>) -> R<pb::ChamberListReply> {
        let chambers = self.daemon.listed(req.into_inner().archived).await.iter().map(convert::chamber).collect();
        Ok(Response::new(pb::ChamberListReply {
            chambers,
            holds: convert::holds(&self.daemon),
            admission: convert::admission(&self.daemon),
        }))
    }

    async fn chamber_status(&self, req: Request<pb::ChamberStatusRequest>) -> R<pb::ChamberStatusReply> {
        let req = req.into_inner();
        let one = req.chamber.is_some();
        let (views, sessions, (passed_total, passed), budgets) = match req.chamber {
            None => (self.daemon.list().await, Vec::new(), (0, Vec::new()), Vec::new()),
            Some(r) => {
                let v = self.daemon.resolve(&convert::chamber_ref(Some(r))?).await?;
                let sessions = self.daemon.sessions(v.record.id, 10).await?;
                let passed = self.daemon.passed(v.record.id, 10).await?;
                let budgets = self.daemon.budgets(v.record.id, Path::new(&v.record.path)).await?;
                (vec![v], sessions, passed, budgets)
            }
        };
        let mut holds = convert::holds(&self.daemon);
        if one && let [v] = views.as_slice() {
            // One chamber's status: the holds of the accounts it may bill.
            let (name, accounts) = (&v.record.name, &v.snap.accounts);
            holds.retain(|h| h.chambers.contains(name) || accounts.contains(&h.provider));
        }
        Ok(Response::new(pb::ChamberStatusReply {
            chambers: views.iter().map(convert::chamber).collect(),
            sessions: sessions.iter().map(convert::session).collect(),
            holds,
            admission: convert::admission(&self.daemon),
            passed: passed.iter().map(convert::passed).collect(),
            passed_total,
            budgets: budgets.iter().map(convert::budget_use).collect(),
        }))
    }

    async fn chamber_remove(&self, req: Request<pb::ChamberRemoveRequest>) -> R<pb::ChamberRemoveReply> {
        let r = convert::chamber_ref(req.into_inner().chamber)?;
        let v = self.daemon.remove(&r).await?;
        Ok(Response::new(pb::ChamberRemoveReply { chamber: Some(convert::chamber(&v)) }))
    }

    async fn chamber_start(&self, req: Request<pb::ChamberStartRequest>) -> R<pb::ChamberStartReply> {
        let req = req.into_inner();
        let r = convert::chamber_ref(req.chamber)?;
        let (v, already) = self.daemon.start(&r, !req.no_wait).await?;
        Ok(Response::new(pb::ChamberStartReply { chamber: Some(convert::chamber(&v)), already }))
    }

    async fn chamber_pause(&self, req: Request<pb::ChamberPauseRequest>) -> R<pb::ChamberPauseReply> {
        let r = convert::chamber_ref(req.into_inner().chamber)?;
        switched(self.daemon.pause(&r, true).await?)
    }

    async fn chamber_resume(&self, req: Request<pb::ChamberPauseRequest>) -> R<pb::ChamberPauseReply> {
        let r = convert::chamber_ref(req.into_inner().chamber)?;
        switched(self.daemon.pause(&r, false).await?)
    }

    async fn chamber_acknowledge(&self, req: Request<pb::ChamberAcknowledgeRequest>) -> R<pb::ChamberPauseReply> {
        let req = req.into_inner();
        let snooze = crate::daemon::Snooze { until: req.until, secs: req.snooze_secs };
        let v = self.daemon.acknowledge(&convert::chamber_ref(req.chamber)?, snooze).await?;
        Ok(Response::new(pb::ChamberPauseReply { chamber: Some(convert::chamber(&v)), already: false }))
    }

    async fn chamber_archive(&self, req: Request<pb::ChamberPauseRequest>) -> R<pb::ChamberPauseReply> {
        let r = convert::chamber_ref(req.into_inner().chamber)?;
        switched(self.daemon.archive(&r, true).await?)
    }

    async fn chamber_unarchive(&self, req: Request<pb::ChamberPauseRequest>) -> R<pb::ChamberPauseReply> {
        let r = convert::chamber_ref(req.into_inner().chamber)?;
        switched(self.daemon.archive(&r, false).await?)
    }

    async fn chamber_reset(&self, req: Request<pb::ChamberResetRequest>) -> R<pb::ChamberResetReply> {
        let r = convert::chamber_ref(req.into_inner().chamber)?;
        let (v, history) = self.daemon.reset(&r).await?;
        Ok(Response::new(pb::ChamberResetReply { chamber: Some(convert::chamber(&v)), history }))
    }

    async fn chamber_trust(&self, req: Request<pb::ChamberTrustRequest>) -> R<pb::ChamberTrustReply> {
        let req = req.into_inner();
        let r = convert::chamber_ref(req.chamber)?;
        let (v, changes) = self.daemon.trust(&r, None, req.diff).await?;
        Ok(Response::new(pb::ChamberTrustReply {
            chamber: Some(convert::chamber(&v)),
            accepted: changes.iter().map(|c| c.key.clone()).collect(),
            changes: changes
                .into_iter()
                .map(|c| pb::TrustChange { key: c.key, before: c.before.unwrap_or_default(), after: c.after })
                .collect(),
        }))
    }

    async fn chamber_wake(&self, req: Request<pb::ChamberWakeRequest>) -> R<pb::ChamberWakeReply> {
        let req = req.into_inner();
        let r = convert::chamber_ref(req.chamber)?;
        let message = opt(&req.message).map(str::to_string);
        let (v, out) = self.daemon.wake(&r, message, req.replace).await?;
        Ok(Response::new(pb::ChamberWakeReply {
            chamber: Some(convert::chamber(&v)),
            replaced: out.replaced,
            queued: out.queued,
            message_file: out.message_file.unwrap_or_default(),
        }))
    }

    async fn chamber_send(&self, req: Request<pb::ChamberSendRequest>) -> R<pb::ChamberSendReply> {
        let req = req.into_inner();
        let r = convert::chamber_ref(req.chamber)?;
        let d = self.daemon.send(&r, &req.from, &req.subject, &req.text).await?;
        Ok(Response::new(pb::ChamberSendReply { file: d.file, waits: d.waits.unwrap_or_default() }))
    }

    async fn chamber_todo(&self, req: Request<pb::ChamberTodoRequest>) -> R<pb::TodoListReply> {
        use crate::supervisor::TodoCall;
        let req = req.into_inner();
        let r = convert::chamber_ref(req.chamber)?;
        let listing = match &req.op {
            Some(pb::chamber_todo_request::Op::List(l)) => *l,
            _ => pb::TodoListRequest::default(),
        };
        let call = match req.op {
            None | Some(pb::chamber_todo_request::Op::List(_)) => TodoCall::List,
            Some(pb::chamber_todo_request::Op::Add(a)) => convert::todo_add(&a),
            Some(pb::chamber_todo_request::Op::Done(d)) => TodoCall::Done(d.id),
            Some(pb::chamber_todo_request::Op::Remove(d)) => TodoCall::Remove(d.id),
        };
        let mut reply = convert::todos_reply(self.daemon.todo(&r, call).await?)?;
        super::add_archived(&self.daemon, &r, &listing, &mut reply).await?;
        Ok(Response::new(reply))
    }

    async fn chamber_stop(&self, req: Request<pb::ChamberStopRequest>) -> R<pb::ChamberStopReply> {
        let req = req.into_inner();
        let r = convert::chamber_ref(req.chamber)?;
        let (v, already, ended_session) = self.daemon.stop(&r, !req.no_wait).await?;
        Ok(Response::new(pb::ChamberStopReply { chamber: Some(convert::chamber(&v)), already, ended_session }))
    }

    async fn chamber_sync(&self, req: Request<pb::ChamberSyncRequest>) -> R<pb::ChamberSyncReply> {
        use pb::chamber_sync_request::Action;
        let req = req.into_inner();
        let r = convert::chamber_ref(req.chamber)?;
        let action = Action::try_from(req.action).unwrap_or(Action::Status);
        let (results, bridges) = match action {
            Action::Status => (Vec::new(), self.daemon.resolve(&r).await?.snap.bridges),
            Action::Pull | Action::Push => self.daemon.sync(&r, action == Action::Pull).await?,
        };
        Ok(Response::new(pb::ChamberSyncReply {
            bridges: bridges.iter().map(convert::bridge).collect(),
            results: results
                .into_iter()
                .map(|(bridge, r)| match r {
                    Ok(count) => pb::SyncResult { bridge, count, error: String::new() },
                    Err(error) => pb::SyncResult { bridge, count: 0, error },
                })
                .collect(),
        }))
    }
}

/// The reply of a switch (pause, resume, archive, unarchive): the chamber
/// now, and whether it was so already.
fn switched((v, already): (crate::daemon::ChamberView, bool)) -> R<pb::ChamberPauseReply> {
    Ok(Response::new(pb::ChamberPauseReply { chamber: Some(convert::chamber(&v)), already }))
}

/// A move between the seed system and cryo, as the API says it.
fn seed_move(r: crate::chamber::seed::Report) -> pb::SeedMove {
    pb::SeedMove {
        carried: r.carried,
        left: r.left,
        backup: r.backup.map(|b| b.display().to_string()).unwrap_or_default(),
    }
}
