//! A session's way through the gateway: what it asks ([`Spec`]: its
//! upstream, credential, spending line, whom it tells), and what its
//! requests used ([`Used`]), counted and priced as each response ends;
//! what the provider's limits said is told on from here.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{kept, wire};
use cryo_session::{Auth, Limited, Prices, Usage};

/// A refusal waited out longer than this ends the session (the CLIs give
/// up on long waits, see `notes/agent-clis.md`); a shorter one is the
/// CLI's to wait out, and only holds new wakes of the account.
pub const IN_SESSION_WAIT: Duration = Duration::from_secs(60);

/// Whom a session's findings are told.
#[derive(Clone)]
pub struct Tell {
    /// A refusal too long to wait out in the session: it ends, the account
    /// is held (`Limited::retry_after_ms` is the provider's wait).
    pub limit: Arc<dyn Fn(Limited) + Send + Sync>,
    /// Hold new wakes of the account this long, for this reason.
    pub hold: Arc<dyn Fn(Duration, String) + Send + Sync>,
    /// The session reached its line: it ends over budget.
    pub over: Arc<dyn Fn() + Send + Sync>,
    /// A sign of the session's life: a request came, a response's bytes
    /// passed (its stall clock starts again).
    pub alive: Arc<dyn Fn() + Send + Sync>,
    /// A request the provider answered (2xx), by its fingerprint (method,
    /// path, body): the same one answered again and again, with nothing
    /// new in it, is a loop whatever the CLI prints. (A retry after a
    /// refusal or an error is not an answered repeat.)
    pub answered: Arc<dyn Fn(u64) + Send + Sync>,
}

/// What a session asks of the gateway.
pub struct Spec {
    pub chamber: String,
    /// The provider account it bills (for `/metrics`).
    pub account: String,
    pub session: u64,
    /// The upstream's base (`https://api.anthropic.com`,
    /// `https://api.openai.com/v1`); a request's path below the session's
    /// base goes below it.
    pub upstream: String,
    pub auth: Auth,
    /// What the session may spend in all (USD): the lowest of
    /// `max_session_usd` and what is left of each budget when it starts.
    pub line: Option<f64>,
    pub prices: Arc<Prices>,
    pub tell: Tell,
    /// The wake's trace: each request forwarded is a span of it.
    pub trace: Option<Arc<crate::base::otlp::Trace>>,
    /// Where its exchanges are kept, redacted (`keep_exchanges`).
    pub kept: Option<kept::Kept>,
}

/// One session's way through the gateway.
pub struct Route {
    pub(super) spec: Spec,
    pub(super) used: Mutex<Used>,
    told_over: AtomicBool,
}

/// What a session's requests used, as the provider reported it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Used {
    pub requests: u64,
    /// Tokens of every response, the last model named, and the cost of
    /// those whose model has a price.
    pub usage: Usage,
    /// Requests refused by the gateway itself (over the line).
    pub refused: u64,
    /// The provider's answer to the last request was a refusal (429), with
    /// the wait it asked for: an agent that ends now gave up on a limit.
    pub last_refusal: Option<Duration>,
}

impl Route {
    pub(super) fn new(spec: Spec) -> Route {
        Route { spec, used: Mutex::default(), told_over: AtomicBool::new(false) }
    }

    /// What the session used so far.
    pub fn used(&self) -> Used {
        self.used.lock().expect("gateway lock").clone()
    }

    pub(super) fn over_line(&self) -> bool {
        let Some(line) = self.spec.line else { return false };
        self.used.lock().expect("gateway lock").usage.cost_usd.is_some_and(|c| c >= line)
    }

    pub(super) fn tell_over(&self) {
        if !self.told_over.swap(true, Ordering::SeqCst) {
            (self.spec.tell.over)();
        }
    }

    /// One response's usage, added to the session's.
    pub(super) fn count(&self, c: &wire::Counted) {
        let mut used = self.used.lock().expect("gateway lock");
        used.requests += 1;
        if c.is_empty() && c.model.is_none() {
            return;
        }
        let u = &mut used.usage;
        if c.model.is_some() {
            u.model = c.model.clone();
        }
        u.input_tokens += c.input;
        u.output_tokens += c.output;
        u.cached_tokens += c.cached;
        u.cache_write_tokens += c.written;
        let one = Usage {
            model: c.model.clone(),
            input_tokens: c.input,
            output_tokens: c.output,
            cached_tokens: c.cached,
            cache_write_tokens: c.written,
            ..Usage::default()
        };
        let cost = self.spec.prices.cost(&one);
        if let Some(cost) = cost {
            u.cost_usd = Some(u.cost_usd.unwrap_or(0.0) + cost);
        }
        let model = c.model.as_deref().unwrap_or("unknown");
        let tokens = [c.input, c.output, c.cached];
        crate::base::metrics::get().model_response(&self.spec.chamber, &self.spec.account, model, tokens, cost);
        let over = self.spec.line.is_some_and(|line| u.cost_usd.is_some_and(|c| c >= line));
        drop(used);
        if over {
            self.tell_over();
        }
    }

    /// What a response's headers said of the account.
    pub(super) fn pressure(&self, p: wire::Pressure) {
        tracing::info!(chamber = %self.spec.chamber, session = self.spec.session, wait = ?p.wait, source = %p.source,
            "provider limit seen by the gateway");
        (self.spec.tell.hold)(p.wait, p.source.clone());
        if p.refused {
            self.used.lock().expect("gateway lock").last_refusal = Some(p.wait);
        }
        if p.refused && p.wait > IN_SESSION_WAIT {
            (self.spec.tell.limit)(Limited {
                resets_at: None,
                retry_after_ms: Some(p.wait.as_millis() as u64),
                text: p.source,
                exact: true,
            });
        }
    }
}
