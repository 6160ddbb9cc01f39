// serve_native.mjs - the client half of tests/test_serve_native.sh: llama-server's own API on a
// running `nextn serve`, checked against llama-server's documented behaviour (tools/server/README.md
// of llama.cpp) and against `nextn run` for the generated text.
//   node serve_native.mjs BASE_URL EXPECT.json STATE.json PHASE
//   PHASE main:      every endpoint and field; saves slot 1 (state: file name, tokens) for "restore"
//         restore:   a fresh server: restores that file into slot 1 and continues the generation
//         spec-save: on a --spec mtp server: log-probabilities equal plain's, saves slot 0
// Prints "ok: ..." / "FAIL: ..." per check; exits 1 if any failed.
import { readFileSync, writeFileSync, existsSync } from "node:fs";

const [base, expectFile, stateFile, phase] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectFile, "utf8"));
const state = existsSync(stateFile) ? JSON.parse(readFileSync(stateFile, "utf8")) : {};
let failed = 0;
function check(name, cond, detail) {
  if (cond) console.log(`ok: ${name}`);
  else { console.log(`FAIL: ${name}${detail !== undefined ? " -- " + JSON.stringify(detail).slice(0, 600) : ""}`); failed = 1; }
}
const KEY = { "X-Api-Key": "secret", "Content-Type": "application/json" };
async function post(path, body, headers = KEY) {
  const r = await fetch(base + path, { method: "POST", headers, body: typeof body === "string" ? body : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { }
  return { status: r.status, json, text, headers: r.headers };
}
async function get(path, headers = KEY) {
  const r = await fetch(base + path, { headers });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { }
  return { status: r.status, json, text };
}
// server-sent events: the "data:" payloads in order, and the raw text
async function stream(path, body) {
  const r = await fetch(base + path, { method: "POST", headers: KEY, body: JSON.stringify({ ...body, stream: true }) });
  const raw = await r.text();
  const events = raw.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6))
    .map((d) => (d === "[DONE]" ? d : JSON.parse(d)));
  return { status: r.status, type: r.headers.get("content-type"), events, raw };
}
const eq = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const greedy = { temperature: 0, ignore_eos: true };
const P = want.prompt, IDS = want.ids;

if (phase === "main") {
  // ---- /completion: the documented response fields, text equal to nextn run
  let r = await post("/completion", { prompt: P, n_predict: 16, ...greedy });
  const c = r.json;
  check("/completion: greedy content equals nextn run", r.status === 200 && c.content === want.t16, [c?.content, want.t16]);
  check("/completion: stop, stop_type limit, counts, model id, slot",
    c.stop === true && c.stop_type === "limit" && c.stopping_word === "" && c.tokens_predicted === 16 &&
    c.tokens_evaluated === IDS.length && eq(c.tokens, []) && c.model === "alt" && c.truncated === false &&
    typeof c.id_slot === "number" && c.index === 0 && typeof c.prompt === "string" && typeof c.has_new_line === "boolean", c);
  check("/completion: generation_settings and timings",
    c.generation_settings.n_predict === 16 && c.generation_settings.temperature === 0 && c.generation_settings.n_ctx === 512 &&
    eq(c.generation_settings.samplers, ["penalties", "top_k", "top_p", "min_p", "temperature"]) &&
    c.timings.predicted_n === 16 && c.timings.prompt_n + c.timings.cache_n === IDS.length, c.generation_settings);
  r = await post("/completion", { prompt: P, n_predict: 16, ...greedy, return_tokens: true });
  const R = r.json.tokens;
  check("return_tokens: 16 ids", r.status === 200 && R.length === 16 && R.every(Number.isInteger), r.json?.tokens);
  let d = await post("/detokenize", { tokens: R });
  check("return_tokens: the ids detokenize to the content", d.json?.content === want.t16, d.json);
  check("the repeated prompt comes from the prompt cache (tokens_cached, timings.cache_n)",
    r.json.tokens_cached === IDS.length - 1 && r.json.timings.cache_n === IDS.length - 1, [r.json.tokens_cached]);
  r = await post("/completion", { prompt: IDS, n_predict: 16, ...greedy });
  check("prompt as token ids: the same content", r.json?.content === want.t16, r.json);
  r = await post("/completion", { prompt: { prompt_string: P }, n_predict: 16, ...greedy });
  check("prompt as {prompt_string}: the same content", r.json?.content === want.t16, r.json);
  const tail = await post("/tokenize", { content: " God created" });
  const head = await post("/tokenize", { content: "In the beginning" });
  check("tokenize splits the prompt at a word", eq([...head.json.tokens, ...tail.json.tokens], IDS), [head.json, tail.json, IDS]);
  r = await post("/completion", { prompt: [...head.json.tokens, " God created"], n_predict: 16, ...greedy });
  check("prompt mixing ids and a string: the same content", r.json?.content === want.t16, r.json);
  r = await post("/completion", { prompt: [P, IDS, { prompt_string: P }], n_predict: 16, ...greedy });
  check("several prompts: an array of results in order, each equal to nextn run",
    r.status === 200 && Array.isArray(r.json) && r.json.length === 3 && r.json.every((x, i) => x.index === i && x.content === want.t16), r.json);
  r = await post("/completions", { prompt: P, n_predict: 16, ...greedy });
  check("/completions without /v1 answers natively", r.json?.content === want.t16 && r.json.choices === undefined, r.json);
  r = await post("/v1/completions", { prompt: [...head.json.tokens, " God created"], max_tokens: 16, ...greedy });
  check("/v1/completions takes the mixed prompt too (OpenAI shape)", r.json?.choices?.[0]?.text === want.t16, r.json);
  r = await post("/v1/completions", { prompt: [P, P], max_tokens: 4 });
  check("/v1/completions refuses several prompts, pointing to /completion", r.status === 400 && /\/completion/.test(r.json?.error?.message), r.json);
  r = await post("/completion", { prompt: [1, 2.5], n_predict: 2 });
  check("a malformed prompt element is a 400 naming it", r.status === 400 && /'prompt'\[1\]/.test(r.json?.error?.message), r.json);

  // ---- streaming: content pieces add up, tokens too, the last event has stop and timings, no [DONE]
  let s = await stream("/completion", { prompt: P, n_predict: 16, ...greedy });
  const ev = s.events;
  const last = ev.at(-1);
  check("stream: event-stream, content pieces equal the content",
    s.status === 200 && s.type.startsWith("text/event-stream") && ev.filter((e) => !e.stop).map((e) => e.content).join("") === want.t16, s.raw.slice(0, 300));
  check("stream: tokens across events equal return_tokens, every event but the last has stop false",
    eq(ev.flatMap((e) => e.tokens), R) && ev.slice(0, -1).every((e) => e.stop === false), ev.map((e) => e.tokens));
  check("stream: the last event: stop true, stop_type, timings, empty content; no [DONE]",
    last.stop === true && last.stop_type === "limit" && last.timings?.predicted_n === 16 && last.content === "" && !s.raw.includes("[DONE]"), last);

  // ---- stop strings and end of generation
  const word = want.t16.slice(6, 11);
  const before = want.t16.slice(0, want.t16.indexOf(word));
  r = await post("/completion", { prompt: P, n_predict: 16, ...greedy, stop: [word] });
  check("stop word: content before it, stop_type word, stopping_word", r.json?.content === before &&
    r.json.stop_type === "word" && r.json.stopping_word === word, [r.json?.content, r.json?.stop_type, r.json?.stopping_word, word]);
  const eog = (await post("/tokenize", { content: "<|im_end|>" })).json.tokens;
  r = await post("/completion", { prompt: P, n_predict: 8, temperature: 0, logit_bias: [[eog[0], 100]] });
  check("an end-of-generation token (raised by logit_bias +100): stop_type eos, empty content",
    eog.length === 1 && r.json?.stop_type === "eos" && r.json.content === "" && r.json.tokens_predicted === 1, r.json);

  // ---- n_probs: completion_probabilities; the same numbers as /v1/completions logprobs
  r = await post("/completion", { prompt: P, n_predict: 16, ...greedy, n_probs: 3 });
  const cp = r.json?.completion_probabilities;
  check("n_probs: 16 entries, id / token / bytes / logprob, 3 alternatives, the greedy token first",
    cp?.length === 16 && cp.every((e, i) => e.id === R[i] && typeof e.token === "string" && Array.isArray(e.bytes) &&
      e.logprob <= 0 && e.top_logprobs.length === 3 && e.top_logprobs[0].id === e.id && e.top_logprobs[0].logprob === e.logprob), cp?.[0]);
  // the same request answered by llama-server itself (tests/fixtures/README.md "serve/"): the same
  // tokens and alternatives, log-probabilities within 2e-3 (measured: 5.3e-4, float rounding of
  // two implementations)
  const ref = JSON.parse(readFileSync(new URL("fixtures/serve/llama-server-n-probs.json", import.meta.url), "utf8"));
  const rc = ref.completion_probabilities, near = (a, b) => Math.abs(a - b) <= 2e-3;
  check("n_probs: llama-server's tokens, alternatives and log-probabilities (within 2e-3)",
    ref.request.prompt === P && ref.content === cp?.slice(0, rc.length).map((e) => e.token).join("") &&
    rc.every((e, i) => e.id === cp[i].id && near(e.logprob, cp[i].logprob) &&
      e.top_logprobs.every((t, j) => t.id === cp[i].top_logprobs[j].id && near(t.logprob, cp[i].top_logprobs[j].logprob))),
    [rc.slice(0, 2), cp?.slice(0, 2)]);
  const o = await post("/v1/completions", { prompt: P, max_tokens: 16, ...greedy, logprobs: 3 });
  const ol = o.json?.choices?.[0]?.logprobs;
  check("/v1/completions logprobs: the same numbers, OpenAI's tokens / token_logprobs / top_logprobs too",
    ol && eq(ol.content.map((e) => e.logprob), cp.map((e) => e.logprob)) && eq(ol.token_logprobs, cp.map((e) => e.logprob)) &&
    ol.tokens.join("") === want.t16 && ol.top_logprobs.length === 16 && ol.text_offset[0] === 0, ol);
  s = await stream("/v1/completions", { prompt: P, max_tokens: 16, ...greedy, logprobs: 3 });
  const sl = s.events.filter((e) => e !== "[DONE]" && e.choices?.[0]?.logprobs).flatMap((e) => e.choices[0].logprobs.content);
  check("/v1/completions logprobs streamed: the same entries", eq(sl.map((e) => e.logprob), cp.map((e) => e.logprob)), sl.length);
  const ch = await post("/v1/chat/completions", { messages: [{ role: "user", content: "Who made the earth?" }], max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 });
  const cl = ch.json?.choices?.[0]?.logprobs?.content;
  check("chat logprobs / top_logprobs: one entry per token, 2 alternatives", cl?.length === 6 && cl.every((e) => e.top_logprobs.length === 2), ch.json);
  // the values: chat's numbers are the completions endpoint's for the same rendered prompt (sampled,
  // with a penalty, so the penalty history and the seed count too)
  const msgs = [{ role: "user", content: "Who made the earth?" }];
  const rendered = (await post("/apply-template", { messages: msgs })).json?.prompt;
  const lq = { max_tokens: 12, temperature: 1, seed: 3, presence_penalty: 0.5, ignore_eos: true };
  const chv = await post("/v1/chat/completions", { messages: msgs, ...lq, logprobs: true, top_logprobs: 3 });
  const cmv = await post("/v1/completions", { prompt: rendered, ...lq, logprobs: 3 });
  const vals = (c) => c?.map((e) => [e.id, e.token, e.logprob, e.top_logprobs.map((t) => [t.id, t.logprob])]);
  const chatLp = vals(chv.json?.choices?.[0]?.logprobs?.content), complLp = vals(cmv.json?.choices?.[0]?.logprobs?.content);
  check("chat logprobs values: equal /v1/completions' for the rendered prompt (tokens, log-probabilities, alternatives)",
    chv.json?.usage?.prompt_tokens === cmv.json?.usage?.prompt_tokens && chatLp?.length === 12 && eq(chatLp, complLp) &&
    chatLp.every((e) => e[2] < 0 && e[3].length === 3 && e[3][0][1] >= e[3][2][1]) &&
    chatLp.some((e) => e[0] !== e[3][0][0]), [chatLp?.slice(0, 3), complLp?.slice(0, 3)]);
  state.chat_lp = chatLp;
  r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], top_logprobs: 2 });
  check("top_logprobs without logprobs: 400", r.status === 400 && /top_logprobs/.test(r.json?.error?.message), r.json);
  state.cp = cp.map((e) => [e.id, e.logprob, e.top_logprobs.map((t) => [t.id, t.logprob])]);

  // ---- samplers: the listed ones in order, the others off
  const smp = { prompt: P, n_predict: 12, temperature: 1, seed: 5 };
  const a = await post("/completion", { ...smp, samplers: ["top_k", "temperature"] });
  const b = await post("/completion", { ...smp, top_p: 1, min_p: 0, repeat_last_n: 0 });
  check("samplers [top_k, temperature] equals top_p 1, min_p 0, penalties off", a.status === 200 && a.json.content === b.json?.content, [a.json?.content, b.json?.content]);
  check("samplers: generation_settings lists them", eq(a.json?.generation_settings?.samplers, ["top_k", "temperature"]), a.json?.generation_settings);
  r = await post("/completion", { ...smp, samplers: "kt" });
  check("samplers as letters", r.json?.content === a.json.content, r.json);
  r = await post("/completion", { ...smp, samplers: ["temperature", "top_k"] });
  check("samplers in another order: served in that order", r.status === 200 && eq(r.json?.generation_settings?.samplers, ["temperature", "top_k"]), r.json);

  // ---- logit_bias in every form, both APIs
  const banned = R[0];
  const forms = [[[banned, false]], { [String(banned)]: false }];
  const piece = (await post("/detokenize", { tokens: [banned] })).json.content;
  const again = (await post("/tokenize", { content: piece })).json.tokens;
  if (eq(again, [banned])) forms.push([[piece, false]], { [piece]: false });
  const outs = [];
  for (const lb of forms) outs.push(await post("/completion", { prompt: P, n_predict: 16, ...greedy, logit_bias: lb, return_tokens: true }));
  check(`logit_bias ban (${forms.length} forms: [[id,false]], {"id":false}, [[text,false]], {"text":false}): same output without the token`,
    outs.every((x) => x.status === 200 && x.json.content === outs[0].json.content && !x.json.tokens.includes(banned)) && outs[0].json.content !== want.t16,
    outs.map((x) => x.json?.content ?? x.json));
  const lift = R[5];
  r = await post("/completion", { prompt: P, n_predict: 4, ...greedy, logit_bias: [[lift, 100]], return_tokens: true });
  check("logit_bias +100: greedy takes that token", eq(r.json?.tokens, [lift, lift, lift, lift]), r.json?.tokens);
  r = await post("/completion", { prompt: P, n_predict: 4, ...greedy, logit_bias: [[lift, 100]] });
  const glb = r.json?.generation_settings?.logit_bias ?? [];
  check("generation_settings.logit_bias lists [id, bias], then ignore_eos's bans [id, false]",
    eq(glb[0], [lift, 100]) && glb.length > 1 && glb.slice(1).every((e) => e[1] === false), glb);
  const v1 = await post("/v1/completions", { prompt: P, max_tokens: 16, ...greedy, logit_bias: { [String(banned)]: -100 } });
  const nat = await post("/completion", { prompt: P, n_predict: 16, ...greedy, logit_bias: [[banned, -100]] });
  check("OpenAI logit_bias {\"id\": -100} equals llama-server's [[id, -100]]", v1.json?.choices?.[0]?.text === nat.json?.content && nat.json.content !== want.t16, [v1.json, nat.json?.content]);
  const chb = await post("/v1/chat/completions", { messages: [{ role: "user", content: "Who made the earth?" }], max_tokens: 3, temperature: 0, logit_bias: { [String(eog[0])]: 100 } });
  check("chat logit_bias: raising the end token ends the reply at once", chb.json?.choices?.[0]?.finish_reason === "stop" && chb.json.usage.completion_tokens === 1, chb.json);
  r = await post("/completion", { prompt: P, logit_bias: [[999999, 1]] });
  check("logit_bias with an id outside the vocabulary: 400", r.status === 400 && /logit_bias/.test(r.json?.error?.message), r.json);

  // ---- /apply-template, /infill, errors
  r = await post("/apply-template", { messages: [{ role: "user", content: "Who made the earth?" }] });
  // the demo model's own template: '<|im_start|>' + role + '\n' + content + '<|im_end|>\n', then
  // '<|im_start|>assistant\n' - no <think> (it cannot think), so neither has the prompt
  check("/apply-template: the model's own ChatML prompt (no <think>)", r.json?.prompt === "<|im_start|>user\nWho made the earth?<|im_end|>\n<|im_start|>assistant\n", r.json);
  r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "Who made the earth?" }], max_tokens: 8, ...greedy });
  check("chat on the demo model answers in content (its template cannot think: no reasoning_content)",
    r.json?.choices?.[0]?.message?.content?.length > 0 && r.json.choices[0].message.reasoning_content === undefined, r.json);
  r = await post("/infill", { input_prefix: "def f(", input_suffix: "):" });
  check("/infill without FIM tokens: 501 not_supported_error", r.status === 501 && r.json?.error?.type === "not_supported_error", r.json);
  r = await post("/completion", { prompt: "word ".repeat(600), n_predict: 2 });
  check("a prompt over the context: exceed_context_size_error with n_prompt_tokens and n_ctx",
    r.status === 400 && r.json?.error?.type === "exceed_context_size_error" && r.json.error.n_prompt_tokens === 601 && r.json.error.n_ctx === 512, r.json);
  r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "word ".repeat(600) }], max_tokens: 2 });
  check("the same through chat", r.status === 400 && r.json?.error?.type === "exceed_context_size_error" && r.json.error.n_prompt_tokens > 512, r.json);

  // ---- chat details
  s = await stream("/v1/chat/completions", { messages: [{ role: "user", content: "Who made the earth?" }], max_tokens: 4, temperature: 0, stream_options: { include_usage: true } });
  const first = s.events[0], usage = s.events.at(-2);
  check("chat stream: the first chunk has the role and content null", first.choices[0].delta.role === "assistant" && first.choices[0].delta.content === null, first);
  check("chat stream: the usage chunk carries timings", usage.choices.length === 0 && usage.usage.completion_tokens === 4 && usage.timings?.predicted_n === 4, usage);
  const conv = [{ role: "user", content: "Who made the earth?" }, { role: "assistant", content: "In the" }];
  const manual = await post("/completion", { prompt: "<|im_start|>user\nWho made the earth?<|im_end|>\n<|im_start|>assistant\nIn the", n_predict: 8, ...greedy });
  const cont = await post("/v1/chat/completions", { messages: conv, continue_final_message: true, add_generation_prompt: false, max_tokens: 8, ...greedy });
  check("continue_final_message: the reply continues the assistant message (= /completion on the rendered prefix)",
    cont.status === 200 && cont.json.choices[0].message.content === manual.json?.content && manual.json.content.length > 0, [cont.json, manual.json?.content]);
  const auto = await post("/v1/chat/completions", { messages: conv, max_tokens: 8, ...greedy });
  check("a final assistant message is continued without asking (llama-server's prefill)", auto.json?.choices?.[0]?.message?.content === manual.json.content, auto.json);
  r = await post("/apply-template", { messages: conv, continue_final_message: true, add_generation_prompt: false });
  check("/apply-template with continue_final_message ends inside the message", r.json?.prompt?.endsWith("<|im_start|>assistant\nIn the"), r.json);
  r = await post("/v1/chat/completions", { messages: conv, continue_final_message: true, max_tokens: 2 });
  check("continue_final_message with add_generation_prompt true: 400", r.status === 400 && /add_generation_prompt/.test(r.json?.error?.message), r.json);
  r = await post("/v1/chat/completions", { messages: [...conv, { role: "assistant", content: "x" }], max_tokens: 2 });
  check("two assistant messages at the end: 400", r.status === 400 && /two assistant messages/.test(r.json?.error?.message), r.json);

  // ---- auth, CORS, models
  r = await post("/completion", { prompt: P, n_predict: 1 }, { "Content-Type": "application/json", "X-Api-Key": "wrong" });
  check("a wrong X-Api-Key: 401", r.status === 401, r.json);
  r = await post("/completion", { prompt: P, n_predict: 1 }, { "Content-Type": "application/json", Authorization: "Bearer secret" });
  check("Authorization: Bearer still works", r.status === 200, r.json);
  for (const [origin, granted] of [["http://a.example", true], ["http://localhost:5173", true], ["http://evil.example", false]]) {
    const pre = await fetch(base + "/completion", { method: "OPTIONS", headers: { Origin: origin, "Access-Control-Request-Method": "POST" } });
    const h = pre.headers.get("access-control-allow-origin");
    check(`CORS pre-flight from ${origin}: ${granted ? "the origin echoed" : "nothing granted"}`,
      pre.status === 200 && (granted ? h === origin && /X-Api-Key/.test(pre.headers.get("access-control-allow-headers")) : h === null), [pre.status, h]);
  }
  r = await get("/v1/models");
  const m = r.json?.data?.[0];
  check("/v1/models: id = the first alias in order, aliases, tags", m?.id === "alt" && eq(m.aliases, ["alt", "demo"]) && eq(m.tags, ["tag1"]), m);
  r = await get("/v1/models/demo");
  check("/v1/models/{alias}", r.status === 200 && r.json?.id === "alt", r.json);
  r = await post("/v1/completions", { model: "demo", prompt: P, max_tokens: 2 });
  check("a request naming an alias is served", r.status === 200, r.json);

  // ---- id_slot, /slots, slot files
  r = await post("/completion", { prompt: IDS, n_predict: 16, ...greedy, id_slot: 1, return_tokens: true });
  check("id_slot 1: run there", r.json?.id_slot === 1 && r.json.content === want.t16, r.json);
  r = await get("/slots");
  const s1 = r.json?.[1];
  check("GET /slots: one entry per slot, idle, the last request's params",
    r.json?.length === 2 && s1.id === 1 && s1.is_processing === false && s1.n_ctx === 512 && s1.params.n_predict === 16 &&
    s1.next_token.n_decoded === 16 && s1.n_tokens === IDS.length + 15, s1);
  r = await post("/slots/1?action=save", { filename: "plain.bin" });
  check("save slot 1: n_saved = prompt + reply - 1, n_written, timings.save_ms",
    r.status === 200 && r.json.id_slot === 1 && r.json.filename === "plain.bin" && r.json.n_saved === IDS.length + 15 &&
    r.json.n_written > 0 && typeof r.json.timings.save_ms === "number", r.json);
  for (const [what, path, body, status] of [["a path in the name", "/slots/1?action=save", { filename: "../x.bin" }, 400],
    ["a missing file", "/slots/1?action=restore", { filename: "none.bin" }, 404], ["an unknown action", "/slots/1?action=load", {}, 400],
    ["a slot that does not exist", "/slots/7?action=erase", {}, 400], ["no filename", "/slots/1?action=save", {}, 400]]) {
    r = await post(path, body);
    check(`slot action with ${what}: ${status}`, r.status === status && r.json?.error, [r.status, r.json]);
  }
  r = await fetch(base + "/slots/0?action=erase", { method: "POST", headers: { "X-Api-Key": "secret" } });
  const er = await r.json();
  check("erase slot 0 (no body needed): n_erased", r.status === 200 && er.id_slot === 0 && er.n_erased > 0, er);
  r = await post("/completion", { prompt: P, n_predict: 16, ...greedy, id_slot: 0 });
  check("after erase: the prompt is decoded again, same output", r.json?.tokens_cached === 0 && r.json.content === want.t16, r.json);
  state.file = "plain.bin";
  state.r1 = R;
}

if (phase === "spec-save") {
  let r = await post("/completion", { prompt: P, n_predict: 16, ...greedy, n_probs: 3, return_tokens: true, id_slot: 1 });
  check("spec: content equals nextn run", r.json?.content === want.t16, r.json);
  const cp = r.json?.completion_probabilities?.map((e) => [e.id, e.logprob, e.top_logprobs.map((t) => [t.id, t.logprob])]);
  check("spec: completion_probabilities equal plain decoding's", eq(cp, state.cp), cp?.[0]);
  const chv = await post("/v1/chat/completions", { messages: [{ role: "user", content: "Who made the earth?" }],
    max_tokens: 12, temperature: 1, seed: 3, presence_penalty: 0.5, ignore_eos: true, logprobs: true, top_logprobs: 3 });
  const chatLp = chv.json?.choices?.[0]?.logprobs?.content?.map((e) => [e.id, e.token, e.logprob, e.top_logprobs.map((t) => [t.id, t.logprob])]);
  check("spec: chat logprobs values equal plain decoding's (sampled, with a penalty)", state.chat_lp?.length === 12 && eq(chatLp, state.chat_lp), chatLp?.[0]);
  r = await post("/slots/1?action=save", { filename: "spec.bin" });
  check("spec: save slot 1", r.status === 200 && r.json.n_saved === IDS.length + 15, r.json);
  state.file = "spec.bin";
}

if (phase === "restore") {
  let r = await post(`/slots/1?action=restore`, { filename: state.file });
  check(`restore ${state.file} into slot 1 of a new server`, r.status === 200 && r.json.n_restored === IDS.length + 15 && r.json.n_read > 0, r.json);
  // the sequence holds the file's positions (a speculative prefill resumes from the sequence, so
  // the continuation's text alone cannot tell a restore from a re-decode)
  const sl = await get("/slots");
  check("GET /slots: the restored slot's sequence holds the file's positions",
    sl.json?.find?.((x) => x.id === 1)?.n_tokens === IDS.length + 15, sl.json);
  r = await post("/completion", { prompt: [...IDS, ...state.r1], n_predict: 12, ...greedy, id_slot: 1 });
  check("the continuation uses the restored state (all but the last prompt token cached)", r.json?.tokens_cached === IDS.length + 15, r.json?.tokens_cached);
  check("the continuation equals the uninterrupted generation (nextn run, 28 tokens)", want.t16 + r.json?.content === want.t28, [r.json?.content, want.t28]);
  r = await post("/slots/0?action=restore", { filename: state.file });
  const again = await post("/completion", { prompt: [...IDS, ...state.r1], n_predict: 12, ...greedy, id_slot: 0 });
  check("the same file restores into another slot", r.status === 200 && again.json?.content === want.t28.slice(want.t16.length) &&
    again.json.tokens_cached === IDS.length + 15, again.json);
}

writeFileSync(stateFile, JSON.stringify(state));
process.exit(failed);
