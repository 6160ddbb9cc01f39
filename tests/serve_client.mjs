// serve_client.mjs - the HTTP client half of tests/test_serve.sh: talks to a running
// `nextn serve` with Node's built-in fetch (a real HTTP/1.1 client, streaming included) and
// checks its answers against what `nextn run` produced for the same requests.
//   node serve_client.mjs BASE_URL API_KEY EXPECT.json MODE      (MODE: full | spec)
// Prints "ok: ..." / "FAIL: ..." per check; exits 1 if any check failed.
import { readFileSync } from "node:fs";

const [base, key, expectFile, mode] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectFile, "utf8"));
let failed = 0;
function check(name, cond, detail) {
  if (cond) console.log(`ok: ${name}`);
  else { console.log(`FAIL: ${name}${detail !== undefined ? " -- " + JSON.stringify(detail).slice(0, 400) : ""}`); failed = 1; }
}
const auth = { Authorization: `Bearer ${key}`, "Content-Type": "application/json" };
async function post(path, body, headers = auth) {
  const r = await fetch(base + path, { method: "POST", headers, body: typeof body === "string" ? body : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { }
  return { status: r.status, json, text };
}
// Reads a server-sent-event stream: the list of "data:" payloads (parsed, except [DONE]).
async function stream(path, body) {
  const r = await fetch(base + path, { method: "POST", headers: auth, body: JSON.stringify({ ...body, stream: true }) });
  const events = [];
  let buf = "";
  const dec = new TextDecoder();
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith("data: ")) continue;
      const d = ev.slice(6);
      events.push(d === "[DONE]" ? d : JSON.parse(d));
    }
  }
  return { status: r.status, type: r.headers.get("content-type"), events };
}
const textOf = (evs) => evs.filter((e) => e !== "[DONE]" && e.choices?.length).map((e) => e.choices[0].text ?? "").join("");
const finishOf = (evs) => evs.filter((e) => e !== "[DONE]" && e.choices?.length && e.choices[0].finish_reason).map((e) => e.choices[0].finish_reason);
const greedy = (p) => ({ prompt: p.prompt, max_tokens: p.n, temperature: 0, ignore_eos: true });

const p0 = want.prompts[0];

if (mode === "spec") {
  // speculative server: greedy output identical to plain `nextn run`, one and several at once
  const r = await post("/v1/completions", greedy(p0));
  check("spec: greedy completion equals nextn run", r.status === 200 && r.json.choices[0].text === p0.text, r.json);
  // six greedy requests and a seeded sampled one on three slots: one shared verify batch per step
  const sampled = { prompt: p0.prompt, max_tokens: want.spec_sampled.n, temperature: 1, seed: 5, ignore_eos: true };
  const [smp, ...all] = await Promise.all([post("/v1/completions", sampled),
    ...want.prompts.map((p, i) => i % 2 ? stream("/v1/completions", greedy(p)) : post("/v1/completions", greedy(p)))]);
  check("spec: concurrent greedy requests (streamed and not) equal nextn run",
    all.every((a, i) => (a.events ? textOf(a.events) : a.json?.choices[0].text) === want.prompts[i].text),
    all.map((a) => (a.events ? textOf(a.events) : a.json?.choices[0].text)));
  check("spec: a seeded sampled request among them equals nextn run --spec mtp alone",
    smp.status === 200 && smp.json.choices[0].text === want.spec_sampled.text, [smp.json, want.spec_sampled.text]);
  // per-request draft counts (llama-server's timings.draft_n / draft_n_accepted), and /metrics
  // totals that are their sums
  const timings = [r.json.timings, smp.json.timings,
    ...all.map((a) => (a.events ? a.events.filter((e) => e !== "[DONE]" && e.timings).at(-1)?.timings : a.json?.timings))];
  // The adaptive cost model decides from measured step costs, so under load a short request may
  // stay plain throughout (llama-server then omits the fields too): 0 drafts is allowed per
  // request, not for all of them (tests/openai/choices.mjs checks exact counts with fixed drafts).
  const dn = (t) => t?.draft_n ?? 0, da = (t) => t?.draft_n_accepted ?? 0;
  check("spec: 0 <= timings.draft_n_accepted <= draft_n for every request, and drafts in some",
    timings.every((t) => t && dn(t) >= 0 && da(t) >= 0 && da(t) <= dn(t)) && timings.some((t) => dn(t) > 0), timings);
  const sum = (k) => timings.reduce((a, t) => a + (t?.[k] ?? 0), 0);
  let m = {};
  for (let i = 0; i < 40; i++) {
    const text = await (await fetch(base + "/metrics", { headers: auth })).text();
    m = Object.fromEntries(text.split("\n").filter((l) => l.startsWith("nextn:spec")).map((l) => l.split(" ")).map(([k, v]) => [k, Number(v)]));
    if (m["nextn:spec_decode_num_draft_tokens_total"] === sum("draft_n")) break;
    await new Promise((res) => setTimeout(res, 50));
  }
  check("spec: /metrics draft and accepted totals are the sums of the requests' timings",
    m["nextn:spec_decode_num_draft_tokens_total"] === sum("draft_n") &&
    m["nextn:spec_decode_num_accepted_tokens_total"] === sum("draft_n_accepted"), [m, sum("draft_n"), sum("draft_n_accepted")]);
  process.exit(failed);
}

// ---- basics and authentication
let r = await fetch(base + "/health");
check("GET /health needs no key and reports the slots", r.status === 200 && (await r.json()).slots_idle === 3);
r = await fetch(base + "/v1/models");
check("GET /v1/models without the key: 200 (public, as llama-server's)", r.status === 200);
r = await fetch(base + "/v1/models", { headers: auth });
const models = await r.json();
check("GET /v1/models lists the alias", r.status === 200 && models.data[0].id === "demo" && models.object === "list", models);
r = await post("/v1/completions", greedy(p0), { Authorization: "Bearer wrong", "Content-Type": "application/json" });
check("a wrong key is 401 with an OpenAI-style error", r.status === 401 && r.json?.error?.type === "authentication_error", r.json);

// ---- completions: non-streamed, streamed
r = await post("/v1/completions", greedy(p0));
check("greedy completion equals nextn run", r.status === 200 && r.json.choices[0].text === p0.text, [r.json?.choices?.[0]?.text, p0.text]);
check("completion: finish_reason length, usage counts", r.json.choices[0].finish_reason === "length" &&
  r.json.usage.completion_tokens === p0.n && r.json.usage.prompt_tokens === p0.n_prompt &&
  r.json.object === "text_completion", r.json);
let s = await stream("/v1/completions", { ...greedy(p0), stream_options: { include_usage: true } });
check("streamed completion: event-stream, same text, [DONE] last", s.status === 200 && s.type.startsWith("text/event-stream") &&
  textOf(s.events) === p0.text && s.events.at(-1) === "[DONE]", textOf(s.events));
check("streamed completion: one finish_reason (length) and a usage chunk",
  JSON.stringify(finishOf(s.events)) === '["length"]' && s.events.at(-2).usage?.completion_tokens === p0.n, s.events.slice(-3));
r = await post("/v1/completions", { prompt: p0.ids, max_tokens: p0.n, temperature: 0, ignore_eos: true });
check("prompt as token ids gives the same text", r.status === 200 && r.json.choices[0].text === p0.text, r.json);
r = await post("/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
check("the chat path without /v1 answers in OpenAI's shape", r.status === 200 && r.json.object === "chat.completion", r.json);

// ---- parallel slots: more requests than slots, half of them streamed
const all = await Promise.all(want.prompts.map((p, i) => i % 2 ? stream("/v1/completions", greedy(p)) : post("/v1/completions", greedy(p))));
const got = all.map((a) => (a.events ? textOf(a.events) : a.json?.choices[0].text));
check(`${want.prompts.length} concurrent requests on 3 slots each equal nextn run`, got.every((t, i) => t === want.prompts[i].text),
  got.map((t, i) => [t, want.prompts[i].text]).filter(([a, b]) => a !== b));

// ---- stop strings (also across the streamed pieces)
const k = Math.max(1, p0.text.indexOf(" ", 4));
const stop = p0.text.slice(k, k + 5);
const cut = p0.text.indexOf(stop);
r = await post("/v1/completions", { ...greedy(p0), stop: ["\u0001never", stop] });
check("stop string: text ends before it, finish_reason stop", r.json?.choices[0].text === p0.text.slice(0, cut) &&
  r.json.choices[0].finish_reason === "stop", [stop, r.json?.choices?.[0]]);
s = await stream("/v1/completions", { ...greedy(p0), stop });
check("stop string while streaming: same text, finish_reason stop", textOf(s.events) === p0.text.slice(0, cut) &&
  JSON.stringify(finishOf(s.events)) === '["stop"]', [stop, textOf(s.events)]);

// ---- sampling: seeded, same as nextn run with the same seed and defaults
const samp = (seed) => post("/v1/completions", { prompt: p0.prompt, max_tokens: want.sampled.n, temperature: 1.0, seed, ignore_eos: true });
const [a1, a2, a3] = await Promise.all([samp(5), samp(5), samp(6)]);
check("temperature 1, seed 5: equals nextn run --temp 1 --seed 5", a1.json?.choices[0].text === want.sampled.text, [a1.json?.choices?.[0]?.text, want.sampled.text]);
check("same seed twice gives the same text, another seed another", a1.json.choices[0].text === a2.json.choices[0].text &&
  a1.json.choices[0].text !== a3.json.choices[0].text);

// ---- chat: reasoning (thinking on) split from content as the template's think block says; a
// template without <think> (the demo model's, chatml-plain) has no reasoning: all is content
const thinks = (await (await fetch(base + "/props", { headers: auth })).json()).nextn?.chat_format === "chatml";
function split(t) {
  if (!thinks) return { reasoning: undefined, content: t };
  const i = t.indexOf("</think>");
  if (i < 0) return { reasoning: t, content: "" };
  return { reasoning: t.slice(0, i).replace(/[ \n]+$/, ""), content: t.slice(i + 8).replace(/^\n+/, "") };
}
const c = want.chat;
const msgs = [{ role: "user", content: c.user }];
r = await post("/v1/chat/completions", { messages: msgs, max_tokens: c.n, temperature: 0, ignore_eos: true });
const exp = split(c.text);
check("chat completion equals nextn run --chat (reasoning / content split)", r.status === 200 &&
  r.json.object === "chat.completion" && r.json.choices[0].message.role === "assistant" &&
  r.json.choices[0].message.reasoning_content === exp.reasoning && r.json.choices[0].message.content === exp.content,
  [r.json?.choices?.[0]?.message, exp]);
r = await post("/v1/chat/completions", { messages: [{ role: "user", content: [{ type: "text", text: c.user }] }], max_tokens: c.n, temperature: 0, ignore_eos: true });
check("chat content as text parts gives the same answer", r.json?.choices[0].message.reasoning_content === exp.reasoning &&
  r.json.choices[0].message.content === exp.content);
s = await stream("/v1/chat/completions", { messages: msgs, max_tokens: c.n, temperature: 0, ignore_eos: true });
const deltas = s.events.filter((e) => e !== "[DONE]" && e.choices?.length).map((e) => e.choices[0].delta);
check("streamed chat: role first, then deltas that add up to the same answer",
  deltas[0].role === "assistant" && deltas.map((d) => d.reasoning_content ?? "").join("").replace(/[ \n]+$/, "") === (exp.reasoning ?? "") &&
  deltas.map((d) => d.content ?? "").join("") === exp.content && s.events.at(-1) === "[DONE]", deltas.slice(0, 4));

// ---- bad requests: clear errors, right status
const bad = [
  ["invalid JSON", '{"prompt": "x",', 400, /not valid JSON/],
  ["body not an object", "[1, 2]", 400, /JSON object/],
  ["missing prompt", {}, 400, /missing 'prompt'/],
  ["max_tokens 0", { prompt: "x", max_tokens: 0 }, 400, /max_tokens/],
  ["n above the slot count (-np 3)", { prompt: "x", n: 4 }, 400, /'n' is 4; at most 3 choices/],
  ["temperature not a number", { prompt: "x", temperature: "hot" }, 400, /'temperature' must be a number/],
  ["token id out of range", { prompt: [1, 99999999] }, 400, /not a token id/],
  ["prompt longer than a slot", { prompt: "ab ".repeat(2000) }, 400, /a slot holds 512/],
];
for (const [name, body, status, re] of bad) {
  r = await post("/v1/completions", body);
  check(`${name}: ${status} naming the problem`, r.status === status && re.test(r.json?.error?.message ?? ""), [r.status, r.json]);
}
r = await post("/v1/chat/completions", { messages: [] });
check("chat with no messages: 400", r.status === 400 && /messages/.test(r.json?.error?.message), r.json);
r = await post("/v1/chat/completions", { messages: [{ role: "wizard", content: "x" }] });
check("chat with an unknown role: 400 naming it", r.status === 400 && /wizard/.test(r.json?.error?.message), r.json);
r = await post("/v1/completions", JSON.stringify({ prompt: "x".repeat(1100000) }));
check("body over --max-body: 413", r.status === 413 && /--max-body/.test(r.json?.error?.message), [r.status, r.json]);
r = await fetch(base + "/v1/nowhere", { headers: auth });
check("unknown endpoint: 404", r.status === 404);
r = await fetch(base + "/v1/completions", { headers: auth });
check("GET on completions: 405", r.status === 405);
r = await fetch(base + "/health");
check("after all that every slot is idle again", (await r.json()).slots_idle === 3);
process.exit(failed);
