// Issue 63, cases 4 and 8: a phone-only person mends from "Needs you": a
// failure acknowledged, another snoozed for an hour (both named under "Set
// aside"), a changed setting reviewed and trusted from its item. 360 px,
// dark. STAGE=after: what a restarted cryod still sets aside.
//   HUB_URL=... HUB_TOKEN=... STAGE=first|after node tests/browser/aside.mjs
import { axe, drive, everywhere } from "./driver.mjs";

await drive(async (browser, out) => {
  const ctx = await browser.newContext({ viewport: { width: 360, height: 780 }, colorScheme: "dark", hasTouch: true, bypassCSP: true });
  const page = await ctx.newPage();
  await page.goto(process.env.HUB_URL + "#token=" + process.env.HUB_TOKEN);
  const queued = () => page.$$eval("#needs-queue > li", (ls) => ls.map((li) => li.dataset.needs || li.dataset.approval));
  const aside = () => page.$$eval("#set-aside li", (ls) => ls.map((li) => li.dataset.aside));
  const gone = (name) => page.waitForFunction((name) => !document.querySelector(`#needs-queue > li[data-needs="${name}"]`)
    && document.querySelector(`#set-aside li[data-aside="${name}"]`), name, { timeout: 10000 });
  if (process.env.STAGE === "after") {
    await page.waitForSelector("#set-aside li", { timeout: 20000, state: "attached" });
    await page.waitForFunction(() => document.querySelectorAll("#set-aside li").length === 2, null, { timeout: 10000 });
    out.queue = await queued();
    out.aside = await aside();
    await ctx.close();
    return;
  }
  await page.waitForSelector('#needs-queue > li[data-needs="crash-b"]', { timeout: 20000 });
  await page.waitForSelector('#needs-queue > li[data-needs="guarded"]', { timeout: 20000 });
  out.before = await queued();
  await axe(page, "queue_360_dark", out);
  await page.screenshot({ path: process.env.SHOTS + "/needs-queue-360-dark.png", fullPage: true });
  const ack = await page.$('[data-acknowledge="crash-a"]');
  out.ack_box = await ack.boundingBox();
  out.snooze_box = await (await page.$('[data-snooze="crash-b"]')).boundingBox();
  // By its selector, not the handle: the queue may be drawn again (a
  // chamber's news) between the look and the tap.
  await page.tap('[data-acknowledge="crash-a"]');
  await gone("crash-a");
  await page.selectOption('[data-snooze="crash-b"]', "3600");
  await gone("crash-b");
  await page.click("#set-aside summary");
  out.aside = await aside();
  out.aside_text = await page.$eval('#set-aside li[data-aside="crash-b"]', (li) => li.textContent);
  await axe(page, "aside_360_dark", out);
  await everywhere(page, "aside", out);
  // The changed setting, reviewed and trusted from its item.
  await page.tap('[data-review="guarded"]');
  await page.waitForSelector("#trust-diff", { timeout: 10000 });
  out.trust_keys = await page.$$eval("#trust-diff tbody th", (ths) => ths.map((t) => t.textContent));
  await axe(page, "trust_360_dark", out);
  await page.tap("#trust-accept");
  await page.waitForFunction(() => !document.querySelector('#needs-queue > li[data-needs="guarded"]'), null, { timeout: 10000 });
  out.after = await queued();
  out.page_width = await page.evaluate(() => document.documentElement.scrollWidth);
  await page.screenshot({ path: process.env.SHOTS + "/needs-aside-360-dark.png", fullPage: true });
  await ctx.close();
});
