// What the browser drivers share: Debian's Chromium, headless and offline,
// and one JSON line on stdout with what the run saw (an `error` if it threw).
import { chromium } from "playwright-core";
import { createRequire } from "node:module";

const AXE = createRequire(import.meta.url).resolve("axe-core/axe.min.js");

// Serious and critical accessibility violations on the page now (axe-core),
// kept in `out.axe[name]`.
export async function axe(page, name, out) {
  await page.addScriptTag({ path: AXE });
  const r = await page.evaluate(async () => (await window.axe.run(document, { resultTypes: ["violations"] })).violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => v.id + ": " + v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ")));
  out.axe = out.axe || {};
  out.axe[name] = r;
}

// Opens a chamber's page and waits until it is that chamber's (a hash
// change re-renders in place: the old page is there until then).
export async function go(page, name) {
  await page.goto(process.env.HUB_URL + "#/c/" + name);
  await page.waitForFunction((name) => document.querySelector("main h1")?.firstChild?.textContent?.trim() === name, name, { timeout: 20000 });
}

export async function drive(body) {
  const out = {};
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  try {
    await body(browser, out);
  } catch (e) {
    out.error = String(e && e.stack || e);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
}

// The page as it is now at both widths (360 and 1280 px) in both themes:
// axe's serious and critical violations kept as `out.axe[NAME_WIDTH_THEME]`,
// and anything wider than the screen as `out.wide[NAME_WIDTH_THEME]`. The
// page's own size and theme come back after.
export async function everywhere(page, name, out) {
  const was = page.viewportSize();
  for (const width of [360, 1280]) {
    await page.setViewportSize({ width, height: was?.height || 800 });
    for (const theme of ["light", "dark"]) {
      await page.emulateMedia({ colorScheme: theme });
      const key = `${name}_${width}_${theme}`;
      await axe(page, key, out);
      out.wide = out.wide || {};
      out.wide[key] = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    }
  }
  await page.emulateMedia({ colorScheme: null });
  if (was) await page.setViewportSize(was);
}
