//! The hibernate gate: whether `cryo-agent hibernate` may end the session.
//!
//! An agent may not leave unread mail behind, may not go to sleep without
//! declaring when to wake (unless the plan is complete), and may not call the
//! plan complete while a TODO is due. A failure (`--exit N`) is never refused:
//! the session is ending badly, and the daemon must hear it.

/// What the gate looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct GateInput {
    /// Messages in the inbox the agent has not claimed.
    pub unread: usize,
    /// Some pending TODO has a time (it declares the next wake).
    pub has_next_wake: bool,
    /// Pending TODOs already due now.
    pub due_now: usize,
    pub complete: bool,
    pub exit_code: i32,
}

/// How an accepted hibernate ends the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Sleep until the next TODO or message.
    Hibernate,
    /// The plan is finished: idle until a message arrives.
    Complete,
    /// The agent reports failure with this code.
    Failure(i32),
}

/// The gate's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    Accept(Ending),
    /// Refused; the session goes on. The text tells the agent what to do.
    Refuse(String),
}

pub fn gate(i: &GateInput) -> Gate {
    if i.exit_code != 0 {
        return Gate::Accept(Ending::Failure(i.exit_code));
    }
    if i.unread > 0 {
        let n = i.unread;
        let s = if n == 1 { "" } else { "s" };
        return Gate::Refuse(format!(
            "refused: {n} unread message{s} in the inbox. Run `cryo-agent receive`, answer with `cryo-agent send`, then hibernate again."
        ));
    }
    if i.complete {
        if i.due_now > 0 {
            return Gate::Refuse(format!(
                "refused: --complete while {} TODO{} due now. Do them (or `cryo-agent todo done ID` / `todo remove ID`), then hibernate again.",
                i.due_now,
                if i.due_now == 1 { " is" } else { "s are" }
            ));
        }
        return Gate::Accept(Ending::Complete);
    }
    if !i.has_next_wake {
        return Gate::Refuse(
            "refused: no pending TODO declares the next wake. Add one with `cryo-agent todo add \"TEXT\" --at TIME`, \
             or hibernate with --complete if the plan is finished."
                .to_string(),
        );
    }
    Gate::Accept(Ending::Hibernate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let base = GateInput { has_next_wake: true, ..GateInput::default() };
        let cases: &[(GateInput, Option<Ending>, &str)] = &[
            (base, Some(Ending::Hibernate), ""),
            (GateInput { unread: 2, ..base }, None, "2 unread messages"),
            (GateInput { unread: 1, exit_code: 3, ..base }, Some(Ending::Failure(3)), ""),
            (GateInput { has_next_wake: false, ..base }, None, "no pending TODO"),
            (GateInput { has_next_wake: false, exit_code: 1, ..base }, Some(Ending::Failure(1)), ""),
            (GateInput { has_next_wake: false, complete: true, ..base }, Some(Ending::Complete), ""),
            (GateInput { complete: true, due_now: 1, ..base }, None, "1 TODO is due now"),
            (GateInput { complete: true, unread: 1, ..base }, None, "unread"),
        ];
        for (input, want, text) in cases {
            match (gate(input), want) {
                (Gate::Accept(e), Some(w)) => assert_eq!(e, *w, "{input:?}"),
                (Gate::Refuse(m), None) => assert!(m.contains(text), "{input:?}: {m}"),
                (got, _) => panic!("{input:?}: got {got:?}"),
            }
        }
    }
}
