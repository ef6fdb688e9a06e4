// Issue 63, case 6: a chamber of 200 TODOs on a 360 px phone. The add form
// comes first; a count; the list 50 at a time ("Show 50 more"); a search;
// a removal undone (nothing sent), then one left to go (sent after its
// six seconds). Prints JSON: what it saw.
//   HUB_URL=... HUB_TOKEN=... CHAMBER=... node tests/browser/todos.mjs
import { axe, drive, everywhere, go } from "./driver.mjs";

const { HUB_URL, HUB_TOKEN, CHAMBER } = process.env;

await drive(async (browser, out) => {
  const ctx = await browser.newContext({ viewport: { width: 360, height: 780 }, bypassCSP: true });
  const page = await ctx.newPage();
  await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
  await page.waitForSelector("#chambers", { timeout: 20000 });
  await go(page, CHAMBER);
  await page.click("#tab-todos");
  await page.waitForFunction(() => document.querySelectorAll("#todos li").length > 0, null, { timeout: 10000 });
  const items = () => page.$$eval("#todos li", (l) => l.length);
  const count = () => page.textContent("#todos-count");
  out.first = { items: await items(), count: await count() };
  out.form_first = await page.evaluate(() => document.getElementById("todo-text").getBoundingClientRect().top < document.getElementById("todos").getBoundingClientRect().top);
  out.page_height = await page.evaluate(() => document.documentElement.scrollHeight);
  await page.click("#todos-more");
  out.more = { items: await items(), count: await count() };
  await page.fill("#todo-search", "item 17");
  out.search = { items: await items(), count: await count() };
  await page.fill("#todo-search", "");
  // Removed, then undone: back in its place, nothing sent.
  const firstId = await page.$eval("#todos li", (li) => li.dataset.todo);
  await page.click(`#todos li[data-todo="${firstId}"] button[data-remove]`);
  out.removed_hidden = await page.$$eval(`#todos li[data-todo="${firstId}"]`, (l) => l.length === 0);
  out.undo_text = await page.textContent("#todo-undo");
  await page.click(`#todo-undo button[data-undo="${firstId}"]`);
  out.undone_back = await page.$$eval(`#todos li[data-todo="${firstId}"]`, (l) => l.length === 1);
  await axe(page, "todos_360", out);
  await everywhere(page, "todos", out);
  // Removed for good: sent once its Undo has passed.
  const secondId = await page.$$eval("#todos li", (l) => l[1].dataset.todo);
  out.removed_for_good = secondId;
  const clicked = Date.now();
  const sent = page.waitForResponse((r) => r.request().method() === "DELETE" && r.url().includes("/todos/"), { timeout: 20000 });
  await page.click(`#todos li[data-todo="${secondId}"] button[data-remove]`);
  out.delete_status = (await sent).status();
  out.delete_after_ms = Date.now() - clicked;
  out.after = await count();
  await ctx.close();
});
