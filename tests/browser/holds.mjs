// Reads the hub's banner of provider accounts held at their limit, in
// headless Chromium, and prints what it says as JSON. Run by
// tests/it/gateway.rs once an account is held; inputs from the
// environment: HUB_URL, HUB_TOKEN.
import { drive } from "./driver.mjs";

const { HUB_URL, HUB_TOKEN } = process.env;

await drive(async (browser, out) => {
  const page = await browser.newPage();
  await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
  await page.waitForSelector("#holds [data-hold]", { timeout: 20000 });
  out.holds = await page.$$eval("#holds [data-hold]", (l) => l.map((p) => ({
    provider: p.dataset.hold,
    text: p.textContent,
    exact: p.querySelector("time")?.getAttribute("datetime") || "",
  })));
});
