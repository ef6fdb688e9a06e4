// The first page's questions, asked as the page starts. index.html loads
// this module before app.js, whose imports arrive a level at a time (most
// of a cold load's wait), so cryod answers `/me` and the chamber list
// meanwhile rather than after. lib.js's `api` takes each answer once.
"use strict";

// What the list asks of each chamber: only what it draws (cryod's
// `fields=row`), the whole chamber's bytes being most of the wait at
// 1,000 chambers.
export const LIST = "/chambers?archived=1&fields=row";

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

if (token) {
  ask("/me");
  if (!hash.startsWith("/c/") && hash !== "/new" && hash !== "/share") ask(LIST);
}

// The answer to GET `path` asked at the start with `tok`, once, and only
// while it is fresh (the start's page, not a later one); else null.
export function early(path, tok) {
  const s = started.get(path);
  if (!s) return null;
  started.delete(path);
  return s.token === tok && performance.now() - s.asked < 10000 ? s.answer : null;
}
