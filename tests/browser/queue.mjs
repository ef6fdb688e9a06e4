// Issue 63, case 8: "Needs you" as a queue: each item's kind and age, what
// blocks an agent first; j and k move through it, Enter opens the item.
//   HUB_URL=... HUB_TOKEN=... node tests/browser/queue.mjs
import { drive } from "./driver.mjs";

await drive(async (browser, out) => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  await page.goto(process.env.HUB_URL + "#token=" + process.env.HUB_TOKEN);
  await page.waitForSelector("#needs-queue > li", { timeout: 20000 });
  // Ages arrive with each chamber's last run.
  await page.waitForFunction(() => [...document.querySelectorAll("#needs-queue > li")].every((li) => li.querySelector("time")), null, { timeout: 10000 });
  out.items = await page.$$eval("#needs-queue > li", (ls) => ls.map((li) => ({
    kind: li.dataset.kind, name: li.dataset.needs || li.dataset.approval, age: li.querySelector("time")?.textContent })));
  // The failure's card wakes its chamber from the queue.
  out.wake_buttons = await page.$$eval("#needs-queue [data-wake-now]", (b) => b.map((x) => x.dataset.wakeNow));
  const focused = () => page.evaluate(() => document.activeElement?.dataset?.needs || null);
  await page.evaluate(() => document.activeElement?.blur());
  await page.keyboard.press("j");
  out.j1 = await focused();
  await page.keyboard.press("j");
  out.j2 = await focused();
  await page.keyboard.press("k");
  out.k1 = await focused();
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelector("main")?.dataset.page === "chamber", null, { timeout: 10000 });
  out.opened = await page.evaluate(() => location.hash);
  await ctx.close();
});
