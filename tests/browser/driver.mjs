// What the browser drivers share: Debian's Chromium, headless and offline,
// and one JSON line on stdout with what the run saw (an `error` if it threw).
import { chromium } from "playwright-core";

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
