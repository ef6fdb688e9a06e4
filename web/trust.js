// A chamber's changed settings, reviewed and trusted.
"use strict";

import { api, chamberPath, el, flash, toast } from "./lib.js";

// What changed in cryo.toml since the operator last accepted it, each key
// before and after; Trust accepts it as it is (`cryoctl chamber trust`),
// and `done` is given the chamber as it is then. From the chamber's page
// and from its item in "Needs you".
export async function reviewTrust(c, done) {
  const base = chamberPath(c.name);
  let d;
  try { d = await api(base + "/trust"); } catch (er) { flash(er); return; }
  const rows = d.changes.map((ch) => el("tr", {},
    el("th", { scope: "row" }, el("code", {}, ch.key)),
    el("td", {}, el("code", {}, ch.before ?? "(not recorded)")),
    el("td", {}, el("code", {}, ch.after))));
  const go = el("button", { id: "trust-accept", type: "submit" }, "Trust");
  const form = el("form", { method: "dialog" },
    el("h2", { id: "h-trust" }, "Accept " + c.name + "'s settings?"),
    d.changes.length
      ? el("table", { id: "trust-diff" }, el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "setting"), el("th", { scope: "col" }, "accepted"), el("th", { scope: "col" }, "now"))), el("tbody", {}, rows))
      : el("p", {}, "Nothing changed since its settings were last accepted."),
    el("p", { class: "muted" }, "These settings decide how the agent is confined, what runs for it and what it may reach. Whoever edited cryo.toml (the agent can) changed them."),
    el("div", { class: "row" }, go, el("button", { type: "button", onclick: () => dialog.close() }, "Cancel")));
  const dialog = el("dialog", { id: "trust-dialog", "aria-labelledby": "h-trust" }, form);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    go.disabled = true;
    try {
      const r = await api(base + "/trust", "POST", {});
      dialog.close();
      done(r.chamber);
      toast(c.name + ": accepted " + (r.accepted.map((a) => a.key).join(", ") || "nothing new") + "; now " + r.chamber.state + ".");
    } catch (er) { dialog.close(); flash(er); }
  });
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();
}
