// Issue 63, cases 1 and 2: a request reaches a page that is already open.
// The list is opened at 360 px; then (GO_FILE written) the agent asks, and
// the card must appear without a reload; the chamber's row, "Needs you"
// and its own page all say it waits; it is approved from the 360 px page.
// ASKED_FILE holds when the agent asked (ms since the epoch, its clock is
// this machine's). Prints JSON: what it saw, and `ask_to_card_ms`.
//   HUB_URL=... HUB_TOKEN=... GO_FILE=... ASKED_FILE=... CHAMBER=... node tests/browser/live-approval.mjs
import { readFileSync, writeFileSync } from "node:fs";
import { axe, drive, everywhere } from "./driver.mjs";

const { HUB_URL, HUB_TOKEN, GO_FILE, ASKED_FILE, CHAMBER } = process.env;

await drive(async (browser, out) => {
  const ctx = await browser.newContext({ viewport: { width: 360, height: 780 }, bypassCSP: true });
  const page = await ctx.newPage();
  await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
  await page.waitForSelector(`tr[data-chamber="${CHAMBER}"]`, { timeout: 20000 });
  // A mark on this document: a reload or a new page would lose it.
  await page.evaluate(() => { window.cryoOpened = true; });
  out.before = await page.$$eval("[data-approval]", (items) => items.length);
  writeFileSync(GO_FILE, "go\n");
  await page.waitForSelector("[data-approval]", { timeout: 10000 });
  const cardAt = Date.now();
  // The agent writes the time before it asks: read once it is there.
  out.ask_to_card_ms = cardAt - Number(readFileSync(ASKED_FILE, "utf8").trim());
  out.same_document = await page.evaluate(() => window.cryoOpened === true);
  out.card = await page.$eval("[data-approval]", (i) => ({ call: i.querySelector("pre")?.textContent, text: i.textContent }));
  out.heading = await page.$eval("#h-needs-all", (h) => h.textContent);
  // The row: its state and what waits on it (the status frame may trail).
  await page.waitForFunction((n) => document.querySelector(`tr[data-chamber="${n}"] .state-awaiting-approval`), CHAMBER, { timeout: 10000 });
  out.row = await page.$eval(`tr[data-chamber="${CHAMBER}"]`, (r) => r.textContent);
  await page.selectOption("#state-filter", "needs");
  out.needs_rows = await page.$$eval("tr[data-chamber]", (rows) => rows.map((r) => r.dataset.chamber));
  await axe(page, "list_360", out);
  await everywhere(page, "live_list", out);

  // Its page (the notification's link): the request, with its answers.
  await page.goto(HUB_URL + "#/c/" + CHAMBER);
  await page.waitForSelector("#needs [data-approval]", { timeout: 10000 });
  out.page_badge = await page.$eval("#state", (s) => s.textContent);
  out.page_card = await page.$eval("#needs [data-approval] pre", (p) => p.textContent);
  const approve = page.locator("#needs [data-approval] button[data-approve]");
  const box = await approve.boundingBox();
  out.approve_box = box && { width: Math.round(box.width), height: Math.round(box.height) };
  out.page_width = await page.evaluate(() => document.documentElement.scrollWidth);
  await axe(page, "chamber_360", out);
  await everywhere(page, "live_chamber", out);
  await approve.click();
  await page.waitForFunction(() => !document.querySelector("[data-approval]"), null, { timeout: 10000 });
  out.after = await page.$$eval("[data-approval]", (items) => items.length);
  // The record of who decided what, on the list.
  await page.goto(HUB_URL + "#/");
  await page.waitForSelector("#decisions", { timeout: 10000 });
  await page.click("#decisions summary");
  await page.waitForSelector("#decisions li[data-decided]", { timeout: 10000 });
  out.decided = await page.$$eval("#decisions li[data-decided]", (ls) => ls.map((l) => l.textContent));
  await ctx.close();
});
