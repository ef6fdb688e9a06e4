// Issue 63, case 10: every page at 360 and 1280 px, light and dark. For
// each: axe's serious and critical violations (contrast among them),
// anything wider than the screen, text under 12 px, and controls under
// 44 px on a phone (buttons, fields, tabs, the header's links, a row's
// chamber link). Screenshots go to SHOTS (named PAGE-WIDTH-THEME.png).
// A page's hash may end in @TAB: that tab of a chamber's page is opened.
//   HUB_URL=... HUB_TOKEN=... PAGES="list:#/,chamber:#/c/a,todos:#/c/a@todos" SHOTS=dir node tests/browser/themes.mjs
import { axe, drive } from "./driver.mjs";

const { HUB_URL, HUB_TOKEN, PAGES, SHOTS } = process.env;
const pages = PAGES.split(",").map((p) => p.split(/:(.*)/s).slice(0, 2));

// What a person cannot read or reach on the page now.
function audit(phone) {
  const seen = (e) => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e); return r.width > 0 && r.height > 0 && s.visibility !== "hidden"; };
  const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.textContent ? " " + JSON.stringify(e.textContent.trim().slice(0, 30)) : "");
  const small = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const t = walker.currentNode, e = t.parentElement;
    if (!t.textContent.trim() || !e || !seen(e) || e.closest(".sr-only")) continue;
    // SVG text is drawn at its picture's scale.
    const pic = e.closest("svg");
    const scale = pic?.viewBox?.baseVal?.width ? pic.getBoundingClientRect().width / pic.viewBox.baseVal.width : 1;
    const px = Math.round(parseFloat(getComputedStyle(e).fontSize) * scale * 10) / 10;
    if (px < 12) small.push(name(e) + " " + px + "px");
  }
  const wide = [];
  const width = document.documentElement.clientWidth;
  for (const e of document.querySelectorAll("main *, header *")) {
    if (!seen(e) || e.closest(".scroll, pre, .log, table.runs, [role=log]")) continue;
    const r = e.getBoundingClientRect();
    if (r.right > width + 1) wide.push(name(e) + " to " + Math.round(r.right));
  }
  const targets = [];
  if (phone) {
    for (const e of document.querySelectorAll("button, input:not([type=hidden]), select, textarea, [role=tab], header a, th[scope=row] a, summary")) {
      if (!seen(e) || e.closest(".sr-only")) continue;
      // A box to tick is reached through its label.
      const box = e.type === "checkbox" || e.type === "radio" ? (e.closest("label") || (e.id && document.querySelector(`label[for="${e.id}"]`)) || e) : e;
      const r = box.getBoundingClientRect();
      if (r.height < 44 - 0.5 || r.width < 44 - 0.5) targets.push(name(e) + " " + Math.round(r.width) + "x" + Math.round(r.height));
    }
  }
  return { page_width: document.documentElement.scrollWidth, width, small: [...new Set(small)].slice(0, 12), wide: wide.slice(0, 12), targets: [...new Set(targets)].slice(0, 12) };
}

await drive(async (browser, out) => {
  for (const theme of ["light", "dark"]) {
    for (const width of [360, 1280]) {
      const ctx = await browser.newContext({ viewport: { width, height: 800 }, colorScheme: theme, bypassCSP: true });
      const page = await ctx.newPage();
      await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
      await page.waitForSelector("#chambers, #list-empty", { timeout: 20000 });
      for (const [label, where] of pages) {
        const [hash, tab] = where.split("@");
        await page.goto(HUB_URL + hash);
        await page.waitForFunction(() => document.querySelector("main")?.dataset.page && !document.querySelector("main p.error[role=alert]"), null, { timeout: 20000 });
        if (tab) {
          await page.click("#tab-" + tab);
          await page.waitForSelector(`#panel-${tab}:not([hidden])`, { timeout: 5000 });
        }
        await page.waitForTimeout(300);
        const key = `${label}_${width}_${theme}`;
        out[key] = await page.evaluate(audit, width < 600);
        await axe(page, key, out);
        if (SHOTS) await page.screenshot({ path: `${SHOTS}/${label}-${width}-${theme}.png`, fullPage: true });
      }
      await ctx.close();
    }
  }
});
