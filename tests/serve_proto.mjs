// serve_proto.mjs - the protocol half of tests/test_serve_proto.sh: raw sockets and fetch against
// a running `nextn serve`, for what an HTTP client, a browser or an attacker sends that is not an
// ordinary well-formed API call.
//   node serve_proto.mjs MODE BASE_URL [ARGS...]
//   proto      BASE KEY          malformed-request table, protocol details (HEAD, 405 + Allow, auth
//                                scheme, WWW-Authenticate, no CORS by default, idle keep-alive close)
//   cors       BASE ORIGIN       --cors ORIGIN: only that origin is allowed, pre-flight included
//   clients    BASE KEY          what off-the-shelf clients meet (issue 37): a placeholder "model" is
//                                answered by the one model, /v1/models public under --api-key,
//                                --no-slots, ignore_eos's end-of-generation bans in generation_settings
//   rebind     BASE              a key-less server run with --allowed-host good.example: Host names
//                                other than IP addresses, localhost and allowed names get 403; a
//                                POST a web page could send without pre-flight gets 415
//   disconnect BASE              a non-streamed client that hangs up (running or queued) frees its place
//   sigterm    BASE PID          SIGTERM with requests running, queued and streaming: each gets a
//                                final error (503, same for streams) or completes
// Prints "ok: ..." / "FAIL: ..." per check; exits 1 if any check failed.
import net from "node:net";

const [mode, base, ...rest] = process.argv.slice(2);
const url = new URL(base);
const host = url.hostname.replace(/^\[|\]$/g, "");
const port = Number(url.port);
let failed = 0;
function check(name, cond, detail) {
  if (cond) console.log(`ok: ${name}`);
  else { console.log(`FAIL: ${name}${detail !== undefined ? " -- " + JSON.stringify(detail).slice(0, 600) : ""}`); failed = 1; }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One raw HTTP exchange: writes `data` (string or Buffer), reads until the server closes or
// `ms` pass (keep-alive), returns {status, headers (lower-case names), body, raw, closed}.
function raw(data, ms = 3000) {
  return new Promise((resolve) => {
    const sock = net.connect({ host, port });
    const chunks = [];
    let closed = false, done = false;
    const finish = () => {
      if (done) return;
      done = true;
      sock.destroy();
      const buf = Buffer.concat(chunks);
      const rawText = buf.toString("latin1");
      const he = rawText.indexOf("\r\n\r\n");
      const head = he >= 0 ? rawText.slice(0, he) : rawText;
      const lines = head.split("\r\n");
      const status = Number((lines[0].match(/^HTTP\/1\.[01] (\d{3})/) || [])[1] || 0);
      const headers = {};
      for (const l of lines.slice(1)) { const i = l.indexOf(":"); if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim(); }
      let body = he >= 0 ? buf.subarray(Buffer.byteLength(rawText.slice(0, he + 4), "latin1")) : Buffer.alloc(0);
      if (headers["content-length"] !== undefined) body = body.subarray(0, Number(headers["content-length"]));
      resolve({ status, headers, body: body.toString("utf8"), raw: rawText, closed });
    };
    sock.on("data", (d) => {
      chunks.push(d);
      // one complete response with a Content-Length: done (keep-alive connections stay open)
      const t = Buffer.concat(chunks).toString("latin1");
      const he = t.indexOf("\r\n\r\n");
      const m = t.match(/\r\ncontent-length: *(\d+)/i);
      if (he >= 0 && m && Buffer.byteLength(t, "latin1") >= he + 4 + Number(m[1]) && !data.toString().startsWith("HEAD")) finish();
    });
    sock.on("end", () => { closed = true; finish(); });
    sock.on("error", () => { closed = true; finish(); });
    sock.setTimeout(ms, finish);
    sock.write(data);
  });
}
const json = (s) => { try { return JSON.parse(s); } catch { return null; } };

// A request with the usual headers; body: object (JSON), string or Buffer (sent as is).
function req(method, path, { body, headers = {}, ct = "application/json", key, hostHdr = url.host } = {}) {
  const b = body === undefined ? Buffer.alloc(0) : Buffer.isBuffer(body) ? body : Buffer.from(typeof body === "string" ? body : JSON.stringify(body), "utf8");
  let h = `${method} ${path} HTTP/1.1\r\n${hostHdr === null ? "" : `Host: ${hostHdr}\r\n`}Connection: close\r\n`;
  if (key) h += `Authorization: Bearer ${key}\r\n`;
  if (ct && method === "POST") h += `Content-Type: ${ct}\r\n`;
  for (const [k, v] of Object.entries(headers)) h += `${k}: ${v}\r\n`;
  if (method === "POST" || b.length) h += `Content-Length: ${b.length}\r\n`;
  return raw(Buffer.concat([Buffer.from(h + "\r\n", "latin1"), b]));
}

async function health() {
  const r = await fetch(base + "/health");
  return r.json();
}
async function waitFor(pred, ms) {
  const t0 = Date.now();
  for (;;) {
    const h = await health();
    if (pred(h)) return { ok: true, h, ms: Date.now() - t0 };
    if (Date.now() - t0 > ms) return { ok: false, h, ms: Date.now() - t0 };
    await sleep(50);
  }
}

if (mode === "proto") {
  const key = rest[0];
  const P = "/v1/completions", C = "/v1/chat/completions";
  const chat = (extra) => ({ messages: [{ role: "user", content: "hi" }], max_tokens: 2, ...extra });
  const cmpl = (extra) => ({ prompt: "In the beginning", max_tokens: 2, ...extra });
  // [name, method, path, options, status, error type, message regex]
  const table = [
    ["invalid JSON", "POST", P, { body: '{"prompt": "x",' }, 400, "invalid_request_error", /not valid JSON/],
    ["trailing garbage after the JSON body", "POST", P, { body: '{"prompt": "x", "max_tokens": 1} xyz' }, 400, "invalid_request_error", /after the JSON/],
    ["a second JSON value after the body", "POST", P, { body: '{"prompt": "x"}{"prompt": "y"}' }, 400, "invalid_request_error", /after the JSON/],
    ["body not an object", "POST", P, { body: "[1, 2]" }, 400, "invalid_request_error", /JSON object/],
    ["NUL escape in the prompt", "POST", P, { body: '{"prompt": "abc\\u0000def", "max_tokens": 1}' }, 400, "invalid_request_error", /'prompt'.*NUL/],
    ["NUL escape in chat content", "POST", C, { body: '{"messages": [{"role": "user", "content": "a\\u0000b"}]}' }, 400, "invalid_request_error", /'messages'\[0\]\.content.*NUL/],
    ["NUL escape in a stop string", "POST", P, { body: '{"prompt": "x", "stop": ["a\\u0000"]}' }, 400, "invalid_request_error", /'stop'\[0\].*NUL/],
    ["raw 0x00 byte in a JSON string", "POST", P, { body: Buffer.from('{"prompt": "ab\0cd"}', "latin1") }, 400, "invalid_request_error", /control character 0x00/],
    ["raw 0x01 byte in a JSON string", "POST", P, { body: Buffer.from('{"prompt": "ab\x01cd"}', "latin1") }, 400, "invalid_request_error", /control character 0x01/],
    ["invalid UTF-8 in stop", "POST", P, { body: Buffer.concat([Buffer.from('{"prompt": "x", "stop": ["a'), Buffer.from([0xff, 0xfe]), Buffer.from('"]}')]) }, 400, "invalid_request_error", /'stop'\[0\].*UTF-8/],
    ["invalid UTF-8 in the prompt", "POST", P, { body: Buffer.concat([Buffer.from('{"prompt": "a'), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]) }, 400, "invalid_request_error", /'prompt'.*UTF-8/],
    ["lone surrogate escape", "POST", P, { body: '{"prompt": "a\\ud800b"}' }, 400, "invalid_request_error", /'prompt'/],
    ["seed 1.5", "POST", P, { body: cmpl({ seed: 1.5 }) }, 400, "invalid_request_error", /'seed' must be an integer/],
    ["max_tokens 2.5", "POST", P, { body: cmpl({ max_tokens: 2.5 }) }, 400, "invalid_request_error", /'max_tokens' must be an integer/],
    ["temperature not a number", "POST", P, { body: cmpl({ temperature: "hot" }) }, 400, "invalid_request_error", /'temperature' must be a number/],
    ["echo (unsupported)", "POST", P, { body: cmpl({ echo: true }) }, 400, "invalid_request_error", /'echo'/],
    ["best_of 2 (unsupported)", "POST", P, { body: cmpl({ best_of: 2 }) }, 400, "invalid_request_error", /'best_of'/],
    ["suffix (unsupported)", "POST", P, { body: cmpl({ suffix: "x" }) }, 400, "invalid_request_error", /'suffix'/],
    ["logit_bias with an id outside the vocabulary", "POST", P, { body: cmpl({ logit_bias: { "99999999": 10 } }) }, 400, "invalid_request_error", /'logit_bias'/],
    ["logit_bias banning every token", "POST", P, { body: cmpl({ logit_bias: Array.from({ length: 4096 }, (_, i) => [i, false]) }) }, 400, "invalid_request_error", /'logit_bias' bans every token/],
    ["logit_bias with a non-number bias", "POST", P, { body: cmpl({ logit_bias: { "5": "x" } }) }, 400, "invalid_request_error", /'logit_bias'/],
    ["response_format json_object (unsupported)", "POST", C, { body: chat({ response_format: { type: "json_object" } }) }, 400, "invalid_request_error", /'response_format'/],
    ["tool_choice required without tools", "POST", C, { body: chat({ tool_choice: "required" }) }, 400, "invalid_request_error", /'tool_choice'/],
    ["tool_choice naming an unknown tool", "POST", C, { body: chat({ tools: [{ type: "function", function: { name: "f" } }], tool_choice: { type: "function", function: { name: "g" } } }) }, 400, "invalid_request_error", /'tool_choice'.*'g'/],
    ["stop strings over 512 KiB together", "POST", P, { body: cmpl({ stop: Array.from({ length: 16 }, (_, i) => "s".repeat(32768) + i) }) }, 400, "invalid_request_error", /'stop'.*524288 bytes/],
    ["17 stop strings", "POST", P, { body: cmpl({ stop: Array.from({ length: 17 }, (_, i) => "s" + i) }) }, 400, "invalid_request_error", /'stop' has more than 16/],
    ["a duplicate key", "POST", P, { body: '{"prompt": "x", "max_tokens": 1, "max_tokens": 2}' }, 400, "invalid_request_error", /'max_tokens' more than once/],
    ["a duplicate key in a message", "POST", C, { body: '{"messages": [{"role": "user", "content": "a", "content": "b"}], "max_tokens": 1}' }, 400, "invalid_request_error", /'messages'\[0\] has the key 'content' more than once/],
    ["an unknown key in a message", "POST", C, { body: chat({ messages: [{ role: "user", content: "hi", frobnicate: 1 }] }) }, 400, "invalid_request_error", /'messages'\[0\]\.frobnicate is not a known field/],
    ["an unknown key in a content part", "POST", C, { body: chat({ messages: [{ role: "user", content: [{ type: "text", text: "hi", image_url: "x" }] }] }) }, 400, "invalid_request_error", /'messages'\[0\]\.content\[0\]\.image_url/],
    ["an unknown key in a tool call", "POST", C, { body: chat({ messages: [{ role: "user", content: "hi" }, { role: "assistant", content: null, tool_calls: [{ id: "1", type: "function", function: { name: "f", arguments: "{}", extra: 1 } }] }, { role: "user", content: "ok" }] }) }, 400, "invalid_request_error", /'messages'\[1\]\.tool_calls\[0\]\.function\.extra/],
    ["an unknown key in a tool", "POST", C, { body: chat({ tools: [{ type: "function", function: { name: "f", parameters: {} }, cache: true }] }) }, 400, "invalid_request_error", /'tools'\[0\]\.cache is not a known field/],
    ["strict: true in a tool (not enforced here)", "POST", C, { body: chat({ tools: [{ type: "function", function: { name: "f", strict: true } }] }) }, 400, "invalid_request_error", /'tools'\[0\]\.function\.strict/],
    ["an unknown parameter", "POST", P, { body: cmpl({ frobnicate: 1 }) }, 400, "invalid_request_error", /'frobnicate'/],
    ["a chat parameter on completions", "POST", P, { body: cmpl({ messages: [] }) }, 400, "invalid_request_error", /'messages'/],
    ["an unknown model", "POST", P, { body: cmpl({ model: "gpt-4" }) }, 404, "not_found_error", /'model'.*gpt-4/],
    ["Content-Type text/plain", "POST", P, { body: cmpl(), ct: "text/plain" }, 415, "invalid_request_error", /Content-Type/],
    ["no Content-Type", "POST", P, { body: cmpl(), ct: null }, 415, "invalid_request_error", /Content-Type/],
    ["Content-Type form", "POST", C, { body: chat(), ct: "application/x-www-form-urlencoded" }, 415, "invalid_request_error", /application\/json/],
    ["body over --max-body", "POST", P, { body: JSON.stringify({ prompt: "x".repeat(1100000) }) }, 413, "invalid_request_error", /--max-body/],
    ["GET on completions", "GET", P, {}, 405, "invalid_request_error", /POST/],
    ["POST on /health", "POST", "/health", { body: "{}" }, 405, "invalid_request_error", /GET/],
    ["DELETE on /v1/models", "DELETE", "/v1/models", {}, 405, "invalid_request_error", /GET/],
    ["unknown path", "GET", "/v1/nowhere", {}, 404, "not_found_error", /no endpoint/],
    ["unknown model id", "GET", "/v1/models/gpt-4", {}, 404, "not_found_error", /gpt-4/],
    ["tokenize without content", "POST", "/tokenize", { body: {} }, 400, "invalid_request_error", /'content'/],
    ["detokenize with a bad id", "POST", "/detokenize", { body: { tokens: [1, 1e9] } }, 400, "invalid_request_error", /'tokens'\[1\]/],
    ["detokenize with an id beyond int64", "POST", "/detokenize", { body: '{"tokens": [1e300]}' }, 400, "invalid_request_error", /'tokens'\[0\]/],
    ["no API key", "POST", P, { body: cmpl(), key: null }, 401, "authentication_error", /API key/],
    ["wrong API key", "POST", P, { body: cmpl(), key: "secreT" }, 401, "authentication_error", /API key/],
    ["header section too large", "GET", "/health", { headers: { "X-Big": "a".repeat(40000) } }, 431, "invalid_request_error", /header/],
    ["URL too long", "GET", "/health?" + "a".repeat(20000), {}, 414, "invalid_request_error", /URL/],
  ];
  for (const [name, method, path, o, status, type, re] of table) {
    const r = await req(method, path, { key: "key" in o ? o.key : key, ...o });
    const j = json(r.body);
    check(`${name}: ${status} ${type}`, r.status === status && r.headers["content-type"]?.startsWith("application/json") &&
      j?.error?.type === type && j?.error?.code === status && re.test(j?.error?.message ?? ""), [r.status, r.headers["content-type"], r.body.slice(0, 300)]);
    if (status === 405) check(`${name}: Allow header`, /GET|POST/.test(r.headers["allow"] ?? ""), r.headers);
    if (status === 401) check(`${name}: WWW-Authenticate: Bearer`, /^Bearer/.test(r.headers["www-authenticate"] ?? ""), r.headers);
  }
  // parameters at their no-op value are accepted; so are metadata fields that do not change the output
  const neutral = { logprobs: false, n: 1, echo: false, best_of: 1, suffix: null, logit_bias: {}, user: "u", model: "demo",
    stream: false, frequency_penalty: 0 };
  let r = await req("POST", P, { key, body: cmpl(neutral) });
  check("neutral values of unsupported parameters and metadata fields: 200", r.status === 200, r.body);
  r = await req("POST", C, { key, body: chat({ response_format: { type: "text" }, tool_choice: "none", parallel_tool_calls: true }) });
  check("chat: response_format text, tool_choice none: 200", r.status === 200, r.body);
  r = await req("POST", P, { key, body: cmpl(), ct: "Application/JSON; charset=utf-8" });
  check("Content-Type with a charset and in capitals: 200", r.status === 200, r.body);

  // protocol details
  r = await raw(`HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  check("HEAD /health: 200, no body", r.status === 200 && r.raw.split("\r\n\r\n")[1] === "", r.raw);
  for (const scheme of ["bearer", "BEARER", "Bearer"]) {
    r = await req("GET", "/v1/models", { headers: { Authorization: `${scheme} ${key}` } });
    check(`Authorization scheme '${scheme}' accepted`, r.status === 200, [r.status, r.body]);
  }
  r = await req("GET", "/v1/models", { headers: { Authorization: `Bearer  ${key}x` } });
  check("a key with a different suffix is refused", r.status === 401);
  r = await req("GET", "/v1/models", { headers: { Authorization: `Basic ${key}` } });
  check("another scheme is refused", r.status === 401);
  r = await req("POST", P, { key, body: cmpl(), headers: { Origin: "https://evil.example" } });
  check("no CORS header without --cors", r.status === 200 && r.headers["access-control-allow-origin"] === undefined, r.headers);
  r = await req("OPTIONS", P, { headers: { Origin: "https://evil.example", "Access-Control-Request-Method": "POST" } });
  check("pre-flight without --cors: no CORS grant", r.headers["access-control-allow-origin"] === undefined && r.status < 500, [r.status, r.headers]);
  // the reply to an error that closes the connection says so
  r = await req("GET", "/health", { headers: { "X-Big": "a".repeat(40000) } });
  check("431: the reply closes the connection", /close/i.test(r.headers["connection"] ?? ""), r.headers);
  // an idle keep-alive connection is closed by the server after --timeout (2 s in the test)
  const t0 = Date.now();
  const ka = await raw(`GET /health HTTP/1.1\r\nHost: x\r\n\r\n`, 8000);
  const waited = Date.now() - t0;
  // raw() returns after the full response; wait for the close on a second connection
  const idle = await new Promise((resolve) => {
    const sock = net.connect({ host, port }, () => sock.write(`GET /health HTTP/1.1\r\nHost: x\r\n\r\n`));
    const t1 = Date.now();
    sock.on("data", () => {});
    sock.on("close", () => resolve(Date.now() - t1));
    setTimeout(() => { sock.destroy(); resolve(-1); }, 8000);
  });
  check(`idle keep-alive connection closed by the server after the timeout (${idle} ms)`, ka.status === 200 && idle >= 1500 && idle < 6000, [waited, idle]);
  process.exit(failed);
}

if (mode === "cors") {
  const origin = rest[0];
  let r = await req("POST", "/v1/completions", { body: { prompt: "x", max_tokens: 1 }, headers: { Origin: origin } });
  check("--cors: the allowed origin is echoed, Vary: Origin", r.status === 200 && r.headers["access-control-allow-origin"] === origin &&
    /Origin/.test(r.headers["vary"] ?? ""), r.headers);
  r = await req("POST", "/v1/completions", { body: { prompt: "x", max_tokens: 1 }, headers: { Origin: "https://evil.example" } });
  check("--cors: another origin gets no grant", r.headers["access-control-allow-origin"] === undefined, r.headers);
  r = await req("OPTIONS", "/v1/chat/completions", { headers: { Origin: origin, "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type" } });
  check("--cors: pre-flight for the allowed origin: 200 (as llama-server) with methods and headers", r.status === 200 &&
    r.headers["access-control-allow-origin"] === origin && /POST/.test(r.headers["access-control-allow-methods"] ?? "") &&
    /content-type/i.test(r.headers["access-control-allow-headers"] ?? "") && /authorization/i.test(r.headers["access-control-allow-headers"] ?? ""), [r.status, r.headers]);
  r = await req("GET", "/v1/nowhere", { headers: { Origin: origin } });
  check("--cors: errors carry the grant too (the page can read them)", r.status === 404 && r.headers["access-control-allow-origin"] === origin, r.headers);
  process.exit(failed);
}

if (mode === "clients") {
  const key = rest[0];
  // the OpenAI SDKs send whatever name the app was written for: the one model answers, named truly
  let r = await req("POST", "/v1/chat/completions", { key, body: { model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], max_tokens: 2 } });
  let j = json(r.body);
  check("a placeholder model name is answered by the served model, and the reply names it", r.status === 200 && j?.model === "alt", [r.status, r.body.slice(0, 300)]);
  r = await req("POST", "/v1/completions", { key, body: { model: "text-davinci-003", prompt: "In the beginning", max_tokens: 2 } });
  check("the same on /v1/completions", r.status === 200 && json(r.body)?.model === "alt", [r.status, r.body.slice(0, 300)]);
  r = await req("POST", "/v1/completions", { key, body: { model: 5, prompt: "x", max_tokens: 1 } });
  check("a model that is not a string is still a 400", r.status === 400 && /'model'/.test(r.body), [r.status, r.body]);
  // /v1/models is public (as llama-server's); generation still needs the key
  r = await req("GET", "/v1/models", {});
  j = json(r.body);
  check("GET /v1/models without the key: 200, every --alias (repeated and comma-listed) listed", r.status === 200 &&
    j?.data?.[0]?.id === "alt" && JSON.stringify(j.data[0].aliases) === JSON.stringify(["alt", "demo", "third"]), [r.status, r.body]);
  r = await req("GET", "/models", {});
  check("GET /models without the key: 200", r.status === 200, r.status);
  r = await req("POST", "/v1/completions", { body: { prompt: "x", max_tokens: 1 } });
  check("generation without the key: still 401", r.status === 401, [r.status, r.body]);
  r = await req("GET", "/props", {});
  check("/props without the key: still 401", r.status === 401, r.status);
  // --no-slots
  r = await req("GET", "/slots", { key });
  j = json(r.body);
  check("--no-slots: GET /slots is 501 not_supported_error", r.status === 501 && j?.error?.type === "not_supported_error" &&
    /--no-slots/.test(j?.error?.message ?? ""), [r.status, r.body]);
  // ignore_eos bans the end-of-generation tokens, and generation_settings.logit_bias says so
  r = await req("POST", "/completion", { key, body: { prompt: "In the beginning", n_predict: 2, ignore_eos: true, logit_bias: [[5, 1.5]] } });
  j = json(r.body);
  const lb = j?.generation_settings?.logit_bias ?? [];
  const bans = lb.filter((e) => e[1] === false).map((e) => e[0]);
  check("ignore_eos: generation_settings.logit_bias keeps the request's entries and adds a ban per EOG token",
    r.status === 200 && lb.length >= 2 && lb[0][0] === 5 && lb[0][1] === 1.5 && bans.length === lb.length - 1, [r.status, lb]);
  let texts = [];
  for (const id of bans) {
    const d = await req("POST", "/detokenize", { key, body: { tokens: [id] } });
    texts.push(json(d.body)?.content);
  }
  check("ignore_eos: the banned tokens are the end-of-generation ones (<|endoftext|>, <|im_end|>, ...)",
    texts.length > 0 && texts.every((t) => /^<\|[a-z_]+\|>$/.test(t ?? "")) && texts.includes("<|endoftext|>"), texts);
  // llama.cpp's further samplers are honoured: XTC at probability 1 and threshold 0 on the top 2
  // removes the best, so greedy takes the second-best token
  r = await req("POST", "/completion", { key, body: { prompt: "In the beginning", n_predict: 1, temperature: 0, n_probs: 2 } });
  const alt = json(r.body)?.completion_probabilities?.[0]?.top_logprobs?.[1]?.id;
  r = await req("POST", "/completion", { key, body: { prompt: "In the beginning", n_predict: 1, temperature: 0, top_k: 2,
    xtc_probability: 1, xtc_threshold: 0, return_tokens: true } });
  j = json(r.body);
  check("xtc_probability 1, xtc_threshold 0, top_k 2, greedy: the second-best token", alt !== undefined && j?.tokens?.[0] === alt, [alt, j?.tokens]);
  check("generation_settings: XTC's fields and 'xtc' in the sampler list", j?.generation_settings?.xtc_probability === 1 &&
    j.generation_settings.xtc_threshold === 0 && JSON.stringify(j.generation_settings.samplers) === '["penalties","top_k","top_p","min_p","xtc","temperature"]',
    j?.generation_settings);
  r = await req("POST", "/v1/completions", { key, body: { prompt: "In the beginning", max_tokens: 2, seed: 3, typ_p: 0.9, top_n_sigma: 2,
    dynatemp_range: 0.5, dynatemp_exponent: 2, typical_p: 0.8 } });
  check("typ_p / typical_p, top_n_sigma, dynatemp_*: 200", r.status === 200, r.body.slice(0, 300));
  r = await req("POST", "/completion", { key, body: { prompt: "In the beginning", n_predict: 1, typical_p: 0.7, top_n_sigma: 1.5,
    dynatemp_range: 0.25, samplers: ["top_n_sigma", "top_k", "typ_p", "temperature"] } });
  j = json(r.body)?.generation_settings;
  check("generation_settings reports them; samplers in llama.cpp's order", r.status === 200 && Math.abs(j?.typical_p - 0.7) < 1e-6 &&
    j.top_n_sigma === 1.5 && j.dynatemp_range === 0.25 && JSON.stringify(j.samplers) === '["top_n_sigma","top_k","typ_p","temperature"]', j);
  // DRY: a repetitive prompt, greedy; a strong DRY changes the continuation, reports its fields
  const rp = "And God said, Let there be light. And God said, Let there be light. And God said,";
  r = await req("POST", "/completion", { key, body: { prompt: rp, n_predict: 12, temperature: 0, return_tokens: true } });
  const plainToks = json(r.body)?.tokens;
  r = await req("POST", "/completion", { key, body: { prompt: rp, n_predict: 12, temperature: 0, return_tokens: true,
    dry_multiplier: 50, dry_base: 1.75, dry_allowed_length: 1, dry_penalty_last_n: -1, dry_sequence_breakers: ["\n", "."] } });
  j = json(r.body);
  check("DRY: a strong penalty changes the greedy continuation of a repetitive prompt", r.status === 200 && plainToks?.length === 12 &&
    JSON.stringify(j?.tokens) !== JSON.stringify(plainToks), [plainToks, j?.tokens, r.body.slice(0, 200)]);
  const gs = j?.generation_settings;
  check("DRY: generation_settings reports it, 'dry' in the sampler list", gs?.dry_multiplier === 50 && gs.dry_allowed_length === 1 &&
    JSON.stringify(gs.dry_sequence_breakers) === JSON.stringify(["\n", "."]) && gs.samplers?.[1] === "dry", gs);
  r = await req("POST", "/completion", { key, body: { prompt: "In the beginning", n_predict: 1, samplers: ["temperature", "top_p", "xtc"] } });
  check("samplers in another order: served, that order reported", r.status === 200 &&
    JSON.stringify(json(r.body)?.generation_settings?.samplers) === '["temperature","top_p","xtc"]', r.body.slice(0, 300));
  r = await req("POST", "/completion", { key, body: { prompt: "x", n_predict: 1, dry_base: 0.5 } });
  check("dry_base below 1 means the default (as llama-server)", r.status === 200 && json(r.body)?.generation_settings?.dry_base === 1.75, r.body.slice(0, 300));
  for (const [what, body, re] of [["dry_sequence_breakers []", { dry_sequence_breakers: [] }, /'dry_sequence_breakers'/],
    ["dry_sequence_breakers not strings", { dry_sequence_breakers: [1] }, /'dry_sequence_breakers'/], ["typ_p 1.5", { typ_p: 1.5 }, /'typ_p'/], ["xtc_threshold -1", { xtc_threshold: -1 }, /'xtc_threshold'/],
    ["a sampler twice", { samplers: ["top_k", "top_k"] }, /samplers/]]) {
    r = await req("POST", "/completion", { key, body: { prompt: "x", n_predict: 1, ...body } });
    check(`${what}: 400 naming it`, r.status === 400 && re.test(json(r.body)?.error?.message ?? ""), [r.status, r.body]);
  }
  r = await req("POST", "/completion", { key, body: { prompt: "In the beginning", n_predict: 2 } });
  check("without ignore_eos: no ban listed", r.status === 200 && (json(r.body)?.generation_settings?.logit_bias ?? [1]).length === 0, r.body.slice(0, 300));
  process.exit(failed);
}

if (mode === "rebind") {
  const P = "/v1/completions", E = "/slots/0?action=erase";
  const body = { prompt: "x", max_tokens: 1 };
  for (const [name, hostHdr, status] of [["a foreign host name", "evil.example:8080", 403], ["a foreign name, no port", "rebind.attacker.example", 403],
    ["an allowed name (--allowed-host, any case, any port)", "GOOD.example:1234", 200], ["the second allowed name", "other.example", 200],
    ["localhost", "localhost:8080", 200], ["localhost.", "localhost.", 200], ["an IPv4 address", "10.1.2.3:80", 200],
    ["a bracketed IPv6 address", "[::1]:9", 200], ["no Host header", null, 200], ["a name that only starts like localhost", "localhost.evil.example", 403]]) {
    const r = await req("POST", P, { body, hostHdr });
    const j = json(r.body);
    check(`Host ${hostHdr}: ${status} (${name})`, r.status === status && (status !== 403 ||
      (j?.error?.type === "permission_error" && /Host.*--allowed-host/.test(j.error.message))), [r.status, r.body.slice(0, 300)]);
  }
  let r = await req("GET", "/health", { hostHdr: "evil.example" });
  check("Host check: /health (no key needed either) still answers", r.status === 200, r.status);
  // "simple" cross-origin requests (no pre-flight) cannot change state
  for (const [name, o, status] of [["empty text/plain POST", { ct: "text/plain" }, 415], ["empty POST without Content-Type", { ct: null }, 415],
    ["empty form POST", { ct: "application/x-www-form-urlencoded" }, 415], ["text/plain body", { ct: "text/plain", body: "{}" }, 415],
    ["empty POST with application/json", {}, 200], ["empty POST with X-Requested-With", { ct: null, headers: { "X-Requested-With": "x" } }, 200],
    ["empty POST with Authorization", { ct: null, headers: { Authorization: "Bearer x" } }, 200]]) {
    r = await req("POST", E, o);
    const j = json(r.body);
    check(`/slots erase, ${name}: ${status}`, r.status === status && (status !== 415 || /Content-Type: application\/json/.test(j?.error?.message ?? "")),
      [r.status, r.body.slice(0, 300)]);
  }
  r = await req("POST", "/tokenize", { ct: "text/plain", body: '{"content":"x"}' });
  check("/tokenize with a text/plain body: 415", r.status === 415, r.status);
  process.exit(failed);
}

// Generation that lasts: ignore_eos until the slot is full.
const long = (extra) => ({ prompt: "In the beginning God created", max_tokens: -1, ignore_eos: true, temperature: 0, ...extra });
const hdrs = { "Content-Type": "application/json" };

if (mode === "disconnect") {
  // 1 slot. A running non-streamed request whose client goes away frees the slot.
  let h = await health();
  check("disconnect: starts idle", h.slots_idle === 1 && h.requests_queued === 0, h);
  const ac = new AbortController();
  const p = fetch(base + "/v1/completions", { method: "POST", headers: hdrs, body: JSON.stringify(long()), signal: ac.signal }).catch(() => "aborted");
  let w = await waitFor((x) => x.slots_processing === 1, 5000);
  check("disconnect: the request runs", w.ok, w.h);
  ac.abort();
  await p;
  w = await waitFor((x) => x.slots_idle === 1 && x.slots_processing === 0, 3000);
  check(`disconnect: a running non-streamed request is cancelled and frees its slot within 3 s (${w.ms} ms)`, w.ok, w.h);
  // One running (kept), one queued that goes away: the queue empties, the running one is unaffected.
  const keep = new AbortController();
  const running = fetch(base + "/v1/completions", { method: "POST", headers: hdrs, body: JSON.stringify(long()), signal: keep.signal }).catch(() => "aborted");
  await waitFor((x) => x.slots_processing === 1, 5000);
  const qa = new AbortController();
  const queued = fetch(base + "/v1/completions", { method: "POST", headers: hdrs, body: JSON.stringify(long()), signal: qa.signal }).catch(() => "aborted");
  w = await waitFor((x) => x.requests_queued === 1, 5000);
  check("disconnect: a second request waits in the queue", w.ok, w.h);
  qa.abort();
  await queued;
  w = await waitFor((x) => x.requests_queued === 0, 3000);
  check(`disconnect: a queued request whose client went away leaves the queue within 3 s (${w.ms} ms)`, w.ok && w.h.slots_processing === 1, w.h);
  keep.abort();
  await running;
  w = await waitFor((x) => x.slots_idle === 1, 3000);
  check("disconnect: idle again", w.ok, w.h);
  // a streamed request whose client goes away while it waits in the queue frees its place too
  const r1 = new AbortController(), r2 = new AbortController();
  const a = fetch(base + "/v1/completions", { method: "POST", headers: hdrs, body: JSON.stringify(long()), signal: r1.signal }).catch(() => "aborted");
  await waitFor((x) => x.slots_processing === 1, 5000);
  const b = fetch(base + "/v1/completions", { method: "POST", headers: hdrs, body: JSON.stringify(long({ stream: true })), signal: r2.signal })
    .then(async (res) => { for await (const _ of res.body); }).catch(() => "aborted");
  await waitFor((x) => x.requests_queued === 1, 5000);
  r2.abort();
  await b;
  w = await waitFor((x) => x.requests_queued === 0, 3000);
  check(`disconnect: a queued stream whose client went away leaves the queue within 3 s (${w.ms} ms)`, w.ok, w.h);
  r1.abort();
  await a;
  w = await waitFor((x) => x.slots_idle === 1, 3000);
  // after all that a short request is served at once
  const t0 = Date.now();
  const res = await fetch(base + "/v1/completions", { method: "POST", headers: hdrs, body: JSON.stringify({ prompt: "x", max_tokens: 2 }) });
  check(`disconnect: the next request is served (${Date.now() - t0} ms)`, res.status === 200 && w.ok);
  process.exit(failed);
}

if (mode === "sigterm") {
  // 3 slots: 1 non-streamed + 2 streams run, 1 non-streamed + 1 stream wait in the queue.
  const pid = Number(rest[0]);
  async function plain() {
    try {
      const r = await fetch(base + "/v1/completions", { method: "POST", headers: hdrs, body: JSON.stringify(long()) });
      return { kind: "plain", status: r.status, text: await r.text() };
    } catch (e) { return { kind: "plain", status: 0, text: String(e.cause ?? e) }; }
  }
  async function streamed() {
    const events = [];
    let status = 0;
    try {
      const r = await fetch(base + "/v1/completions", { method: "POST", headers: hdrs, body: JSON.stringify(long({ stream: true })) });
      status = r.status;
      let buf = "";
      const dec = new TextDecoder();
      for await (const chunk of r.body) {
        buf += dec.decode(chunk, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const ev = buf.slice(0, i); buf = buf.slice(i + 2);
          if (ev.startsWith("data: ")) events.push(ev.slice(6) === "[DONE]" ? "[DONE]" : json(ev.slice(6)));
        }
      }
      return { kind: "stream", status, events, cut: false };
    } catch (e) { return { kind: "stream", status, events, cut: String(e.cause ?? e) }; }
  }
  const running = [plain(), streamed(), streamed()];
  let w = await waitFor((x) => x.slots_processing === 3, 5000);
  const queued = [plain(), streamed()];
  w = await waitFor((x) => x.slots_processing === 3 && x.requests_queued === 2, 5000);
  check("sigterm: 3 requests run and 2 wait", w.ok, w.h);
  await sleep(200); // the streams have sent a few pieces
  const t0 = Date.now();
  process.kill(pid, "SIGTERM");
  const all = await Promise.all([...running, ...queued]);
  const ms = Date.now() - t0;
  check(`sigterm: every request has its answer within 5 s (${ms} ms)`, ms < 5000);
  for (const [i, a] of all.entries()) {
    const where = i < 3 ? "running" : "queued";
    if (a.kind === "plain") {
      const j = json(a.text);
      check(`sigterm: ${where} non-streamed request: 503 JSON error`, a.status === 503 && j?.error?.code === 503 &&
        j.error.type === "unavailable_error" && /shutting down/.test(j.error.message), a);
    } else {
      const evs = a.events;
      const err = evs.find((e) => e && e !== "[DONE]" && e.error);
      check(`sigterm: ${where} stream: an error event (503, same as non-streamed) then [DONE]`, a.status === 200 && !a.cut &&
        err?.error?.code === 503 && err.error.type === "unavailable_error" && evs.at(-1) === "[DONE]", { cut: a.cut, last: evs.slice(-2) });
    }
  }
  process.exit(failed);
}
console.error(`serve_proto.mjs: unknown mode ${mode}`);
process.exit(2);
