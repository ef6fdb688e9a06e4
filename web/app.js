// The cryo hub: plain JavaScript modules, no build step. It talks to cryod's
// JSON API with a bearer token (the owner's, or a guest's invite) and
// follows one event stream for live updates.
"use strict";

import { api, at, auth, el, LIST, isOwner, readEvents, setToken, state, takeTokenFromUrl, toast, Unauthorized, when } from "./lib.js";
import { listPage, moveInQueue, openInQueue, renderList } from "./list.js";
import { approvalChanged, refreshApprovals } from "./approvals.js";

// The other pages' modules, loaded when first shown: a start on the list
// compiles only what the list draws (boot.js fetches early what a start on
// another page needs). Until a page has been shown, its module is null.
const pages = { chamber: null, run: null, owner: null };
const loaders = { chamber: () => import("./chamber.js"), run: () => import("./run.js"), owner: () => import("./owner.js") };
async function pageOf(name) { return pages[name] ??= await loaders[name](); }

const main = document.getElementById("main");
const live = document.getElementById("live");

takeTokenFromUrl();

function signIn(why) {
  setToken("");
  state.me = null;
  main.dataset.page = "signin";
  const input = el("input", { id: "token", type: "password", autocomplete: "off" });
  const form = el("form", {},
    el("label", { for: "token" }, "Hub token or invite"), input,
    el("div", { class: "row" }, el("button", { class: "primary", type: "submit" }, "Sign in")));
  form.addEventListener("submit", (e) => { e.preventDefault(); setToken(input.value.trim()); route(); });
  main.replaceChildren(el("section", { id: "signin" }, el("h1", {}, "Sign in"),
    el("p", {}, why || "Open the link `cryoctl hub` prints (or the invite you were sent), or paste its token here."), form));
  input.focus();
}

// The owner's navigation; a guest's is its chambers only.
function nav() {
  const links = [el("a", { href: "#/" }, "Chambers")];
  if (isOwner()) links.push(el("a", { href: "#/new" }, "New chamber"), el("a", { href: "#/share" }, "Sharing"));
  else if (state.me) links.push(el("span", { class: "muted" }, "guest: " + state.me.name));
  document.getElementById("nav").replaceChildren(...links);
}

// Provider accounts held at their limit: one banner for all. Asked again
// after changes, but never more than one request at a time.
let holdsAsked = null;
// Who waits on a hold, by name (each a link to its page): those cryod
// names, and every chamber shown held by that account.
function waiting(h) {
  const held = [...state.chambers.values()].filter((c) => c.held_by === h.provider).map((c) => c.name);
  const names = [...new Set([...(h.chambers || []), ...held])].sort();
  if (!names.length) return ["."];
  const links = names.flatMap((n, i) => [i ? ", " : "", el("a", { href: "#/c/" + encodeURIComponent(n) }, n)]);
  return [", ", names.length === 1 ? "1 chamber: " : names.length + " chambers: ", ...links, "."];
}
function holds() {
  if (!isOwner()) return;
  if (holdsAsked) { holdsAsked.again = true; return; }
  holdsAsked = { again: false };
  api("/limits").catch(() => []).then((list) => {
    const box = document.getElementById("holds");
    box.hidden = !list.length;
    // Until when, and who said so: the provider's own header, or cryo's
    // default hold when it named no reset.
    const why = (h) => h.source ? " (" + h.source + ")" : h.default_hold ? " (cryo's default hold: the provider named no reset)" : "";
    box.replaceChildren(...list.map((h) => el("p", { "data-hold": h.provider }, el("span", { class: "badge state-held" }, "held"), " by ",
      el("strong", {}, h.provider), " until ", at(h.until), " (", when(h.until), ")", why(h), ...waiting(h))));
    const again = holdsAsked.again;
    holdsAsked = null;
    if (again) holds();
  });
}

async function route() {
  performance.mark("route");
  if (!state.token) { signIn(); return; }
  pages.chamber?.leaveChamber();
  pages.run?.leaveRun();
  const h = location.hash.replace(/^#/, "") || "/";
  try {
    if (!state.me) { state.me = await api("/me"); nav(); }
    // `#/c/NAME`, or `#/c/NAME/answer` (a question's notification): the
    // page with the cursor in its reply box.
    // `#/c/NAME/run/N`: one run on a page of its own.
    if (h.startsWith("/c/")) {
      const [name, what, arg] = h.slice(3).split("/");
      if (what === "run") await (await pageOf("run")).runPage(decodeURIComponent(name), Number(arg));
      else {
        await (await pageOf("chamber")).chamberPage(decodeURIComponent(name), what === "answer");
        // Once: a later redraw does not take the cursor again.
        if (what) history.replaceState(null, "", "#/c/" + name);
      }
    }
    else if (h === "/new" && isOwner()) (await pageOf("owner")).newPage();
    else if (h === "/share" && isOwner()) await (await pageOf("owner")).sharePage();
    else await listPage();
    holds();
    // Into the new page, unless it put the cursor somewhere (a reply box).
    if (!main.contains(document.activeElement)) main.focus({ preventScroll: true });
  } catch (e) {
    if (e instanceof Unauthorized) signIn(e.message);
    else main.replaceChildren(el("p", { class: "error", role: "alert" }, e.message));
  }
}

// ---- live updates: one event stream, read with fetch so it carries the token --
async function follow() {
  for (;;) {
    if (!state.token || !state.me) { await new Promise((r) => setTimeout(r, 100)); continue; }
    try {
      const r = await fetch("/api/events", { headers: auth() });
      if (r.status === 401) { signIn("This link was revoked."); continue; }
      if (!r.ok || !r.body) throw new Error("events: " + r.status);
      live.classList.add("on");
      // Subscribed now: what changed before (while the page loaded, or the
      // stream was down) is read again, so nothing between is missed.
      caughtUp();
      await readEvents(r, handle);
    } catch (e) { /* the daemon restarted or the network blinked: retry */ }
    live.classList.remove("on");
    document.body.dataset.streamEnded = String(Date.now());
    await new Promise((r) => setTimeout(r, 1000));
  }
}

function caughtUp() {
  refreshApprovals();
  if (state.current) pages.chamber?.refreshHeader().catch(() => {});
  else if (main.dataset.page === "list") api(LIST).then((list) => {
    if (state.current || main.dataset.page !== "list") return;
    state.chambers = new Map(list.map((c) => [c.name, c]));
    renderList();
  }).catch(() => {});
}

function handle(ev, d) {
  if (ev === "status") {
    state.chambers.set(d.chamber.name, d.chamber);
    renderList();
    pages.chamber?.chamberChanged(d.chamber);
    if (state.current === d.chamber.name) pages.chamber?.renderTodos().catch(() => {});
    holds();
  } else if (ev === "message" && state.current === d.chamber) {
    pages.chamber?.addMessage(d.message);
  } else if (ev === "log" && state.current === d.chamber) {
    pages.chamber?.logLine(d.line);
  } else if (ev === "approval") {
    approvalChanged(d.approval);
  } else if (ev === "index" || ev === "resync") {
    route();
  }
}

// ---- keyboard shortcuts (listed on the `?` overlay) ------------------------------
const KEYS = [
  ["?", "show or hide this list"],
  ["/", "search the chambers"],
  ["g c", "go to the chambers"],
  ["g n", "go to New chamber"],
  ["r", "on a chamber: write to its agent"],
  ["w", "on a chamber: wake it now"],
  ["p", "on a chamber: pause or resume it"],
  ["j k", "in Needs you: the next or the previous item"],
  ["Enter", "in Needs you: open the item's chamber"],
];
function shortcuts() {
  const open = document.getElementById("keys");
  if (open) { open.close(); return; }
  const d = el("dialog", { id: "keys", "aria-labelledby": "h-keys" },
    el("h2", { id: "h-keys" }, "Keyboard shortcuts"),
    el("dl", { class: "keys" }, KEYS.flatMap(([k, what]) => [el("dt", {}, k.split(" ").map((p) => el("kbd", {}, p))), el("dd", {}, what)])),
    // Single keys can be turned off (a stray key, speech input): all but `?`.
    el("label", { class: "check-row", for: "keys-on" }, el("input", { id: "keys-on", type: "checkbox", checked: keysOn(),
      onchange: (e) => localStorage.setItem("cryo-keys", e.target.checked ? "on" : "off") }), "Single-key shortcuts on"),
    el("div", { class: "row" }, el("button", { type: "button", onclick: () => d.close() }, "Close")));
  d.addEventListener("close", () => d.remove());
  document.body.append(d);
  d.showModal();
}
document.getElementById("keys-open").addEventListener("click", shortcuts);
const keysOn = () => localStorage.getItem("cryo-keys") !== "off";
let pending = "";
document.addEventListener("keydown", (e) => {
  const t = e.target;
  if (e.ctrlKey || e.metaKey || e.altKey || e.repeat || e.isComposing || t.closest?.("input, textarea, select, [contenteditable]")) return;
  // Nothing acts behind an open dialog (a reset being confirmed).
  if (document.querySelector("dialog[open]") && !(e.key === "?" && document.getElementById("keys"))) return;
  if (e.key !== "?" && !keysOn()) return;
  const key = pending + e.key;
  pending = "";
  const click = (sel) => document.querySelector(sel)?.click();
  switch (key) {
    case "?": shortcuts(); break;
    case "/": if (document.getElementById("filter")) { e.preventDefault(); document.getElementById("filter").focus(); } break;
    case "g": pending = "g "; setTimeout(() => { pending = ""; }, 1500); break;
    case "g c": location.hash = "#/"; break;
    case "g n": if (isOwner()) location.hash = "#/new"; break;
    case "r": if (document.getElementById("send-text")) { e.preventDefault(); document.getElementById("send-text").focus(); } break;
    case "w": click("#controls button[data-action=wake]"); break;
    case "p": click("#controls button[data-action=pause], #controls button[data-action=resume]"); break;
    case "j": if (!moveInQueue(1)) return; break;
    case "k": if (!moveInQueue(-1)) return; break;
    case "Enter": if (!openInQueue()) return; break;
    default: return;
  }
});

if ("serviceWorker" in navigator) {
  // A worker that takes over from another brings a new cryod's files, and
  // this page was drawn from the old ones: it is drawn anew, unless
  // something is being written in it (then the person is told).
  const had = navigator.serviceWorker.controller;
  navigator.serviceWorker.addEventListener("controllerchange", () => {
    if (!had) return;
    const typing = [...document.querySelectorAll("textarea, input:not([type=search])")].some((f) => f.value);
    if (!typing) location.reload();
    else toast("cryo was updated: reload the page when you are done here.");
  });
  navigator.serviceWorker.register("/sw.js").then(() => { document.body.dataset.sw = "registered"; }).catch(() => {});
}
window.addEventListener("hashchange", route);
route();
follow();
