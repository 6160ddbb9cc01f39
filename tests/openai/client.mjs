// client.mjs - the official OpenAI Node client against a running `nextn serve` (started by
// tests/test_serve_openai.sh with --api-key secret --alias demo -np 2): every call a client makes
// parses, the answers equal `nextn run`'s (EXPECT.json, made by the shell test), errors map to the
// client's error classes, and /metrics, /tokenize, /detokenize, /props agree with what was sent.
//   node client.mjs BASE_URL EXPECT.json
import OpenAI from "openai";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const [base, expectFile] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectFile, "utf8"));
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "secret", maxRetries: 0 });
const model = "demo";
let failed = 0;
async function check(name, fn) {
  try { await fn(); console.log(`ok: ${name}`); }
  catch (e) { console.log(`FAIL: ${name} -- ${String(e?.stack ?? e).slice(0, 800)}`); failed = 1; }
}
const auth = { Authorization: "Bearer secret", "Content-Type": "application/json" };
const usage = { prompt: 0, completion: 0, requests: 0 }; // of every completion answered below
const count = (u) => { usage.prompt += u.prompt_tokens - (u.prompt_tokens_details?.cached_tokens ?? 0); usage.completion += u.completion_tokens; usage.requests++; };

await check("models.list / models.retrieve", async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), ["demo"]);
  const m = await client.models.retrieve("demo");
  assert.equal(m.id, "demo");
  assert.equal(m.object, "model");
  await assert.rejects(client.models.retrieve("gpt-4"), (e) => e instanceof OpenAI.NotFoundError);
});

const c = want.completion;
await check("completions.create: greedy text equals nextn run", async () => {
  const r = await client.completions.create({ model, prompt: c.prompt, max_tokens: c.n, temperature: 0, ignore_eos: true });
  assert.equal(r.choices[0].text, c.text);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, c.n);
  count(r.usage);
});

await check("completions.create stream: the pieces add up to the same text, usage at the end", async () => {
  const s = await client.completions.create({ model, prompt: c.prompt, max_tokens: c.n, temperature: 0, ignore_eos: true,
    stream: true, stream_options: { include_usage: true } });
  let text = "", u = null, finish = null;
  for await (const ch of s) {
    if (ch.choices?.length) { text += ch.choices[0].text; finish = ch.choices[0].finish_reason ?? finish; }
    if (ch.usage) u = ch.usage;
  }
  assert.equal(text, c.text);
  assert.equal(finish, "length");
  assert.equal(u.completion_tokens, c.n);
  count(u);
});

const h = want.chat;
// The demo model's own template has no <think> (chat_format chatml-plain): its replies are all
// content and carry no reasoning_content; a thinking template's open inside <think>.
const thinks = (await (await fetch(base + "/props", { headers: auth })).json()).nextn?.chat_format === "chatml";
const split = (t) => { if (!thinks) return { r: undefined, c: t }; const i = t.indexOf("</think>"); return i < 0 ? { r: t, c: "" } : { r: t.slice(0, i).replace(/[ \n]+$/, ""), c: t.slice(i + 8).replace(/^\n+/, "") }; };
await check("chat.completions.create: equals nextn run --chat (reasoning_content apart)", async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: h.user }], max_tokens: h.n,
    temperature: 0, ignore_eos: true });
  const e = split(h.text);
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.reasoning_content, e.r);
  assert.equal(r.choices[0].message.content, e.c);
  count(r.usage);
});

await check("chat.completions.stream: role first, deltas add up (ChatCompletionStream)", async () => {
  const s = client.chat.completions.stream({ model, messages: [{ role: "user", content: h.user }], max_tokens: h.n,
    temperature: 0, ignore_eos: true, stream_options: { include_usage: true } });
  let reasoning = "";
  s.on("chunk", (ch) => { reasoning += ch.choices[0]?.delta?.reasoning_content ?? ""; });
  const fin = await s.finalChatCompletion();
  const e = split(h.text);
  assert.equal(fin.choices[0].message.role, "assistant");
  assert.equal(fin.choices[0].message.content ?? "", e.c);
  assert.equal(reasoning.replace(/[ \n]+$/, ""), e.r ?? "");
  count(fin.usage);
});

await check("errors: AuthenticationError, BadRequestError naming the parameter; a placeholder model name is served", async () => {
  const bad = new OpenAI({ baseURL: base + "/v1", apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(bad.completions.create({ model, prompt: "x", max_tokens: 1 }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  const listed = await bad.models.list(); // public, as llama-server's (serve --models-need-key guards it)
  assert.equal(listed.data[0].id, model);
  await assert.rejects(client.completions.create({ model, prompt: "x", echo: true }),
    (e) => e instanceof OpenAI.BadRequestError && /'echo'/.test(e.message));
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], response_format: { type: "json_object" } }),
    (e) => e instanceof OpenAI.BadRequestError && /'response_format'/.test(e.message));
  const other = await client.completions.create({ model: "gpt-4o", prompt: "x", max_tokens: 1 });
  assert.equal(other.model, model); // the one model answers, under its own name
  count(other.usage);
  await assert.rejects(client.completions.create({ model, prompt: "x", seed: 1.5 }),
    (e) => e instanceof OpenAI.BadRequestError && /'seed'/.test(e.message));
});

await check("POST /tokenize, /detokenize: the ids of nextn tokenize, and back", async () => {
  let r = await fetch(base + "/tokenize", { method: "POST", headers: auth, body: JSON.stringify({ content: c.prompt }) });
  const t = await r.json();
  assert.deepEqual(t.tokens, c.ids);
  r = await fetch(base + "/tokenize", { method: "POST", headers: auth, body: JSON.stringify({ content: c.prompt, with_pieces: true }) });
  const p = await r.json();
  assert.deepEqual(p.tokens.map((x) => x.id), c.ids);
  assert.equal(p.tokens.map((x) => x.piece).join(""), c.prompt);
  r = await fetch(base + "/detokenize", { method: "POST", headers: auth, body: JSON.stringify({ tokens: c.ids }) });
  assert.equal((await r.json()).content, c.prompt);
});

await check("GET /props: slots, context, defaults", async () => {
  const r = await fetch(base + "/props", { headers: auth });
  const p = await r.json();
  assert.equal(p.total_slots, 2);
  assert.equal(p.default_generation_settings.n_ctx, 512);
  assert.equal(p.model_alias, "demo");
  assert.equal(p.default_generation_settings.speculative, false);
  assert.equal(typeof p.default_generation_settings.params.temperature, "number");
});

// every completion above has left its slot by now (or does within a moment): the totals must
// equal the sums of the usage the client saw
await check("GET /metrics: Prometheus text whose totals equal the usage the client received", async () => {
  let text = "", m = {};
  for (let i = 0; i < 40; i++) {
    const r = await fetch(base + "/metrics", { headers: auth });
    assert.match(r.headers.get("content-type"), /^text\/plain/);
    text = await r.text();
    m = {};
    for (const l of text.split("\n")) { const x = l.match(/^(nextn:[a-z_]+(\{[^}]*\})?) (\S+)$/); if (x) m[x[1]] = Number(x[3]); }
    if (m["nextn:tokens_predicted_total"] === usage.completion) break;
    await new Promise((res) => setTimeout(res, 50));
  }
  assert.equal(m["nextn:tokens_predicted_total"], usage.completion);
  assert.equal(m["nextn:prompt_tokens_total"], usage.prompt);
  assert.equal(m['nextn:requests_total{endpoint="/v1/completions",status="200"}'], 3);
  assert.equal(m['nextn:requests_total{endpoint="/v1/chat/completions",status="200"}'], 2);
  assert.equal(m['nextn:requests_total{endpoint="/v1/completions",status="400"}'], 2);
  assert.equal(m['nextn:requests_total{endpoint="/v1/completions",status="404"}'], undefined);
  assert.equal(m['nextn:requests_total{endpoint="/v1/completions",status="401"}'], 1);
  assert.equal(m['nextn:requests_total{endpoint="/v1/models",status="401"}'], undefined);
  assert.equal(m["nextn:slots_total"], 2);
  assert.equal(m["nextn:requests_processing"], 0);
  assert.equal(m["nextn:requests_deferred"], 0);
  assert.ok(m["nextn:prompt_seconds_total"] > 0 && m["nextn:tokens_predicted_seconds_total"] > 0);
  for (const name of ["requests_total", "prompt_tokens_total", "tokens_predicted_total", "prompt_cache_hits_total", "requests_processing"])
    assert.match(text, new RegExp(`^# TYPE nextn:${name} (counter|gauge)$`, "m"));
});

process.exit(failed);
