// Pictures of time, drawn as SVG: a chamber's last days (each session a bar
// coloured by its outcome, the coming wakes as ticks) and the fleet's next
// wakes on one axis with the sessions running now.
"use strict";

import { el, local } from "./lib.js";

const NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, ...kids) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, v);
  for (const kid of kids.flat()) e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return e;
}

// The picture's width in its own units: at most 700, else about the
// screen's, so its 12 px labels are drawn at 12 px on a phone too.
const width = () => Math.max(280, Math.min(700, (window.innerWidth || 700) - 60));

// A picture drawn `W` units wide shown in a narrower box (a side panel)
// scales its labels down with it: they are drawn larger by as much, so
// they read at 12 px wherever the picture is.
function readable(pic, W) {
  new ResizeObserver(([seen]) => {
    if (seen.contentRect.width > 0) pic.style.setProperty("--axis", Math.max(12, 12 * W / seen.contentRect.width) + "px");
  }).observe(pic);
  return pic;
}

// A session's colour: cryod says whether it failed and what kind it was.
const HELD = ["limited", "over_budget", "stopped"];
const colour = (s) => !s.outcome ? "running" : s.failed ? "bad" : HELD.includes(s.kind) ? "held" : "ok";

// A chamber's sessions over `days` days up to now, then a day of what comes next.
export function chamberTimeline(h, days = 7) {
  const W = width(), H = 90, pad = 24;
  const now = Date.now(), start = now - days * 86400e3, end = now + 86400e3;
  const x = (t) => pad + (W - 2 * pad) * (t - start) / (end - start);
  const kids = [svg("title", {}, "Sessions of the last " + days + " days and the wakes of the next day")];
  for (let d = 0; d <= days + 1; d++) {
    const t = start + d * 86400e3;
    kids.push(svg("line", { x1: x(t), x2: x(t), y1: 10, y2: H - 20, class: "grid" }),
      svg("text", { x: x(t) + 2, y: H - 6, class: "axis" }, new Date(t).toLocaleDateString([], { weekday: "short" })));
  }
  kids.push(svg("line", { x1: x(now), x2: x(now), y1: 4, y2: H - 16, class: "now" }));
  for (const s of h.sessions) {
    const a = Date.parse(s.started_at || s.created_at), b = s.ended_at ? Date.parse(s.ended_at) : now;
    if (!(a >= start)) continue;
    const kind = colour(s);
    const late = s.lateness_ms ? " · " + s.lateness_ms + " ms late" : "";
    const cost = s.cost_usd != null ? " · $" + Number(s.cost_usd).toFixed(2) : "";
    kids.push(svg("rect", { x: x(a), y: 20, width: Math.max(3, x(b) - x(a)), height: 30, class: "bar " + kind, "data-session": s.number, "data-outcome": s.outcome || "running" },
      svg("title", {}, "session " + s.number + " (" + s.trigger + "): " + (s.outcome || "running") + " · " + local(s.started_at) + late + cost)));
  }
  for (const w of h.upcoming) {
    const t = Date.parse(w.at);
    if (t > end) continue;
    kids.push(svg("path", { d: `M${x(t)} 56 l-4 8 h8 z`, class: "wake" + (w.held ? " held" : ""), "data-wake": w.at },
      svg("title", {}, "wake " + local(w.at) + (w.text ? ": " + w.text : "") + (w.held ? " (" + w.held + ")" : ""))));
  }
  return readable(svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "timeline", role: "img", "aria-label": "timeline of sessions and coming wakes", id: "timeline" }, kids), W);
}

// The digest: one row a day.
export function digest(h) {
  const money = (c) => c == null ? "-" : "$" + c.toFixed(2);
  return el("table", { id: "digest" },
    el("thead", {}, el("tr", {}, ["day", "sessions", "failed", "in", "out", "cost"].map((t) => el("th", { scope: "col" }, t)))),
    el("tbody", {}, h.days.map((d) => el("tr", { "data-day": d.day },
      el("th", { scope: "row" }, d.day), el("td", {}, d.sessions), el("td", { class: d.failures ? "error" : "" }, d.failures),
      el("td", {}, d.messages_in), el("td", {}, d.messages_out), el("td", {}, money(d.cost_usd))))));
}

// Every chamber's next wakes over the next day, and what runs now.
// Only chambers with something to draw get a row (a wake in the day, a
// session running), at most `most` of them, soonest first.
export function fleetTimeline(s, all, most = 40) {
  const rowH = 22, pad = 90, W = width(), hours = 24;
  const soonest = new Map();
  for (const r of s.running) soonest.set(r.chamber, -1);
  for (const w of s.wakes) if (!soonest.has(w.chamber)) soonest.set(w.chamber, Date.parse(w.at));
  const names = all.filter((n) => soonest.has(n)).sort((a, b) => soonest.get(a) - soonest.get(b)).slice(0, most).sort();
  const now = Date.now(), end = now + hours * 3600e3, start = now - 2 * 3600e3;
  const x = (t) => pad + (W - pad - 10) * (t - start) / (end - start);
  const rows = names.length, H = rows * rowH + 24;
  const kids = [svg("title", {}, "The next day's wakes of every chamber, and the sessions running now")];
  // A label every 6 hours, every 12 on a narrow picture (they would touch).
  for (let hh = 0; hh <= hours; hh += W < 500 ? 12 : 6) {
    const t = now + hh * 3600e3;
    kids.push(svg("line", { x1: x(t), x2: x(t), y1: 0, y2: rows * rowH, class: "grid" }),
      // The last label ends at its line: it would run off the picture.
      svg("text", hh === hours ? { x: x(t) - 2, y: H - 6, class: "axis", "text-anchor": "end" } : { x: x(t) + 2, y: H - 6, class: "axis" }, hh ? "+" + hh + "h" : "now"));
  }
  names.forEach((n, i) => {
    const y = i * rowH;
    kids.push(svg("text", { x: 2, y: y + 15, class: "axis name" }, n));
    const r = s.running.find((r) => r.chamber === n);
    if (r && r.started) {
      const a = Math.max(start, Date.parse(r.started));
      kids.push(svg("rect", { x: x(a), y: y + 4, width: Math.max(3, x(now) - x(a)), height: 14, class: "bar running", "data-running": n },
        svg("title", {}, n + ": session " + r.session + " running since " + local(r.started))));
    }
    for (const w of s.wakes.filter((w) => w.chamber === n)) {
      const t = Math.max(now, Date.parse(w.at));
      if (t > end) continue;
      kids.push(svg("circle", { cx: x(t), cy: y + 11, r: 5, class: "wake" + (w.held ? " held" : ""), "data-wake": n },
        svg("title", {}, n + ": " + local(w.at) + (w.text ? " · " + w.text : "") + (w.held ? " (" + w.held + ")" : ""))));
    }
  });
  return readable(svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "timeline", role: "img", "aria-label": "the fleet's coming wakes", id: "fleet-timeline" }, kids), W);
}

// What the colours and marks of a timeline mean.
export function legend(fleet = false) {
  const item = (cls, text) => el("li", {}, el("span", { class: "swatch " + cls, "aria-hidden": "true" }), text);
  return el("ul", { class: "legend", "aria-label": "legend" }, fleet
    ? [item("running", "running now"), item("wake", "a planned wake"), item("held", "a wake held back")]
    : [item("ok", "session ended well"), item("bad", "failed, crashed, timed out, stalled or looping"), item("held", "held: limited, over budget or stopped"),
      item("running", "running; ▲ a planned wake")]);
}
