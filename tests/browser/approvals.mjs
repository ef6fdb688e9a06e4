// The hub's "Needs you" with a tool call waiting for a person: the
// request's call shown whole, its Approve and Deny, axe-clean, at 1280 and
// 390 px. Approves the request named by APPROVE (by its call's text), then
// denies the one named by DENY with a reason. Prints JSON: what it saw.
//   HUB_URL=... HUB_TOKEN=... APPROVE=... DENY=... node tests/browser/approvals.mjs
import { axe, drive, everywhere } from "./driver.mjs";

const { HUB_URL, HUB_TOKEN, APPROVE, DENY } = process.env;

await drive(async (browser, out) => {
  for (const width of [390, 1280]) {
    const ctx = await browser.newContext({ viewport: { width, height: 800 }, bypassCSP: true });
    const page = await ctx.newPage();
    await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
    await page.waitForFunction((n) => document.querySelectorAll("[data-approval]").length >= n, 2, { timeout: 30000 });
    out["items_" + width] = await page.$$eval("[data-approval]", (items) => items.map((i) => ({
      id: i.dataset.approval, call: i.querySelector("pre")?.textContent, text: i.textContent,
    })));
    out["heading_" + width] = await page.$eval("#h-needs-all", (h) => h.textContent);
    await axe(page, "needs_you_" + width, out);
    if (width === 1280) {
      await everywhere(page, "needs_you", out);
      const item = (text) => page.locator("[data-approval]", { has: page.locator("pre", { hasText: text }) });
      await item(APPROVE).getByRole("button", { name: "Approve" }).click();
      await page.waitForFunction((t) => ![...document.querySelectorAll("[data-approval] pre")].some((p) => p.textContent === t), APPROVE, { timeout: 20000 });
      const deny = item(DENY);
      await deny.locator("input").fill("not from the hub");
      await deny.getByRole("button", { name: "Deny" }).click();
      await page.waitForFunction(() => document.querySelectorAll("[data-approval]").length === 0, null, { timeout: 20000 });
      out.toasts = await page.$$eval("[role=status], .toast", (t) => t.map((x) => x.textContent));
    }
    await ctx.close();
  }
});
