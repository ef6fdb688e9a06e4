// One chamber: its controls, conversation (paged, Markdown made safe by
// cryod, attachments), status, TODOs, plan, settings, log and the agent's
// live transcript. A guest sees the conversation only.
"use strict";

import { api, at, auth, badge, blobUrl, chamberPath, el, flash, isOwner, linesView, local, prose, readEvents, state, toast, upload, when } from "./lib.js";
import { chamberTimeline, digest, legend } from "./timeline.js";
import { approvalItem, onApprovals, pending, refreshApprovals } from "./approvals.js";
import { reviewTrust } from "./trust.js";

const PAGE = 50;
const RUNS_SHOWN = 50; // the newest runs the Runs tab lists and filters
let oldest = null; // the file of the oldest message shown: the cursor for the page before
let loadingOlder = false;
let transcript = null; // the open transcript stream, if any
let here = null; // the chamber shown, as last heard
// A request of this chamber asked or decided: its "Needs you" is redrawn.
onApprovals(() => { if (here && state.current === here.name) document.getElementById("needs")?.replaceWith(needs(here)); });

// What each control does, shown beside it.
const CONTROLS = {
  start: "plan its wakes and run what is due",
  wake: "start a session now",
  pause: "let mail arrive but start no session",
  resume: "start sessions again",
  stop: "end any session and plan nothing",
  archive: "hide it from the list; it never starts until unarchived",
  unarchive: "list it again (it stays stopped)",
  reset: "move its TODOs, notes, messages and logs into history/ and begin again",
};
function controls(c) {
  const base = chamberPath(c.name);
  // Which controls a state offers is cryod's rule (`actions`).
  return (c.actions || []).map((a) => el("div", { class: "control" },
    el("button", { "data-action": a, "aria-describedby": "does-" + a, onclick: async (e) => {
      if (a === "reset") { confirmReset(c); return; }
      e.target.disabled = true;
      try { const v = await api(base + "/" + a, "POST", {}); headerReads++; showState(v); toast(c.name + ": " + a + " done; now " + v.state + "."); } catch (er) { flash(er); e.target.disabled = false; }
    } }, a),
    el("span", { id: "does-" + a, class: "muted does" }, CONTROLS[a])));
}

// A reset asks first: the chamber's name, typed.
function confirmReset(c) {
  const input = el("input", { id: "reset-name", autocomplete: "off", spellcheck: "false" });
  const go = el("button", { class: "danger", type: "submit", disabled: true }, "Reset");
  const form = el("form", { method: "dialog" },
    el("h2", { id: "h-reset" }, "Reset " + c.name + "?"),
    el("p", {}, "It is stopped first. Its todo.json, NOTES.md, messages and logs move into ",
      el("code", {}, "history/"), " inside the chamber; plan.md and cryo.toml stay. It begins again from its plan when started."),
    el("label", { for: "reset-name" }, "Type its name to go on"), input,
    el("div", { class: "row" }, go, el("button", { type: "button", onclick: () => dialog.close() }, "Cancel")));
  const dialog = el("dialog", { id: "reset-dialog", "aria-labelledby": "h-reset" }, form);
  input.addEventListener("input", () => { go.disabled = input.value !== c.name; });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    go.disabled = true;
    try {
      const v = await api(chamberPath(c.name) + "/reset", "POST", { confirm: input.value });
      dialog.close();
      await chamberPage(c.name);
      const box = document.getElementById("error");
      if (box) box.textContent = "";
      document.getElementById("controls")?.after(el("p", { id: "reset-done", role: "status" }, "Reset: the earlier files are in " + v.history + "/."));
    } catch (er) { dialog.close(); flash(er); }
  });
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();
  input.focus();
}

function showState(c) {
  here = c;
  document.getElementById("state")?.replaceChildren(c.archived ? badge("archived") : badge(c.state, c.last_result));
  if (isOwner()) document.getElementById("controls")?.replaceChildren(...controls(c));
  document.getElementById("status")?.replaceChildren(status(c));
  document.getElementById("needs")?.replaceWith(needs(c));
}

// What waits for the person, above the conversation: the attention line
// (a failure and the one thing to do, a hold, a changed setting to trust)
// and the open questions, which the composer below answers.
function needs(c) {
  const items = [];
  // Its tool calls that wait for a person, each with Approve and Deny.
  const asks = isOwner() ? pending(c.name) : [];
  if (asks.length) items.push(el("ul", { class: "needs-list" }, asks.map(approvalItem)));
  if (c.attention) items.push(el("p", { class: "error", "data-need": "attention" }, prose(c.attention)));
  if (c.fault) items.push(el("p", { class: "error", "data-need": "fault" }, prose(c.fault)));
  // A changed setting that waits for the operator: the diff, then Trust.
  if (c.fault && isOwner() && c.fault.includes("cryoctl chamber trust")) {
    items.push(el("div", { class: "row" }, el("button", { id: "trust-review", onclick: () => reviewTrust(c, showState) }, "Review the changes")));
  }
  if (c.acknowledged_at && items.length) {
    items.push(el("p", { class: "muted", "data-need": "set-aside" }, "Set aside ", at(c.acknowledged_at),
      c.snoozed_until ? [", snoozed until ", at(c.snoozed_until)] : ", until it changes", "."));
  }
  for (const w of c.warnings || []) items.push(el("p", { class: "warn", "data-need": "warning" }, prose(w)));
  if (c.open_questions) items.push(el("p", { "data-need": "questions" }, el("span", { class: "badge qbadge" }, c.open_questions + (c.open_questions === 1 ? " open question" : " open questions")),
    " — the agent asked; answer below and it reads your reply at its next wake."));
  return items.length ? el("section", { id: "needs", class: "needs", "aria-labelledby": "h-needs" }, el("h2", { id: "h-needs" }, "Needs you"), items)
    : el("div", { id: "needs", hidden: true });
}

export async function chamberPage(name, answer = false) {
  if (state.current !== name) { openRuns.clear(); todoQuery = ""; todoLimit = 50; }
  state.current = name;
  oldest = null;
  const main = document.getElementById("main");
  main.dataset.page = "chamber";
  const base = chamberPath(name);
  const owner = isOwner();
  // The page's own read is a header read: a change told while it loads
  // (its refresh found no page to draw on) is read again once it is drawn.
  const read = ++headerReads;
  const [info, msgs, extra] = await Promise.all([
    api(base + "?sessions=" + RUNS_SHOWN), api(base + "/messages?limit=" + PAGE),
    owner ? Promise.all([api(base + "/todos"), api(base + "/plan"), api(base + "/notes"), api(base + "/log?lines=100"), api(base + "/settings"), api(base + "/history?days=7")]) : null,
  ]);
  // Another page was asked for meanwhile: it draws itself.
  if (state.current !== name) return;
  const c = info.chamber;
  here = c;
  if (owner) refreshApprovals();
  const conversation = el("section", { "aria-labelledby": "h-conv" }, el("h2", { id: "h-conv" }, "Conversation"),
    el("div", { id: "messages", role: "log", tabindex: "0", "aria-label": "messages, oldest first", "aria-live": "polite" }, msgs.map(message)),
    composer(base));
  let body;
  if (owner) {
    const [todos, plan, notes, log, settings, history] = extra;
    const planText = el("textarea", { id: "plan-text", rows: 10 });
    planText.value = plan.text;
    const savePlan = async (e) => {
      e.target.disabled = true;
      try { await api(base + "/plan", "PUT", { text: planText.value }); toast("Plan saved to plan.md."); } catch (er) { flash(er); } finally { e.target.disabled = false; }
    };
    const panels = [
      ["status", "Status", [el("div", { id: "status" }, status(c)), el("h3", {}, "The last 7 days"), el("div", { id: "days-box" }, dayBars(history))]],
      ["runs", "Runs", [el("div", { id: "sessions" }, sessions(info.sessions)),
        el("h3", { id: "h-time" }, "The last 7 days and what comes next"),
        el("div", { id: "timeline-box" }, chamberTimeline(history)), legend(),
        el("details", { id: "digest-box" }, el("summary", {}, "By day"), el("div", { class: "scroll" }, digest(history)))]],
      ["todos", "TODOs", todoPanel(base)],
      ["plan", "Plan", [el("label", { for: "plan-text", class: "sr-only" }, "Plan (plan.md)"), planText,
        el("div", { class: "row" }, el("button", { id: "plan-save", onclick: savePlan }, "Save plan"))]],
      ["notes", "Notes", [el("pre", { class: "text" }, notes.text || "(empty)")]],
      ["settings", "Settings", [settingsForm(base, settings)]],
      ["log", "Log", [(logView = linesView("log", "cryo.log", log.lines)).node]],
      ["transcript", "Transcript", [el("p", { class: "muted" }, "The agent's tool calls and text as they happen (cryo-agent.log)."),
        (transcriptView = linesView("transcript", "agent transcript", [])).node]],
    ];
    // The conversation is the page's centre (first on a phone); the rest
    // are tabs beside it.
    body = el("div", {},
      needs(c),
      el("div", { class: "grid chamber" },
        el("div", { class: "centre" }, conversation),
        el("div", { class: "side" }, tabs(panels))));
  } else {
    body = conversation;
  }
  main.replaceChildren(
    el("h1", {}, c.name, " ", el("span", { id: "state" }, c.archived ? badge("archived") : badge(c.state, c.last_result))),
    el("div", { id: "error", class: "error", role: "alert" }),
    owner ? el("div", { class: "row", id: "controls", role: "group", "aria-label": "controls" }, controls(c)) : "",
    body);
  oldest = msgs.length ? msgs[0].file : null;
  const box = document.getElementById("messages");
  box.addEventListener("scroll", () => { if (box.scrollTop < 40) older(base); });
  await showAttachments(box, base);
  scrollMessages();
  if (answer) document.getElementById("send-text")?.focus();
  if (owner) { drawTodos(extra[0]); followTranscript(base); }
  if (read !== headerReads) refreshHeader().catch(() => {});
}

// ---- the conversation ----------------------------------------------------------
function message(m) {
  const cls = "msg " + (m.direction === "out" ? "out" : "in") + (m.question ? " question" : "");
  // `html` is cryod's rendering of the Markdown, already sanitised: the only
  // markup set here. The raw body is never parsed as HTML.
  const body = el("div", { class: "md" });
  const t = document.createElement("template");
  t.innerHTML = m.html ?? "";
  for (const img of t.content.querySelectorAll("img")) { img.dataset.src = img.getAttribute("src") || ""; img.removeAttribute("src"); }
  body.append(t.content);
  return el("article", { class: cls, "data-file": m.file, "data-ts": m.timestamp, "data-dir": m.direction },
    el("div", { class: "meta" }, m.question ? el("span", { class: "badge qbadge" }, "open question") : "", " ",
      (m.direction === "out" ? m.from + " → you" : m.from + " → agent") + " · " + local(m.timestamp)),
    body);
}

// Links and images into messages/attachments/ are fetched with the token.
async function showAttachments(root, base) {
  const prefix = "messages/attachments/";
  for (const img of root.querySelectorAll("img[data-src]")) {
    const src = img.dataset.src;
    img.removeAttribute("data-src");
    if (!src.startsWith(prefix)) { img.replaceWith(el("span", { class: "muted" }, "[an image from elsewhere is not loaded]")); continue; }
    try { img.src = await blobUrl(base + "/attachments/" + encodeURIComponent(src.slice(prefix.length))); img.classList.add("inline"); } catch (e) { img.alt = e.message; }
  }
  for (const a of root.querySelectorAll("a[href^='" + prefix + "']")) {
    const file = a.getAttribute("href").slice(prefix.length);
    a.href = "#";
    a.dataset.attachment = file;
    a.addEventListener("click", async (e) => {
      e.preventDefault();
      try { const url = await blobUrl(base + "/attachments/" + encodeURIComponent(file)); const d = el("a", { href: url, download: file }); d.click(); } catch (er) { flash(er); }
    });
  }
}

async function older(base) {
  if (loadingOlder || !oldest) return;
  loadingOlder = true;
  try {
    const page = await api(base + "/messages?limit=" + PAGE + "&before=" + encodeURIComponent(oldest));
    const box = document.getElementById("messages");
    if (!box || !page.length) { oldest = null; return; }
    const before = box.scrollHeight;
    const nodes = page.map(message);
    box.prepend(...nodes);
    for (const n of nodes) await showAttachments(n, base);
    box.scrollTop += box.scrollHeight - before;
    oldest = page[0].file;
  } catch (e) { flash(e); } finally { loadingOlder = false; }
}

export async function addMessage(m) {
  const box = document.getElementById("messages");
  if (!box || box.querySelector(`[data-file="${CSS.escape(m.file)}"]`)) return;
  const node = message(m);
  box.append(node);
  await showAttachments(node, chamberPath(state.current));
  scrollMessages();
}

function scrollMessages() { const m = document.getElementById("messages"); if (m) m.scrollTop = m.scrollHeight; }

function composer(base) {
  const text = el("textarea", { id: "send-text", rows: 3, placeholder: "Write to the agent (Ctrl+Enter sends)" });
  const files = el("input", { id: "send-files", type: "file", multiple: true, class: "files" });
  // When the agent will not read it at once, the answer says when (and how to have it read now).
  const waits = el("p", { id: "waits", class: "note", role: "status" });
  const send = async () => {
    if (!text.value.trim() && !files.files.length) return;
    try {
      const links = [];
      for (const f of files.files) links.push((await upload(base + "/attachments", f)).markdown);
      const body = [text.value.trim(), ...links].filter(Boolean).join("\n\n");
      const r = await api(base + "/messages", "POST", { text: body });
      text.value = ""; files.value = "";
      waits.textContent = r.waits ? "Not read yet: " + r.waits : "";
    } catch (e) { flash(e); }
  };
  text.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send(); });
  return el("div", { class: "composer" },
    el("label", { for: "send-text", class: "sr-only" }, "Message"), text,
    el("div", { class: "row" }, el("label", { for: "send-files" }, "Attach"), files,
      el("button", { class: "primary", id: "send", onclick: send }, "Send")), waits);
}

// ---- tabs beside the conversation ----------------------------------------------------
// One panel shown at a time; the choice is kept across pages and redraws.
// Arrow keys, Home and End move between tabs (the WAI-ARIA tabs pattern).
let openTab = localStorage.getItem("cryo.tab") || "status";
function showTab(id) {
  const tab = document.getElementById("tab-" + id);
  if (!tab) return;
  openTab = id;
  localStorage.setItem("cryo.tab", id);
  for (const t of tab.parentElement.children) {
    const on = t === tab;
    t.setAttribute("aria-selected", String(on));
    t.tabIndex = on ? 0 : -1;
    document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
  }
}
function tabs(panels) {
  if (!panels.some(([id]) => id === openTab)) openTab = panels[0][0];
  const list = el("div", { role: "tablist", class: "tabs", "aria-label": "the chamber" }, panels.map(([id, title]) =>
    el("button", { role: "tab", id: "tab-" + id, "aria-controls": "panel-" + id, "aria-selected": String(id === openTab), tabindex: id === openTab ? "0" : "-1", onclick: () => showTab(id) }, title)));
  list.addEventListener("keydown", (e) => {
    const all = [...list.children], at = all.indexOf(document.activeElement);
    const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: all.length - 1 }[e.key];
    if (at < 0 || to === undefined) return;
    e.preventDefault();
    const next = all[(to + all.length) % all.length];
    next.focus();
    showTab(next.id.slice(4));
  });
  return el("section", { class: "tabbed", "aria-label": "status, runs, TODOs, plan, notes, settings, log and transcript" }, list,
    panels.map(([id, title, kids]) => el("div", { role: "tabpanel", id: "panel-" + id, "aria-labelledby": "tab-" + id, tabindex: "0", hidden: id !== openTab },
      el("h2", { id: "h-" + id, class: "sr-only" }, title), kids)));
}

// Sessions a day over the last days as small bars (failures in the failure
// colour), with the day's cost: a glance, where a table of zeros was.
function dayBars(h) {
  // The seven days to today in the chamber's zone, left to right, each
  // found by its date (a day cryod did not list had nothing).
  const byDay = new Map(h.days.map((d) => [d.day, d]));
  let fmt;
  try { fmt = new Intl.DateTimeFormat("en-CA", { timeZone: h.timezone }); } catch (_) { fmt = new Intl.DateTimeFormat("en-CA"); }
  const iso = (t) => fmt.format(t);
  const days = [6, 5, 4, 3, 2, 1, 0].map((n) => iso(Date.now() - n * 86400e3))
    .map((day) => byDay.get(day) || { day, sessions: 0, failures: 0, cost_usd: null });
  const most = Math.max(1, ...days.map((d) => d.sessions));
  const total = days.reduce((n, d) => n + d.sessions, 0), failed = days.reduce((n, d) => n + d.failures, 0);
  const cost = days.reduce((n, d) => n + (d.cost_usd || 0), 0);
  // A height is set through the CSSOM: the page's policy (style-src
  // 'self') refuses style attributes.
  const seg = (cls, n) => { const e = el("span", { class: "seg " + cls }); e.style.height = (100 * n / most) + "%"; return e; };
  const bar = (d) => {
    const ok = d.sessions - d.failures;
    const title = d.day + ": " + d.sessions + (d.sessions === 1 ? " session" : " sessions") + (d.failures ? ", " + d.failures + " failed" : "") + (d.cost_usd ? ", $" + d.cost_usd.toFixed(2) : "");
    return el("li", { title, "data-day": d.day },
      el("span", { class: "stack", "aria-hidden": "true" },
        d.failures ? seg("bad", d.failures) : "", ok ? seg("ok", ok) : ""),
      el("span", { class: "sr-only" }, title),
      el("span", { class: "day", "aria-hidden": "true" }, new Date(d.day + "T12:00:00").toLocaleDateString([], { weekday: "narrow" })));
  };
  return el("div", { id: "days" },
    el("ol", { class: "bars", "aria-label": "sessions a day" }, days.map(bar)),
    el("p", { class: "muted" }, total + (total === 1 ? " session" : " sessions") + " in 7 days" + (failed ? ", " + failed + " failed" : "") + (cost ? ", $" + cost.toFixed(2) : "")));
}

// ---- status, sessions, TODOs, settings -----------------------------------------------
function status(c) {
  const rows = [["state", c.state], ["session", c.session || "-"], ["next wake", c.next_wake ? el("span", {}, when(c.next_wake), " ", el("span", { class: "muted" }, at(c.next_wake)))
    : c.held_until ? el("span", {}, "when the hold ends, ", at(c.held_until)) : "-"]];
  // A hold is not a failure: its own words and colour, and its end.
  if (c.held_by) rows.splice(1, 0, ["held", el("span", { class: "warn", "data-held": c.held_by }, "by " + c.held_by + " until ", at(c.held_until), " (", when(c.held_until), ")")]);
  if (c.last_result !== undefined) rows.push(["last result", c.last_result || "-"], ["unread mail", c.mail_waiting], ["agent", c.agent]);
  if (c.node) rows.push(["node", c.node]);
  if (c.git) rows.push(["git", gitLine(c.git)]);
  if (c.attention) rows.push(["attention", c.attention]);
  if (c.fault) rows.push(["fault", c.fault]);
  if (c.error) rows.push(["error", c.error]);
  for (const w of c.warnings || []) rows.push(["warning", w]);
  for (const b of c.bridges || []) {
    const when = [b.last_pull ? "pulled " + local(b.last_pull) : "", b.last_push ? "pushed " + local(b.last_push) : ""].filter(Boolean).join(", ");
    rows.push(["sync " + b.name, el("span", { class: b.state === "connected" ? "" : "error", "data-bridge": b.name },
      b.state + (b.last_error ? ": " + b.last_error : "") + (when ? " · " + when : ""))]);
  }
  return el("table", {}, el("tbody", {}, rows.map(([k, v]) => el("tr", {}, el("th", { scope: "row" }, k), el("td", {}, v)))));
}

// A [git] chamber's branch, its last session's changes, and its draft
// pull request (a link to its page).
function gitLine(g) {
  const parts = [el("code", {}, g.branch), ` · session ${g.session}: ${g.commits} commit${g.commits === 1 ? "" : "s"}, `, changes(g)];
  if (g.pull_request) {
    const pr = "pull request #" + g.pull_request;
    parts.push(" · ", g.pull_request_url ? el("a", { href: g.pull_request_url, rel: "noopener noreferrer", target: "_blank" }, pr) : pr);
  }
  return el("span", { "data-git": g.branch }, parts);
}
export function changes(g) {
  return el("span", { class: "nowrap", title: `${g.files} file${g.files === 1 ? "" : "s"}` },
    el("span", { class: "diff-add" }, "+" + g.additions), " ", el("span", { class: "diff-del" }, "−" + g.deletions));
}
// A run's diff: each file's counts, then the patch, its lines marked as
// added, deleted or a hunk's head (text only; the first lines of a long one).
const MAX_DIFF_LINES = 3000;
function diffBlock(d, title) {
  const files = el("table", { class: "diff-files" }, el("tbody", {}, d.files.map((f) => el("tr", {},
    el("td", {}, f.path), el("td", { class: "diff-add nowrap" }, f.binary ? "binary" : "+" + f.additions),
    el("td", { class: "diff-del nowrap" }, f.binary ? "" : "−" + f.deletions)))));
  const lines = d.patch.split("\n");
  const shown = lines.slice(0, MAX_DIFF_LINES).map((l) => {
    const kind = l.startsWith("+++") || l.startsWith("---") || l.startsWith("diff ") || l.startsWith("index ") ? "diff-meta"
      : l.startsWith("@@") ? "diff-hunk" : l.startsWith("+") ? "diff-add" : l.startsWith("-") ? "diff-del" : "";
    return el("span", { class: kind }, l + "\n");
  });
  const cut = lines.length > MAX_DIFF_LINES || d.cut ? el("p", { class: "muted" }, "the patch is longer: see it whole with `cryoctl chamber diff`") : "";
  return [el("h3", {}, title), el("p", {}, `${d.commits} commit${d.commits === 1 ? "" : "s"} on `, el("code", {}, d.branch), ", ",
    `${d.files.length} file${d.files.length === 1 ? "" : "s"}, `, changes({ ...d, files: d.files.length })), files,
    el("pre", { class: "log diff", tabindex: "0", role: "region", "aria-label": title }, shown), cut];
}

// Sessions as a CI console lists runs: a status icon and colour, what
// woke it, when (relative, exact on hover), how long, tokens and cost.
const RUN = [
  [/^running/, "●", "running"], [/^hibernated|^completed/, "✓", "ok"], [/^crashed|^failed/, "✕", "bad"],
  [/^timed out|^stalled/, "⏱", "bad"], [/^looping/, "↻", "bad"], [/^limited|^over budget/, "⏸", "held"], [/^stopped|^interrupted/, "■", "muted"],
];
export function runStatus(s) {
  const outcome = s.outcome || "running";
  const [, icon, kind] = RUN.find(([re]) => re.test(outcome)) || [null, "•", "muted"];
  const since = !s.outcome && s.started_at ? " " + duration(Date.now() - Date.parse(s.started_at)) : "";
  return el("span", { class: "run run-" + kind, title: outcome }, el("span", { "aria-hidden": "true" }, icon + " "), outcome.split(":")[0] + since);
}
export function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  return s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m " + (s % 60) + "s" : Math.floor(s / 3600) + "h " + Math.floor(s % 3600 / 60) + "m";
}
// A run's own lines: its block of cryo.log and of the agent's transcript,
// in a row under it (opened and closed by its number; kept open when the
// runs are redrawn).
const openRuns = new Set();
async function runDetail(button, number, wake, git) {
  const row = button.closest("tr");
  const open = row.nextElementSibling?.dataset.detail === String(number);
  if (open) { row.nextElementSibling.remove(); button.setAttribute("aria-expanded", "false"); openRuns.delete(number); return; }
  if (button.disabled) return;
  const base = chamberPath(state.current);
  button.disabled = true;
  try {
    const [log, tx, diff] = await Promise.all([api(base + "/log?session=" + number),
      api(base + "/log?agent=true&session=" + number + (wake ? "&wake=" + encodeURIComponent(wake) : "")),
      git ? api(base + "/diff?session=" + number).catch(() => null) : null]);
    if (row.nextElementSibling?.dataset.detail === String(number)) return;
    const block = (title, r) => [el("h3", {}, title), r.lines.length ? el("pre", { class: "log", tabindex: "0", role: "region", "aria-label": title }, r.lines.join("\n"))
      : el("p", { class: "muted" }, r.note || "nothing")];
    row.after(el("tr", { "data-detail": number }, el("td", { colspan: 9, class: "run-detail" },
      diff ? diffBlock(diff, "changes, session " + number) : "",
      block("cryo.log, session " + number, log), block("transcript, session " + number, tx))));
    button.setAttribute("aria-expanded", "true");
    openRuns.add(number);
  } catch (er) { flash(er); } finally { button.disabled = false; }
}

// The runs shown: every one, the failed ones, or this week's.
let runsFilter = "";
const RUN_FILTERS = [["", "every run"], ["failed", "failed"], ["week", "this week"]];
const failedRun = (s) => /^(crashed|failed|timed out|stalled|looping)/.test(s.outcome || "");
function sessions(all) {
  const pick = el("select", { id: "runs-filter" }, RUN_FILTERS.map(([v, l]) => el("option", { value: v, selected: runsFilter === v }, l)));
  pick.addEventListener("change", () => { runsFilter = pick.value; document.getElementById("sessions")?.replaceChildren(sessions(all)); document.getElementById("runs-filter")?.focus(); });
  const weekAgo = Date.now() - 7 * 86400e3;
  const list = all.filter((s) => runsFilter === "failed" ? failedRun(s) : runsFilter === "week" ? Date.parse(s.started_at || s.due_at) >= weekAgo : true);
  return el("div", {}, el("div", { class: "row" }, el("label", { for: "runs-filter", class: "sr-only" }, "Which runs"), pick,
    el("span", { class: "muted", id: "runs-count" }, list.length + " of " + all.length + " runs")), runsTable(list));
}
function runsTable(list) {
  if (!list.length) return el("p", { class: "muted" }, "none yet");
  const tokens = (s) => (s.input_tokens || s.output_tokens) ? Math.round((s.input_tokens + s.output_tokens) / 100) / 10 + "k" : "-";
  // On a phone: number, status, start, duration and cost.
  const head = [["#"], ["status"], ["trigger", "wide"], ["started"], ["took"], ["tokens", "wide"], ["cost"], ["account", "wide"], ["changes"]];
  return el("div", { class: "scroll", tabindex: "0", role: "region", "aria-label": "runs" }, el("table", { class: "runs" }, el("thead", {}, el("tr", {}, head.map(([h, cls]) => el("th", { scope: "col", class: cls }, h)))),
    el("tbody", {}, list.map((s) => el("tr", { "data-session": s.number, "data-wake": s.wake_id, "data-git": s.git ? "1" : "" },
      el("td", {}, el("button", { class: "quiet", "aria-expanded": "false", "data-run": s.number, "aria-label": "session " + s.number + ": its log and transcript" + (s.git ? " and changes" : ""), onclick: (e) => runDetail(e.currentTarget, s.number, s.wake_id, !!s.git) }, s.number)),
      el("td", {}, el("a", { href: "#/c/" + encodeURIComponent(state.current) + "/run/" + s.number, "data-run-link": s.number, title: "run " + s.number + " on a page of its own" }, runStatus(s))), el("td", { class: "wide" }, s.trigger),
      el("td", {}, when(s.started_at || s.due_at)),
      el("td", { class: "nowrap" }, s.started_at && s.ended_at ? duration(Date.parse(s.ended_at) - Date.parse(s.started_at)) : "-"),
      el("td", { class: "wide" }, tokens(s)),
      el("td", {}, s.cost_usd == null ? "-" : "$" + Number(s.cost_usd).toFixed(2)),
      el("td", { class: "wide" }, s.account || "-"),
      el("td", {}, s.git ? changes(s.git) : "-"))))));
}

// TODOs: the add form first, then a search, a count, the list 50 at a
// time; a removal waits six seconds with an Undo before it is sent (one
// left pending when the page goes is sent then).
let todoQuery = "";
let todoLimit = 50;
let lastTodos = [];
const removing = new Map(); // id -> { timer, send }

function drawTodos(todos) {
  lastTodos = todos;
  const open = todos.filter((t) => t.state !== "done" && !removing.has(t.id));
  const q = todoQuery.trim().toLowerCase();
  const matching = q ? open.filter((t) => t.text.toLowerCase().includes(q)) : open;
  const shown = matching.slice(0, todoLimit);
  document.getElementById("todos")?.replaceChildren(...shown.map(todoItem));
  const count = document.getElementById("todos-count");
  if (count) {
    count.textContent = !open.length ? "Nothing to do."
      : (q ? matching.length + " of " + open.length + " match" : open.length + " to do")
        + (shown.length < matching.length ? ", the first " + shown.length + " shown" : "") + ".";
  }
  const more = document.getElementById("todos-more");
  if (more) {
    more.hidden = shown.length >= matching.length;
    more.textContent = "Show " + Math.min(50, matching.length - shown.length) + " more";
  }
}

function todoItem(t) {
  const base = chamberPath(state.current);
  return el("li", { "data-todo": t.id }, t.text, " ", el("span", { class: "muted" }, t.at ? local(t.at) : "no time", t.every ? " · every " + t.every : "", t.cron ? " · " + t.cron : ""), " ",
    el("button", { "aria-label": "done: " + t.text, onclick: async () => { try { await api(base + "/todos/" + t.id + "/done", "POST", {}); renderTodos(); } catch (e) { flash(e); } } }, "done"), " ",
    el("button", { "aria-label": "remove: " + t.text, "data-remove": t.id, onclick: () => removeTodo(base, t) }, "remove"));
}

function removeTodo(base, t) {
  const send = async () => {
    removing.delete(t.id);
    try { await api(base + "/todos/" + t.id, "DELETE"); } catch (e) { flash(e); }
    renderTodos().catch(() => {});
  };
  removing.set(t.id, { timer: setTimeout(send, 6000), send });
  drawTodos(lastTodos);
  const undo = el("button", { type: "button", "data-undo": t.id }, "Undo");
  undo.onclick = () => {
    const r = removing.get(t.id);
    if (r) { clearTimeout(r.timer); removing.delete(t.id); }
    document.getElementById("todo-undo")?.replaceChildren();
    drawTodos(lastTodos);
  };
  document.getElementById("todo-undo")?.replaceChildren(el("span", {}, "Removed “" + t.text + "”. "), undo);
}

// Removals still waiting for their Undo are sent now (the page goes).
function sendRemovals() {
  for (const r of [...removing.values()]) { clearTimeout(r.timer); r.send(); }
}

function todoPanel(base) {
  const search = el("input", { type: "search", id: "todo-search", placeholder: "Search TODOs", autocomplete: "off" });
  search.value = todoQuery;
  search.addEventListener("input", () => { todoQuery = search.value; todoLimit = 50; drawTodos(lastTodos); });
  const more = el("button", { type: "button", id: "todos-more", hidden: "" }, "Show more");
  more.onclick = () => { todoLimit += 50; drawTodos(lastTodos); };
  return [todoForm(base),
    el("div", { class: "row" }, el("label", { for: "todo-search", class: "sr-only" }, "Search TODOs"), search),
    el("p", { id: "todos-count", class: "muted", "aria-live": "polite" }),
    el("ul", { id: "todos" }), more,
    el("p", { id: "todo-undo", role: "status" }),
    doneHistory(base)];
}

// Done TODOs, newest first, a page at a time (older ones come from the
// archive beside todo.json).
function doneHistory(base) {
  const list = el("ol", { id: "todos-done", reversed: "" });
  const older = el("button", { type: "button", id: "todos-done-older", hidden: "" }, "Older");
  let before = null;
  const page = async () => {
    try {
      const r = await api(base + "/todos/done?limit=50" + (before ? "&before=" + before : ""));
      list.append(...r.todos.slice().reverse().map((t) => el("li", {}, t.text)));
      before = r.before;
      older.hidden = !before;
    } catch (e) { flash(e); }
  };
  older.onclick = page;
  const box = el("details", { id: "todos-done-box" }, el("summary", {}, "Done"), list, older);
  box.addEventListener("toggle", () => { if (box.open && !list.children.length) page(); });
  return box;
}

function todoForm(base) {
  const text = el("input", { id: "todo-text" });
  const at = el("input", { id: "todo-at", placeholder: "+2h, tomorrow 09:00" });
  const form = el("form", {},
    el("div", { class: "field" }, el("label", { for: "todo-text" }, "New TODO"), text),
    el("div", { class: "field" }, el("label", { for: "todo-at" }, "When"), at),
    el("div", { class: "row" }, el("button", { type: "submit", id: "todo-add" }, "Add")));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try { await api(base + "/todos", "POST", { text: text.value, at: at.value }); toast("TODO added: " + text.value); text.value = ""; at.value = ""; renderTodos(); } catch (er) { flash(er); }
  });
  return form;
}

export async function renderTodos() {
  if (!state.current || !isOwner()) return;
  drawTodos(await api(chamberPath(state.current) + "/todos"));
}

// The documented keys of cryo.toml; cryod rewrites the file keeping its
// comments. An empty field removes the key (its default applies). A value
// that is not of its key's kind is shown beside the field, and nothing is
// written until every field is valid.
function settingsForm(base, s) {
  const fields = s.keys.map((k) => {
    const id = "set-" + k.key;
    const input = k.kind === "bool"
      ? el("select", { id, "data-key": k.key, "data-kind": k.kind }, ["", "true", "false"].map((o) => el("option", { value: o, selected: String(k.value ?? "") === o }, o || "(default)")))
      : el("input", { id, "data-key": k.key, "data-kind": k.kind, value: k.value ?? "", inputmode: k.kind === "integer" ? "numeric" : undefined, placeholder: "(default)", "aria-describedby": id + "-error" });
    const error = el("p", { id: id + "-error", class: "field-error", "aria-live": "polite" });
    input.addEventListener("input", () => { error.textContent = ""; input.removeAttribute("aria-invalid"); });
    // Its unit or form, and whether a change waits for the operator's word
    // (a change made here is the operator's word).
    return el("div", { class: "field", "data-accept": k.needs_acceptance ? "yes" : undefined },
      el("label", { for: id }, k.key, k.hint ? el("span", { class: "muted hint" }, " (" + k.hint + ")") : "",
        k.needs_acceptance ? el("span", { class: "badge accept", title: "an edit of this key in cryo.toml by anyone but you waits for your acceptance (cryoctl chamber trust)" }, "guarded") : ""),
      input, error);
  });
  const done = el("p", { id: "settings-saved", role: "status", class: "muted" });
  const form = el("form", { id: "settings", novalidate: true }, fields,
    el("p", { class: "muted" }, "Provider: ", s.provider.name || "(none)", s.provider.env.length ? " · env: " + s.provider.env.join(", ") + " (values stay in cryo.toml)" : ""),
    el("div", { class: "row" }, el("button", { type: "submit", id: "settings-save" }, "Save settings")), done);
  // A field's own line, shown once, beside it.
  const mark = (key, line) => {
    const input = form.querySelector(`[data-key="${CSS.escape(key)}"]`);
    const error = form.querySelector("#set-" + CSS.escape(key) + "-error");
    if (!input || !error) return null;
    error.textContent = line;
    input.setAttribute("aria-invalid", "true");
    return input;
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    for (const f of form.querySelectorAll(".field-error")) f.textContent = "";
    for (const f of form.querySelectorAll("[aria-invalid]")) f.removeAttribute("aria-invalid");
    const changes = {};
    let bad = null;
    for (const k of s.keys) {
      const input = form.querySelector(`[data-key="${k.key}"]`);
      const raw = input.value.trim();
      if (k.kind === "integer" && raw !== "" && !/^\d+$/.test(raw)) {
        form.querySelector("#set-" + CSS.escape(k.key) + "-error").textContent = "“" + raw + "” is not a whole number: write digits only (or leave it empty for the default).";
        input.setAttribute("aria-invalid", "true");
        bad = bad || input;
        continue;
      }
      const v = raw === "" ? null : k.kind === "integer" ? Number(raw) : k.kind === "bool" ? raw === "true" : raw;
      if (v !== (k.value ?? null)) changes[k.key] = v;
    }
    if (bad) { done.textContent = "Not saved: a field needs another value."; bad.focus(); return; }
    const keys = Object.keys(changes);
    if (!keys.length) { done.textContent = "Nothing changed."; return; }
    try {
      s = await api(base + "/settings", "PUT", changes);
      done.textContent = "Saved to cryo.toml: " + keys.join(", ") + ".";
      toast(done.textContent);
    } catch (er) {
      // Every field cryod refused, each with its own line; the line under
      // Save says only that (each message once, no toast over the form).
      const marked = Object.entries(er.fields || {}).map(([key, line]) => mark(key, line)).filter(Boolean);
      done.textContent = marked.length ? "Not saved: " + (marked.length === 1 ? "a field needs" : marked.length + " fields need") + " another value." : "Not saved: " + er.message;
      marked[0]?.focus();
    }
  });
  return form;
}

// Each header read in turn: an answer older than the latest read, or than
// an action's own answer (which counts as a read), is dropped, so a slow
// answer never draws a state the chamber has left.
let headerReads = 0;
export async function refreshHeader() {
  if (!state.current) return;
  const read = ++headerReads;
  const info = await api(chamberPath(state.current) + "?sessions=" + RUNS_SHOWN);
  if (read !== headerReads || info.chamber.name !== state.current) return;
  showState(info.chamber);
  if (isOwner()) {
    document.getElementById("sessions")?.replaceChildren(sessions(info.sessions));
    for (const n of [...openRuns]) { const b = document.querySelector(`#sessions button[data-run="${n}"]`); openRuns.delete(n); if (b) runDetail(b, n, b.closest("tr")?.dataset.wake, !!b.closest("tr")?.dataset.git); }
    const h = await api(chamberPath(state.current) + "/history?days=7");
    document.getElementById("timeline-box")?.replaceChildren(chamberTimeline(h));
    document.getElementById("digest")?.replaceWith(digest(h));
    document.getElementById("days")?.replaceWith(dayBars(h));
  }
}

export function chamberChanged(c) { if (state.current === c.name) { showState(c); refreshHeader().catch(() => {}); } }

// The Log and Transcript tabs of the page shown (each searchable).
let logView = null, transcriptView = null;
export function logLine(line) {
  if (logView?.pre.isConnected) logView.append([line]);
}

// The agent's transcript: what is there, then each line as the agent works.
async function followTranscript(base) {
  transcript?.abort();
  const ctl = new AbortController();
  transcript = ctl;
  const view = transcriptView;
  try {
    const r = await fetch("/api" + base + "/transcript", { headers: auth(), signal: ctl.signal });
    await readEvents(r, (ev, d) => {
      if (ev !== "lines" || !view?.pre.isConnected) return;
      view.append(d.lines);
    });
  } catch (_) { /* left the page, or cryod went away */ }
}

export function leaveChamber() { transcript?.abort(); transcript = null; sendRemovals(); }
