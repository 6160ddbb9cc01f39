// drive.mjs BASE_URL SCREENSHOT.png - drives nextn's chat page in headless Chromium (Debian's
// /usr/bin/chromium through playwright-core) the way a person would, and checks what it shows
// against the API's own answers for the same requests:
//   1. types a message (thinking off, temperature 0), waits for the streamed answer, and compares
//      the text on the page with a non-streamed /v1/chat/completions call with the same body;
//   2. a second turn with thinking on: the whole conversation goes to the server (compared the
//      same way), the reasoning is shown in a folded <details>, not in the answer;
//   3. reloads the page: the conversation is still there (localStorage);
//   4. the stats line shows tokens/s; writes a screenshot.
// Exits non-zero with a message on the first mismatch.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";

const [base, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"],
});
const fail = async (msg) => { console.error("webui: " + msg); await browser.close(); process.exit(1); };
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 720 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(base + "/");
  await page.waitForFunction(() => document.getElementById("model").textContent !== "connecting…");
  assert.ok((await page.textContent("#model")).length > 0, "model name shown");

  await page.click("#toggle-settings");
  await page.fill("#temperature", "0");
  await page.fill("#max-tokens", "24");
  await page.uncheck("#thinking");
  await page.fill("#system", "You are terse.");
  await page.dispatchEvent("#system", "change");

  const api = async (body) => {
    const r = await fetch(base + "/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" },
                                                           body: JSON.stringify({ ...body, stream: false }) });
    assert.equal(r.status, 200, "API status");
    return (await r.json()).choices[0].message;
  };
  const turn = async (text, n) => {
    await page.fill("#input", text);
    await page.press("#input", "Enter");
    await page.waitForSelector(`.msg.assistant:nth-of-type(${2 * n}) >> xpath=.`, { state: "attached" });
    await page.waitForFunction((k) => {
      const a = document.querySelectorAll(".msg.assistant");
      return a.length >= k && ["done", "error"].includes(a[k - 1].dataset.state);
    }, n, { timeout: 60000 });
    const a = (await page.$$(".msg.assistant"))[n - 1];
    assert.equal(await a.getAttribute("data-state"), "done", "turn " + n + " finished without error");
    return a;
  };

  // turn 1: thinking off
  const a1 = await turn("Tell me about the package manager.", 1);
  const shown1 = await a1.$eval(".content", (e) => e.textContent);
  const body1 = await page.evaluate(() => {
    const st = JSON.parse(localStorage.getItem("nextn.webui.v1"));
    return window.nextnRequestBody(st.messages.slice(0, -1), st.settings);
  });
  assert.equal(body1.messages[0].role, "system");
  const ref1 = await api(body1);
  assert.ok(shown1.length > 0, "turn 1 shows text");
  assert.equal(shown1, ref1.content, "turn 1: page text == API answer");
  assert.ok(await a1.$eval("details", (e) => e.hidden), "turn 1: no reasoning block with thinking off");

  // turn 2: thinking on, whole conversation sent
  await page.check("#thinking");
  await page.dispatchEvent("#thinking", "change");
  const a2 = await turn("And the second one?", 2);
  const body2 = await page.evaluate(() => {
    const st = JSON.parse(localStorage.getItem("nextn.webui.v1"));
    return window.nextnRequestBody(st.messages.slice(0, -1), st.settings);
  });
  assert.equal(body2.messages.filter((m) => m.role === "user").length, 2, "turn 2 sends the history");
  const ref2 = await api(body2);
  const shown2 = await a2.$eval(".content", (e) => e.textContent);
  const reasoning2 = await a2.$eval(".reasoning", (e) => e.textContent);
  assert.equal(shown2, ref2.content || "", "turn 2: page answer == API content");
  assert.equal(reasoning2, ref2.reasoning_content || "", "turn 2: page reasoning == API reasoning_content");
  if (reasoning2) {
    assert.equal(await a2.$eval("details", (e) => e.hidden), false, "reasoning block shown");
    assert.equal(await a2.$eval("details", (e) => e.open), false, "reasoning folded when done");
  }
  const stats = await a2.$eval(".stats", (e) => e.textContent);
  assert.match(stats, /tokens\/s/, "stats line has tokens/s");

  // reload: the conversation is kept in the browser
  await page.reload();
  await page.waitForSelector(".msg.assistant");
  assert.equal((await page.$$(".msg")).length, 4, "4 messages after reload");
  assert.equal(await page.$eval(".msg.assistant .content", (e) => e.textContent), shown1, "turn 1 kept");
  if (shot) await page.screenshot({ path: shot, fullPage: false });
  if (errors.length) await fail("page errors: " + errors.join("; "));
  console.log(`webui: ok (turn 1 ${shown1.length} chars, turn 2 ${shown2.length}+${reasoning2.length} chars; ${stats})`);
} catch (e) {
  await fail(e.stack || String(e));
}
await browser.close();
