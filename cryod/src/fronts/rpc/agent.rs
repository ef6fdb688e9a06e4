//! The Agent service (`cryo-agent` inside a session), served only on the
//! sessions' own doors (`cryo_session::Doors`).
//!
//! Every call carries the session token (metadata `x-cryo-session-token`) and
//! the chamber name the agent was given (`x-cryo-chamber`). The token must
//! belong to a live session of that very chamber, and arrive through that
//! session's own door; then the call goes to the chamber's supervisor, which
//! owns the chamber's files.

use cryo_proto::v1 as pb;
use cryo_proto::v1::agent_server::Agent;
use tonic::{Request, Response, Status};

use crate::daemon::Daemon;
use crate::error::Error;
use crate::fronts::convert::{self, todos_reply};
use crate::supervisor::{AgentCall, AgentReply, TodoCall};

pub struct AgentService {
    pub daemon: Daemon,
}

type R<T> = Result<Response<T>, Status>;

/// gRPC metadata key carrying the chamber name the agent was started in.
pub const CHAMBER_METADATA: &str = "x-cryo-chamber";

impl AgentService {
    async fn call<T>(&self, req: &Request<T>, call: AgentCall) -> Result<AgentReply, Status> {
        let entry = self.session_of(req)?;
        let (verb, t) = (verb(&call), std::time::Instant::now());
        let r = self.daemon.agent_call(entry.chamber, entry.session, call).await.map_err(Status::from);
        crate::base::metrics::get().agent_call(verb, t.elapsed());
        r
    }

    /// The live session the call's token, door and chamber name agree on.
    fn session_of<T>(&self, req: &Request<T>) -> Result<crate::services::runtime::TokenEntry, Status> {
        let md = req.metadata();
        let token = md.get(cryo_proto::TOKEN_METADATA).and_then(|v| v.to_str().ok()).unwrap_or("");
        if token.is_empty() {
            return Err(Status::unauthenticated(
                "cryo-agent works only inside a cryo session (CRYO_SESSION_TOKEN is not set)",
            ));
        }
        let entry = self.daemon.session_of_token(token);
        let Some(entry) = entry else {
            return Err(Status::permission_denied(
                "this session token is not valid: its session has ended (or it was never issued)",
            ));
        };
        // A token works only through its own session's door.
        let door = req.extensions().get::<cryo_session::DoorKey>();
        if door.is_none_or(|d| d.chamber != entry.chamber || d.session != entry.session) {
            return Err(Status::permission_denied(
                "this session token came through another session's socket: an agent calls cryod only through \
                 the CRYO_SOCKET its own session was given",
            ));
        }
        let claimed = md.get(CHAMBER_METADATA).and_then(|v| v.to_str().ok()).unwrap_or("");
        if claimed != entry.name {
            return Err(Status::permission_denied(format!(
                "this session token belongs to another chamber than {claimed:?}: an agent acts only on its own chamber"
            )));
        }
        Ok(entry)
    }
}

/// The answer to an agent call on the operator's socket.
pub fn not_here() -> Status {
    Status::permission_denied(
        "the operator's socket does not serve agent calls: cryo-agent reaches cryod only through its own \
         session's socket (the CRYO_SOCKET the session was given)",
    )
}

/// A call's verb, as `cryo-agent` names it (a metrics label).
fn verb(call: &AgentCall) -> &'static str {
    match call {
        AgentCall::Hibernate { .. } => "hibernate",
        AgentCall::Send { .. } => "send",
        AgentCall::Receive => "receive",
        AgentCall::Dialog { .. } => "dialog",
        AgentCall::Todo(TodoCall::Add { .. }) => "todo_add",
        AgentCall::Todo(TodoCall::List) => "todo_list",
        AgentCall::Todo(TodoCall::Done(_)) => "todo_done",
        AgentCall::Todo(TodoCall::Remove(_)) => "todo_remove",
    }
}

fn unexpected() -> Status {
    Error::Internal("unexpected reply from the supervisor".into()).into()
}

#[tonic::async_trait]
impl Agent for AgentService {
    async fn hello(&self, req: Request<pb::HelloRequest>) -> R<pb::HelloReply> {
        super::hello(&self.daemon, req.get_ref()).map(Response::new)
    }

    async fn hibernate(&self, req: Request<pb::HibernateRequest>) -> R<pb::HibernateReply> {
        let r = req.get_ref();
        let call = AgentCall::Hibernate {
            summary: r.summary.clone(),
            complete: r.complete,
            exit_code: r.exit_code,
            linger_secs: r.linger_secs,
        };
        match self.call(&req, call).await? {
            AgentReply::Hibernate(message) => Ok(Response::new(pb::HibernateReply { message })),
            _ => Err(unexpected()),
        }
    }

    async fn send(&self, req: Request<pb::SendRequest>) -> R<pb::SendReply> {
        let r = req.get_ref();
        let call = AgentCall::Send { text: r.text.clone(), question: r.question, subject: r.subject.clone() };
        match self.call(&req, call).await? {
            AgentReply::Sent { file, reply } => Ok(Response::new(pb::SendReply { file, reply })),
            _ => Err(unexpected()),
        }
    }

    async fn receive(&self, req: Request<pb::ReceiveRequest>) -> R<pb::ReceiveReply> {
        match self.call(&req, AgentCall::Receive).await? {
            AgentReply::Mail(m) => {
                Ok(Response::new(pb::ReceiveReply { messages: m.iter().map(convert::mail).collect() }))
            }
            _ => Err(unexpected()),
        }
    }

    async fn dialog(&self, req: Request<pb::DialogRequest>) -> R<pb::DialogReply> {
        let r = req.get_ref();
        let call = AgentCall::Dialog { last: r.last, all: r.all };
        match self.call(&req, call).await? {
            AgentReply::Dialog { messages, claimed } => {
                Ok(Response::new(pb::DialogReply { messages: messages.iter().map(convert::mail).collect(), claimed }))
            }
            _ => Err(unexpected()),
        }
    }

    async fn todo_add(&self, req: Request<pb::TodoAddRequest>) -> R<pb::TodoAddReply> {
        let r = req.get_ref();
        let call = AgentCall::Todo(convert::todo_add(r));
        let list = todos_reply(self.call(&req, call).await?)?;
        Ok(Response::new(pb::TodoAddReply { todo: list.todos.into_iter().next() }))
    }

    async fn todo_list(&self, req: Request<pb::TodoListRequest>) -> R<pb::TodoListReply> {
        let mut reply = todos_reply(self.call(&req, AgentCall::Todo(TodoCall::List)).await?)?;
        // `call` checked that the token is this chamber's.
        let name = req.metadata().get(CHAMBER_METADATA).and_then(|v| v.to_str().ok()).unwrap_or("");
        let chamber = crate::daemon::ChamberRef::Name(name.to_string());
        super::add_archived(&self.daemon, &chamber, req.get_ref(), &mut reply).await?;
        Ok(Response::new(reply))
    }

    async fn todo_done(&self, req: Request<pb::TodoIdRequest>) -> R<pb::TodoListReply> {
        let id = req.get_ref().id;
        todos_reply(self.call(&req, AgentCall::Todo(TodoCall::Done(id))).await?).map(Response::new)
    }

    async fn approve(&self, req: Request<pb::ApproveRequest>) -> R<pb::ApproveReply> {
        let entry = self.session_of(&req)?;
        let r = req.get_ref();
        let input: serde_json::Value = serde_json::from_str(&r.input_json)
            .map_err(|e| Status::invalid_argument(format!("input_json is not JSON: {e}")))?;
        let max_wait = (r.max_wait_secs > 0).then(|| std::time::Duration::from_secs(r.max_wait_secs.into()));
        let ask = crate::supervisor::Ask { tool: r.tool.clone(), input, reason: r.reason.clone(), max_wait };
        let t = std::time::Instant::now();
        let answer = self.daemon.approve_call(entry.chamber, entry.session, ask).await.map_err(Status::from)?;
        crate::base::metrics::get().agent_call("approve", t.elapsed());
        Ok(Response::new(pb::ApproveReply { allow: answer.allow, message: answer.message }))
    }

    async fn todo_remove(&self, req: Request<pb::TodoIdRequest>) -> R<pb::TodoListReply> {
        let id = req.get_ref().id;
        todos_reply(self.call(&req, AgentCall::Todo(TodoCall::Remove(id))).await?).map(Response::new)
    }
}
