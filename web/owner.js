// The owner's pages besides the list: a new chamber, and sharing (invites
// and the devices Web Push reaches).
"use strict";

import { api, el, flash, local, state, toast } from "./lib.js";

const main = () => document.getElementById("main");

// ---- a new chamber -----------------------------------------------------------
export function newPage() {
  state.current = null;
  main().dataset.page = "new";
  const field = (id, label, attrs = {}) => [el("label", { for: id }, label), el("input", { id, ...attrs })];
  const start = el("input", { id: "new-start", type: "checkbox", class: "check" });
  const form = el("form", {},
    el("div", { class: "field" }, field("new-name", "Name")),
    el("div", { class: "field" }, field("new-dir", "Folder (absolute path)", { required: true })),
    el("div", { class: "field" }, field("new-agent", "Agent: claude, codex, opencode or a command")),
    el("label", { class: "check-row", for: "new-start" }, start, "Start it now"),
    el("div", { class: "row" }, el("button", { class: "primary", type: "submit" }, "Create")));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const v = (id) => document.getElementById(id).value;
    try {
      const r = await api("/chambers", "POST", { name: v("new-name"), dir: v("new-dir"), agent: v("new-agent"), start: start.checked });
      location.hash = "#/c/" + encodeURIComponent(r.chamber.name);
    } catch (er) { flash(er); }
  });
  main().replaceChildren(el("section", {}, el("h1", {}, "New chamber"), el("div", { id: "error", class: "error", role: "alert" }), form));
  document.getElementById("new-name").focus();
}

// ---- sharing: invites and devices ----------------------------------------------
export async function sharePage() {
  state.current = null;
  main().dataset.page = "share";
  const [invites, list, push] = await Promise.all([api("/invites"), api("/chambers"), api("/push")]);
  const name = el("input", { id: "invite-name", required: true, maxlength: 40, autocomplete: "off" });
  const boxes = list.map((c) => el("label", { class: "check-row" },
    el("input", { type: "checkbox", class: "check invite-chamber", value: c.name }), c.name));
  const shown = el("div", { id: "invite-link", role: "status" });
  const form = el("form", {},
    el("div", { class: "field" }, el("label", { for: "invite-name" }, "Guest's name"), name),
    el("fieldset", {}, el("legend", {}, "Chambers the guest may see and write to"), boxes),
    el("div", { class: "row" }, el("button", { class: "primary", type: "submit", id: "invite-add" }, "Make a link")), shown);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const chambers = boxes.map((b) => b.querySelector("input")).filter((i) => i.checked).map((i) => i.value);
    try {
      const r = await api("/invites", "POST", { name: name.value.trim(), chambers });
      const link = el("input", { id: "invite-url", readonly: true, value: r.link, "aria-label": "the link for " + r.name });
      shown.replaceChildren(el("p", {}, "The link for ", el("strong", {}, r.name), " (shown this once; send it privately):"), link);
      link.select();
      renderInvites(await api("/invites"));
    } catch (er) { flash(er); }
  });
  main().replaceChildren(
    el("h1", {}, "Sharing and devices"),
    el("div", { id: "error", class: "error", role: "alert" }),
    el("section", {}, el("h2", {}, "Invite a guest"),
      el("p", { class: "muted" }, "A guest sees only the chambers chosen here, and only their conversations. Revoking cuts the guest off at once."),
      form),
    el("section", {}, el("h2", {}, "Invites"), el("ul", { id: "invites" })),
    el("section", {}, el("h2", {}, "This device"), devicePanel(push)));
  renderInvites(invites);
}

function renderInvites(invites) {
  const ul = document.getElementById("invites");
  if (!ul) return;
  if (!invites.length) { ul.replaceChildren(el("li", { class: "muted" }, "none")); return; }
  ul.replaceChildren(...invites.map((i) => el("li", { "data-invite": i.name },
    el("strong", {}, i.name), " · ", i.chambers.join(", "), " · ", el("span", { class: "muted" }, "made " + local(i.created)), " ",
    el("button", { "aria-label": "revoke " + i.name, onclick: async () => {
      try { await api("/invites/" + encodeURIComponent(i.name), "DELETE"); renderInvites(await api("/invites")); toast("Revoked " + i.name + "'s link."); } catch (e) { flash(e); }
    } }, "revoke"))));
}

// Web Push: "notify this device" subscribes this browser with cryod's VAPID
// key; the list shows every device cryod notifies.
function devicePanel(push) {
  const list = el("ul", { id: "devices" });
  const render = (subs) => list.replaceChildren(...(subs.length ? subs.map((s) =>
    el("li", { "data-device": s.endpoint }, s.name || "a device", " · ", el("span", { class: "muted" }, s.service), " ",
      el("button", { "aria-label": "forget " + (s.name || "this device"), onclick: async () => {
        try { await api("/push", "DELETE", { endpoint: s.endpoint }); render((await api("/push")).subscriptions); toast("That device is no longer notified."); } catch (e) { flash(e); }
      } }, "forget"))) : [el("li", { class: "muted" }, "no device is notified")]));
  render(push.subscriptions);
  const why = el("p", { id: "push-status", role: "status", class: "muted" });
  const button = el("button", { id: "push-subscribe", onclick: async () => {
    try {
      if (!("serviceWorker" in navigator) || !("PushManager" in window)) throw new Error("this browser has no Web Push");
      if (await Notification.requestPermission() !== "granted") throw new Error("notifications are not allowed for this page");
      const reg = await navigator.serviceWorker.ready;
      const sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: push.key });
      const j = sub.toJSON();
      await api("/push", "POST", { endpoint: j.endpoint, keys: j.keys, name: navigator.userAgent.split(") ")[0].split("(")[1] || "browser" });
      render((await api("/push")).subscriptions);
      why.textContent = "This device is notified.";
    } catch (e) { why.textContent = "Not subscribed: " + e.message; }
  } }, "Notify this device");
  return el("div", {}, el("p", {}, "Questions, failures and other notices from cryod's ", el("code", {}, "webpush"), " notifier reach the devices below."),
    el("div", { class: "row" }, button), why, list);
}
