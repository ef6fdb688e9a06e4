// What every page of the hub shares: the token, the API, elements, times.
"use strict";

// What boot.js (run before any module) asked, and how the list is asked for.
const { early } = window.cryoBoot;
export const { LIST } = window.cryoBoot;

export const state = {
  token: localStorage.getItem("cryo-token") || "",
  me: null, // {role: "owner"} or {role: "guest", name, chambers}
  chambers: new Map(),
  current: null, // the chamber page shown, if any
};

// The token comes once in the URL fragment (never sent to a server or kept
// in its logs), then lives in localStorage.
export function takeTokenFromUrl() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("token")) {
    setToken(fragment.get("token"));
    history.replaceState(null, "", location.pathname + "#/");
  }
}

export function setToken(t) {
  state.token = t;
  if (t) localStorage.setItem("cryo-token", t); else localStorage.removeItem("cryo-token");
}

export const isOwner = () => state.me?.role === "owner";

export function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat(Infinity)) e.append(kid instanceof Node ? kid : document.createTextNode(String(kid ?? "")));
  return e;
}

export class Unauthorized extends Error {}

async function answer(r) {
  if (r.status === 401) throw new Unauthorized("That token was not accepted (revoked, or mistyped).");
  const data = await r.json().catch(() => ({}));
  if (!r.ok) {
    const e = new Error(data.error || r.statusText);
    e.status = r.status;
    e.fields = data.fields || null;
    e.retryAfter = r.headers.get("Retry-After");
    throw e;
  }
  return data;
}

export function auth(extra = {}) {
  return { Authorization: "Bearer " + state.token, "X-Cryo-Csrf": "1", ...extra };
}

export async function api(path, method = "GET", body) {
  // A question boot.js asked as the page started is answered from there.
  const r = await ((method === "GET" && early(path, state.token)) || fetch("/api" + path, {
    method,
    headers: auth(body ? { "Content-Type": "application/json" } : {}),
    body: body ? JSON.stringify(body) : undefined,
  }));
  return answer(r);
}

export async function upload(path, file) {
  const r = await fetch("/api" + path + "?name=" + encodeURIComponent(file.name), {
    method: "POST", headers: auth({ "Content-Type": "application/octet-stream" }), body: file,
  });
  return answer(r);
}

// A file the API serves only with the token: fetched, then shown from memory.
export async function blobUrl(path) {
  const r = await fetch("/api" + path, { headers: auth() });
  if (!r.ok) throw new Error("cannot fetch " + path + ": " + r.status);
  return URL.createObjectURL(await r.blob());
}

export const chamberPath = (name) => "/chambers/" + encodeURIComponent(name);

// cryo's own lines name commands and keys in `backticks`: shown as code
// (text nodes only: nothing in the line is read as markup).
export function prose(text) {
  const parts = String(text ?? "").split("`");
  if (parts.length < 3) return text;
  return parts.map((p, i) => (i % 2 && i < parts.length - 1 ? el("code", {}, p) : i % 2 ? "`" + p : p));
}

// ---- times -------------------------------------------------------------------
// One formatter for every time shown (toLocaleString makes one per call:
// a thousand rows took a second).
const LOCAL = new Intl.DateTimeFormat([], { weekday: "short", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
export function local(t) {
  if (!t) return "-";
  const d = new Date(t);
  return isNaN(d) ? String(t) : LOCAL.format(d);
}

// An exact time, as every page writes one: the viewer's local time, the
// date and zone in full on hover.
const FULL = new Intl.DateTimeFormat([], { dateStyle: "full", timeStyle: "long" });
export function at(t) {
  const d = new Date(t);
  if (!t || isNaN(d)) return el("span", { class: "muted" }, "-");
  return el("time", { datetime: typeof t === "string" ? t : d.toISOString(), title: FULL.format(d), class: "nowrap" }, LOCAL.format(d));
}

// A time as people read it on a console: relative ("3h ago", "in 5m"),
// the exact time on hover, never wrapped.
export function when(t) {
  if (!t) return el("span", { class: "muted" }, "-");
  const d = new Date(t);
  if (isNaN(d)) return el("span", {}, String(t));
  let s = Math.round((d - Date.now()) / 1000);
  const past = s < 0; s = Math.abs(s);
  const txt = s < 45 ? "now" : s < 3600 ? Math.round(s / 60) + "m" : s < 86400 ? Math.round(s / 3600) + "h" : Math.round(s / 86400) + "d";
  return el("time", { datetime: d.toISOString(), title: local(t) }, txt === "now" ? "now" : past ? txt + " ago" : "in " + txt);
}

// A chamber's state; a chamber whose last session failed (crashed, timed
// out, failed) says so beside it, in the failure colour.
export function badge(s, lastResult) {
  const b = el("span", { class: "badge state-" + String(s).replace(/ /g, "-") }, s);
  const failed = failure(lastResult);
  if (!failed) return b;
  const held = failed === "limited" || failed === "over budget";
  const f = el("span", { class: "badge " + (held ? "held" : "failing"), "data-failing": failed }, failed);
  // Idle after a failure is the failure (one badge, not "idle crashed").
  return s === "idle" ? el("span", { class: "badges", title: "idle since its last session " + failed }, f) : el("span", { class: "badges" }, b, f);
}

export function failure(lastResult) {
  const m = /^(crashed|timed out|timeout|failed|over budget|limited|stalled|looping)/.exec(lastResult || "");
  return m ? (m[1] === "timeout" ? "timed out" : m[1]) : "";
}

// Feedback where the user is: a toast at the bottom of the screen (seen
// however far down the page is scrolled), and the page's error line.
// `#toasts` is a polite live region in index.html; an error the page's
// own alert line already says is shown, not said twice.
export function toast(text, bad = false, quiet = false) {
  const box = document.getElementById("toasts");
  if (!box) return;
  const t = el("p", { class: "toast" + (bad ? " bad" : ""), "aria-hidden": quiet ? "true" : undefined }, text);
  box.append(t);
  setTimeout(() => t.remove(), bad ? 8000 : 4000);
}

export function flash(e) {
  const text = e.message + (e.retryAfter ? " (try again in " + e.retryAfter + " s)" : "");
  const box = document.getElementById("error");
  if (box) box.textContent = text;
  toast(text, true, !!box);
}

// Reads an event stream (`event: NAME` / `data: JSON` frames) from a fetch
// response, calling `each(name, data)` per frame, until it ends.
export async function readEvents(r, each) {
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, i); buf = buf.slice(i + 2);
      const ev = /^event: (.*)$/m.exec(frame)?.[1];
      const data = /^data: (.*)$/m.exec(frame)?.[1];
      if (ev) each(ev, data ? JSON.parse(data) : {});
    }
  }
}

// A block of log lines, opened at its newest, with a search that keeps only
// the lines that match (counted), and room for lines that come later (at
// most `keep`, the oldest let go). The run page's log and transcript and
// the chamber's Log and Transcript tabs.
export function linesView(id, title, lines, keep = 5000) {
  let all = lines.slice(-keep);
  const pre = el("pre", { class: "log", id, tabindex: "0", role: "region", "aria-label": title });
  const search = el("input", { type: "search", id: id + "-search", placeholder: "Search " + title, autocomplete: "off" });
  const said = el("span", { class: "muted", "aria-live": "polite", id: id + "-count" });
  const draw = () => {
    const q = search.value.trim().toLowerCase();
    const kept = q ? all.filter((l) => l.toLowerCase().includes(q)) : all;
    pre.textContent = kept.join("\n");
    said.textContent = q ? kept.length + " of " + all.length + " lines" : "";
    pre.scrollTop = pre.scrollHeight;
  };
  search.addEventListener("input", draw);
  draw();
  // Shown later (a tab, a fold): at the newest line then too.
  new IntersectionObserver((seen) => { if (seen.some((s) => s.isIntersecting)) pre.scrollTop = pre.scrollHeight; }).observe(pre);
  const node = el("div", { class: "lines" },
    el("div", { class: "row" }, el("label", { for: search.id, class: "sr-only" }, "Search " + title), search, said), pre);
  return {
    node,
    pre,
    append(more) { all = all.concat(more).slice(-keep); draw(); },
  };
}
