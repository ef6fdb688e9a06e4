// Times the hub's first paint in headless Chromium, for BENCHMARKS.md:
// the list (its rows drawn) loaded from nothing and reached from a
// chamber's page, and with CHAMBER that chamber's page (its newest
// messages drawn), RUNS times each, at 1280 px. Prints JSON: the
// milliseconds to the content, p50 and max.
//   HUB_URL=... HUB_TOKEN=... [CHAMBER=name] [RUNS=5] node tests/browser/paint.mjs
import { drive } from "./driver.mjs";

const { HUB_URL, HUB_TOKEN, CHAMBER } = process.env;
const RUNS = Number(process.env.RUNS || 5);

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: s[Math.floor(s.length / 2)], max: s[s.length - 1], runs: s.length };
};

await drive(async (browser, out) => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
  await page.waitForSelector("#chambers tbody tr", { timeout: 60000 });
  const time = async (hash, ready) => {
    const ms = [];
    for (let i = 0; i < RUNS; i++) {
      await page.goto("about:blank");
      await page.goto(HUB_URL + hash);
      await page.waitForFunction(ready, null, { timeout: 60000, polling: "raf" });
      ms.push(Math.round(await page.evaluate(() => performance.now())));
    }
    return stats(ms);
  };
  out.rows = await page.$$eval("#chambers tbody tr", (r) => r.length);
  // Within the app: from a chamber's page back to the list (a hash change).
  const first = await page.$eval("#chambers tbody tr", (r) => r.dataset.chamber);
  const nav = [];
  for (let i = 0; i < RUNS; i++) {
    await page.goto(HUB_URL + "#/c/" + first);
    await page.waitForSelector("#messages", { timeout: 60000, state: "attached" });
    nav.push(await page.evaluate(() => new Promise((done) => {
      const t = performance.now();
      location.hash = "#/";
      const check = () => document.querySelector("#chambers tbody tr") ? done(Math.round(performance.now() - t)) : requestAnimationFrame(check);
      requestAnimationFrame(check);
    })));
  }
  out.list_nav_ms = stats(nav);
  out.list_ms = await time("#/", () => document.querySelectorAll("#chambers tbody tr").length > 0);
  if (CHAMBER) out.chamber_ms = await time("#/c/" + CHAMBER, () => document.querySelectorAll("#messages article").length > 0);
  await ctx.close();
});
