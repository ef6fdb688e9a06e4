// Drives the cryo hub in headless Chromium and prints what it saw as JSON.
// Run by tests/it/browser.rs; inputs come from the environment:
//   HUB_URL (the page, no fragment), HUB_TOKEN, CHAMBER (whose agent answers
//   "got: <text>"), SHOTS (a folder for screenshots), CHROMIUM (the browser).
import { chromium } from "playwright-core";

const { HUB_URL, HUB_TOKEN, CHAMBER, SHOTS } = process.env;
const out = {};
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
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
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
  await page.waitForSelector("#chambers tbody tr", { timeout: 10000 });
  await page.waitForFunction(() => document.querySelectorAll("#chambers tbody tr").length >= 2, null, { timeout: 10000 });
  out.list = await page.$$eval("#chambers tbody tr", (rows) => rows.map((r) => r.getAttribute("data-chamber")));
  out.token_kept_out_of_url = !page.url().includes(HUB_TOKEN);
  await page.screenshot({ path: SHOTS + "/list-desktop.png", fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: SHOTS + "/list-phone.png", fullPage: true });
  await page.setViewportSize({ width: 1280, height: 800 });

  // One chamber: send a message and see the reply arrive without a reload.
  await page.click(`a[href="#/c/${CHAMBER}"]`);
  await page.waitForSelector("#messages", { timeout: 10000 });
  let reloaded = false;
  page.on("load", () => { reloaded = true; });
  await page.fill("#send-text", "hello from the browser");
  const sentAt = Date.now();
  await page.click("#send");
  await page.waitForFunction(() => document.getElementById("messages").textContent.includes("got: hello from the browser"), null, { timeout: 20000 });
  out.reply_ms = Date.now() - sentAt;
  out.reply_without_reload = !reloaded;

  // A TODO added on the page.
  await page.fill("#todo-text", "from the page");
  await page.fill("#todo-at", "+3h");
  await page.click("#todo-add");
  await page.waitForFunction(() => document.getElementById("todos").textContent.includes("from the page"), null, { timeout: 10000 });
  out.todo_shown = true;

  // Stop and start change the state shown.
  await page.click("#controls button:text('stop')");
  await page.waitForFunction(() => document.getElementById("state").textContent.trim() === "stopped", null, { timeout: 20000 });
  out.stopped_shown = true;
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
  await page.screenshot({ path: SHOTS + "/chamber-desktop.png", fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: SHOTS + "/chamber-phone.png", fullPage: true });
  await ctx.close();
} catch (e) {
  out.error = String(e && e.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
