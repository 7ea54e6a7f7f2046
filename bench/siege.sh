#!/usr/bin/env bash
# The 10-concurrent-requests experiment with siege, one command (docs/bench.md).
# Bash starts, drives and stops things; bench/siege_steps.py does the waiting, timing and arithmetic.
set -euo pipefail

registry_modes() {  # the modes lab/modes/registry.py registers, as "/a, /b, ..."; where to look without a Python
    local here=${BASH_SOURCE[0]%/*} python
    [[ $here != "${BASH_SOURCE[0]}" ]] || here=.
    python=${PYTHON:-$here/../.venv/bin/python}
    [[ -x $python ]] || python=python3
    (cd "$here/.." && "$python" -c 'from lab.modes.registry import MODES; print(", ".join("/" + m for m in MODES))' \
        2>/dev/null) || echo "the modes in lab/modes/registry.py"
}

usage() {
    local modes
    modes=$(registry_modes)
    sed "s|@MODES@|$modes|" <<'EOF'
usage: bench/siege.sh [options]

Fire `siege -c 10 -r 1` at every mode the server serves, as its /modes lists
them (the registry, lab/modes/registry.py: @MODES@),
and at a forked server's /blocking and /threading. Then print siege's own
line for every request, per endpoint in the order they came back
(`HTTP/1.1 200   4.54 secs: ... GET /blocking`), one table:
elapsed (the makespan), mean/shortest/longest response, transactions, failures, the ideal makespan
for this machine, ratio = elapsed / ideal, and the spread: how many requests
each server process answered (from its /stats before and after), and one
sentence under it on what the rows show (a staircase, all late, waves of
the lanes, all together), from the response times measured.

Without --url it starts its own servers on free loopback ports (server.py
--port 0, one single-process and one --processes 0) and stops them and
everything they started on exit, error or Ctrl-C. Every endpoint is warmed up
with a few seconds of load first: CPUs that speed up under sustained load
would otherwise time the solo runs on a slower CPU than the measurement.
The single-run time t behind the ideal is the median of solo requests timed
just before and just after each siege run.

options:
  --url BASE          bench a server that is already running (every mode it lists at /modes)
  --forked-url BASE   with --url: also bench this server's /blocking and /threading as
                      forked-blocking and forked-threading
  -c, --concurrent N  simultaneous siege users (default: 10)
  -r, --reps N        requests per user (default: 1)
  -w, --workload W    workload behind /blocking, /threading, /processing
                      (default: the routes' own, count)
  -p, --param K=V     workload param, repeatable: -p n=50000000
  --delay S           /async upstream delay in seconds (default: the server's, 1.0)
  --warmup S          seconds of warm-up load per endpoint, one request per core at a
                      time, before anything is timed (default: 3; async: one request)
  --solo-runs N       solo requests per endpoint before siege, and again after;
                      their median is the single-run time t of the ideal (default: 3)
  --rounds N          bench every endpoint N times, in turn (all of them, then all again), and
                      print each figure's median and range; warns when t moved by more
                      than 15 % of its median (default: 1)
  --server-args ARGS  extra flags for the servers it starts: --server-args '--process-pool 4'
  --out DIR           results folder (default: bench/results/<timestamp>/)
  -h, --help          show this help

environment: PYTHON  interpreter with the lab's requirements (default: .venv/bin/python)

Writes to the results folder: summary.json, summary.md, machine.json, the
siegerc siege ran with, and per endpoint siege's output (NAME.siege.out, its
line per request; NAME.siege.stderr, its summary) and its solo timings (NAME.plan.json); with --rounds, each
round's endpoints are NAME-rN, and rounds.json holds the medians and ranges.

Needs siege: sudo apt-get install siege. Exit status 2 if it is missing or an
option is wrong, 1 if a step fails.
EOF
}

die() {
    echo "error: $*" >&2
    echo "try: bench/siege.sh --help" >&2
    exit 2
}

count_arg() {  # OPTION VALUE: a positive integer, or exit 2
    [[ $2 =~ ^[1-9][0-9]{0,5}$ ]] || die "$1 needs a positive integer, got '$2'"
}

value_arg() {  # OPTION VALUE: present, or exit 2
    [[ -n $2 ]] || die "$1 needs a value"
}

CONCURRENCY=10 REPS=1 WORKLOAD="" DELAY="" SOLO_RUNS=3 WARMUP=3 SERVER_ARGS="" URL="" FORKED_URL="" OUT="" ROUNDS=1
PARAMS=()
ARGV="$*"
while (($#)); do
    case $1 in
    -h | --help) usage; exit 0 ;;
    --url) value_arg "$1" "${2:-}"; URL=$2; shift ;;
    --forked-url) value_arg "$1" "${2:-}"; FORKED_URL=$2; shift ;;
    -c | --concurrent) count_arg "$1" "${2:-}"; CONCURRENCY=$2; shift ;;
    -r | --reps) count_arg "$1" "${2:-}"; REPS=$2; shift ;;
    -w | --workload) value_arg "$1" "${2:-}"; WORKLOAD=$2; shift ;;
    -p | --param) [[ ${2:-} == ?*=* ]] || die "$1 needs NAME=VALUE, got '${2:-}'"; PARAMS+=("$2"); shift ;;
    --delay) [[ ${2:-} =~ ^[0-9]*\.?[0-9]+$ ]] || die "--delay needs seconds, got '${2:-}'"; DELAY=$2; shift ;;
    --solo-runs) count_arg "$1" "${2:-}"; SOLO_RUNS=$2; shift ;;
    --rounds) count_arg "$1" "${2:-}"; ROUNDS=$2; shift ;;
    --warmup) [[ ${2:-} =~ ^[0-9]*\.?[0-9]+$ ]] || die "--warmup needs seconds, got '${2:-}'"; WARMUP=$2; shift ;;
    --server-args) (($# > 1)) || die "$1 needs flags (quoted, as one argument)"; SERVER_ARGS=$2; shift ;;
    --out) value_arg "$1" "${2:-}"; OUT=$2; shift ;;
    *) die "unknown option '$1'" ;;
    esac
    shift
done
for base in "$URL" "$FORKED_URL"; do
    [[ -z $base || $base =~ ^https?://[^/]+/?$ ]] || die "expected a base URL like http://127.0.0.1:8000, got '$base'"
done
[[ -z $FORKED_URL || -n $URL ]] || die "--forked-url goes with --url"

if ! command -v siege >/dev/null 2>&1; then
    echo "error: siege is not installed; install it with: sudo apt-get install siege" >&2
    exit 2
fi

# Only builtins so far: the missing-siege message must work with a bare PATH.
here=${BASH_SOURCE[0]%/*}
[[ $here != "${BASH_SOURCE[0]}" ]] || here=.
ROOT=$(cd "$here/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[[ -x $PYTHON ]] || PYTHON=$(command -v python3) || die "no Python: run 'make install' or set PYTHON"

if [[ -z $OUT ]]; then
    stamp=$ROOT/bench/results/$(date +%Y%m%d-%H%M%S)
    OUT=$stamp n=0
    while [[ -e $OUT ]]; do n=$((n + 1)) && OUT=$stamp-$n; done
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$ROOT"

# --- stop exactly what we started, however we leave --------------------------------------------
CHILD=""   # the step running now (run() below), so a signal does not wait for it
SERVERS=() # pids of the servers we started; each leads its own process group (setsid)

any_running() {  # PID...: true while a process group led by one of them has a live member
    local pid
    for pid in "$@"; do
        # A group whose leader has exited holds only orphans: nobody is stopping them in order.
        if kill -0 "$pid" 2>/dev/null && kill -0 -- "-$pid" 2>/dev/null; then return 0; fi
    done
    return 1
}

stop_servers() {  # SIGTERM lets each stop its pools and upstream in order; then SIGKILL each group
    local pid tries=0
    for pid in "${SERVERS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    # Not waiting longer: after an interrupt a blocked event loop still runs
    # every queued /blocking job first, and nobody wants those results.
    while any_running "${SERVERS[@]}" && ((tries++ < 50)); do sleep 0.1; done
    for pid in "${SERVERS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
    SERVERS=()
}

cleanup() {
    if [[ -n $CHILD ]]; then kill -TERM "$CHILD" 2>/dev/null || true; fi
    stop_servers
    if [[ -n $CHILD ]]; then kill -KILL "$CHILD" 2>/dev/null || true; fi
    wait 2>/dev/null || true # reap them all: nothing of ours outlives the script
}
trap cleanup EXIT
trap 'cleanup; exit 129' HUP
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 141' PIPE
trap 'cleanup; exit 143' TERM

run() {  # COMMAND...: in the background, so that a trapped signal interrupts the wait at once
    "$@" &
    CHILD=$!
    local rc=0
    wait "$CHILD" || rc=$?
    CHILD=""
    return "$rc"
}

step() { run "$PYTHON" -m bench.siege_steps "$@"; }

# --- servers -----------------------------------------------------------------------------------
read -r -a EXTRA <<<"$SERVER_ARGS"
FLAGS=()

start_server() {  # NAME FLAGS...: sets SERVER_PID
    local name=$1
    shift
    setsid "$PYTHON" server.py --port 0 --no-access-log --grace 5 "$@" </dev/null >"$OUT/server-$name.log" 2>&1 &
    SERVER_PID=$!
    SERVERS+=("$SERVER_PID")
}

server_url() {  # NAME PID: wait until every process of the server serves; sets SERVER_URL
    # Not $(...), here or below: bash runs it in a subshell it waits for in the
    # foreground, and a Ctrl-C arriving then made the script exit 0 instead of
    # 130; a file read by the `read` builtin keeps every wait interruptible.
    step ready --log "$OUT/server-$1.log" --pid "$2" >"$OUT/.step"
    read -r SERVER_URL <"$OUT/.step"
}

if [[ -z $URL ]]; then
    echo "starting servers (logs in $OUT/server-*.log) ..." >&2
    start_server single "${EXTRA[@]}"
    single_pid=$SERVER_PID
    start_server forked --processes 0 "${EXTRA[@]}"
    forked_pid=$SERVER_PID
    server_url single "$single_pid"
    URL=$SERVER_URL
    server_url forked "$forked_pid"
    FORKED_URL=$SERVER_URL
    FLAGS+=(--flags "$URL=server.py --port 0 --no-access-log --grace 5${SERVER_ARGS:+ $SERVER_ARGS}")
    FLAGS+=(--flags "$FORKED_URL=server.py --port 0 --no-access-log --grace 5 --processes 0${SERVER_ARGS:+ $SERVER_ARGS}")
    echo "single-process server: $URL   forked server: $FORKED_URL" >&2
fi
URL=${URL%/}
FORKED_URL=${FORKED_URL%/}

# --- siege -------------------------------------------------------------------------------------
# Our own rc file (-R): a user's ~/.siege/siege.conf must not change what is measured.
step siegerc --dir "$OUT"

bench_endpoint() {  # GROUP BASE MODE ROUND: the endpoint GROUP, or GROUP-rROUND with --rounds
    local group=$1 base=$2 mode=$3 round=$4 url rc=0 p name=$1
    if ((ROUNDS > 1)); then name=$group-r$round; fi
    local args=(--base "$base" --name "$name" --group "$group" --round "$round" --mode "$mode" --dir "$OUT"
        --solo-runs "$SOLO_RUNS" --warmup "$WARMUP")
    if [[ -n $WORKLOAD ]]; then args+=(--workload "$WORKLOAD"); fi
    for p in "${PARAMS[@]}"; do args+=(-p "$p"); done
    if [[ -n $DELAY ]]; then args+=(--delay "$DELAY"); fi
    echo "$name: ${WARMUP} s warm-up and $SOLO_RUNS solo requests ..." >&2
    step prepare "${args[@]}" >"$OUT/.step"
    read -r url <"$OUT/.step"
    echo "$name: siege -c $CONCURRENCY -r $REPS $url" >&2
    # siege's own line per request goes to NAME.siege.out, its summary to NAME.siege.stderr (the rc file's verbose).
    run siege -R "$OUT/siegerc" --no-parser --benchmark -c "$CONCURRENCY" -r "$REPS" "$url" \
        >"$OUT/$name.siege.out" 2>"$OUT/$name.siege.stderr" || rc=$?
    if ((rc != 0)); then echo "warning: siege exited with $rc on $name; see $OUT/$name.siege.stderr" >&2; fi
    echo "$name: $SOLO_RUNS solo requests after siege ..." >&2
    step solo-after --name "$name" --dir "$OUT" --solo-runs "$SOLO_RUNS"
}

# Every mode the server can run the workload in (its /modes: the registry in lab/modes/registry.py), in its order.
step modes --base "$URL" --workload "$WORKLOAD" >"$OUT/.step"
mapfile -t MODES <"$OUT/.step"
for ((round = 1; round <= ROUNDS; round++)); do
    for mode in "${MODES[@]}"; do
        bench_endpoint "$mode" "$URL" "$mode" "$round"
    done
    if [[ -n $FORKED_URL ]]; then
        # The forked server's own lesson: how its children share the burst (the spread column).
        bench_endpoint forked-blocking "$FORKED_URL" blocking "$round"
        bench_endpoint forked-threading "$FORKED_URL" threading "$round"
    fi
done
rm -f "$OUT/.step"

step machine --dir "$OUT" "${FLAGS[@]}" --argv "bench/siege.sh $ARGV"
echo >&2
step report --dir "$OUT" -c "$CONCURRENCY" -r "$REPS"
echo
echo "results: $OUT"
