// serve_multiturn.mjs - time to first token per turn of a multi-turn chat against a running
// OpenAI-compatible server (`nextn serve` with or without its prompt cache, `llama-server`).
//
//   node bench/serve_multiturn.mjs BASE_URL [--turns N] [--words W] [--max-tokens M] [--key KEY]
//                                  [--label NAME] [--seed S]
//
// One conversation: a system prompt, then N user turns of about W words each (deterministic
// text from a fixed word list and seed) and the assistant's replies (greedy, M tokens at most,
// thinking off), each turn's request holding the whole history.  Each request is streamed;
// TTFT = wall time from sending it to the first chunk that carries text.  Prints one line per
// turn: "LABEL turn T: prompt P tokens, ttft X ms" and at the end the TTFT of the first turn, the
// median of turns 2..N, and the last.
const args = process.argv.slice(2);
if (!args.length || args[0].startsWith("-")) {
  console.error("usage: node serve_multiturn.mjs BASE_URL [--turns N] [--words W] [--max-tokens M] [--key KEY] [--label NAME] [--seed S]");
  process.exit(2);
}
const base = args[0];
const opt = { turns: 10, words: 120, "max-tokens": 32, key: "", label: "server", seed: 1 };
for (let i = 1; i < args.length; i += 2) {
  const k = args[i].replace(/^--/, "");
  if (!(k in opt) || i + 1 >= args.length) { console.error(`serve_multiturn: unknown or incomplete option ${args[i]}`); process.exit(2); }
  opt[k] = typeof opt[k] === "number" ? Number(args[i + 1]) : args[i + 1];
}
const headers = { "Content-Type": "application/json", ...(opt.key ? { Authorization: `Bearer ${opt.key}` } : {}) };
const words = ("the package manager installs configuration files from the archive and the kernel loads modules " +
  "when a device appears on the bus while the daemon writes its log to the journal and users read the manual " +
  "page before they change the settings of the network interface or the firewall rules of the system").split(" ");
let x = opt.seed >>> 0;
function text(n) {
  const out = [];
  for (let i = 0; i < n; i++) { x = (x * 1103515245 + 12345) >>> 0; out.push(words[(x >>> 8) % words.length]); }
  return out.join(" ");
}

async function turn(messages) {
  const t0 = performance.now();
  const r = await fetch(base + "/v1/chat/completions", { method: "POST", headers, body: JSON.stringify({
    messages, max_tokens: opt["max-tokens"], temperature: 0, stream: true, stream_options: { include_usage: true },
    chat_template_kwargs: { enable_thinking: false } }) });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  let ttft = null, content = "", usage = null, buf = "";
  const dec = new TextDecoder();
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const d = JSON.parse(ev.slice(6));
      if (d.usage) usage = d.usage;
      const delta = d.choices?.[0]?.delta ?? {};
      const piece = (delta.content ?? "") + (delta.reasoning_content ?? "");
      if (piece.length && ttft === null) ttft = performance.now() - t0;
      content += delta.content ?? "";
    }
  }
  return { ttft: ttft ?? performance.now() - t0, content, prompt: usage?.prompt_tokens ?? -1 };
}

const messages = [{ role: "system", content: "You are a helpful assistant. " + text(40) }];
const ttfts = [];
for (let t = 1; t <= opt.turns; t++) {
  messages.push({ role: "user", content: text(opt.words) });
  const r = await turn(messages);
  ttfts.push(r.ttft);
  console.log(`${opt.label} turn ${t}: prompt ${r.prompt} tokens, ttft ${r.ttft.toFixed(1)} ms`);
  messages.push({ role: "assistant", content: r.content });
}
const rest = ttfts.slice(1).sort((a, b) => a - b);
const med = rest.length ? rest[Math.floor(rest.length / 2)] : NaN;
console.log(`${opt.label}: ttft turn 1 ${ttfts[0].toFixed(1)} ms, median of turns 2..${opt.turns} ${med.toFixed(1)} ms, turn ${opt.turns} ${ttfts[ttfts.length - 1].toFixed(1)} ms`);
