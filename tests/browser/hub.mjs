// Drives the cryo hub in headless Chromium and prints what it saw as JSON.
// Run by tests/it/browser.rs; inputs come from the environment:
//   HUB_URL (the page, no fragment), HUB_TOKEN, CHAMBER (whose agent answers
//   "got: <text>"), SHOTS (a folder for screenshots), CHROMIUM (the browser),
//   MANY (a chamber with 10,000 messages), TZ_CHAMBER (whose agent answers
//   "tz=$TZ"), QUOTA_CHAMBER (whose attachment quota is 1 MiB).
import { axe, drive, go } from "./driver.mjs";

// A 2x2 PNG (red), for an upload that shows inline.
const PNG = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEklEQVR4nGP4z8DAwMDAxMDAAAAjAwIBu6lZ4wAAAABJRU5ErkJggg==", "base64");

const { HUB_URL, HUB_TOKEN, CHAMBER, SHOTS } = process.env;
await drive(async (browser, out) => {
  // Without the token: the sign-in screen, and nothing read.
  {
    const ctx = await browser.newContext();
    const page = await ctx.newPage();
    const okApi = [];
    page.on("response", (r) => { if (r.url().includes("/api/") && r.status() === 200) okApi.push(r.url()); });
    await page.goto(HUB_URL);
    await page.waitForSelector("#signin", { timeout: 10000 });
    out.signin_shown = true;
    out.leaked_without_token = okApi.length > 0 || (await page.content()).includes(CHAMBER);
    await ctx.close();
  }
  // bypassCSP only so the test can add axe-core's script to the page.
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 }, bypassCSP: true });
  const page = await ctx.newPage();
  await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
  await page.waitForSelector("#chambers tbody tr", { timeout: 10000 });
  await page.waitForFunction(() => document.querySelectorAll("#chambers tbody tr").length >= 2, null, { timeout: 10000 });
  out.list = await page.$$eval("#chambers tbody tr", (rows) => rows.map((r) => r.getAttribute("data-chamber")));
  out.token_kept_out_of_url = !page.url().includes(HUB_TOKEN);
  await page.screenshot({ path: SHOTS + "/list-desktop.png", fullPage: true });
  await axe(page, "list", out);
  await page.waitForSelector("#fleet-timeline", { timeout: 10000 });
  out.fleet_wake_alpha = (await page.$$('#fleet-timeline circle[data-wake="alpha"]')).length > 0;
  // Installable: the manifest is linked and the service worker registers.
  await page.waitForFunction(() => document.body.dataset.sw === "registered", null, { timeout: 10000 });
  out.sw_registered = true;
  out.manifest = await page.evaluate(async () => (await fetch(document.querySelector("link[rel=manifest]").href)).json());
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: SHOTS + "/list-phone.png", fullPage: true });
  await page.setViewportSize({ width: 1280, height: 800 });

  // One chamber: send a message and see the reply arrive without a reload.
  await page.click(`a[href="#/c/${CHAMBER}"]`);
  await page.waitForSelector("#messages", { timeout: 10000 });
  const buttons = () => page.$$eval("#controls button", (bs) => bs.map((b) => b.textContent));
  await page.waitForFunction(() => document.getElementById("state").textContent.trim() === "idle", null, { timeout: 20000 });
  out.controls_idle = await buttons();
  await axe(page, "chamber", out);
  let reloaded = false;
  page.on("load", () => { reloaded = true; });
  await page.fill("#send-text", "hello from the browser");
  const sentAt = Date.now();
  await page.click("#send");
  await page.waitForFunction(() => document.getElementById("messages").textContent.includes("got: hello from the browser"), null, { timeout: 20000 });
  out.reply_ms = Date.now() - sentAt;
  out.reply_without_reload = !reloaded;

  // A TODO added on the page.
  await page.click("#tab-todos");
  await page.fill("#todo-text", "from the page");
  await page.fill("#todo-at", "+3h");
  await page.click("#todo-add");
  await page.waitForFunction(() => document.getElementById("todos").textContent.includes("from the page"), null, { timeout: 10000 });
  out.todo_shown = true;

  // Stop and start change the state shown.
  await page.click("#controls button:text('stop')");
  await page.waitForFunction(() => document.getElementById("state").textContent.trim() === "stopped", null, { timeout: 20000 });
  out.stopped_shown = true;
  await page.waitForFunction(() => document.querySelector("#controls button[data-action=start]"), null, { timeout: 10000 });
  out.controls_stopped = await buttons();
  // Mail to a stopped chamber says it waits, and how to have it read.
  await page.fill("#send-text", "while stopped");
  await page.click("#send");
  await page.waitForFunction(() => document.getElementById("waits").textContent.includes("is stopped"), null, { timeout: 10000 });
  out.waits_shown = await page.textContent("#waits");
  await page.click("#controls button:text('start')");
  await page.waitForFunction(() => ["idle", "running"].includes(document.getElementById("state").textContent.trim()), null, { timeout: 20000 });
  out.started_shown = true;
  await page.waitForFunction(() => document.getElementById("messages").textContent.includes("got: while stopped"), null, { timeout: 20000 });

  // How long from an outbox file being written (its timestamp, to the
  // millisecond) to the message being on the page, over MEASURE replies.
  const n = Number(process.env.MEASURE || 0);
  if (n > 0) {
    await page.evaluate(() => {
      window.__seen = [];
      new MutationObserver((muts) => {
        const now = Date.now();
        for (const m of muts) for (const node of m.addedNodes) {
          if (node.dataset && node.dataset.dir === "out") window.__seen.push(now - Date.parse(node.dataset.ts));
        }
      }).observe(document.getElementById("messages"), { childList: true });
    });
    for (let i = 0; i < n; i++) {
      await page.fill("#send-text", "measure " + i);
      await page.click("#send");
      await page.waitForFunction((i) => document.getElementById("messages").textContent.includes("got: measure " + i), i, { timeout: 20000 });
    }
    const seen = (await page.evaluate(() => window.__seen)).sort((a, b) => a - b);
    out.outbox_to_page_ms = { count: seen.length, median: seen[Math.floor(seen.length / 2)], p99: seen[Math.min(seen.length - 1, Math.round(seen.length * 0.99))] };
  }

  // Markdown is rendered, and nothing active an agent (or anyone) writes runs.
  await page.evaluate(() => { window.__pwned = 0; });
  await page.fill("#send-text", "**bold** <script>window.__pwned=1</script> <img src=x onerror=\"window.__pwned=2\"> [x](javascript:window.__pwned=3)");
  await page.click("#send");
  await page.waitForFunction(() => [...document.querySelectorAll("#messages .msg.out")].some((m) => m.textContent.includes("got: ")  && m.querySelector("strong")), null, { timeout: 20000 });
  for (const a of await page.$$("#messages a")) { const h = await a.getAttribute("href"); if (h && h.startsWith("javascript")) out.js_link = h; }
  out.inert = await page.evaluate(() => ({
    pwned: window.__pwned,
    scripts: document.querySelectorAll("#messages script").length,
    handlers: [...document.querySelectorAll("#messages *")].filter((e) => [...e.attributes].some((a) => a.name.startsWith("on"))).length,
    bold: document.querySelectorAll("#messages .msg strong").length > 0,
  }));

  // An image attached to a message shows inline (fetched with the token).
  await page.setInputFiles("#send-files", { name: "dot.png", mimeType: "image/png", buffer: PNG });
  await page.fill("#send-text", "a picture");
  await page.click("#send");
  await page.waitForFunction(() => [...document.querySelectorAll("#messages img.inline")].some((i) => i.complete && i.naturalWidth === 2), null, { timeout: 20000 });
  out.image_inline = true;

  await page.screenshot({ path: SHOTS + "/chamber-desktop.png", fullPage: true });
  await page.setViewportSize({ width: 360, height: 780 });
  await page.screenshot({ path: SHOTS + "/chamber-phone.png", fullPage: true });
  out.phone_overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1);
  await page.setViewportSize({ width: 1280, height: 800 });

  // The quota: a second large upload is refused, and says why.
  if (process.env.QUOTA_CHAMBER) {
    await go(page, process.env.QUOTA_CHAMBER);
    const big = Buffer.concat([PNG, Buffer.alloc(700 * 1024)]);
    await page.setInputFiles("#send-files", { name: "big1.png", mimeType: "image/png", buffer: big });
    await page.fill("#send-text", "first");
    await page.click("#send");
    await page.waitForFunction(() => document.getElementById("send-text").value === "", null, { timeout: 10000 });
    await page.setInputFiles("#send-files", { name: "big2.png", mimeType: "image/png", buffer: big });
    await page.fill("#send-text", "second");
    await page.click("#send");
    await page.waitForFunction(() => document.getElementById("error").textContent.includes("quota"), null, { timeout: 10000 });
    out.quota_error = await page.textContent("#error");
  }

  // Settings: a new time zone is written to cryo.toml, and the next session has it.
  if (process.env.TZ_CHAMBER) {
    await go(page, process.env.TZ_CHAMBER);
    await page.click("#tab-settings");
    await page.fill("#set-timezone", "Europe/Berlin");
    await page.click("#settings-save");
    await page.waitForFunction(() => document.getElementById("settings-saved").textContent.includes("Saved"), null, { timeout: 10000 });
    await page.waitForFunction(() => document.querySelector("#controls button[data-action=wake]"), null, { timeout: 20000 });
    await page.click("#controls button[data-action=wake]");
    await page.waitForFunction(() => document.getElementById("messages").textContent.includes("tz=Europe/Berlin"), null, { timeout: 20000 });
    out.settings_used = true;
    await axe(page, "settings", out);
  }

  // 10,000 messages: the first page paints as fast as a small chamber's, and
  // older pages come on scroll.
  if (process.env.MANY) {
    // From the list to a chamber's first page of messages, painted.
    const open = async (name) => {
      await page.goto(HUB_URL + "#/");
      await page.waitForSelector("#chambers", { timeout: 10000 });
      const t = Date.now();
      await go(page, name);
      await page.waitForFunction(() => document.querySelectorAll("#messages .msg").length > 0, null, { timeout: 20000 });
      await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
      return Date.now() - t;
    };
    out.first_paint_many_ms = await open(process.env.MANY);
    out.first_paint_small_ms = await open(CHAMBER);
    await open(process.env.MANY);
    out.first_page = await page.$$eval("#messages .msg", (m) => m.length);
    for (let i = 0; i < 3; i++) {
      const n = await page.$$eval("#messages .msg", (m) => m.length);
      await page.$eval("#messages", (b) => { b.scrollTop = 0; b.dispatchEvent(new Event("scroll")); });
      await page.waitForFunction((n) => document.querySelectorAll("#messages .msg").length > n, n, { timeout: 10000 });
    }
    out.after_scrolls = await page.$$eval("#messages .msg", (m) => m.length);
    out.oldest_after_scrolls = await page.$eval("#messages .msg", (m) => m.textContent);
  }

  // The timeline: a crashed session in the failure colour; the digest counts it.
  await go(page, "crash");
  await page.click("#tab-runs");
  await page.waitForSelector("#timeline rect[data-outcome]", { timeout: 10000 });
  out.crash_bar = await page.$eval("#timeline rect[data-outcome]", (r) => ({
    outcome: r.dataset.outcome, fill: getComputedStyle(r).fill,
    bad: getComputedStyle(document.documentElement).getPropertyValue("--bad").trim(),
  }));
  // The colour as the browser resolves it, for comparing.
  out.crash_bar.bad = await page.evaluate((c) => { const d = document.createElement("div"); d.style.color = c; document.body.append(d); const v = getComputedStyle(d).color; d.remove(); return v; }, out.crash_bar.bad);
  out.crash_digest_failures = await page.$eval("#digest tbody tr:first-child td:nth-of-type(2)", (t) => t.textContent);
  await axe(page, "timeline", out);
  await page.screenshot({ path: SHOTS + "/timeline-desktop.png", fullPage: false });

  // Reset asks first (the chamber's name, typed), then moves the runtime
  // files into history/; archive hides the chamber from the list.
  await go(page, "beta");
  await page.waitForSelector("#controls button[data-action=reset]", { timeout: 10000 });
  out.controls_beta = await buttons();
  await page.click("#controls button[data-action=reset]");
  await page.waitForSelector("#reset-dialog[open]", { timeout: 5000 });
  out.reset_locked = await page.$eval("#reset-dialog button.danger", (b) => b.disabled);
  await axe(page, "reset", out);
  await page.screenshot({ path: SHOTS + "/reset-dialog.png", fullPage: false });
  await page.fill("#reset-name", "beta");
  await page.click("#reset-dialog button.danger");
  await page.waitForSelector("#reset-done", { timeout: 10000 });
  out.reset_done = await page.textContent("#reset-done");
  await page.click("#controls button[data-action=archive]");
  await page.waitForFunction(() => document.getElementById("state").textContent.trim() === "archived", null, { timeout: 10000 });
  out.controls_archived = await buttons();
  await page.goto(HUB_URL + "#/");
  await page.waitForSelector("#show-archived", { timeout: 10000 });
  const listed = () => page.$$eval("#chambers tbody tr", (rows) => rows.map((r) => r.getAttribute("data-chamber")));
  out.list_archived_hidden = await listed();
  await page.click("#show-archived");
  await page.waitForSelector('#chambers tr[data-chamber="beta"]', { timeout: 10000 });
  out.list_archived_shown = await listed();
  out.archived_badge = await page.textContent('#chambers tr[data-chamber="beta"] .badge');

  // Sharing: an invite opens only its chamber; the guest's mail is stamped with
  // its name; revoking ends the guest's stream at once.
  await page.goto(HUB_URL + "#/share");
  await page.waitForSelector("#invite-name", { timeout: 10000 });
  await axe(page, "share", out);
  await page.fill("#invite-name", "ann");
  await page.check(`.invite-chamber[value="${CHAMBER}"]`);
  await page.click("#invite-add");
  await page.waitForSelector("#invite-url", { timeout: 10000 });
  const link = await page.inputValue("#invite-url");
  out.invite_link_has_token = link.includes("#token=");
  out.devices_panel = await page.isVisible("#push-subscribe");
  // Allowed, so the subscription goes as far as the browser's push service.
  await ctx.grantPermissions(["notifications"]);
  await page.click("#push-subscribe");
  await page.waitForFunction(() => document.getElementById("push-status").textContent !== "", null, { timeout: 20000 });
  out.push_status = await page.textContent("#push-status");
  out.devices = await page.$$eval("#devices li", (l) => l.map((x) => x.textContent));

  const guestCtx = await browser.newContext({ viewport: { width: 360, height: 780 }, bypassCSP: true });
  const guest = await guestCtx.newPage();
  await guest.goto(link);
  await guest.waitForSelector("#chambers tbody tr", { timeout: 10000 });
  out.guest_list = await guest.$$eval("#chambers tbody tr", (rows) => rows.map((r) => r.getAttribute("data-chamber")));
  await guest.screenshot({ path: SHOTS + "/guest-list-phone.png", fullPage: true });
  await guest.click(`a[href="#/c/${CHAMBER}"]`);
  await guest.waitForSelector("#send-text", { timeout: 10000 });
  out.guest_sees = await guest.evaluate(() => ({ log: !!document.getElementById("log"), plan: !!document.getElementById("plan-text"), settings: !!document.getElementById("settings"), controls: !!document.getElementById("controls") }));
  await axe(guest, "guest", out);
  await guest.fill("#send-text", "hello from a guest");
  await guest.click("#send");
  await guest.waitForFunction(() => document.getElementById("messages").textContent.includes("got: hello from a guest"), null, { timeout: 20000 });
  out.guest_reply = true;
  await guest.screenshot({ path: SHOTS + "/guest-chamber-phone.png", fullPage: true });
  const endedBefore = await guest.evaluate(() => document.body.dataset.streamEnded || "");
  await page.goto(HUB_URL + "#/share");
  await page.waitForSelector(`[data-invite="ann"] button`, { timeout: 10000 });
  await page.click(`[data-invite="ann"] button`);
  await guest.waitForFunction((b) => (document.body.dataset.streamEnded || "") !== b, endedBefore, { timeout: 10000 });
  out.guest_stream_ended = true;
  await guest.waitForSelector("#signin", { timeout: 10000 });
  out.guest_signed_out = true;
  await guestCtx.close();
  await ctx.close();
});
