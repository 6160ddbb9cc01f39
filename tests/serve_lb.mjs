// serve_lb.mjs - the client half of tests/test_serve_lb.sh: a bounded burst of greedy
// completions through nginx (deploy/nginx.conf) to two `nextn serve` replicas; once the victim
// replica is busy it is killed (SIGKILL) or stopped (SIGTERM); every request must still get
// exactly the text `nextn run` gives (EXPECT.json).
//   node serve_lb.mjs LB_URL EXPECT.json VICTIM_URL VICTIM_PID SIGNAL
import { readFileSync } from "node:fs";

const [lb, expectFile, victim, pid, signal] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectFile, "utf8"));
let failed = 0;
function check(name, cond, detail) {
  if (cond) console.log(`ok: ${name}`);
  else { console.log(`FAIL: ${name}${detail !== undefined ? " -- " + JSON.stringify(detail).slice(0, 600) : ""}`); failed = 1; }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const headers = { "Content-Type": "application/json" };

async function one(i) {
  const p = want.prompts[i % want.prompts.length];
  try {
    const r = await fetch(lb + "/v1/completions", { method: "POST", headers,
      body: JSON.stringify({ prompt: p.prompt, max_tokens: p.n, temperature: 0, ignore_eos: true }) });
    const text = await r.text();
    let j = null;
    try { j = JSON.parse(text); } catch { }
    return { i, status: r.status, ok: r.status === 200 && j?.choices?.[0]?.text === p.text, got: j?.choices?.[0]?.text ?? text.slice(0, 200) };
  } catch (e) {
    return { i, status: 0, ok: false, got: String(e.cause ?? e) };
  }
}

const N = 16;
const t0 = Date.now();
const burst = Array.from({ length: N }, (_, i) => one(i));
// kill the victim once it is working on a request and has more waiting (least_conn spreads the
// burst over both replicas)
let busy = null;
for (let k = 0; k < 200; k++) {
  try { busy = await (await fetch(victim + "/health")).json(); } catch { busy = null; }
  if (busy && busy.slots_processing > 0) break;
  await sleep(10);
}
check(`${signal}: the victim replica is busy when it goes`, busy && busy.slots_processing > 0, busy);
process.kill(Number(pid), signal);
const res = await Promise.all(burst);
const bad = res.filter((r) => !r.ok);
check(`${signal}: all ${N} requests of the burst get the right answer (${Date.now() - t0} ms)`, bad.length === 0, bad);
// and the service goes on with one replica
const after = await Promise.all(Array.from({ length: 4 }, (_, i) => one(i)));
check(`${signal}: requests after it are served by the other replica`, after.every((r) => r.ok), after.filter((r) => !r.ok));
process.exit(failed);
