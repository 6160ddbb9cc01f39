// choices.mjs - OpenAI "n" (several choices) with the official OpenAI Node client against a running
// `nextn serve -np 3` (started by tests/test_serve_n.sh, plain or --spec mtp):
//   - greedy n = 3: three identical choices, each equal to the n = 1 answer and to `nextn run`;
//   - seeded sampling: choice k of an n = 3 request equals an n = 1 request with seed + k (the
//     documented reproducibility rule), texts and log-probabilities, chat and completions;
//   - the prompt is decoded once: /metrics prompt_tokens_total and timings.prompt_n grow by
//     P + (n - 1) (the prompt, then the last prompt token once more per further choice), not n * P;
//   - streams: chunks carry their choice's index and reassemble per index to the non-streamed
//     choices; one finish_reason per choice; usage sums the completions, counts the prompt once;
//   - admission as a group: an n = 3 request waits for all three slots, a single request sent
//     after it does not overtake it;
//   - n above the slot count (and n = 0) is a 400 naming 'n'; a client that goes away frees all
//     n slots (streamed and not).
//   node choices.mjs BASE_URL EXPECT.json
import OpenAI from "openai";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const [base, expectFile, drafts] = process.argv.slice(2); // drafts: "fixed-drafts" = --spec mtp --no-adaptive
const want = JSON.parse(readFileSync(expectFile, "utf8"));
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "none", maxRetries: 0 });
const model = want.model;
let failed = 0;
async function check(name, fn) {
  try { await fn(); console.log(`ok: ${name}`); }
  catch (e) { console.log(`FAIL: ${name} -- ${String(e?.stack ?? e).slice(0, 1200)}`); failed = 1; }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function metric(name) {
  const t = await (await fetch(base + "/metrics")).text();
  const m = t.match(new RegExp(`^${name} ([0-9.e+]+)$`, "m"));
  assert.ok(m, `metric ${name} in /metrics`);
  return Number(m[1]);
}
async function idleSlots() { return (await (await fetch(base + "/health")).json()).slots_idle; }
async function waitIdle(n, seconds) {
  const t0 = Date.now();
  while (Date.now() - t0 < seconds * 1000) { if ((await idleSlots()) === n) return; await sleep(50); }
  assert.fail(`${n} idle slots within ${seconds} s (have ${await idleSlots()})`);
}

const c = want.completion;
const msgs = [{ role: "user", content: want.chat_user }];

await check("completions n=3 greedy: three identical choices = the n=1 answer = nextn run", async () => {
  const one = await client.completions.create({ model, prompt: c.prompt, max_tokens: c.n, temperature: 0, ignore_eos: true });
  assert.equal(one.choices[0].text, c.text);
  const r = await client.completions.create({ model, prompt: c.prompt, max_tokens: c.n, temperature: 0, ignore_eos: true, n: 3 });
  assert.deepEqual(r.choices.map((x) => x.index), [0, 1, 2]);
  for (const ch of r.choices) { assert.equal(ch.text, c.text); assert.equal(ch.finish_reason, "length"); }
  assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
  assert.equal(r.usage.completion_tokens, 3 * c.n);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 3 * c.n);
});

await check("chat n=3 greedy: three identical messages = the n=1 message", async () => {
  const one = await client.chat.completions.create({ model, messages: msgs, max_tokens: 20, temperature: 0, ignore_eos: true });
  const r = await client.chat.completions.create({ model, messages: msgs, max_tokens: 20, temperature: 0, ignore_eos: true, n: 3 });
  assert.equal(r.choices.length, 3);
  r.choices.forEach((ch, k) => {
    assert.equal(ch.index, k);
    assert.equal(ch.message.content, one.choices[0].message.content);
    assert.equal(ch.message.reasoning_content, one.choices[0].message.reasoning_content);
  });
});

await check("prompt decoded once: /metrics and timings.prompt_n grow by P + n - 1, not n * P", async () => {
  await waitIdle(3, 5); // totals count a request when it leaves its slot
  const before = await metric("nextn:prompt_tokens_total");
  // cache_prompt false: the first choice decodes the whole prompt, whatever the slots held
  const r = await client.completions.create({ model, prompt: want.long_prompt, max_tokens: 4, temperature: 0, n: 3,
    cache_prompt: false });
  const P = r.usage.prompt_tokens;
  assert.ok(P > 40, `a long prompt (${P} tokens)`);
  assert.equal(r.timings.prompt_n, P + 2);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
  await waitIdle(3, 5);
  assert.equal(await metric("nextn:prompt_tokens_total") - before, P + 2);
});

if (drafts === "fixed-drafts")
  await check("--spec mtp: every choice drafts and accepts what the n=1 request does (the MTP cache is copied too)", async () => {
    // with a fixed draft length the drafts depend only on the state, and with the MTP head's
    // cache of the prompt missing they differ
    const p = { model, prompt: want.long_prompt, max_tokens: 40, temperature: 0, ignore_eos: true };
    const one = await client.completions.create(p);
    const r = await client.completions.create({ ...p, n: 3 });
    for (const ch of r.choices) assert.equal(ch.text, one.choices[0].text);
    assert.ok(one.timings.draft_n > 0);
    assert.equal(r.timings.draft_n, 3 * one.timings.draft_n);
    assert.equal(r.timings.draft_n_accepted, 3 * one.timings.draft_n_accepted);
  });

const seed = 5;
await check("completions n=3 seeded (temperature 1): choice k = the n=1 request with seed + k, logprobs too", async () => {
  const p = { model, prompt: c.prompt, max_tokens: 12, temperature: 1, ignore_eos: true, logprobs: 2 };
  const r = await client.completions.create({ ...p, seed, n: 3 });
  const texts = new Set();
  for (let k = 0; k < 3; k++) {
    const one = await client.completions.create({ ...p, seed: seed + k });
    const ch = r.choices[k];
    assert.equal(ch.index, k);
    assert.equal(ch.text, one.choices[0].text, `choice ${k}`);
    assert.deepEqual(ch.logprobs, one.choices[0].logprobs, `choice ${k} logprobs`);
    texts.add(ch.text);
  }
  assert.ok(texts.size >= 2, "the choices differ (each has its own seed)");
  assert.equal(r.usage.completion_tokens, 36);
});

await check("chat n=3 seeded: choice k = the n=1 request with seed + k (message, logprobs, finish_reason)", async () => {
  const p = { model, messages: msgs, max_tokens: 24, temperature: 1, logprobs: true, top_logprobs: 2 };
  const r = await client.chat.completions.create({ ...p, seed: 11, n: 3 });
  let gen = 0;
  for (let k = 0; k < 3; k++) {
    const one = await client.chat.completions.create({ ...p, seed: 11 + k });
    const ch = r.choices[k];
    assert.equal(ch.index, k);
    assert.deepEqual(ch.message, one.choices[0].message, `choice ${k}`);
    assert.deepEqual(ch.logprobs, one.choices[0].logprobs, `choice ${k} logprobs`);
    assert.equal(ch.finish_reason, one.choices[0].finish_reason);
    gen += one.usage.completion_tokens;
  }
  assert.equal(r.usage.completion_tokens, gen);
});

await check("chat stream n=2 seeded: chunks reassemble per index to the non-streamed choices", async () => {
  const p = { model, messages: msgs, max_tokens: 24, temperature: 1, seed: 21, n: 2, logprobs: true, top_logprobs: 1 };
  const full = await client.chat.completions.create(p);
  const s = await client.chat.completions.create({ ...p, stream: true, stream_options: { include_usage: true } });
  const acc = [0, 1].map(() => ({ content: "", reasoning: "", finish: null, lp: [], roles: 0 }));
  let usage = null;
  for await (const ch of s) {
    if (ch.usage) usage = ch.usage;
    for (const x of ch.choices ?? []) {
      const a = acc[x.index];
      assert.ok(a, `index ${x.index}`);
      if (x.delta?.role) a.roles++;
      a.content += x.delta?.content ?? "";
      a.reasoning += x.delta?.reasoning_content ?? "";
      if (x.logprobs?.content) a.lp.push(...x.logprobs.content);
      if (x.finish_reason) { assert.equal(a.finish, null, "one finish_reason per choice"); a.finish = x.finish_reason; }
    }
  }
  for (let k = 0; k < 2; k++) {
    const m = full.choices[k];
    assert.equal(acc[k].roles, 1);
    assert.equal(acc[k].content, m.message.content ?? "");
    assert.equal(acc[k].reasoning.replace(/[ \n]+$/, ""), m.message.reasoning_content ?? "");
    assert.equal(acc[k].finish, m.finish_reason);
    assert.deepEqual(acc[k].lp, m.logprobs.content);
  }
  assert.equal(usage.completion_tokens, full.usage.completion_tokens);
  assert.equal(usage.prompt_tokens, full.usage.prompt_tokens);
});

await check("completions stream n=3 greedy: every index gets the n=1 text", async () => {
  const s = await client.completions.create({ model, prompt: c.prompt, max_tokens: c.n, temperature: 0, ignore_eos: true,
    n: 3, stream: true });
  const text = ["", "", ""], fin = [0, 0, 0];
  for await (const ch of s) for (const x of ch.choices) { text[x.index] += x.text; if (x.finish_reason) fin[x.index]++; }
  assert.deepEqual(text, [c.text, c.text, c.text]);
  assert.deepEqual(fin, [1, 1, 1]);
});

await check("n above the slot count, n = 0: BadRequestError naming 'n' and the limit", async () => {
  await assert.rejects(client.completions.create({ model, prompt: c.prompt, max_tokens: 2, n: 4 }),
    (e) => e instanceof OpenAI.BadRequestError && /'n' is 4; at most 3 /.test(e.message) && /-np/.test(e.message));
  await assert.rejects(client.chat.completions.create({ model, messages: msgs, max_tokens: 2, n: 9 }),
    (e) => e instanceof OpenAI.BadRequestError && /'n'/.test(e.message));
  await assert.rejects(client.completions.create({ model, prompt: c.prompt, max_tokens: 2, n: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && /'n'/.test(e.message));
  const r = await fetch(base + "/completion", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: c.prompt, n_predict: 2, n: 2 }) });
  assert.equal(r.status, 400, "llama-server's /completion keeps one choice");
});

await check("admission as a group: n=3 waits for three free slots, a later single request does not overtake it", async () => {
  await waitIdle(3, 5);
  const order = [];
  // A holds one slot for a while
  const a = await client.completions.create({ model, prompt: c.prompt, max_tokens: 300, temperature: 0, ignore_eos: true, stream: true });
  const it = a[Symbol.asyncIterator]();
  await it.next(); // A runs
  const b = client.completions.create({ model, prompt: "And God said", max_tokens: 8, temperature: 0, ignore_eos: true, n: 3 })
    .then((r) => { order.push("B"); return r; });
  // C only after B is in the queue (a fixed pause raced B's admission on a loaded machine)
  for (let t = 0; t < 500 && (await metric("nextn:requests_deferred")) < 1; t++) await sleep(20);
  assert.equal(await metric("nextn:requests_deferred"), 1, "B waits in the queue");
  // C decodes far longer than B, so that B's answer (all three choices) reaches us first even when
  // the machine is loaded and B's HTTP thread is slow to write it: the order then says which was
  // admitted first
  const cc = client.completions.create({ model, prompt: "Let there be light", max_tokens: 200, temperature: 0, ignore_eos: true })
    .then((r) => { order.push("C"); return r; });
  for (let x = await it.next(); !x.done; x = await it.next());
  const [rb] = await Promise.all([b, cc]);
  // only B and C are ordered: B starts when A ends, and on a loaded machine B's short answer can
  // reach us before this loop has read A's last chunks
  assert.deepEqual(order, ["B", "C"]);
  assert.ok(rb.timings.queue_ms > 0, "B waited in the queue");
  assert.equal(rb.choices.length, 3);
});

await check("a client that goes away frees all n slots (streamed and not)", async () => {
  await waitIdle(3, 5);
  const ac = new AbortController();
  const s = await client.completions.create({ model, prompt: c.prompt, max_tokens: -1, temperature: 0, ignore_eos: true,
    n: 3, stream: true }, { signal: ac.signal });
  const it = s[Symbol.asyncIterator]();
  await it.next();
  assert.equal(await idleSlots(), 0, "the three choices run");
  ac.abort();
  await waitIdle(3, 3);
  const ac2 = new AbortController();
  const p = client.chat.completions.create({ model, messages: msgs, max_tokens: -1, temperature: 0, ignore_eos: true, n: 3 },
    { signal: ac2.signal }).catch((e) => e);
  for (let t = 0; t < 100 && (await idleSlots()) !== 0; t++) await sleep(20);
  assert.equal(await idleSlots(), 0, "the three choices run");
  ac2.abort();
  assert.ok((await p) instanceof Error);
  await waitIdle(3, 3);
});

process.exit(failed);
