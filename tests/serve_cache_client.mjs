// serve_cache_client.mjs - the client half of tests/test_serve_cache.sh: the prompt cache of
// `nextn serve`.  Two servers run the same model: CACHED (prompt cache on) and PLAIN
// (--no-cache-prompt).  The same request sequence goes to both; every answer must be identical,
// and the cached server must report the prompt tokens it reused (timings.cache_n,
// usage.prompt_tokens_details.cached_tokens).
//   node serve_cache_client.mjs CACHED_URL PLAIN_URL MODE     (MODE: plain | spec)
// Prints "ok: ..." / "FAIL: ..." per check and "ratio: ..." lines (prompt time of a cached
// request / the uncached first one: logged, not asserted); exits 1 if any check failed.
const [cached, plain, mode] = process.argv.slice(2);
let failed = 0;
function check(name, cond, detail) {
  if (cond) console.log(`ok: ${name}`);
  else { console.log(`FAIL: ${name}${detail !== undefined ? " -- " + JSON.stringify(detail).slice(0, 600) : ""}`); failed = 1; }
}
async function post(base, path, body) {
  const r = await fetch(base + path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { }
  if (r.status !== 200) throw new Error(`${path}: ${r.status} ${text}`);
  return json;
}
const textOf = (j) => j.choices[0].message ? j.choices[0].message.content + "|" + (j.choices[0].message.reasoning_content ?? "") : j.choices[0].text;

// deterministic token ids (the demo model's vocabulary has 4096 tokens; ids below 3000 are
// ordinary byte-level tokens)
function ids(n, seed) {
  const a = [];
  let x = seed >>> 0;
  for (let i = 0; i < n; i++) { x = (x * 1103515245 + 12345) >>> 0; a.push(100 + ((x >>> 8) % 2800)); }
  return a;
}

// Sends body to both servers (cached first), checks the answers are equal, returns the cached one.
async function both(name, path, body) {
  const c = await post(cached, path, body);
  const p = await post(plain, path, body);
  check(`${name}: same answer with and without the cache`, textOf(c) === textOf(p), { cached: textOf(c), plain: textOf(p) });
  check(`${name}: the uncached server reuses nothing`, p.timings.cache_n === 0 && p.usage.prompt_tokens_details.cached_tokens === 0, p.timings);
  check(`${name}: usage.prompt_tokens_details.cached_tokens == timings.cache_n`, c.usage.prompt_tokens_details.cached_tokens === c.timings.cache_n, c.usage);
  check(`${name}: prompt_n + cache_n == prompt tokens`, c.timings.prompt_n + c.timings.cache_n === c.usage.prompt_tokens, c.timings);
  return c;
}

const greedy = { temperature: 0 };
const sampled = { temperature: 0.8, seed: 11, top_k: 40 };

// 1. multi-turn chat: each turn's prompt holds the previous turns
for (const [label, smp] of [["greedy", greedy], ["sampled", sampled]]) {
  const msgs = [{ role: "system", content: "You answer briefly." }, { role: "user", content: "Who made the earth?" }];
  let prevPrompt = 0;
  for (let turn = 1; turn <= 3; turn++) {
    const r = await both(`chat ${label} turn ${turn}`, "/v1/chat/completions",
      { messages: msgs, max_tokens: 12, chat_template_kwargs: { enable_thinking: false }, ...smp });
    // up to the previous prompt's last <|im_start|>: history renders the reply without the
    // generation prompt's think block (on the demo vocabulary that prompt is ~15 tokens)
    if (turn > 1) check(`chat ${label} turn ${turn}: reuses the previous turns`, r.timings.cache_n >= prevPrompt - 20, { cache_n: r.timings.cache_n, prevPrompt });
    prevPrompt = r.usage.prompt_tokens;
    msgs.push({ role: "assistant", content: r.choices[0].message.content });
    msgs.push({ role: "user", content: ["And then?", "Why?", "Thanks."][turn - 1] });
  }
}

// 2. completions: the same prompt twice (regenerate), a prompt that diverges in the middle (a
// checkpoint restored), a request that opts out, a prompt extending the last one
const base = ids(300, 7);
let r = await both("completion A", "/v1/completions", { prompt: base, max_tokens: 8, ...greedy });
r = await both("completion A again", "/v1/completions", { prompt: base, max_tokens: 8, ...greedy });
check("completion A again: all but the last prompt token reused", r.timings.cache_n === base.length - 1, r.timings);
const diverge = base.slice(0, 200).concat(ids(40, 9));
r = await both("completion diverging at 200", "/v1/completions", { prompt: diverge, max_tokens: 8, ...sampled });
check("completion diverging at 200: a checkpoint at or before 200 restored (every 64)", r.timings.cache_n === 192, r.timings);
r = await both("completion extending the last", "/v1/completions", { prompt: diverge.concat(ids(30, 10)), max_tokens: 8, ...greedy });
check("completion extending the last: reuses its prompt", r.timings.cache_n >= diverge.length - 1, r.timings);
r = await both("completion diverging, cache_prompt false", "/v1/completions", { prompt: diverge, max_tokens: 8, cache_prompt: false, ...greedy });
check("cache_prompt: false reuses nothing", r.timings.cache_n === 0, r.timings);
const fresh = ids(120, 12);
await both("a new prompt, cache_prompt false", "/v1/completions", { prompt: fresh, max_tokens: 8, cache_prompt: false, ...greedy });
r = await both("the same prompt cached", "/v1/completions", { prompt: fresh, max_tokens: 8, ...greedy });
check("a request that opted out left nothing behind", r.timings.cache_n === 0, r.timings);

// 3. two slots: each request goes to the slot holding its prefix
const p1 = ids(200, 21), p2 = ids(200, 22);
await both("slot X", "/v1/completions", { prompt: p1, max_tokens: 4, ...greedy });
await both("slot Y", "/v1/completions", { prompt: p2, max_tokens: 4, ...greedy });
r = await both("back to X", "/v1/completions", { prompt: p1.concat(ids(20, 23)), max_tokens: 4, ...greedy });
check("back to X: the slot holding X's prefix is chosen", r.timings.cache_n >= 199, r.timings);
r = await both("back to Y", "/v1/completions", { prompt: p2.concat(ids(20, 24)), max_tokens: 4, ...greedy });
check("back to Y: the slot holding Y's prefix is chosen", r.timings.cache_n >= 199, r.timings);

// 4. a 3,512-token prefix: three requests (different questions after the same document), then a
// conversation continuing the last answer; prompt time relative to the first (logged)
const doc = ids(3512, 31);
const t = [];
for (let k = 0; k < 3; k++) {
  r = await both(`long prefix request ${k + 1}`, "/v1/completions", { prompt: doc.concat(ids(16, 40 + k)), max_tokens: 6, ...greedy });
  t.push(r.timings);
}
check("long prefix: the 2nd and 3rd reuse >= 3,456 of the 3,512 shared tokens", t[1].cache_n >= 3456 && t[2].cache_n >= 3456, t);
for (let k = 1; k < 3; k++)
  console.log(`ratio: ${mode} long prefix request ${k + 1}: prompt ${t[k].prompt_ms.toFixed(1)} ms / first ${t[0].prompt_ms.toFixed(1)} ms = ${(t[k].prompt_ms / t[0].prompt_ms).toFixed(3)} (decoded ${t[k].prompt_n}, reused ${t[k].cache_n})`);

process.exit(failed);
