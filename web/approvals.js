// Tool calls that wait for a person (a chamber's [approvals] policy asked):
// the owner's list, kept current by the event stream's `approval` frames
// (a request asked, a request decided), and one request's card with its
// Approve and Deny, shown in "Needs you" and on its chamber's page.
"use strict";

import { api, el, flash, isOwner, state, toast, when } from "./lib.js";

// Whoever draws requests: called again when the list changes.
const redraws = new Set();
export function onApprovals(draw) { redraws.add(draw); }
function redraw() { for (const draw of redraws) draw(); }

// The requests that wait, oldest first (of one chamber, when named).
export const pending = (chamber) =>
  (state.approvals || []).filter((a) => a.state === "pending" && (!chamber || a.chamber === chamber));

// The whole list, fetched at most once a second: a call within that second
// is made when it ends, never dropped (the frames carry each change; this
// is for a page's first draw and after the stream reconnects).
let fetchedAt = 0;
let timer = null;
export function refreshApprovals() {
  if (!isOwner() || timer) return;
  timer = setTimeout(() => {
    timer = null;
    fetchedAt = Date.now();
    api("/approvals").then((r) => { state.approvals = r.approvals || []; redraw(); }).catch(() => {});
  }, Math.max(0, fetchedAt + 1000 - Date.now()));
}

// An `approval` frame (or our own answer): the request replaces what was
// known of it; a decided one no longer waits.
export function approvalChanged(a) {
  const rest = (state.approvals || []).filter((x) => x.id !== a.id);
  state.approvals = a.state === "pending" ? [...rest, a] : rest;
  redraw();
}

// One request: what the agent asks to run, why, and the two answers.
// What was typed as a Deny reason, by request (a redraw keeps it).
const reasons = new Map();
export function approvalItem(a) {
  const reason = el("input", { type: "text", id: "deny-" + a.id, placeholder: "Why not (for the agent)", autocomplete: "off" });
  reason.value = reasons.get(a.id) || "";
  reason.addEventListener("input", () => reasons.set(a.id, reason.value));
  const answer = async (action, button) => {
    button.disabled = true;
    try {
      const decided = await api("/approvals/" + encodeURIComponent(a.id) + "/" + action, "POST", { reason: reason.value.trim() });
      toast((action === "approve" ? "Approved: " : "Denied: ") + a.what);
      reasons.delete(a.id);
      approvalChanged(decided);
    } catch (er) { flash(er); button.disabled = false; }
  };
  const yes = el("button", { class: "primary", "data-approve": a.id }, "Approve");
  const no = el("button", { "data-deny": a.id }, "Deny");
  yes.addEventListener("click", () => answer("approve", yes));
  no.addEventListener("click", () => answer("deny", no));
  return el("li", { "data-approval": a.id, class: "approval" },
    el("strong", {}, el("a", { href: "#/c/" + encodeURIComponent(a.chamber) }, a.chamber)), " asks to run " + a.tool + " ",
    when(a.created_at), ":",
    // The whole call, its lines kept: what is approved is what is read.
    el("pre", { class: "approval-call" }, a.subject),
    el("p", { class: "muted" }, a.rule + (a.reason ? ". The agent says: " + a.reason : "")),
    el("div", { class: "row" }, yes, no, el("label", { for: "deny-" + a.id, class: "sr-only" }, "Why not"), reason));
}
