// The cryo hub: plain JavaScript, no build step. It talks to cryod's JSON API
// with the owner's bearer token (kept in localStorage after the first visit,
// which brings it in the URL fragment so it never reaches a server log) and
// follows the one event stream for live updates.
"use strict";

const main = document.getElementById("main");
const live = document.getElementById("live");
let token = localStorage.getItem("cryo-token") || "";
let chambers = new Map();
let current = null; // the chamber page shown, if any

// ---- the token ---------------------------------------------------------
const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.get("token")) {
  token = fragment.get("token");
  localStorage.setItem("cryo-token", token);
  history.replaceState(null, "", location.pathname + "#/");
}

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const kid of kids.flat()) e.append(kid instanceof Node ? kid : document.createTextNode(String(kid ?? "")));
  return e;
}

async function api(path, method = "GET", body) {
  const r = await fetch("/api" + path, {
    method,
    headers: { Authorization: "Bearer " + token, "X-Cryo-Csrf": "1", ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  if (r.status === 401) { signIn("That token was not accepted."); throw new Error("unauthorized"); }
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}

function signIn(why) {
  localStorage.removeItem("cryo-token");
  token = "";
  const input = el("input", { id: "token", type: "password", autocomplete: "off", "aria-label": "hub token" });
  main.replaceChildren(el("section", { id: "signin" },
    el("h2", {}, "Sign in"),
    el("p", {}, why || "Open the link `cryoctl hub` prints, or paste its token here."),
    el("form", { onsubmit: (e) => { e.preventDefault(); token = input.value.trim(); localStorage.setItem("cryo-token", token); route(); } },
      input, el("div", { class: "row" }, el("button", { class: "primary", type: "submit" }, "Sign in")))));
  input.focus();
}

// ---- times ---------------------------------------------------------------
function local(t) {
  if (!t) return "-";
  const d = new Date(t);
  return d.toLocaleString([], { weekday: "short", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}
function left(t) {
  if (!t) return "";
  let s = Math.round((new Date(t) - Date.now()) / 1000);
  const late = s < 0; s = Math.abs(s);
  const txt = s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m" : s < 86400 ? Math.floor(s / 3600) + "h " + Math.floor(s % 3600 / 60) + "m" : Math.floor(s / 86400) + "d";
  return late ? txt + " late" : "in " + txt;
}
function badge(state) { return el("span", { class: "badge state-" + state }, state); }

// ---- the chamber list ------------------------------------------------------
async function listPage() {
  current = null;
  const list = await api("/chambers");
  chambers = new Map(list.map((c) => [c.name, c]));
  renderList();
}

function renderList() {
  if (current) return;
  if (chambers.size === 0) {
    main.replaceChildren(el("p", { class: "muted" }, "No chambers yet. ", el("a", { href: "#/new" }, "Create one"), "."));
    return;
  }
  // A fleet's hub shows every node's chambers, with the node that runs each.
  const fleet = [...chambers.values()].some((c) => c.node);
  const rows = [...chambers.values()].sort((a, b) => a.name.localeCompare(b.name)).map((c) =>
    el("tr", { "data-chamber": c.name },
      el("td", {}, el("a", { href: "#/c/" + encodeURIComponent(c.name) }, c.name)),
      el("td", {}, badge(c.state)),
      fleet ? el("td", { "data-node": c.node || "" }, c.node || "-") : "",
      el("td", {}, c.next_wake ? [local(c.next_wake), el("div", { class: "muted" }, left(c.next_wake))] : "-"),
      el("td", { class: "wide" }, c.attention ? el("span", { class: "error" }, c.attention) : (c.last_result || "-")),
      el("td", {}, c.mail_waiting ? el("span", { class: "badge", title: "unread mail" }, "✉ " + c.mail_waiting) : "",
        c.open_questions ? el("span", { class: "q", title: "open questions" }, " ?") : "")));
  main.replaceChildren(el("table", { id: "chambers" },
    el("thead", {}, el("tr", {}, el("th", {}, "Chamber"), el("th", {}, "State"), fleet ? el("th", {}, "Node") : "", el("th", {}, "Next wake"), el("th", { class: "wide" }, "Last result"), el("th", {}, "Mail"))),
    el("tbody", {}, rows)));
}

// ---- one chamber -------------------------------------------------------------
async function chamberPage(name) {
  current = name;
  const [info, msgs, todos, plan, notes, log] = await Promise.all([
    api("/chambers/" + encodeURIComponent(name)),
    api("/chambers/" + encodeURIComponent(name) + "/messages"),
    api("/chambers/" + encodeURIComponent(name) + "/todos"),
    api("/chambers/" + encodeURIComponent(name) + "/plan"),
    api("/chambers/" + encodeURIComponent(name) + "/notes"),
    api("/chambers/" + encodeURIComponent(name) + "/log?lines=100"),
  ]);
  const c = info.chamber;
  const base = "/chambers/" + encodeURIComponent(name);
  const act = (a) => el("button", { onclick: async () => { try { await api(base + "/" + a, "POST", {}); refreshHeader(); } catch (e) { flash(e); } } }, a);
  const text = el("textarea", { id: "send-text", rows: 3, placeholder: "Write to the agent (Ctrl+Enter sends)", "aria-label": "message" });
  // When the agent will not read it at once, the answer says when (and how to have it read now).
  const waits = el("p", { id: "waits", class: "note", role: "status" });
  const send = async () => {
    if (!text.value.trim()) return;
    try { const r = await api(base + "/messages", "POST", { text: text.value }); text.value = ""; waits.textContent = r.waits ? "Not read yet: " + r.waits : ""; } catch (e) { flash(e); }
  };
  text.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send(); });
  const todoText = el("input", { id: "todo-text", placeholder: "TODO", "aria-label": "TODO text" });
  const todoAt = el("input", { id: "todo-at", placeholder: "when: +2h, tomorrow 09:00", "aria-label": "TODO time" });
  const planText = el("textarea", { id: "plan-text", rows: 10, "aria-label": "plan" });
  planText.value = plan.text;
  main.replaceChildren(
    el("h1", {}, c.name, " ", el("span", { id: "state" }, badge(c.state))),
    el("div", { id: "error", class: "error", role: "alert" }),
    el("div", { class: "row", id: "controls" }, ["start", "stop", "pause", "resume", "wake"].map(act)),
    el("div", { class: "grid" },
      el("div", {},
        el("section", {}, el("h2", {}, "Conversation"), el("div", { id: "messages" }, msgs.map(message)),
          text, el("div", { class: "row" }, el("button", { class: "primary", id: "send", onclick: send }, "Send")), waits),
        el("section", {}, el("h2", {}, "Plan"), planText,
          el("div", { class: "row" }, el("button", { onclick: async () => { try { await api(base + "/plan", "PUT", { text: planText.value }); } catch (e) { flash(e); } } }, "Save plan"))),
        el("section", {}, el("h2", {}, "Log"), el("pre", { class: "log", id: "log" }, log.lines.join("\n")))),
      el("div", {},
        el("section", {}, el("h2", {}, "Status"), el("div", { id: "status" }, status(c))),
        el("section", {}, el("h2", {}, "TODOs"), el("ul", { id: "todos" }, todoItems(todos)),
          el("form", { onsubmit: async (e) => { e.preventDefault(); try { await api(base + "/todos", "POST", { text: todoText.value, at: todoAt.value }); todoText.value = ""; todoAt.value = ""; renderTodos(); } catch (er) { flash(er); } } },
            el("div", { class: "row" }, todoText), el("div", { class: "row" }, todoAt, el("button", { type: "submit", id: "todo-add" }, "Add")))),
        el("section", {}, el("h2", {}, "Recent sessions"), el("div", { id: "sessions" }, sessions(info.sessions))),
        el("section", {}, el("h2", {}, "Notes"), el("pre", { class: "text" }, notes.text || "(empty)")))));
  scrollMessages();
}

function flash(e) { const box = document.getElementById("error"); if (box) box.textContent = e.message; }
function scrollMessages() { const m = document.getElementById("messages"); if (m) m.scrollTop = m.scrollHeight; }

function message(m) {
  const cls = "msg " + (m.direction === "out" ? "out" : "in") + (m.question ? " question" : "");
  return el("div", { class: cls, "data-file": m.file, "data-ts": m.timestamp, "data-dir": m.direction },
    el("div", { class: "meta" }, (m.direction === "out" ? m.from + " → you" : m.from + " → agent") + " · " + local(m.timestamp) + (m.question ? " · question" : "")),
    el("pre", {}, m.body));
}

function status(c) {
  const rows = [["state", c.state], ["session", c.session || "-"], ["next wake", c.next_wake ? local(c.next_wake) + " (" + left(c.next_wake) + ")" : "-"],
    ["last result", c.last_result || "-"], ["unread mail", c.mail_waiting], ["agent", c.agent]];
  if (c.node) rows.push(["node", c.node]);
  if (c.attention) rows.push(["attention", c.attention]);
  if (c.fault) rows.push(["fault", c.fault]);
  if (c.error) rows.push(["error", c.error]);
  for (const b of c.bridges || []) {
    const when = [b.last_pull ? "pulled " + local(b.last_pull) : "", b.last_push ? "pushed " + local(b.last_push) : ""].filter(Boolean).join(", ");
    rows.push(["sync " + b.name, el("span", { class: b.state === "connected" ? "" : "error", "data-bridge": b.name },
      b.state + (b.last_error ? ": " + b.last_error : "") + (when ? " · " + when : ""))]);
  }
  return el("table", {}, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))));
}

function sessions(list) {
  if (!list.length) return el("p", { class: "muted" }, "none yet");
  return el("table", {}, el("tr", {}, el("th", {}, "#"), el("th", {}, "trigger"), el("th", {}, "late"), el("th", {}, "outcome")),
    list.map((s) => el("tr", {}, el("td", {}, s.number), el("td", {}, s.trigger), el("td", {}, s.lateness_ms == null ? "-" : s.lateness_ms + " ms"), el("td", {}, s.outcome || "running"))));
}

function todoItems(todos) {
  const base = "/chambers/" + encodeURIComponent(current);
  return todos.filter((t) => t.state !== "done").map((t) =>
    el("li", { "data-todo": t.id }, t.text, " ", el("span", { class: "muted" }, t.at ? local(t.at) : "no time", t.every ? " · every " + t.every : "", t.cron ? " · " + t.cron : ""), " ",
      el("button", { "aria-label": "done " + t.text, onclick: async () => { try { await api(base + "/todos/" + t.id + "/done", "POST", {}); renderTodos(); } catch (e) { flash(e); } } }, "done"), " ",
      el("button", { "aria-label": "remove " + t.text, onclick: async () => { try { await api(base + "/todos/" + t.id, "DELETE"); renderTodos(); } catch (e) { flash(e); } } }, "remove")));
}

async function renderTodos() {
  if (!current) return;
  const todos = await api("/chambers/" + encodeURIComponent(current) + "/todos");
  document.getElementById("todos")?.replaceChildren(...todoItems(todos));
}

async function refreshHeader() {
  if (!current) return;
  const info = await api("/chambers/" + encodeURIComponent(current));
  document.getElementById("state")?.replaceChildren(badge(info.chamber.state));
  document.getElementById("status")?.replaceChildren(status(info.chamber));
  document.getElementById("sessions")?.replaceChildren(sessions(info.sessions));
}

// ---- a new chamber -----------------------------------------------------------
function newPage() {
  current = null;
  const name = el("input", { id: "new-name", placeholder: "name", "aria-label": "name" });
  const dir = el("input", { id: "new-dir", placeholder: "folder (absolute path)", "aria-label": "folder" });
  const agent = el("input", { id: "new-agent", placeholder: "agent: claude, codex, opencode or a command", "aria-label": "agent" });
  const start = el("input", { id: "new-start", type: "checkbox", style: "width:auto" });
  main.replaceChildren(el("section", {}, el("h2", {}, "New chamber"),
    el("div", { id: "error", class: "error", role: "alert" }),
    el("form", { onsubmit: async (e) => { e.preventDefault(); try { const r = await api("/chambers", "POST", { name: name.value, dir: dir.value, agent: agent.value, start: start.checked }); location.hash = "#/c/" + encodeURIComponent(r.chamber.name); } catch (er) { flash(er); } } },
      el("div", { class: "row" }, name), el("div", { class: "row" }, dir), el("div", { class: "row" }, agent),
      el("label", { class: "row" }, start, "start it now"),
      el("div", { class: "row" }, el("button", { class: "primary", type: "submit" }, "Create")))));
  name.focus();
}

// ---- live updates: one event stream, read with fetch so it carries the token --
async function follow() {
  while (true) {
    if (!token) { await new Promise((r) => setTimeout(r, 1000)); continue; }
    try {
      const r = await fetch("/api/events", { headers: { Authorization: "Bearer " + token } });
      if (!r.ok || !r.body) throw new Error("events: " + r.status);
      live.classList.add("on");
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, i); buf = buf.slice(i + 2);
          const ev = /^event: (.*)$/m.exec(frame)?.[1];
          const data = /^data: (.*)$/m.exec(frame)?.[1];
          if (ev) handle(ev, data ? JSON.parse(data) : {});
        }
      }
    } catch (e) { /* the daemon restarted or the network blinked: retry */ }
    live.classList.remove("on");
    await new Promise((r) => setTimeout(r, 1000));
  }
}

function handle(ev, d) {
  if (ev === "status") {
    chambers.set(d.chamber.name, d.chamber);
    renderList();
    if (current === d.chamber.name) {
      document.getElementById("state")?.replaceChildren(badge(d.chamber.state));
      document.getElementById("status")?.replaceChildren(status(d.chamber));
      refreshHeader().catch(() => {});
    }
  } else if (ev === "message" && current === d.chamber) {
    const box = document.getElementById("messages");
    if (box && !box.querySelector(`[data-file="${CSS.escape(d.message.file)}"]`)) { box.append(message(d.message)); scrollMessages(); }
  } else if (ev === "log" && current === d.chamber) {
    const log = document.getElementById("log");
    if (log) { log.textContent += "\n" + d.line; log.scrollTop = log.scrollHeight; }
  } else if (ev === "index" || ev === "resync") {
    route();
  }
}

// ---- routing -----------------------------------------------------------------
async function route() {
  if (!token) { signIn(); return; }
  const h = location.hash.replace(/^#/, "") || "/";
  try {
    if (h.startsWith("/c/")) await chamberPage(decodeURIComponent(h.slice(3)));
    else if (h === "/new") newPage();
    else await listPage();
    main.focus({ preventScroll: true });
  } catch (e) { if (e.message !== "unauthorized") main.replaceChildren(el("p", { class: "error" }, e.message)); }
}

window.addEventListener("hashchange", route);
route();
follow();
