// serve_load.mjs - aggregate generation throughput of a running OpenAI-compatible server
// (`nextn serve`, `llama-server`, ...) under C concurrent clients.
//
//   node bench/serve_load.mjs BASE_URL [--clients C] [--requests R] [--max-tokens N]
//                             [--prompts FILE] [--temperature T] [--key KEY]
//
// Each client sends R requests one after the other to POST /v1/completions with a prompt taken
// round-robin from FILE (one token-id list per line, comma-separated, e.g.
// tests/fixtures/demo-model/prompts.txt; default), {"max_tokens": N, "temperature": T
// (default 0), "ignore_eos": true}.  Prints the completion tokens (from each reply's usage), the
// wall time from the first request to the last reply, aggregate tokens/s and the median
// per-request latency.  The server decides batching; start it with -np >= C to run the clients
// in parallel.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const args = process.argv.slice(2);
if (!args.length || args[0].startsWith("-")) {
  console.error("usage: node serve_load.mjs BASE_URL [--clients C] [--requests R] [--max-tokens N] [--prompts FILE] [--temperature T] [--key KEY]");
  process.exit(2);
}
const base = args[0];
const opt = { clients: 3, requests: 4, "max-tokens": 64, temperature: 0, key: "",
  prompts: fileURLToPath(new URL("../tests/fixtures/demo-model/prompts.txt", import.meta.url)) };
for (let i = 1; i < args.length; i += 2) {
  const k = args[i].replace(/^--/, "");
  if (!(k in opt) || i + 1 >= args.length) { console.error(`serve_load: unknown or incomplete option ${args[i]}`); process.exit(2); }
  opt[k] = typeof opt[k] === "number" ? Number(args[i + 1]) : args[i + 1];
}
const prompts = readFileSync(opt.prompts, "utf8").split("\n").filter(Boolean).map((l) => l.split(",").map(Number));
const headers = { "Content-Type": "application/json", ...(opt.key ? { Authorization: `Bearer ${opt.key}` } : {}) };

let next = 0, tokens = 0;
const lat = [];
async function client() {
  for (let r = 0; r < opt.requests; r++) {
    const prompt = prompts[next++ % prompts.length];
    const t0 = performance.now();
    const res = await fetch(base + "/v1/completions", { method: "POST", headers,
      body: JSON.stringify({ prompt, max_tokens: opt["max-tokens"], temperature: opt.temperature, ignore_eos: true }) });
    const j = await res.json();
    if (res.status !== 200) { console.error(`serve_load: HTTP ${res.status}: ${JSON.stringify(j).slice(0, 300)}`); process.exit(1); }
    tokens += j.usage.completion_tokens;
    lat.push(performance.now() - t0);
  }
}
const t0 = performance.now();
await Promise.all(Array.from({ length: opt.clients }, client));
const wall = (performance.now() - t0) / 1000;
lat.sort((a, b) => a - b);
console.log(`clients ${opt.clients} x ${opt.requests} requests x ${opt["max-tokens"]} tokens: ${tokens} tokens in ` +
  `${wall.toFixed(2)} s = ${(tokens / wall).toFixed(1)} tokens/s, median request ${(lat[lat.length >> 1] / 1000).toFixed(2)} s`);
