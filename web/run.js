// One run (a session) on a page of its own, `#/c/NAME/run/N`, as a CI
// console shows a job: its title (the summary it ended with), outcome,
// duration, cost, trigger and changes; Run again for one that failed; the
// git changes full width, file by file; cryo.log and the transcript opened
// at their newest line, searchable, the transcript followed while it runs.
"use strict";

import { api, auth, chamberPath, el, flash, linesView, local, readEvents, state, toast, when } from "./lib.js";
import { changes, duration, runStatus } from "./chamber.js";

let following = null; // the transcript stream of a running run

export function leaveRun() { following?.abort(); following = null; }

export async function runPage(name, number) {
  state.current = null;
  const main = document.getElementById("main");
  main.dataset.page = "run";
  const base = chamberPath(name);
  const info = await api(base + "?sessions=500");
  const s = info.sessions.find((x) => x.number === number);
  if (!s) throw new Error(`${name} has no run ${number} among its last 500`);
  const [log, tx, diff] = await Promise.all([
    api(base + "/log?session=" + number),
    api(base + "/log?agent=true&session=" + number + "&wake=" + encodeURIComponent(s.wake_id)),
    s.git ? api(base + "/diff?session=" + number).catch(() => null) : null]);
  // Its title: what it ended with, as cryo.log says (the summary the agent
  // gave with hibernate), else its outcome.
  const ended = log.lines.map((l) => /session ended: (.*)$/.exec(l)?.[1]).filter(Boolean).pop();
  const title = ended || s.outcome || "running";
  const failed = /^(crashed|failed|timed out|stalled|looping)/.test(s.outcome || "");
  const took = s.started_at && s.ended_at ? duration(Date.parse(s.ended_at) - Date.parse(s.started_at)) : s.started_at ? duration(Date.now() - Date.parse(s.started_at)) + " so far" : "-";
  const facts = [
    ["outcome", runStatus(s)], ["trigger", s.trigger], ["started", s.started_at ? [when(s.started_at), " (" + local(s.started_at) + ")"] : "-"],
    ["took", took], ["tokens", s.input_tokens || s.output_tokens ? s.input_tokens + " in, " + s.output_tokens + " out" : "-"],
    ["cost", s.cost_usd == null ? "-" : "$" + Number(s.cost_usd).toFixed(2)], ["model", s.model || "-"], ["account", s.account || "-"],
    ["changes", s.git ? changes(s.git) : "-"],
  ];
  const again = el("button", { class: "primary", id: "run-again" }, "Run again");
  again.addEventListener("click", async () => {
    again.disabled = true;
    try { await api(base + "/wake", "POST", {}); toast(name + " wakes now: its next run starts."); location.hash = "#/c/" + encodeURIComponent(name); }
    catch (e) { flash(e); again.disabled = false; }
  });
  const sections = [];
  if (diff) sections.push(el("section", { "aria-labelledby": "h-run-changes", class: "run-changes" }, el("h2", { id: "h-run-changes" }, "Changes"), fullDiff(diff, base)));
  const txBox = lines("transcript", "Transcript", tx);
  sections.push(lines("log", "cryo.log", log), txBox);
  main.replaceChildren(
    el("p", {}, el("a", { href: "#/c/" + encodeURIComponent(name), id: "run-back" }, "← " + name + ", every run")),
    el("h1", { id: "run-title" }, name + " · run " + number),
    el("p", { class: "run-summary", id: "run-summary" }, title),
    el("div", { id: "error", class: "error", role: "alert" }),
    el("dl", { class: "facts", id: "run-facts" }, facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-fact": k }, v)])),
    failed ? el("div", { class: "row" }, again, el("span", { class: "muted" }, "wakes " + name + " now: a new run, as a manual wake")) : "",
    ...sections);
  for (const pre of main.querySelectorAll("pre.log")) pre.scrollTop = pre.scrollHeight;
  if (!s.outcome) follow(base, txBox.view, number);
}

// A block of lines, opened at the newest, with a search.
function lines(id, title, r) {
  if (!r.lines.length) return el("section", { "aria-labelledby": "h-run-" + id }, el("h2", { id: "h-run-" + id }, title), el("p", { class: "muted" }, r.note || "nothing"));
  const view = linesView("run-" + id, title, r.lines, FOLLOW_LINES);
  const box = el("section", { "aria-labelledby": "h-run-" + id }, el("h2", { id: "h-run-" + id }, title), view.node);
  box.view = view;
  return box;
}

// While the run runs: its transcript's new lines as they are written.
const FOLLOW_LINES = 5000;
async function follow(base, view, number) {
  if (!view) return;
  following = new AbortController();
  try {
    const r = await fetch("/api" + base + "/transcript", { headers: auth(), signal: following.signal });
    let first = true;
    await readEvents(r, (ev, d) => {
      if (ev !== "lines") return;
      // The stream opens with the file's last lines, which the page has.
      if (first) { first = false; return; }
      view.append(d.lines);
      // It follows this run only: a line of the next ends it.
      if (d.lines.some((l) => l.startsWith("--- cryo session ") && !l.startsWith(`--- cryo session ${number} `))) following?.abort();
    });
  } catch (e) { /* the page went, or the stream ended */ }
}

// A run's changes full width: the files (each a link), then each file's
// patch folded under its name, open while there are few; and the branch's
// whole diff on asking.
const MAX_LINES = 3000;
function fullDiff(d, base, branch = true) {
  const patches = d.patch.split(/\n(?=diff --git )/);
  // A file's own patch: its header exactly (an agent's file named
  // "a b/x" must not stand in for "x"); git quotes unusual paths, which
  // then have no patch shown here.
  const of = (f) => patches.find((p) => p.split("\n")[0] === "diff --git a/" + f.path + " b/" + f.path) ?? null;
  const few = d.files.length <= 8;
  let budget = MAX_LINES;
  let cutAny = false;
  const body = (text) => {
    if (text === null) return el("span", { class: "muted" }, "(its patch is not shown here: see it with `cryoctl chamber diff`)");
    const all = text.split("\n");
    const ls = all.slice(0, Math.max(0, budget));
    budget -= ls.length;
    if (ls.length < all.length) { cutAny = true; ls.push("[… cut here: the whole patch is in `cryoctl chamber diff`]"); }
    return ls.map((l) => el("span", { class: l.startsWith("@@") ? "diff-hunk" : l.startsWith("+") && !l.startsWith("+++") ? "diff-add" : l.startsWith("-") && !l.startsWith("---") ? "diff-del" : /^(diff |index |\+\+\+|---)/.test(l) ? "diff-meta" : "" }, l + "\n"));
  };
  const files = d.files.map((f, i) => el("details", { class: "diff-file", id: "diff-file-" + i, open: few ? "" : undefined, "data-path": f.path },
    el("summary", {}, el("code", {}, f.path), " ", f.binary ? "binary" : [el("span", { class: "diff-add" }, "+" + f.additions), " ", el("span", { class: "diff-del" }, "−" + f.deletions)]),
    el("pre", { class: "diff", tabindex: "0" }, body(of(f)))));
  const whole = el("button", { type: "button", id: "branch-diff" }, "The branch's whole diff");
  const wholeBox = el("div", { id: "branch-diff-box" });
  whole.addEventListener("click", async () => {
    whole.disabled = true;
    try { const b = await api(base + "/diff"); wholeBox.replaceChildren(el("h3", {}, "The branch " + b.branch), el("div", {}, fullDiff(b, base, false))); }
    catch (e) { flash(e); whole.disabled = false; }
  });
  const cut = cutAny || d.cut ? el("p", { class: "muted" }, "the patch is longer: see it whole with `cryoctl chamber diff`") : "";
  return [el("p", {}, `${d.commits} commit${d.commits === 1 ? "" : "s"} on `, el("code", {}, d.branch), ", ",
    `${d.files.length} file${d.files.length === 1 ? "" : "s"}: `,
    d.files.map((f, i) => [i ? ", " : "", el("a", { href: "#", onclick: (e) => { e.preventDefault(); const x = document.getElementById("diff-file-" + i); x.open = true; x.scrollIntoView(); } }, f.path)])),
  files, cut, branch ? [el("div", { class: "row" }, whole), wholeBox] : ""];
}
