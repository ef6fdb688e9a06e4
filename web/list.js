// The chamber list: what needs the person across chambers (failures,
// questions with a reply box, mail waiting on a stopped chamber), the
// chambers searched and filtered, and the next day's wakes.
"use strict";

import { api, at, badge, chamberPath, el, failure, flash, isOwner, LIST, prose, state, toast, when } from "./lib.js";
import { approvalItem, onApprovals, pending, refreshApprovals } from "./approvals.js";
import { reviewTrust } from "./trust.js";
import { fleetTimeline, legend } from "./timeline.js";

const main = () => document.getElementById("main");
// A request asked or decided redraws the list (its "Needs you" and rows).
onApprovals(() => renderList());

// ---- the chamber list --------------------------------------------------------
// The rows come first; the next day's wakes (which cryod reads from every
// chamber's files) are drawn when they arrive.
export async function listPage() {
  state.current = null;
  state.schedule = null;
  // The marks name the steps of a start (tests/browser/paint.mjs prints them).
  performance.mark("listPage");
  const list = await api(LIST);
  performance.mark("list-answered");
  state.chambers = new Map(list.map((c) => [c.name, c]));
  main().dataset.page = "list";
  renderList();
  performance.mark("rendered");
  refreshApprovals();
  // Asked once the rows are up: it would share cryod's cores with them.
  if (isOwner()) {
    // The wakes of the day the picture draws, no further.
    state.schedule = await api("/schedule?count=200&hours=24").catch(() => null);
    renderList();
  }
}

// Rows drawn at once; the rest on asking (search and the filter find any).
const ROWS = 100;

// Drawn again on each change while the list is shown: what needs the
// person, then the chambers (filtered), then the next day. The filters
// themselves are drawn once, so typing in them is never interrupted.
export function renderList() {
  if (state.current || main().dataset.page !== "list") return;
  let page = document.getElementById("list-page");
  if (!page) {
    page = el("div", { id: "list-page" }, el("h1", { class: "sr-only" }, "Chambers"),
      el("div", { id: "needs-all" }), filters(), el("div", { id: "list-body" }));
    main().replaceChildren(page);
  }
  const all = [...state.chambers.values()];
  renderNeeds(all);
  document.getElementById("list-body").replaceChildren(...listBody(all));
}

// Search by name and what a chamber last said; filter by state.
const STATES = [["", "every state"], ["needs", "needs you"], ["running", "running"], ["idle", "idle"], ["awaiting approval", "awaiting approval"], ["held", "held"], ["paused", "paused"], ["stopped", "stopped"], ["faulted", "faulted"]];
function filters() {
  state.filter = state.filter || { text: "", state: "" };
  const text = el("input", { id: "filter", type: "search", placeholder: "Search chambers (/)", value: state.filter.text, autocomplete: "off" });
  const pick = el("select", { id: "state-filter" }, STATES.map(([v, l]) => el("option", { value: v, selected: state.filter.state === v }, l)));
  text.addEventListener("input", () => { state.filter.text = text.value; renderList(); });
  pick.addEventListener("change", () => { state.filter.state = pick.value; renderList(); });
  return el("div", { class: "row filters", role: "search" },
    el("label", { for: "filter", class: "sr-only" }, "Search chambers"), text,
    el("label", { for: "state-filter", class: "sr-only" }, "State"), pick);
}

const bad = (c) => !c.archived && ["crashed", "timed out", "failed", "stalled", "looping"].includes(failure(c.last_result));
// What asks a person of a chamber besides its requests (which have cards
// of their own in "Needs you"); the filter keeps either.
const needsMore = (c) => !c.archived && (failure(c.last_result) || c.attention || c.fault || c.open_questions || (c.state === "stopped" && c.mail_waiting));
const needsYou = (c) => needsMore(c) || (!c.archived && (c.state === "awaiting approval" || pending(c.name).length > 0));
// What a person set aside (acknowledged, or snoozed until a time not yet
// come): out of the queue, named below it. A snooze's end is cryod's
// (its timer publishes the chamber again), not a timer of the page's. An open question is never set
// aside: it is answered.
const setAside = (c) => c.acknowledged_at && !c.open_questions
  && (!c.snoozed_until || Date.parse(c.snoozed_until) > Date.now());

function shown(c) {
  const f = state.filter || { text: "", state: "" };
  if (c.archived && !state.showArchived) return false;
  if (f.state === "needs" ? !needsYou(c) : f.state && c.state !== f.state) return false;
  const q = f.text.trim().toLowerCase();
  return !q || [c.name, c.last_result, c.attention, c.agent].some((t) => (t || "").toLowerCase().includes(q));
}

function listBody(all) {
  const archived = all.filter((c) => c.archived).length;
  const chambers = new Map(all.filter(shown).map((c) => [c.name, c]));
  const toggle = archived ? el("p", {}, el("button", { id: "show-archived", "aria-pressed": String(!!state.showArchived),
    onclick: () => { state.showArchived = !state.showArchived; renderList(); } },
  (state.showArchived ? "Hide" : "Show") + " archived (" + archived + ")")) : "";
  if (chambers.size === 0) {
    const why = !all.length ? "No chambers yet. " : archived === all.length ? "Every chamber is archived. " : "No chamber matches. ";
    return [el("p", { class: "muted", id: "list-empty" }, why, isOwner() && !all.length ? [el("a", { href: "#/new" }, "Create one"), "."] : ""), toggle];
  }
  // A fleet's hub shows every node's chambers, with the node that runs each.
  const fleet = [...chambers.values()].some((c) => c.node);
  const sorted = [...chambers.values()].sort((a, b) => a.name.localeCompare(b.name));
  const hidden = state.allRows ? 0 : Math.max(0, sorted.length - ROWS);
  const rows = sorted.slice(0, sorted.length - hidden).map((c) =>
    el("tr", { "data-chamber": c.name, class: bad(c) ? "failing" : "" },
      el("th", { scope: "row" }, el("a", { href: "#/c/" + encodeURIComponent(c.name) }, c.name)),
      el("td", {}, c.archived ? badge("archived") : badge(c.state, c.last_result)),
      fleet ? el("td", { "data-node": c.node || "" }, c.node || "-") : "",
      el("td", {}, c.next_wake ? when(c.next_wake) : "-"),
      isOwner() ? el("td", { class: "wide" }, c.attention ? el("span", { class: "error" }, prose(c.attention)) : (c.last_result || "-")) : "",
      el("td", {}, waiting(c))));
  return [
    el("table", { id: "chambers" },
      el("caption", { class: "sr-only" }, "Chambers"),
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Chamber"), el("th", { scope: "col" }, "State"),
        fleet ? el("th", { scope: "col" }, "Node") : "", el("th", { scope: "col" }, "Next wake"),
        isOwner() ? el("th", { scope: "col", class: "wide" }, "Last result") : "", el("th", { scope: "col" }, "Waiting"))),
      el("tbody", {}, rows)),
    hidden ? el("p", {}, hidden + " more chambers: search or filter above, or ",
      el("button", { id: "all-rows", onclick: () => { state.allRows = true; renderList(); } }, "show all " + sorted.length)) : "",
    toggle,
    state.schedule ? el("section", { "aria-labelledby": "h-fleet" }, el("h2", { id: "h-fleet" }, "The next day"),
      fleetTimeline(state.schedule, [...chambers.keys()]), legend(true)) : ""];
}

// What waits for a person, across chambers, as a queue: each item its kind
// and age, what blocks an agent first (a tool call it waits on, a question,
// a fault, a failure, mail on a stopped chamber), the oldest first within a
// kind; each with the action that ends it (Approve and Deny, a reply box,
// the line naming the command). j and k move through it, Enter opens one.
// Its count is the installed app's badge.
const asked = new Map(); // chamber -> {count, question}: fetched again when the count changes
const NEEDS_SHOWN = 12;
const RANK = { approval: 0, question: 1, fault: 2, failure: 3, attention: 3, "waiting mail": 4 };
function kindOf(c) {
  if (c.open_questions) return "question";
  if (c.fault) return "fault";
  if (failure(c.last_result)) return "failure";
  if (c.attention) return "attention";
  return "waiting mail";
}
// Since when a chamber's need stands: its last run's end (fetched once a run).
const since = new Map(); // chamber -> { session, at }
function sinceOf(c) {
  const known = since.get(c.name);
  if (known && known.session === c.session) return known.at;
  since.set(c.name, { session: c.session, at: null });
  api("/chambers/" + encodeURIComponent(c.name) + "?sessions=1").then((r) => {
    const s = r.sessions[0];
    since.set(c.name, { session: c.session, at: s ? s.ended_at || s.started_at || s.due_at : null });
    renderNeeds([...state.chambers.values()]);
  }).catch(() => {});
  return null;
}
const kindBadge = (kind) => el("span", { class: "badge kind kind-" + kind.replace(/ /g, "-"), "data-kind": kind }, kind);

function renderNeeds(all) {
  const box = document.getElementById("needs-all");
  if (!box || !isOwner()) return;
  // A chamber whose one need is a request's (its line names it) is that
  // request's card.
  const carded = (c) => c.attention && pending(c.name).some((a) => c.attention.includes(a.id))
    && !c.fault && !c.open_questions && !(c.state === "stopped" && c.mail_waiting);
  const needing = all.filter((c) => needsMore(c) && !carded(c));
  const list = needing.filter((c) => !setAside(c));
  const aside = needing.filter(setAside);
  const waits = pending();
  navigator.setAppBadge?.(list.length + waits.length).catch(() => {});
  // A question answered is forgotten: a new one later is fetched afresh.
  for (const c of all) if (!c.open_questions) { asked.delete(c.name); holders.delete(c.name); }
  if (!list.length && !waits.length) { box.replaceChildren(...asideLine(aside), decisions()); return; }
  const queue = [
    ...waits.map((a) => ({ kind: "approval", at: a.created_at, name: a.chamber, node: () => approvalItem(a) })),
    ...list.map((c) => ({ kind: kindOf(c), at: sinceOf(c), name: c.name, node: () => chamberItem(c) })),
  ].sort((a, b) => RANK[a.kind] - RANK[b.kind] || (Date.parse(a.at) || Infinity) - (Date.parse(b.at) || Infinity) || a.name.localeCompare(b.name));
  // The first few in full (each question's text is a request); the rest
  // are a count, and the state filter lists them all.
  const items = queue.slice(0, NEEDS_SHOWN).map((q) => {
    const li = q.node();
    li.tabIndex = -1;
    li.dataset.kind = q.kind;
    li.prepend(kindBadge(q.kind), " ", q.at ? when(q.at) : "", " ");
    return li;
  });
  const more = queue.length - items.length;
  // Redrawn on every change anywhere: an answer being typed keeps its focus.
  const typing = document.activeElement, at = typing?.selectionStart;
  const focusedItem = typing?.closest?.(".needs-list > li");
  const focusedKey = focusedItem && (focusedItem.dataset.approval || focusedItem.dataset.needs);
  box.replaceChildren(el("section", { class: "needs", "aria-labelledby": "h-needs-all" },
    el("h2", { id: "h-needs-all" }, "Needs you (" + queue.length + ")"),
    el("ul", { class: "needs-list", id: "needs-queue", "aria-label": "what needs you, what blocks an agent first" }, items),
    more > 0 ? el("p", { class: "muted" }, "and " + more + " more: choose “needs you” in the state filter below.") : "",
    ...asideLine(aside), decisions()));
  if (typing?.isConnected && typing !== document.activeElement) {
    typing.focus({ preventScroll: true });
    if (at != null) typing.selectionStart = typing.selectionEnd = at;
  } else if (focusedKey && typing === focusedItem) {
    box.querySelector(`[data-approval="${focusedKey}"], [data-needs="${focusedKey}"]`)?.focus({ preventScroll: true });
  }
}

function chamberItem(c) {
  const link = el("a", { href: "#/c/" + encodeURIComponent(c.name) }, c.name);
  const kids = [];
  const failed = failure(c.last_result);
  if (c.attention || failed || c.fault) kids.push(el("p", { class: "error" }, prose(c.attention || c.fault || c.last_result)));
  if (c.state === "stopped" && c.mail_waiting) kids.push(el("p", {}, (c.mail_waiting === 1 ? "1 message waits" : c.mail_waiting + " messages wait") + " on it while it is stopped: start it to have them read."));
  if (c.open_questions) kids.push(question(c));
  // What ends it, here: a failed or stalled chamber woken now (its next
  // run); a changed setting reviewed, with its diff, on its page.
  const actions = [];
  if ((failed || c.attention) && !c.fault && (c.actions || []).includes("wake")) {
    const wake = el("button", { type: "button", "data-wake-now": c.name }, "Wake now");
    wake.addEventListener("click", async () => {
      wake.disabled = true;
      try { await api("/chambers/" + encodeURIComponent(c.name) + "/wake", "POST", {}); toast(c.name + " wakes now."); }
      catch (er) { flash(er); wake.disabled = false; }
    });
    actions.push(wake);
  }
  if (c.fault && c.fault.includes("cryoctl chamber trust")) {
    actions.push(el("button", { type: "button", "data-review": c.name, onclick: () => reviewTrust(c, changed) }, "Review and trust"));
  }
  // Seen, and set aside: until it changes, or until a time.
  actions.push(...acknowledge(c));
  return el("li", { "data-needs": c.name }, el("strong", {}, link), " ", badge(c.state, c.last_result), kids,
    actions.length ? el("div", { class: "row" }, actions) : "");
}

// A chamber as cryod answered it, in the list.
function changed(c) {
  state.chambers.set(c.name, c);
  renderList();
}

// Acknowledge (set aside until what needs you changes) and Snooze (until a
// time): kept by cryod, so a restart or another device sees the same.
const SNOOZES = [["", "Snooze…"], ["3600", "for 1 hour"], ["14400", "for 4 hours"], ["tomorrow", "until tomorrow 09:00"], ["604800", "for a week"]];
function acknowledge(c) {
  const send = async (body, what) => {
    try { changed(await api(chamberPath(c.name) + "/acknowledge", "POST", body)); toast(c.name + ": " + what + "."); }
    catch (er) { flash(er); }
  };
  const ack = el("button", { type: "button", "data-acknowledge": c.name }, "Acknowledge");
  ack.addEventListener("click", () => { ack.disabled = true; send({}, "set aside until it changes"); });
  const id = "snooze-" + c.name;
  const pick = el("select", { id, "data-snooze": c.name }, SNOOZES.map(([v, l]) => el("option", { value: v }, l)));
  pick.addEventListener("change", () => {
    if (!pick.value) return;
    const body = pick.value === "tomorrow" ? { until: tomorrowAtNine().toISOString() } : { snooze_secs: Number(pick.value) };
    send(body, "snoozed " + pick.selectedOptions[0].textContent);
  });
  return [ack, el("label", { for: id, class: "sr-only" }, "Snooze " + c.name), pick];
}
function tomorrowAtNine() {
  const t = new Date();
  t.setDate(t.getDate() + 1);
  t.setHours(9, 0, 0, 0);
  return t;
}

// What was set aside, named (nothing a person must act on is lost from
// sight): each with until when.
function asideLine(aside) {
  if (!aside.length) return [];
  const items = aside.map((c) => el("li", { "data-aside": c.name },
    el("a", { href: "#/c/" + encodeURIComponent(c.name) }, c.name), " ",
    c.snoozed_until ? el("span", { class: "muted" }, "snoozed until ", at(c.snoozed_until)) : el("span", { class: "muted" }, "until it changes")));
  const box = el("details", { id: "set-aside", open: asideOpen || undefined },
    el("summary", {}, "Set aside (" + aside.length + ")"), el("ul", { class: "aside-list" }, items));
  box.addEventListener("toggle", () => { asideOpen = box.open; });
  return [box];
}
let asideOpen = false; // kept open across redraws

// Who decided what: the requests answered, newest first. Asked when the
// section opens and again when a request is decided (at most every 5 s);
// a redraw of the list draws what was fetched.
let decisionsOpen = false;
let decided = null; // the last answer, newest first
let decidedAt = 0;
let decidedPending = 0; // requests waiting, when last fetched
function loadDecisions(force) {
  const waiting = pending().length;
  if (!force && decided && (waiting >= decidedPending || Date.now() - decidedAt < 5000)) return;
  decidedAt = Date.now();
  decidedPending = waiting;
  api("/approvals?all=true").then((r) => {
    decided = (r.approvals || []).filter((a) => a.state !== "pending")
      .sort((a, b) => Date.parse(b.decided_at) - Date.parse(a.decided_at)).slice(0, 20);
    document.getElementById("decisions-list")?.replaceChildren(...decidedItems());
  }).catch(() => {});
}
const decidedItems = () => !decided ? [] : decided.length ? decided.map((a) => el("li", { "data-decided": a.id },
  el("strong", {}, a.state), " by " + (a.decided_by || "?") + " ", when(a.decided_at), ": ",
  el("a", { href: "#/c/" + encodeURIComponent(a.chamber) }, a.chamber), " " + a.what + (a.answer ? " (" + a.answer + ")" : "")))
  : [el("li", { class: "muted" }, "none yet")];
function decisions() {
  const list = el("ol", { id: "decisions-list", class: "decisions" }, decidedItems());
  const box = el("details", { id: "decisions", open: decisionsOpen || undefined }, el("summary", {}, "Decided requests"), list);
  box.addEventListener("toggle", () => { decisionsOpen = box.open; if (box.open) loadDecisions(true); });
  if (decisionsOpen) loadDecisions(false);
  return box;
}

// j and k: the next and the previous item of the queue; Enter opens it.
export function moveInQueue(step) {
  const items = [...document.querySelectorAll("#needs-queue > li")];
  if (!items.length) return false;
  const at = items.indexOf(document.activeElement?.closest?.("#needs-queue > li"));
  const next = items[Math.max(0, Math.min(items.length - 1, at < 0 ? 0 : at + step))];
  next.focus();
  next.scrollIntoView({ block: "nearest" });
  return true;
}
export function openInQueue() {
  const item = document.activeElement;
  if (!item?.matches?.("#needs-queue > li")) return false;
  item.querySelector("a")?.click();
  return true;
}

// The newest open question of `c`, with a reply box. The same box is
// kept while the count stays (a status change elsewhere redraws the list;
// an answer being typed is not lost).
const holders = new Map(); // chamber -> {count, node}
function question(c) {
  const kept = holders.get(c.name);
  if (kept && kept.count === c.open_questions) return kept.node;
  const holder = el("div", { class: "question", "data-question": c.name });
  holders.set(c.name, { count: c.open_questions, node: holder });
  const seen = asked.get(c.name);
  const draw = (q) => {
    const text = el("textarea", { rows: 2, id: "reply-" + c.name, placeholder: "Your answer" });
    const said = el("p", { class: "muted", role: "status" });
    const send = el("button", { class: "primary", type: "submit" }, "Answer");
    const form = el("form", { class: "reply" }, el("label", { for: "reply-" + c.name, class: "sr-only" }, "Answer to " + c.name), text, el("div", { class: "row" }, send), said);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      if (!text.value.trim()) return;
      send.disabled = true;
      try {
        const r = await api("/chambers/" + encodeURIComponent(c.name) + "/messages", "POST", { text: text.value.trim() });
        said.textContent = r.waits ? "Sent; not read yet: " + r.waits : "Sent: the agent reads it now.";
        toast("Answer sent to " + c.name + ".");
        text.value = "";
      } catch (er) { flash(er); } finally { send.disabled = false; }
    });
    const body = el("div", { class: "md" });
    if (q) { const t = document.createElement("template"); t.innerHTML = q.html ?? ""; for (const i of t.content.querySelectorAll("img")) i.remove(); body.append(t.content); }
    holder.replaceChildren(el("p", { class: "meta muted" }, c.open_questions === 1 ? "The agent asks:" : c.open_questions + " questions; the newest:"), body, form);
  };
  if (seen && seen.count === c.open_questions) draw(seen.question);
  else {
    draw(null);
    api("/chambers/" + encodeURIComponent(c.name) + "/messages?limit=20").then((msgs) => {
      const q = msgs.filter((m) => m.question).pop() || null;
      asked.set(c.name, { count: c.open_questions, question: q });
      if (!holder.querySelector("textarea").value) draw(q);
    }).catch(() => {});
  }
  return holder;
}


// What waits on a chamber: tool calls to approve, unread mail, open questions.
function waiting(c) {
  const kids = [];
  const asks = pending(c.name).length;
  if (asks) kids.push(el("span", { class: "badge qbadge", title: "tool calls waiting for your approval", "data-approvals": asks },
    asks + (asks === 1 ? " approval" : " approvals")));
  if (c.mail_waiting) kids.push(el("span", { class: "badge", title: "unread mail", "data-mail": c.mail_waiting }, c.mail_waiting + " unread"));
  if (c.open_questions) kids.push(el("span", { class: "badge qbadge", title: "questions the agent asked, not yet answered", "data-questions": c.open_questions },
    c.open_questions + (c.open_questions === 1 ? " question" : " questions")));
  return kids.length ? el("span", { class: "badges" }, kids) : "-";
}

