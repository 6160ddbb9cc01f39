# server_lib.sh - sourced by the serving benchmarks (serve_bench.sh, llama_server_mtp.sh): one
# background HTTP server at a time.
#
#   srv_start LOG PORT CMD...   runs CMD in the background (stdout and stderr to LOG) and waits
#                               until GET /health on PORT answers; if the server exits first or
#                               has not answered after 5 minutes, prints the end of LOG and exits
#                               the script with status 1
#   srv_stop                    stops it and waits for it (the sourcing script traps EXIT with it)
srv_pid=""

srv_stop() {
    if [ -n "$srv_pid" ]; then kill "$srv_pid" 2>/dev/null || true; wait "$srv_pid" 2>/dev/null || true; fi
    srv_pid=""
}

srv_start() {
    local log=$1 port=$2 i
    shift 2
    "$@" >"$log" 2>&1 &
    srv_pid=$!
    for i in $(seq 1 1500); do
        curl -sf "localhost:$port/health" >/dev/null 2>&1 && return 0
        if ! kill -0 "$srv_pid" 2>/dev/null; then
            echo "$1 exited while starting; the end of $log:" >&2; tail -n 30 "$log" >&2; exit 1
        fi
        sleep 0.2
    done
    echo "$1: no answer on localhost:$port/health after 5 minutes; the end of $log:" >&2
    tail -n 30 "$log" >&2
    srv_stop
    exit 1
}
