// The hub's service worker: it keeps the page's shell (HTML, scripts, style,
// icons) for a quick start and shows Web Push notices. It never stores what
// the API answers (chambers, messages, tokens): only the fixed files below.
"use strict";

// The shell's version: cryod writes a digest of the page's files in place
// of the mark as it serves this script, so a cryod with other files makes
// a new worker, which fills a new cache and drops the old one.
const SHELL = "cryo-shell-" + "CRYO_SHELL_DIGEST";
const FILES = ["/", "/boot.js", "/app.js", "/lib.js", "/chamber.js", "/owner.js", "/list.js", "/approvals.js", "/trust.js", "/run.js", "/timeline.js", "/app.css", "/manifest.webmanifest", "/icon-192.png", "/icon-512.png"];

self.addEventListener("install", (e) => {
  // The API never waits on this worker (the fetch handler below passes it
  // by): where the browser can say so, its requests go straight to cryod.
  // A browser that cannot (or refuses the rule) keeps the handler's way.
  try { e.addRoutes?.({ condition: { urlPattern: { pathname: "/api/*" } }, source: "network" })?.catch(() => {}); } catch (_) { /* the fetch handler passes it by */ }
  // The shell is read from this worker's cache by the browser itself,
  // without starting the worker (a file the cache lacks comes from the
  // network); elsewhere the fetch handler below does the same.
  const shell = FILES.map((f) => ({ condition: { urlPattern: { pathname: f }, requestMethod: "GET" }, source: { cacheName: SHELL } }));
  try { e.addRoutes?.(shell)?.catch(() => {}); } catch (_) { /* the fetch handler serves them */ }
  e.waitUntil(caches.open(SHELL).then((c) => c.addAll(FILES)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (e) => {
  e.waitUntil(caches.keys()
    .then((keys) => Promise.all(keys.filter((k) => k !== SHELL).map((k) => caches.delete(k))))
    .then(() => self.clients.claim()));
});

// The shell: from this worker's cache, which holds this cryod's files (a
// new cryod's are a new worker's), so a start waits on no round trip; the
// network for a file the cache lacks. Anything else (the API above all)
// goes straight to the network.
self.addEventListener("fetch", (e) => {
  const url = new URL(e.request.url);
  if (e.request.method !== "GET" || url.origin !== location.origin || !FILES.includes(url.pathname)) return;
  e.respondWith(caches.open(SHELL).then((c) => c.match(url.pathname)).then((r) => r || fetch(e.request)));
});

// A notice from cryod (encrypted for this device; the browser decrypts it):
// {title, body, url, event, chamber, id}.
self.addEventListener("push", (e) => {
  let n = {};
  try { n = e.data ? e.data.json() : {}; } catch (_) { n = { title: "cryo", body: e.data ? e.data.text() : "" }; }
  e.waitUntil(self.registration.showNotification(n.title || "cryo", {
    body: n.body || "", tag: n.id || undefined, icon: "/icon-192.png", badge: "/icon-192.png",
    data: { url: n.url || "/", event: n.event || "", actions: n.actions || [] },
    // A question is answered in one step: the chamber's page opens with
    // the cursor in its reply box. An approval's two answers are its
    // signed links, POSTed from here.
    actions: n.event === "question" ? [{ action: "answer", title: "Answer" }]
      : (n.actions || []).slice(0, 2).map((a, i) => ({ action: "link" + i, title: a.label })),
  }));
});

self.addEventListener("notificationclick", (e) => {
  e.notification.close();
  const data = e.notification.data || {};
  // An approval's answer: its link (of this hub only) is POSTed, and what
  // it did is shown.
  const picked = e.action.startsWith("link") ? (data.actions || [])[Number(e.action.slice(4))] : null;
  if (picked) {
    const u = new URL(picked.url, self.registration.scope);
    if (u.origin !== self.location.origin || !u.pathname.startsWith("/approve/")) return;
    e.waitUntil(fetch(u.href, { method: "POST" }).then((r) => r.ok ? (picked.label === "Approve" ? "Approved" : "Denied") : "Not answered: the link was refused")
      .catch(() => "Not answered: the hub could not be reached")
      .then((t) => self.registration.showNotification("cryo", { body: t, tag: "approval-answer" })));
    return;
  }
  // Only a page of this hub is opened; a question's opens its reply box.
  const u = new URL(data.url || "/", self.registration.scope);
  if (u.origin !== self.location.origin) u.href = self.registration.scope;
  else if (u.hash.startsWith("#/c/") && (e.action === "answer" || data.event === "question")) u.hash += "/answer";
  const url = u.href;
  e.waitUntil(self.clients.matchAll({ type: "window" }).then((list) => {
    for (const c of list) if (c.url.startsWith(self.registration.scope)) { c.navigate(url); return c.focus(); }
    return self.clients.openWindow(url);
  }));
});
