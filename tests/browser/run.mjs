// Issue 63, case 9: runs as a CI console. The runs tab filters (failed);
// a failed run's own page (its URL) with its facts, Run again, cryo.log and
// the transcript opened at their newest line and searchable; Run again
// wakes the chamber, and the good run's page is titled by its summary.
//   HUB_URL=... HUB_TOKEN=... CHAMBER=... node tests/browser/run.mjs
import { axe, drive, everywhere, go } from "./driver.mjs";

const { HUB_URL, HUB_TOKEN, CHAMBER } = process.env;

await drive(async (browser, out) => {
  for (const width of [360, 1280]) {
    const ctx = await browser.newContext({ viewport: { width, height: 800 }, bypassCSP: true });
    const page = await ctx.newPage();
    await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
    await page.waitForSelector("#chambers", { timeout: 20000 });
    await go(page, CHAMBER);
    await page.click("#tab-runs");
    await page.selectOption("#runs-filter", "failed");
    out["failed_filter_" + width] = await page.textContent("#runs-count");
    await page.click('#sessions a[data-run-link="1"]');
    await page.waitForSelector("#run-title", { timeout: 20000 });
    const run = {};
    out["failed_run_" + width] = run;
    run.url = page.url().replace(HUB_URL, "");
    run.title = await page.textContent("#run-title");
    run.summary = await page.textContent("#run-summary");
    run.facts = await page.$$eval("#run-facts dd", (dd) => Object.fromEntries(dd.map((d) => [d.dataset.fact, d.textContent])));
    run.again = await page.$$eval("#run-again", (b) => b.length);
    // Opened at the newest line.
    run.at_newest = await page.$$eval("pre.log", (ps) => ps.map((p) => p.scrollHeight <= p.clientHeight + 2 || p.scrollTop + p.clientHeight >= p.scrollHeight - 2));
    run.sections = await page.$$eval("main section", (ss) => ss.map((x) => x.textContent.slice(0, 300)));
    await page.fill("#run-transcript-search", "line 7", { timeout: 3000 });
    run.search = await page.textContent("#run-transcript-count");
    run.found = await page.textContent("#run-transcript");
    run.page_width = await page.evaluate(() => document.documentElement.scrollWidth);
    await axe(page, "run_" + width, out);
    if (width === 1280) await everywhere(page, "run", out);
    if (width === 360) {
      // The chamber page's Log and Transcript tabs: at the newest line,
      // searchable, in the dark theme too.
      await page.emulateMedia({ colorScheme: "dark" });
      await go(page, CHAMBER);
      await page.click("#tab-transcript");
      await page.waitForFunction(() => document.getElementById("transcript")?.textContent.includes("line 80"), null, { timeout: 20000 });
      const newest = (id) => page.$eval(id, (p) => p.scrollTop + p.clientHeight >= p.scrollHeight - 2);
      out.tab_transcript_newest = await newest("#transcript");
      await page.fill("#transcript-search", "line 7");
      out.tab_transcript_search = await page.textContent("#transcript-count");
      await page.click("#tab-log");
      out.tab_log_newest = await newest("#log");
      await page.fill("#log-search", "session 1");
      out.tab_log_search = await page.textContent("#log-count");
      await axe(page, "tabs_360_dark", out);
      await page.emulateMedia({ colorScheme: "light" });
    }
    if (width === 1280) {
      // A reload of its URL is the same page.
      await page.reload();
      await page.waitForSelector("#run-title", { timeout: 20000 });
      out.reloaded_title = await page.textContent("#run-title");
      await page.click("#run-again");
      await page.waitForFunction(() => document.querySelector("main")?.dataset.page === "chamber", null, { timeout: 20000 });
      await page.click("#tab-runs");
      await page.selectOption("#runs-filter", "");
      // The good run that follows, once it has ended.
      const good = await page.waitForFunction(() => [...document.querySelectorAll("#sessions tbody tr")]
        .find((r) => r.textContent.includes("completed"))?.dataset.session, null, { timeout: 60000, polling: 250 });
      const n = await good.jsonValue();
      await page.click(`#sessions a[data-run-link="${n}"]`);
      await page.waitForSelector("#run-summary", { timeout: 20000 });
      out.good_run = { summary: await page.textContent("#run-summary"), again: await page.$$eval("#run-again", (b) => b.length) };
    }
    await ctx.close();
  }
});
