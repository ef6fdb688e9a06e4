// Drives the hub as a console (issue 42) in headless Chromium, at 1280 px
// and at 360 px, and prints what it saw as JSON. Run by tests/it/browser.rs;
// inputs from the environment: HUB_URL, HUB_TOKEN, SHOTS (a folder for
// screenshots), CRASH (a chamber whose session crashed), ASKER (one whose
// agent asked a question), SET (one whose settings the page edits), BUSY
// (one whose session runs on).
import { axe, drive, everywhere, go } from "./driver.mjs";

const { HUB_URL, HUB_TOKEN, SHOTS, CRASH, ASKER, SET, BUSY } = process.env;
const WIDTHS = { desktop: 1280, phone: 360 };

// Badges and times that wrap onto a second line (a word cut in two).
const wrapped = () => [...document.querySelectorAll(".badge, time")].filter((e) => {
  if (e.tagName === "TIME") return e.getClientRects().length > 1;
  const line = parseFloat(getComputedStyle(e).fontSize) * 1.9;
  return e.getBoundingClientRect().height > line;
}).map((e) => e.textContent);

// How far each checkbox's label starts from its box, in px.
const checkGaps = (sel) => [...document.querySelectorAll(sel)].map((box) => {
  const label = box.closest("label") || document.querySelector(`label[for="${box.id}"]`);
  const range = document.createRange();
  const text = [...label.childNodes].find((n) => n.nodeType === 3 && n.textContent.trim());
  range.selectNodeContents(text);
  return Math.round(range.getBoundingClientRect().left - box.getBoundingClientRect().right);
});

await drive(async (browser, out) => {
  out.axe = {};
  for (const [wide, width] of Object.entries(WIDTHS)) {
    const ctx = await browser.newContext({ viewport: { width, height: 800 }, bypassCSP: true });
    const page = await ctx.newPage();
    const seen = (out[wide] = {});
    await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
    await page.waitForSelector(`#chambers tr[data-chamber="${CRASH}"]`, { timeout: 10000 });
    // The list: a failing chamber says so, a question is counted and named.
    await page.waitForFunction((c) => document.querySelector(`#chambers tr[data-chamber="${c}"] [data-failing]`), CRASH, { timeout: 20000 });
    seen.crash_badge = await page.textContent(`#chambers tr[data-chamber="${CRASH}"] [data-failing]`);
    seen.crash_badge_colour = await page.$eval(`#chambers tr[data-chamber="${CRASH}"] [data-failing]`, (e) => getComputedStyle(e).backgroundColor);
    await page.waitForFunction((c) => document.querySelector(`#chambers tr[data-chamber="${c}"] [data-questions]`), ASKER, { timeout: 20000 });
    seen.questions = await page.textContent(`#chambers tr[data-chamber="${ASKER}"] [data-questions]`);
    seen.list_wrapped = await page.evaluate(wrapped);
    seen.list_times_have_exact = await page.$$eval("#chambers time", (ts) => ts.length > 0 && ts.every((t) => t.title && t.dateTime));
    await page.waitForSelector("#fleet-timeline", { timeout: 10000 });
    seen.fleet_legend = await page.$$eval("#list-page .legend li", (l) => l.length);
    seen.last_label_inside = await page.$eval("#fleet-timeline", (svg) => {
      const labels = [...svg.querySelectorAll("text.axis:not(.name)")];
      const last = labels[labels.length - 1];
      return { text: last.textContent, inside: last.getBBox().x + last.getBBox().width <= svg.viewBox.baseVal.width };
    });
    // Needs you: the failure and the question, with its text and a reply box.
    await page.waitForSelector(`#needs-all [data-needs="${CRASH}"]`, { timeout: 10000 });
    seen.needs_all = await page.$$eval("#needs-all [data-needs]", (l) => l.map((e) => e.dataset.needs));
    await page.waitForFunction((c) => document.querySelector(`[data-question="${c}"] .md`)?.textContent.includes("branch"), ASKER, { timeout: 10000 });
    seen.question_text = (await page.textContent(`[data-question="${ASKER}"] .md`)).trim();
    // Search and the state filter.
    const rows = () => page.$$eval("#chambers tbody tr", (r) => r.map((e) => e.dataset.chamber));
    await page.keyboard.press("/");
    seen.slash_focuses = await page.evaluate(() => document.activeElement?.id);
    await page.keyboard.type(ASKER.slice(0, 3));
    seen.searched = await rows();
    await page.fill("#filter", "");
    await page.selectOption("#state-filter", "needs");
    seen.needing = await rows();
    await page.selectOption("#state-filter", "");
    await page.locator("body").focus();
    await page.screenshot({ path: `${SHOTS}/console-list-${wide}.png`, fullPage: true });
    await axe(page, "list-" + wide, out);
    // The shortcuts overlay.
    await page.evaluate(() => document.activeElement?.blur());
    await page.keyboard.press("?");
    await page.waitForSelector("#keys[open]", { timeout: 5000 });
    seen.shortcuts = await page.$$eval("#keys dt", (l) => l.map((e) => e.textContent));
    await axe(page, "shortcuts-" + wide, out);
    await page.keyboard.press("Escape");
    await page.waitForFunction(() => !document.getElementById("keys"), null, { timeout: 5000 });
    if (wide === "desktop") {
      // Answering from the list is one step.
      await page.fill(`#reply-${ASKER}`, "Use main, from the list");
      await page.click(`[data-question="${ASKER}"] button[type=submit]`);
      await page.waitForFunction(() => [...document.querySelectorAll(".toast")].some((t) => t.textContent.startsWith("Answer sent")), null, { timeout: 10000 });
      seen.answered = await page.$$eval(".toast", (l) => l.map((t) => t.textContent).find((t) => t.startsWith("Answer sent")));
    }

    // A crashed chamber's page: what needs the person first, then the conversation.
    await go(page, CRASH);
    await page.waitForSelector("#needs [data-need]", { timeout: 10000 });
    seen.needs = await page.textContent("#needs");
    // The conversation is the centre: first on a phone, the widest column
    // on a desktop with the tabs beside it.
    seen.layout = await page.evaluate(() => {
      const box = (sel) => { const r = document.querySelector(sel).getBoundingClientRect(); return { top: Math.round(r.top + scrollY), left: Math.round(r.left), width: Math.round(r.width) }; };
      return { needs: box("#needs"), conversation: box("#h-conv"), tabs: box("[role=tablist]"), centre: box(".centre"), side: box(".side") };
    });
    // Status opens first: the last days as small bars, the crash in red.
    seen.tab_open = await page.$eval("[role=tab][aria-selected=true]", (t) => t.id);
    seen.day_bars = await page.$$eval("#days ol.bars li", (l) => ({ days: l.length, bad: l.filter((d) => d.querySelector(".seg.bad")).length, said: document.querySelector("#days p").textContent }));
    await page.screenshot({ path: `${SHOTS}/console-chamber-${wide}.png`, fullPage: true });
    // The tabs answer the arrow keys.
    await page.focus("#tab-status");
    await page.keyboard.press("ArrowRight");
    seen.arrow_tab = await page.evaluate(() => ({ focused: document.activeElement.id, shown: [...document.querySelectorAll("[role=tabpanel]")].filter((p) => !p.hidden).map((p) => p.id) }));
    // End, Home, and the left arrow wrapping round from the first.
    seen.keys_tab = [];
    for (const key of ["End", "Home", "ArrowLeft", "ArrowRight"]) {
      await page.keyboard.press(key);
      seen.keys_tab.push(await page.evaluate(() => document.activeElement.id));
    }
    await page.click("#tab-runs");
    seen.runs = await page.$$eval("#sessions table.runs tbody tr", (rows) => rows.map((r) => ({
      status: r.querySelector(".run").textContent.trim(), kind: r.querySelector(".run").className, started: r.querySelector("time")?.title || "",
    })));
    // A run's own lines: its cryo.log block and its transcript.
    await page.click('#sessions tr[data-session="1"] button');
    await page.waitForSelector('#sessions tr[data-detail="1"] pre', { timeout: 10000 });
    seen.run_detail = await page.$$eval('#sessions tr[data-detail="1"] pre', (l) => l.map((p) => p.textContent));
    seen.chamber_legend = await page.$$eval("#timeline-box + .legend li", (l) => l.length);
    seen.chamber_wrapped = await page.evaluate(wrapped);
    seen.phone_overflow = await page.evaluate(() => document.documentElement.scrollWidth > innerWidth + 1);
    await page.screenshot({ path: `${SHOTS}/console-crash-${wide}.png`, fullPage: true });
    await axe(page, "crash-" + wide, out);
    // Every tab's panel, axe-clean.
    seen.tabs = await page.$$eval("[role=tab]", (l) => l.map((t) => t.id.slice(4)));
    for (const tab of seen.tabs) {
      await page.click("#tab-" + tab);
      await axe(page, "tab-" + tab + "-" + wide, out);
    }
    await page.click("#tab-runs");

    // A bad TODO time, sent from far down the page: the error is where the user is.
    await page.click("#tab-todos");
    await page.evaluate(() => document.getElementById("todo-add").scrollIntoView());
    await page.evaluate(() => scrollTo(0, document.body.scrollHeight));
    await page.fill("#todo-text", "from the console");
    await page.fill("#todo-at", "whenever it suits");
    await page.click("#todo-add");
    await page.waitForSelector(".toast.bad", { timeout: 10000 });
    seen.todo_error = await page.$eval(".toast.bad", (t) => {
      const r = t.getBoundingClientRect();
      return { text: t.textContent, visible: r.top >= 0 && r.bottom <= innerHeight && r.width > 0 };
    });
    // Saving the plan says so.
    await page.click("#tab-plan");
    await page.fill("#plan-text", "# Plan\n\nfrom the console, " + wide + "\n");
    await page.click("#plan-save");
    await page.waitForFunction(() => [...document.querySelectorAll(".toast")].some((t) => t.textContent.includes("Plan saved")), null, { timeout: 10000 });
    seen.plan_saved = true;

    // Settings: a bad number is shown beside its field and nothing is sent.
    // (First the page a question's notification opens: the cursor in the reply box.)
    await page.goto(HUB_URL + "#/c/" + ASKER + "/answer");
    await page.waitForFunction(() => document.activeElement?.id === "send-text", null, { timeout: 20000 });
    seen.answer_focus = true;
    await go(page, ASKER);
    await page.waitForSelector("#needs [data-need=questions]", { timeout: 10000 });
    seen.asker_needs = await page.textContent("#needs");
    await page.screenshot({ path: `${SHOTS}/console-question-${wide}.png`, fullPage: true });
    await axe(page, "question-" + wide, out);
    // A session running now: its run says so, with the time it has taken.
    await go(page, BUSY);
    await page.click("#tab-runs");
    await page.waitForSelector("#sessions .run-running", { timeout: 20000 });
    seen.running = await page.textContent("#sessions .run-running");
    await page.screenshot({ path: `${SHOTS}/console-running-${wide}.png`, fullPage: true });
    await axe(page, "running-" + wide, out);
    await go(page, SET);
    await page.click("#tab-settings");
    const puts = [];
    page.on("request", (r) => { if (r.method() === "PUT" && r.url().endsWith("/settings")) puts.push(r.url()); });
    await page.fill("#set-max_attempts", "ten minutes");
    await page.click("#settings-save");
    await page.waitForFunction(() => document.getElementById("set-max_attempts-error").textContent.length > 0, null, { timeout: 5000 });
    seen.settings_error = {
      text: await page.textContent("#set-max_attempts-error"),
      invalid: await page.getAttribute("#set-max_attempts", "aria-invalid"),
      status: await page.textContent("#settings-saved"),
      focused: await page.evaluate(() => document.activeElement?.id),
      puts: puts.length,
    };
    await page.fill("#set-max_attempts", "");
    // One cryod refuses (over its limit): its line beside the field too.
    seen.guarded = await page.$$eval(".field[data-accept=yes] [data-key]", (l) => l.map((e) => e.dataset.key));
    await page.fill("#set-max_attempts", "101");
    await page.click("#settings-save");
    await page.waitForFunction(() => document.getElementById("set-max_attempts-error").textContent.includes("limit"), null, { timeout: 5000 });
    seen.server_error = await page.textContent("#set-max_attempts-error");
    // Two refused at once: both marked, each line once, no toast, no path.
    await page.fill("#set-timezone", "Mars/Olympus");
    await page.click("#settings-save");
    await page.waitForFunction(() => document.getElementById("set-timezone-error").textContent.length > 0, null, { timeout: 5000 });
    seen.two_bad = {
      attempts: await page.textContent("#set-max_attempts-error"),
      timezone: await page.textContent("#set-timezone-error"),
      invalid: await page.$$eval("#settings [aria-invalid=true]", (l) => l.map((e) => e.dataset.key)),
      status: await page.textContent("#settings-saved"),
      toasts: await page.$$eval(".toast.bad", (t) => t.length),
      page_error: await page.textContent("#error"),
    };
    await page.fill("#set-timezone", "");
    await page.evaluate(() => document.getElementById("settings").scrollIntoView());
    await page.screenshot({ path: `${SHOTS}/console-settings-error-${wide}.png` });
    await axe(page, "settings-error-" + wide, out);
    if (wide === "desktop") await everywhere(page, "settings_error", out);
    if (wide === "desktop") {
      // Then a good one, and a removed key: saved, and said which.
      await page.fill("#set-max_attempts", "4");
      await page.fill("#set-max_session_duration", "");
      await page.click("#settings-save");
      await page.waitForFunction(() => document.getElementById("settings-saved").textContent.startsWith("Saved"), null, { timeout: 10000 });
      seen.settings_saved = await page.textContent("#settings-saved");
    }

    // Checkboxes sit beside their labels.
    await page.goto(HUB_URL + "#/new");
    await page.waitForSelector("#new-start");
    seen.new_check_gap = await page.evaluate(checkGaps, "#new-start");
    await axe(page, "new-" + wide, out);
    await page.goto(HUB_URL + "#/share");
    await page.waitForSelector(".invite-chamber");
    seen.share_check_gaps = await page.evaluate(checkGaps, ".invite-chamber");
    await axe(page, "share-" + wide, out);
    await ctx.close();
  }
  // The page as the policy cryod sends has it (the contexts above bypass
  // it, to add axe's script): nothing refused, the crash's bar drawn.
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  const refused = [];
  page.on("console", (m) => { if (m.type() === "error") refused.push(m.text()); });
  page.on("pageerror", (e) => refused.push(String(e)));
  await page.goto(HUB_URL + "#token=" + HUB_TOKEN);
  await page.waitForSelector(`#chambers tr[data-chamber="${CRASH}"]`, { timeout: 10000 });
  await go(page, CRASH);
  await page.click("#tab-status");
  await page.waitForSelector("#days .seg.bad", { timeout: 10000 });
  out.csp = { refused, bad_bar_px: await page.$eval("#days .seg.bad", (e) => Math.round(e.getBoundingClientRect().height)) };
  await ctx.close();
});
