// The first page's questions, asked as the page starts. A classic script
// that index.html runs as it reads its head (before the stylesheet, so
// nothing waits for it): cryod answers `/me` and the chamber list while
// the modules are read and compiled. lib.js's `api` takes each answer
// once, through `window.cryoBoot`.
(() => {
"use strict";

// What the list asks of each chamber: only what it draws (cryod's
// `fields=row`), the whole chamber's bytes being most of the wait at
// 1,000 chambers.
const LIST = "/chambers?archived=1&fields=row";

// path -> {token, asked (ms), answer (a Response's promise)}
const started = new Map();

// The token as lib.js will hold it: the link's fragment on a first open,
// else the one kept; and the page that route() will draw.
const fragment = new URLSearchParams(location.hash.slice(1));
const token = fragment.get("token") || localStorage.getItem("cryo-token");
const hash = fragment.get("token") ? "/" : location.hash.replace(/^#/, "") || "/";

function ask(path) {
  const answer = fetch("/api" + path, { headers: { Authorization: "Bearer " + token, "X-Cryo-Csrf": "1" } });
  answer.catch(() => {}); // whoever takes it sees the failure
  started.set(path, { token, asked: performance.now(), answer });
}

// The modules of the page a start opens, when it is not the list's (which
// index.html names): fetched and compiled now, not when app.js asks.
const preload = (f) => document.head.append(Object.assign(document.createElement("link"), { rel: "modulepreload", href: f }));
if (hash.startsWith("/c/")) {
  preload("/chamber.js");
  if (hash.includes("/run/")) preload("/run.js");
} else if (hash === "/new" || hash === "/share") preload("/owner.js");

if (token) {
  performance.mark("boot"); ask("/me");
  if (!hash.startsWith("/c/") && hash !== "/new" && hash !== "/share") ask(LIST);
}

// The answer to GET `path` asked at the start with `tok`, once, and only
// while it is fresh (the start's page, not a later one); else null.
function early(path, tok) {
  const s = started.get(path);
  if (!s) return null;
  started.delete(path);
  return s.token === tok && performance.now() - s.asked < 10000 ? s.answer : null;
}

window.cryoBoot = { LIST, early };
})();
