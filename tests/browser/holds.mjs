// Reads the hub's banner of provider accounts held at their limit, in
// headless Chromium, and prints what it says as JSON. Run by
// tests/it/gateway.rs once an account is held; inputs from the
// environment: HUB_URL, HUB_TOKEN.
import { drive, everywhere } from "./driver.mjs";

const { HUB_URL, HUB_TOKEN } = process.env;

await drive(async (browser, out) => {
  // bypassCSP only so axe-core's script can be added to the page.
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 }, bypassCSP: true });
  const page = await ctx.newPage();
  await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
  await page.waitForSelector("#holds [data-hold]", { timeout: 20000 });
  await everywhere(page, "holds_banner", out);
  out.holds = await page.$$eval("#holds [data-hold]", (l) => l.map((p) => ({
    provider: p.dataset.hold,
    text: p.textContent,
    exact: p.querySelector("time")?.getAttribute("datetime") || "",
  })));
  // The first held chamber's page: held, in the hold's colour, and until when.
  // Clicked by its selector, not a handle the list may draw again.
  if (await page.$("#holds [data-hold] a")) {
    await page.click("#holds [data-hold] a");
    await page.waitForSelector("#status [data-held]", { timeout: 20000 });
    out.page = await page.evaluate(() => {
      const held = document.querySelector("#status [data-held]");
      const row = (k) => [...document.querySelectorAll("#status tr")].find((r) => r.querySelector("th")?.textContent === k)?.querySelector("td")?.textContent;
      const probe = document.createElement("span"); probe.className = "error"; document.body.append(probe);
      const bad = getComputedStyle(probe).color; probe.remove();
      return { badge: document.getElementById("state").textContent, held: held.textContent, colour: getComputedStyle(held).color, failure_colour: bad,
        zone_on_hover: held.querySelector("time")?.title || "", next_wake: row("next wake") };
    });
    await everywhere(page, "held_chamber", out);
  }
});
