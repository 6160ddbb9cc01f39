#!/usr/bin/env bash
# test_serve_lb.sh - scale-out recipe: two `nextn serve` replicas behind nginx with the repo's
# deploy/nginx.conf (only its ports rewritten).  A burst of 16 greedy requests goes through nginx;
# one replica is killed (SIGKILL) while it works, later the other is stopped (SIGTERM, after the
# first came back); every request must still get exactly `nextn run`'s text.
. "$(dirname "$0")/lib.sh"
model=$demo_model
nginx=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx" ] || { echo "FAIL: nginx is required (scripts/deps.sh installs it)"; exit 1; }
need node "scripts/deps.sh installs nodejs"

# expectations from `nextn run`
run() { "$NEXTN" run -m "$model" --no-display-prompt -t 1 "$@" 2>/dev/null; }
{
  echo '{"prompts": ['
  i=0
  for p in "In the beginning God created" "And the LORD said unto Moses" "def main(args):"; do
    text=$(run -p "$p" -n 48 --temp 0 --ignore-eos; printf x); text=${text%x}; text=${text%$'\n'}
    [ $i -gt 0 ] && echo ','
    node -e 'process.stdout.write(JSON.stringify({prompt:process.argv[1],n:48,text:process.argv[2]}))' "$p" "$text"
    i=$((i + 1))
  done
  echo ']}'
} >"$tmp/expect.json"

replica() { # log, port -> starts a replica, sets $url and $pid
  serve_start "$1" -m "$model" --port "$2" -np 1 -c 256 -t 1
  url=$base
}
replica "$tmp/a.log" 0; url_a=$url; pid_a=$pid
replica "$tmp/b.log" 0; url_b=$url; pid_b=$pid
check "two replicas start" '[ -n "$url_a" ] && [ -n "$url_b" ]'
port_a=${url_a##*:}; port_b=${url_b##*:}
port_lb=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')

sed -e "s/127\.0\.0\.1:8081/127.0.0.1:$port_a/" -e "s/127\.0\.0\.1:8082/127.0.0.1:$port_b/" \
    -e "s/listen 127\.0\.0\.1:8080;/listen 127.0.0.1:$port_lb;/" "$NEXTN_SRC/deploy/nginx.conf" >"$tmp/nginx.conf"
check "the test runs deploy/nginx.conf with only its three ports changed" \
  '[ "$(diff "$NEXTN_SRC/deploy/nginx.conf" "$tmp/nginx.conf" | grep -c "^>")" -eq 3 ]'
mkdir -p "$tmp/logs"
"$nginx" -p "$tmp" -c "$tmp/nginx.conf" -g "daemon off; pid $tmp/nginx.pid; error_log $tmp/nginx.err warn;" 2>"$tmp/nginx.out" &
pids+=($!); pid_lb=$!
lb="http://127.0.0.1:$port_lb"
for _ in $(seq 100); do curl -fs "$lb/health" >/dev/null 2>&1 && break; sleep 0.05; done
check "nginx answers in front of the replicas" 'curl -fs "$lb/health" | grep -q "\"status\":\"ok\""' || cat "$tmp/nginx.out" "$tmp/nginx.err"

# 1. a replica dies (SIGKILL) in the middle of the burst
node "$NEXTN_SRC/tests/serve_lb.mjs" "$lb" "$tmp/expect.json" "$url_a" "$pid_a" SIGKILL || fail=1
wait "$pid_a" 2>/dev/null
# 2. it comes back on its port; the other is stopped (SIGTERM) in the middle of a burst
replica "$tmp/a2.log" "$port_a"
check "the killed replica restarts on its port" '[ "$url" = "$url_a" ]'
# nginx takes the replica back once its fail_timeout for the dead one has run out
for _ in $(seq 100); do
  grep -q " POST /v1/completions 200 " "$tmp/a2.log" && break
  curl -fs -o /dev/null -H "Content-Type: application/json" -d '{"prompt": "x", "max_tokens": 1}' "$lb/v1/completions"
  sleep 0.2
done
check "nginx sends requests to the restarted replica again" 'grep -q " POST /v1/completions 200 " "$tmp/a2.log"'
node "$NEXTN_SRC/tests/serve_lb.mjs" "$lb" "$tmp/expect.json" "$url_b" "$pid_b" SIGTERM || fail=1
wait "$pid_b"
check "the stopped replica exits 0" "[ $? -eq 0 ]"
check "the stopped replica failed what it held with 503 (nginx sent those to the other one)" \
  'grep -q " 503 .*shutting down" "$tmp/b.log"'
kill -TERM "$pid_lb" "$pid" 2>/dev/null
wait "$pid_lb" "$pid" 2>/dev/null
if [ $fail -ne 0 ]; then
  echo "--- nginx error log"; tail -20 "$tmp/nginx.err"
  for l in a a2 b; do echo "--- replica $l (last lines)"; tail -8 "$tmp/$l.log"; done
fi
exit $fail
