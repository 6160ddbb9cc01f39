// serve_stops.mjs - does one request's stop strings slow the other slots down?  (issue 32 item 1)
//
//   node bench/serve_stops.mjs BASE_URL [--rounds R] [--max-tokens N] [--stops S] [--stop-len L]
//                                       [--head-start MS]
//
// Start the server with -np 2 and a large -c (the neighbour generates for the whole round).  Each round runs, in random order, two paired measurements: the
// "victim" (POST /completion, greedy, ignore_eos, N tokens) beside a "neighbour" that generates
// without stop strings, and beside the same neighbour with S stop strings of L bytes that never
// match (the neighbour starts MS ms first - the old rescan cost grew with the text - and outlives the
// victim).  It prints the victim's median
// timings.predicted_per_second in each case and their ratio.
const args = process.argv.slice(2);
if (!args.length || args[0].startsWith("-")) {
  console.error("usage: node serve_stops.mjs BASE_URL [--rounds R] [--max-tokens N] [--stops S] [--stop-len L] [--head-start MS]");
  process.exit(2);
}
const base = args[0];
const opt = { rounds: 5, "max-tokens": 128, stops: 16, "stop-len": 32768, "head-start": 50 };
for (let i = 1; i < args.length; i += 2) {
  const k = args[i].replace(/^--/, "");
  if (!(k in opt) || i + 1 >= args.length) { console.error(`serve_stops: unknown or incomplete option ${args[i]}`); process.exit(2); }
  opt[k] = Number(args[i + 1]);
}
const headers = { "Content-Type": "application/json" };
const stops = Array.from({ length: opt.stops }, (_, i) => "\u0001" + "z".repeat(opt["stop-len"] - 2) + String.fromCharCode(65 + (i % 26)));
const post = (body, signal) => fetch(base + "/completion", { method: "POST", headers, body: JSON.stringify(body), signal });

async function victimBeside(withStops) {
  const ac = new AbortController();
  const neighbour = post({ prompt: "Once upon a time", n_predict: -1, temperature: 0, ignore_eos: true,
    ...(withStops ? { stop: stops } : {}) }, ac.signal).catch(() => null);
  await new Promise((r) => setTimeout(r, opt["head-start"])); // the neighbour is generating
  const r = await (await post({ prompt: "In the beginning", n_predict: opt["max-tokens"], temperature: 0, ignore_eos: true })).json();
  ac.abort();
  await neighbour;
  await new Promise((r) => setTimeout(r, 200)); // the neighbour's slot is free again
  return r.timings.predicted_per_second;
}

const med = (a) => { const s = [...a].sort((x, y) => x - y); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const plain = [], withStops = [];
for (let r = 0; r < opt.rounds; r++) {
  const order = Math.random() < 0.5 ? [false, true] : [true, false];
  for (const w of order) (w ? withStops : plain).push(await victimBeside(w));
}
const a = med(plain), b = med(withStops);
console.log(`victim tokens/s beside a plain neighbour: median ${a.toFixed(1)} (${plain.map((x) => x.toFixed(1)).join(" ")})`);
console.log(`victim tokens/s beside ${opt.stops} stop strings of ${opt["stop-len"]} bytes: median ${b.toFixed(1)} (${withStops.map((x) => x.toFixed(1)).join(" ")})`);
console.log(`ratio (with / without): ${(b / a).toFixed(3)}`);
