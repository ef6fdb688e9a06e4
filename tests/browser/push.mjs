// Hands one Web Push message to the hub's service worker in headless
// Chromium and prints, as JSON, the notifications the page then has.
// Run by tests/it/people.rs; from the environment: HUB_URL (the page, no
// fragment), HUB_TOKEN, and PUSH_PAYLOAD: what cryod encrypted for a device,
// as the browser's push service hands it over once decrypted. (No push
// service is reachable here, so the DevTools protocol delivers it in the
// service's place.)
import { drive } from "./driver.mjs";

const { HUB_URL, HUB_TOKEN, PUSH_PAYLOAD } = process.env;
const origin = new URL(HUB_URL).origin;
const scope = new URL("/", HUB_URL).href;
await drive(async (browser, out) => {
  const ctx = await browser.newContext();
  await ctx.grantPermissions(["notifications"], { origin });
  const page = await ctx.newPage();
  const cdp = await ctx.newCDPSession(page);
  const registrations = new Map();
  cdp.on("ServiceWorker.workerRegistrationUpdated", (e) => {
    for (const r of e.registrations) if (!r.isDeleted) registrations.set(r.scopeURL, r.registrationId);
  });
  await cdp.send("ServiceWorker.enable");
  await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
  await page.waitForFunction(() => document.body.dataset.sw === "registered", null, { timeout: 10000 });
  await page.evaluate(() => navigator.serviceWorker.ready.then(() => true));
  const deadline = Date.now() + 10000;
  while (!registrations.has(scope)) {
    if (Date.now() > deadline) throw new Error("the service worker's registration was never reported: " + [...registrations.keys()]);
    await new Promise((r) => setTimeout(r, 50));
  }
  // The notifications the worker shows, once there are some (10 s at most).
  const shown = () => page.evaluate(async () => {
    const reg = await navigator.serviceWorker.ready;
    const until = Date.now() + 10000;
    let list = await reg.getNotifications();
    while (!list.length && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 50));
      list = await reg.getNotifications();
    }
    return list.map((n) => ({ title: n.title, body: n.body, tag: n.tag, url: n.data && n.data.url, icon: n.icon, actions: n.actions.map((a) => a.action) }));
  });
  await cdp.send("ServiceWorker.deliverPushMessage", { origin, registrationId: registrations.get(scope), data: PUSH_PAYLOAD });
  out.notifications = await shown();
  // A worker still starting on a loaded machine may miss the first
  // delivery (seen once in a full run): a push service delivers again; so
  // does this (one notification per event all the same: its tag).
  if (!out.notifications.length) {
    out.delivered_again = true;
    await cdp.send("ServiceWorker.deliverPushMessage", { origin, registrationId: registrations.get(scope), data: PUSH_PAYLOAD });
    out.notifications = await shown();
  }
  out.permission = await page.evaluate(() => Notification.permission);
  await ctx.close();
});
