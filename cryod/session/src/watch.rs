//! A running session watched for what a person would see at a glance: an
//! agent that has gone quiet (no model request through the gateway and no
//! event on its stream for `stall_after`), or one that makes the same tool
//! call over and over (`loop_after` times in a row). Either is told once
//! (see [`Watch::new`]); the chamber ends the session with that outcome.
//!
//! Only a known kind is watched: cryod reads its events. Its requests
//! through the gateway, its events and its log lines all count as signs of
//! life; a tool call is compared with the one before by its name and its
//! exact arguments. The gateway also tells each request the provider
//! answered, by its fingerprint: the same request answered `loop_after`
//! times in a row (nothing new in the conversation between) is a loop
//! too, whatever the CLI prints.

use std::sync::{Arc, Mutex};

use cryo_core::session::Caught;
use tokio::time::Instant;

use crate::events::ToolCall;

/// Whom what the watch saw is told (once per session).
pub(crate) type Sink = Arc<dyn Fn(Caught) + Send + Sync>;

/// One session's watch; clones share it.
#[derive(Clone)]
pub struct Watch {
    inner: Arc<Inner>,
}

struct Inner {
    /// `stall_after` and `loop_after`, as the chamber says.
    stall_after: Option<std::time::Duration>,
    loop_after: Option<u32>,
    state: Mutex<State>,
    /// Wakes the stall clock when the session ends.
    ended: tokio::sync::Notify,
    sink: Sink,
}

struct State {
    /// The last sign of life.
    last: Instant,
    /// The tool call repeated so far, and how many times in a row.
    run: Option<(String, u32)>,
    /// The answered request repeated so far (its fingerprint), likewise.
    asked: Option<(u64, u32)>,
    /// What it saw was told (nothing more is).
    told: bool,
    ended: bool,
}

impl Watch {
    /// A watch by the chamber's `stall_after` and `loop_after`, telling
    /// `sink`; none if it watches nothing.
    pub fn new(stall_after: Option<std::time::Duration>, loop_after: Option<u32>, sink: Sink) -> Option<Watch> {
        if stall_after.is_none() && loop_after.is_none() {
            return None;
        }
        let state = State { last: Instant::now(), run: None, asked: None, told: false, ended: false };
        let inner =
            Inner { stall_after, loop_after, state: Mutex::new(state), ended: tokio::sync::Notify::new(), sink };
        Some(Watch { inner: Arc::new(inner) })
    }

    /// The agent runs: the stall clock starts now (if `stall_after` is
    /// set), until [`Watch::end`].
    pub fn start(&self) {
        let Some(after) = self.inner.stall_after else { return };
        self.touch();
        let inner = self.inner.clone();
        tokio::spawn(async move {
            loop {
                let due = {
                    let s = inner.state.lock().expect("watch lock");
                    if s.ended || s.told {
                        return;
                    }
                    s.last + after
                };
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = inner.ended.notified() => {}
                }
                let stalled = {
                    let mut s = inner.state.lock().expect("watch lock");
                    let stalled = !s.ended && !s.told && s.last.elapsed() >= after;
                    s.told |= stalled;
                    stalled
                };
                if stalled {
                    (inner.sink)(Caught::Stalled { idle_secs: after.as_secs() });
                    return;
                }
            }
        });
    }

    /// A sign of life: a model request, an event, a log line.
    pub fn touch(&self) {
        self.inner.state.lock().expect("watch lock").last = Instant::now();
    }

    /// A tool call the agent made (also a sign of life).
    pub fn call(&self, call: &ToolCall) {
        if let Some(times) = self.repeat(|s| &mut s.run, call.key.clone()) {
            (self.inner.sink)(Caught::Looping { call: call.shown.clone(), times });
        }
    }

    /// Counts `key` as the next in its run (`which` of the state's runs),
    /// a sign of life; returns the run's length when it has just reached
    /// `loop_after` (told once per session).
    fn repeat<K: PartialEq>(&self, which: impl FnOnce(&mut State) -> &mut Option<(K, u32)>, key: K) -> Option<u32> {
        let mut s = self.inner.state.lock().expect("watch lock");
        s.last = Instant::now();
        let run = which(&mut s);
        let times = match run {
            Some((k, n)) if *k == key => {
                *n += 1;
                *n
            }
            _ => {
                *run = Some((key, 1));
                1
            }
        };
        let looping = !s.told && !s.ended && self.inner.loop_after.is_some_and(|after| times >= after);
        s.told |= looping;
        looping.then_some(times)
    }

    /// A request the provider answered, by its fingerprint.
    pub fn request(&self, fingerprint: u64) {
        if let Some(times) = self.repeat(|s| &mut s.asked, fingerprint) {
            let call = "the model request, identical each time and answered each time".to_string();
            (self.inner.sink)(Caught::Looping { call, times });
        }
    }

    /// The session ended: nothing more is told.
    pub fn end(&self) {
        self.inner.state.lock().expect("watch lock").ended = true;
        self.inner.ended.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn watched(stall: Option<u64>, loops: Option<u32>) -> (Watch, Arc<Mutex<Vec<Caught>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let to = seen.clone();
        let w = Watch::new(stall.map(Duration::from_secs), loops, Arc::new(move |c| to.lock().unwrap().push(c)))
            .expect("it watches");
        (w, seen)
    }

    fn call(name: &str, arg: &str) -> ToolCall {
        ToolCall { name: name.into(), key: format!("{name}\0{arg}"), shown: format!("{name}: {arg}"), id: None }
    }

    #[test]
    fn nothing_to_watch_is_no_watch() {
        assert!(Watch::new(None, None, Arc::new(|_| {})).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn silence_for_stall_after_is_told_once_and_signs_of_life_put_it_off() {
        let (w, seen) = watched(Some(600), None);
        w.start();
        tokio::time::sleep(Duration::from_secs(590)).await;
        w.touch();
        tokio::time::sleep(Duration::from_secs(590)).await;
        assert!(seen.lock().unwrap().is_empty(), "a touch 590 s in puts the stall off");
        tokio::time::sleep(Duration::from_secs(11)).await;
        tokio::task::yield_now().await;
        assert_eq!(*seen.lock().unwrap(), vec![Caught::Stalled { idle_secs: 600 }]);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(seen.lock().unwrap().len(), 1, "told once");
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_session_is_never_told_stalled() {
        let (w, seen) = watched(Some(60), None);
        w.start();
        w.end();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(seen.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_same_call_loop_after_times_in_a_row_is_a_loop() {
        let (w, seen) = watched(None, Some(3));
        for c in [call("Bash", "ls"), call("Bash", "ls"), call("Bash", "pwd"), call("Bash", "ls"), call("Bash", "ls")] {
            w.call(&c);
        }
        assert!(seen.lock().unwrap().is_empty(), "another call between breaks the run");
        w.call(&call("Bash", "ls"));
        w.call(&call("Bash", "ls"));
        assert_eq!(*seen.lock().unwrap(), vec![Caught::Looping { call: "Bash: ls".into(), times: 3 }]);
        w.end();
        for _ in 0..5 {
            w.call(&call("Read", "x"));
        }
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    /// The agent: the identical model request answered again and
    /// again, no tool call printed: a loop at `loop_after`; another request
    /// between breaks the run, and tool calls between do not hide it.
    #[tokio::test]
    async fn the_same_answered_request_loop_after_times_is_a_loop() {
        let (w, seen) = watched(None, Some(3));
        for f in [7, 7, 8, 7, 7] {
            w.request(f);
            w.call(&call("Bash", &f.to_string()));
        }
        assert!(seen.lock().unwrap().is_empty(), "another request between breaks the run");
        w.request(7);
        let told = seen.lock().unwrap().clone();
        assert!(
            matches!(&told[..], [Caught::Looping { times: 3, call }] if call.contains("model request")),
            "{told:?}"
        );
    }
}
