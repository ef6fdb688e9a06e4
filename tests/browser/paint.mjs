// Times the hub's first paint in headless Chromium, for BENCHMARKS.md:
// the list (its rows drawn) loaded from nothing and reached from a
// chamber's page, and with CHAMBER that chamber's page (its newest
// messages drawn), RUNS times each, at 1280 px. Prints JSON: the
// milliseconds to the content, p50 and max. A cold load's figure is the
// page's own (when the frame holding the content has been drawn; until
// 2026-11-29, later, the driver polled the page meanwhile, which added its
// script's run to the page's thread); `list_driver_ms` is a load as the
// driver sees it (its next call after the rows were there: after the load
// event, two round trips to Chromium and whatever the page did meanwhile),
// as measured until 2026-11-29, in loads of its own.
// With PAINT_PROFILE=FILE it also writes FILE: three more cold loads of the
// list, each with its resource timings (what waited on what), the last one
// traced (FILE.trace.json, for chrome://tracing or Perfetto), and cryod's
// time to answer `/api/me` and both lists from outside the browser.
//   HUB_URL=... HUB_TOKEN=... [CHAMBER=name] [RUNS=5] [PAINT_PROFILE=FILE] node tests/browser/paint.mjs
import { drive } from "./driver.mjs";

const { HUB_URL, HUB_TOKEN, CHAMBER } = process.env;
const RUNS = Number(process.env.RUNS || 5);

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: s[Math.floor(s.length / 2)], max: s[s.length - 1], runs: s.length };
};

await drive(async (browser, out) => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  // Each page notes when the frame that first holds what a run waits for
  // has been drawn (from navigation start): the change seen, then the
  // frame, then the first task after it.
  await ctx.addInitScript(() => {
    window.__drawn = {};
    new MutationObserver(() => {
      for (const sel of ["#chambers tbody tr", "#messages article"]) {
        if (sel in window.__drawn || !document.querySelector(sel)) continue;
        window.__drawn[sel] = null;
        requestAnimationFrame(() => setTimeout(() => {
          window.__drawn[sel] = performance.now();
          console.debug("cryo-drawn " + sel);
        }));
      }
    }).observe(document, { childList: true, subtree: true });
  });
  const page = await ctx.newPage();
  await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
  await page.waitForSelector("#chambers tbody tr", { timeout: 60000 });
  // The page says when `sel` is drawn on its console: waiting for that
  // runs nothing in the page (a polling wait would run the driver's
  // script on the page's thread, in the middle of what is measured).
  const drawnSignal = (sel) => page.waitForEvent("console", { predicate: (m) => m.text() === "cryo-drawn " + sel, timeout: 60000 });
  // A cold load of `hash` until `sel` is drawn: the page's figure (loads
  // with nothing polled), and the driver's (loads of their own).
  const time = async (hash, sel) => {
    const [ms, driver] = [[], []];
    for (let i = 0; i < RUNS; i++) {
      await page.goto("about:blank");
      const drawn = drawnSignal(sel);
      await page.goto(HUB_URL + hash);
      await drawn;
      ms.push(Math.round(await page.evaluate((sel) => window.__drawn[sel], sel)));
    }
    for (let i = 0; i < RUNS; i++) {
      await page.goto("about:blank");
      await page.goto(HUB_URL + hash);
      await page.waitForFunction((sel) => document.querySelectorAll(sel).length > 0, sel, { timeout: 60000, polling: "raf" });
      driver.push(Math.round(await page.evaluate(() => performance.now())));
    }
    return [stats(ms), stats(driver)];
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
  [out.list_ms, out.list_driver_ms] = await time("#/", "#chambers tbody tr");
  if (CHAMBER) [out.chamber_ms] = await time("#/c/" + CHAMBER, "#messages article");
  if (process.env.PAINT_PROFILE) {
    const fs = await import("node:fs");
    const prof = [];
    for (let i = 0; i < 3; i++) {
      await page.goto("about:blank");
      if (i === 2) await browser.startTracing(page, { path: process.env.PAINT_PROFILE + ".trace.json", screenshots: false,
        categories: ["devtools.timeline", "v8.execute", "disabled-by-default-devtools.timeline", "blink.user_timing", "loading", "navigation", "ServiceWorker", "blink.resource"] });
      const drawn = drawnSignal("#chambers tbody tr");
      await page.goto(HUB_URL + "#/");
      await drawn;
      if (i === 2) await browser.stopTracing();
      prof.push(await page.evaluate(() => {
        const n = performance.getEntriesByType("navigation")[0];
        const r = (x) => Math.round(x);
        return {
          drawn: r(window.__drawn["#chambers tbody tr"]),
          nav: { workerStart: r(n.workerStart), fetchStart: r(n.fetchStart), responseStart: r(n.responseStart), responseEnd: r(n.responseEnd), domInteractive: r(n.domInteractive), dcl: r(n.domContentLoadedEventEnd), load: r(n.loadEventEnd) },
          res: performance.getEntriesByType("resource").map((e) => [e.name.replace(/^https?:\/\/[^/]+/, ""), r(e.startTime), r(e.workerStart), r(e.responseStart), r(e.responseEnd), e.transferSize, e.workerFinalSourceType || ""]),
          marks: performance.getEntriesByType("mark").map((m) => [m.name, r(m.startTime)]),
        };
      }));
    }
    // cryod's own time: node's fetch, no browser or service worker between.
    const h = { headers: { Authorization: "Bearer " + HUB_TOKEN } };
    const server = {};
    for (const path of ["/api/me", "/api/chambers?archived=1&fields=row", "/api/chambers?archived=1"]) {
      const ms = [];
      for (let i = 0; i < 15; i++) { const t = performance.now(); await (await fetch(new URL(path, HUB_URL), h)).arrayBuffer(); ms.push(Math.round(performance.now() - t)); }
      server[path] = stats(ms);
    }
    prof.push(server);
    fs.writeFileSync(process.env.PAINT_PROFILE, JSON.stringify(prof, null, 1));
  }
  await ctx.close();
});
