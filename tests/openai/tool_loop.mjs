// tool_loop.mjs - the official OpenAI Node client drives tool calls against a nextn server
// started by tests/test_serve_tools.c.  That server's replies to requests with tools are forced
// text (the test hook nx_server_params.test_force; the demo model does not write tool calls by
// itself), so what is tested here is everything after sampling: detokenizing, the reasoning
// split, the tool-call parser, the response and stream shapes, and the client's own handling of
// them - its two-step tool loop (runTools) included.  The forced replies (see the harness):
//   a request whose last message is a tool result  -> "I have the forecast.\n</think>\n\nThe weather in Paris is sunny, 22 degrees."
//   tool_choice naming get_weather                   -> the rest of an XML call (city Paris, days 2)
//   tool_choice "none" (asked with thinking off)     -> an XML call, which stays content
//   a user message mentioning "two cities"           -> two calls (XML: Paris/2, JSON: Rome/1)
//   any other request with tools                     -> "I should call get_weather.\n</think>\n\n" + an XML call (Paris/2)
//   node tool_loop.mjs BASE_URL
import OpenAI from "openai";
import assert from "node:assert/strict";

const base = process.argv[2];
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "secret", maxRetries: 0 });
const model = "demo";
let failed = 0;
async function check(name, fn) {
  try { await fn(); console.log(`ok: ${name}`); }
  catch (e) { console.log(`FAIL: ${name} -- ${String(e?.stack ?? e).slice(0, 1500)}`); failed = 1; }
}

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather", description: "Weather forecast for a city",
    parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] },
  },
};
const ask = [{ role: "user", content: "What is the weather in Paris?" }];
const answer = "The weather in Paris is sunny, 22 degrees.";

let first;
await check("step 1: the reply is a tool call (finish_reason tool_calls, arguments as JSON, reasoning apart)", async () => {
  first = await client.chat.completions.create({ model, messages: ask, tools: [weatherTool] });
  const c = first.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.role, "assistant");
  assert.equal(c.message.content, null);
  assert.equal(c.message.reasoning_content, "I should call get_weather.");
  assert.equal(c.message.tool_calls.length, 1);
  const tc = c.message.tool_calls[0];
  assert.equal(tc.type, "function");
  assert.match(tc.id, /^call_/);
  assert.equal(tc.function.name, "get_weather");
  assert.deepEqual(JSON.parse(tc.function.arguments), { city: "Paris", days: 2 });
});

await check("step 2: the tool result goes back, the answer is content (finish_reason stop)", async () => {
  const tc = first.choices[0].message.tool_calls[0];
  const r = await client.chat.completions.create({
    model, tools: [weatherTool],
    messages: [...ask, first.choices[0].message,
      { role: "tool", tool_call_id: tc.id, content: JSON.stringify({ city: "Paris", sky: "sunny", celsius: 22 }) }],
  });
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.equal(r.choices[0].message.content, answer);
  assert.equal(r.choices[0].message.tool_calls, undefined);
});

// the client's own loop: it calls the function with the parsed arguments, sends the result back
// and stops at the first reply without calls
for (const stream of [false, true]) {
  await check(`runTools (stream ${stream}): the client's two-step loop ends with the answer`, async () => {
    const calls = [];
    const runner = client.chat.completions.runTools({
      model, messages: ask, stream,
      tools: [{ type: "function", function: { name: "get_weather", description: "Weather forecast for a city",
        parameters: weatherTool.function.parameters, parse: JSON.parse,
        function: (args) => { calls.push(args); return { city: args.city, sky: "sunny", celsius: 22 }; } } }],
    });
    const content = await runner.finalContent();
    assert.deepEqual(calls, [{ city: "Paris", days: 2 }]);
    assert.equal(content, answer);
    const roles = runner.messages.map((m) => m.role);
    assert.deepEqual(roles.slice(-3), ["assistant", "tool", "assistant"]);
  });
}

await check("streamed: delta.tool_calls pieces assemble into the same call (ChatCompletionStream)", async () => {
  const s = client.chat.completions.stream({ model, messages: ask, tools: [weatherTool] });
  const deltas = [];
  s.on("chunk", (ch) => { const d = ch.choices[0]?.delta; if (d?.tool_calls) deltas.push(d.tool_calls); });
  const fin = await s.finalChatCompletion();
  const c = fin.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.tool_calls.length, 1);
  assert.equal(c.message.tool_calls[0].function.name, "get_weather");
  assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), { city: "Paris", days: 2 });
  assert.match(c.message.tool_calls[0].id, /^call_/);
  assert.ok(deltas.length >= 2, "the call arrives in pieces (name first, then arguments)");
  assert.equal(deltas[0][0].function.name, "get_weather");
  assert.equal(deltas[0][0].function.arguments, "");
  assert.ok(!(c.message.content ?? "").includes("<tool_call>"), "no call markup in the streamed content");
});

const two = [{ role: "user", content: "Compare the weather in two cities." }];
let par;
await check("parallel calls: two blocks (XML and JSON form) -> two calls in order, text before them as content", async () => {
  par = await client.chat.completions.create({ model, messages: two, tools: [weatherTool] });
  const c = par.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.content, "Checking both.");
  assert.deepEqual(c.message.tool_calls.map((t) => [t.function.name, JSON.parse(t.function.arguments)]),
    [["get_weather", { city: "Paris", days: 2 }], ["get_weather", { city: "Rome", days: 1 }]]);
  assert.notEqual(c.message.tool_calls[0].id, c.message.tool_calls[1].id);
});

await check("parallel calls streamed: the same two calls, indices 0 and 1", async () => {
  const fin = await client.chat.completions.stream({ model, messages: two, tools: [weatherTool] }).finalChatCompletion();
  assert.deepEqual(fin.choices[0].message.tool_calls.map((t) => JSON.parse(t.function.arguments)),
    [{ city: "Paris", days: 2 }, { city: "Rome", days: 1 }]);
  assert.equal(fin.choices[0].message.content, "Checking both.");
});

await check("parallel_tool_calls false: the reply ends after the first call", async () => {
  const r = await client.chat.completions.create({ model, messages: two, tools: [weatherTool], parallel_tool_calls: false });
  const c = r.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.tool_calls.length, 1);
  assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), { city: "Paris", days: 2 });
  assert.ok(r.usage.completion_tokens < par.usage.completion_tokens, `${r.usage.completion_tokens} < ${par.usage.completion_tokens}`);
});

for (const stream of [false, true]) {
  await check(`tool_choice naming the function (stream ${stream}): the reply opens inside the call`, async () => {
    const body = { model, messages: ask, tools: [weatherTool], tool_choice: { type: "function", function: { name: "get_weather" } } };
    const r = stream ? await client.chat.completions.stream(body).finalChatCompletion() : await client.chat.completions.create(body);
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls");
    assert.equal(c.message.tool_calls.length, 1);
    assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), { city: "Paris", days: 2 });
  });
}

await check("n=2: every choice has its tool call (its own id), finish_reason tool_calls; streamed per index", async () => {
  const body = { model, messages: ask, tools: [weatherTool], n: 2 };
  const r = await client.chat.completions.create(body);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  for (const c of r.choices) {
    assert.equal(c.finish_reason, "tool_calls");
    assert.equal(c.message.tool_calls.length, 1);
    assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), { city: "Paris", days: 2 });
  }
  assert.notEqual(r.choices[0].message.tool_calls[0].id, r.choices[1].message.tool_calls[0].id);
  const s = await client.chat.completions.create({ ...body, stream: true });
  const calls = [[], []], fin = [null, null];
  for await (const ch of s)
    for (const x of ch.choices) {
      for (const tc of x.delta?.tool_calls ?? []) {
        if (tc.id) calls[x.index].push({ id: tc.id, name: tc.function.name, args: "" });
        if (tc.function?.arguments) calls[x.index][tc.index].args += tc.function.arguments;
      }
      if (x.finish_reason) fin[x.index] = x.finish_reason;
    }
  assert.deepEqual(fin, ["tool_calls", "tool_calls"]);
  assert.notEqual(calls[0][0]?.id, calls[1][0]?.id);
  for (let k = 0; k < 2; k++) {
    assert.equal(calls[k].length, 1);
    assert.match(calls[k][0].id, /^call_/);
    assert.equal(calls[k][0].name, "get_weather");
    assert.deepEqual(JSON.parse(calls[k][0].args), { city: "Paris", days: 2 });
  }
});

await check("tool_choice none: no tool_calls, the text stays content", async () => {
  const r = await client.chat.completions.create({ model, messages: ask, tools: [weatherTool], tool_choice: "none",
    chat_template_kwargs: { enable_thinking: false } });
  const c = r.choices[0];
  assert.equal(c.finish_reason, "stop");
  assert.equal(c.message.tool_calls, undefined);
  assert.match(c.message.content, /^<tool_call>\n<function=get_weather>/);
});

await check("tool_choice required without tools: BadRequestError naming tool_choice", async () => {
  await assert.rejects(client.chat.completions.create({ model, messages: ask, tool_choice: "required" }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /tool_choice/.test(e.message));
});

await check("a malformed tools entry: BadRequestError naming it", async () => {
  await assert.rejects(client.chat.completions.create({ model, messages: ask, tools: [{ type: "function", function: {} }] }),
    (e) => e instanceof OpenAI.BadRequestError && /'tools'\[0\]/.test(e.message));
});

process.exit(failed);
