// A [git] chamber's page: the status tab's git line (branch, changes, the
// pull request's link), the runs' changes column, and a run's diff opened
// from its number (files with their counts, the patch's lines marked),
// axe-clean, at 390 and 1280 px. Prints JSON: what it saw.
//   HUB_URL=... HUB_TOKEN=... CHAMBER=... SHOTS=... node tests/browser/diff.mjs
import { axe, drive, everywhere, go } from "./driver.mjs";

const { CHAMBER, SHOTS } = process.env;

await drive(async (browser, out) => {
  for (const [width, wide] of [[390, "phone"], [1280, "desktop"]]) {
    const ctx = await browser.newContext({ viewport: { width, height: 900 }, bypassCSP: true });
    const page = await ctx.newPage();
    await page.goto(process.env.HUB_URL + "#token=" + process.env.HUB_TOKEN);
    await go(page, CHAMBER);
    await page.waitForSelector("#status [data-git]", { timeout: 20000 });
    out["git_line_" + width] = await page.$eval("#status [data-git]", (g) => ({
      text: g.textContent, link: g.querySelector("a")?.getAttribute("href") ?? null,
    }));
    await page.click("#tab-runs");
    await page.click('#sessions button[data-run="1"]');
    await page.waitForSelector("pre.diff", { timeout: 20000 });
    out["changes_" + width] = await page.$eval('#sessions tr[data-session="1"] td:last-child', (t) => t.textContent);
    out["files_" + width] = await page.$$eval(".diff-files tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
    out["patch_" + width] = await page.$eval("pre.diff", (p) => ({
      text: p.textContent,
      added: [...p.querySelectorAll(".diff-add")].map((s) => s.textContent.trimEnd()),
      deleted: [...p.querySelectorAll(".diff-del")].map((s) => s.textContent.trimEnd()),
      markup: p.querySelectorAll("script, img, a").length,
    }));
    await axe(page, "diff_" + width, out);
    await page.screenshot({ path: `${SHOTS}/git-diff-${wide}.png`, fullPage: true });
    // The run's own page: its changes full width, file by file, and the
    // branch's whole diff on asking.
    await page.click('#sessions a[data-run-link="1"]');
    await page.waitForSelector("details.diff-file", { timeout: 20000 }).catch(async (e) => {
      out.run_page = await page.textContent("main");
      throw e;
    });
    out["run_files_" + width] = await page.$$eval("details.diff-file", (ds) => ds.map((d) => ({
      path: d.dataset.path, open: d.open, lines: d.querySelector("pre").textContent.split("\n").filter(Boolean).length,
      own: d.querySelector("pre").textContent.split("\n")[0] === `diff --git a/${d.dataset.path} b/${d.dataset.path}`,
      markup: d.querySelectorAll("script, img").length })));
    out["run_diff_width_" + width] = await page.evaluate(() => ({ page: document.documentElement.scrollWidth,
      diff: Math.round(document.querySelector(".run-changes").getBoundingClientRect().width) }));
    await page.click("#branch-diff");
    await page.waitForSelector("#branch-diff-box details.diff-file", { timeout: 20000 });
    out["branch_files_" + width] = await page.$$eval("#branch-diff-box details.diff-file", (ds) => ds.map((d) => d.dataset.path));
    await axe(page, "run_diff_" + width, out);
    if (width === 1280) await everywhere(page, "run_diff", out);
    await page.screenshot({ path: `${SHOTS}/git-run-${wide}.png`, fullPage: true });
    await ctx.close();
  }
});
