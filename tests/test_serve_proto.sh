#!/usr/bin/env bash
# test_serve_proto.sh - `nextn serve` against what is not an ordinary API call (tests/serve_proto.mjs):
# a table of malformed requests (status, error type, the field named), protocol details (HEAD,
# 405 + Allow, bearer scheme, WWW-Authenticate, JSON 431/414, idle keep-alive timeout), CORS off
# by default and opt-in with --cors, JSON-only POST bodies, one access-log line per request,
# --host localhost / ::1, a client that hangs up (running or queued), and SIGTERM with requests
# running, queued and streaming.
. "$(dirname "$0")/lib.sh"
model=$demo_model
need node "scripts/deps.sh installs nodejs"
need curl "scripts/deps.sh installs it"
js="$NEXTN_SRC/tests/serve_proto.mjs"

# start a server on a free port, wait for its "listening on" line, set $base to its URL
start() { # log, args...
    local log=$1; shift
    serve_start "$log" -m "$model" --port 0 "$@"
}
# SIGTERM the last server; it must exit 0 (under ASan: no leak, no error report)
stop() {
  kill -TERM "${pids[-1]}" 2>/dev/null; wait "${pids[-1]}" 2>/dev/null; local rc=$?
  check "server on $base exits 0 after SIGTERM" "[ $rc -eq 0 ]"
}

# ---- the malformed-request table and the protocol details
start "$tmp/proto.log" -np 2 -c 256 --api-key secret --alias demo --max-body 1 -t 1 --timeout 2
check "server starts" '[ -n "$base" ]'
if [ -n "$base" ]; then
  node "$js" proto "$base" secret || fail=1
  stop
  # one access-log line per request: client, method, path, status, time, tokens
  check "access log: a line per answered completion with status, tokens and times" \
    'grep -Eq "^[0-9T:Z-]+ 127\.0\.0\.1 POST /v1/completions 200 ms=[0-9.]+ prompt_tokens=[0-9]+ gen_tokens=2 queue_ms=[0-9.]+ prompt_ms=[0-9.]+ gen_ms=[0-9.]+ finish=length" "$tmp/proto.log"'
  check "access log: errors with their status and message" \
    'grep -Eq "POST /v1/completions 400 ms=[0-9.]+ error=\"'"'"'seed'"'"' must be an integer" "$tmp/proto.log" &&
     grep -Eq "GET /health 431 " "$tmp/proto.log" && grep -Eq "HEAD /health 200 " "$tmp/proto.log"'
  check "access log: the request path is logged without its query string, control bytes escaped" \
    '! grep -q "aaaaaaaaaaaaaaaa" "$tmp/proto.log"'
else
  cat "$tmp/proto.log"
fi

# ---- CORS opt-in (two origins), served on IPv6 loopback
start "$tmp/cors.log" -np 1 -c 256 -t 1 --host ::1 --cors "https://app.example,https://other.example"
check "--host ::1: listens on http://[::1]:PORT" '[[ "$base" == http://\[::1\]:* ]] && curl -fsS "$base/health" >/dev/null'
[ -n "$base" ] && { node "$js" cors "$base" "https://other.example" || fail=1; }
stop

# ---- --host localhost: every address it names
start "$tmp/localhost.log" -np 1 -c 64 -t 1 --host localhost --ctx-checkpoints 1
port=${base##*:}
check "start-up line: 1 checkpoint (singular)" 'grep -q "prompt cache: up to 1 checkpoint per slot" "$tmp/localhost.log"'
check "--host localhost: answers on 127.0.0.1" '[ -n "$base" ] && curl -fsS "http://127.0.0.1:$port/health" >/dev/null'
if getent ahosts localhost | grep -q '^::1'; then
  check "--host localhost: answers on ::1 too" 'curl -fsS "http://[::1]:$port/health" >/dev/null'
fi
stop
check "--host with a name that does not resolve: a clear error, the command named once" \
  '! "$NEXTN" serve -m "$model" --port 0 --host no-such-host.invalid 2>"$tmp/e" && grep -q "no-such-host.invalid" "$tmp/e" &&
   grep -q "^nextn serve: cannot resolve --host .no-such-host.invalid." "$tmp/e"'

# ---- a client that hangs up frees its slot or its place in the queue
start "$tmp/disc.log" -np 1 -c 8192 -t 1
[ -n "$base" ] && { node "$js" disconnect "$base" || fail=1; }
stop
check "access log: cancelled requests are logged as such" 'grep -q "error=\"cancelled by the client" "$tmp/disc.log"'

# ---- SIGTERM with 3 requests running (1 plain, 2 streams) and 2 queued (1 plain, 1 stream)
start "$tmp/term.log" -np 3 -c 8192 -t 1
if [ -n "$base" ]; then
  srv=${pids[-1]}
  node "$js" sigterm "$base" "$srv" || fail=1
  for _ in $(seq 100); do kill -0 "$srv" 2>/dev/null || break; sleep 0.05; done
  check "sigterm: the server exits 0" '! kill -0 "$srv" 2>/dev/null && wait "$srv"; [ $? -eq 0 ]'
  check "sigterm: each failed request is in the access log" '[ "$(grep -c "error=\"server is shutting down" "$tmp/term.log")" -eq 5 ]'
fi
# a request cancelled (499) or refused (503) before it generated logs no generation (or prompt) time
check "access log: no gen_ms on requests that generated nothing" \
  'grep -Eq " (499|503) .*gen_tokens=0 " "$tmp/disc.log" "$tmp/term.log" && ! grep -E "gen_tokens=0 .*gen_ms=" "$tmp/disc.log" "$tmp/term.log"'

exit $fail
