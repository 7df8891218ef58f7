#!/usr/bin/env bash
# bnsl as a Flower app on this machine: one SuperLink and one SuperNode per shard, all on loopback.
#
#   examples/flower/run_local.sh SHARD_DIR OUT_DIR [bnsl learn options]
#   examples/flower/run_local.sh examples/tiny/shards /tmp/run --dp --epsilon 5 --noise per-site --seed 1
#
# Every *.csv in SHARD_DIR is one site (its own SuperNode, its node config naming the CSV and its limits).
# The run folder (adjacency.csv, edges.csv, graph.dot, report.json) is written to OUT_DIR; the sites'
# transcripts, their state directories and every process's log go to OUT_DIR.flower/ beside it.
# Everything started here is stopped on exit, on failure and on Ctrl-C.
#
# Loopback only: the SuperLink and SuperNodes run --insecure (plaintext). A real federation uses TLS and
# SuperNode authentication (docs/federation.md, section "Flower").
#
# Environment: BNSL_FLOWER_BIN (folder holding flwr, flower-superlink, flower-supernode and the python
# with bnsl; default: the folder of `flwr` on PATH), BNSL_SITE_MAX_EPSILON (each local site's max-epsilon,
# default 10), BNSL_FLOWER_STALL (seconds the run may log nothing before it is stopped, default 900),
# BNSL_FLOWER_TIMEOUT (seconds for the whole run; default none: the run's length follows its plan), BNSL_FLOWER_APP (another app
# folder, default this one), BNSL_FLOWER_EXPECT (the file in OUT_DIR that marks success, default report.json).
set -euo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,8p' "$0" >&2
    exit 2
fi
SHARD_DIR=$1
OUT_DIR=$2
shift 2
APP_DIR=$(cd "${BNSL_FLOWER_APP:-$(dirname "$0")}" && pwd)
EXPECT=${BNSL_FLOWER_EXPECT:-report.json}
# the folder of flwr and the Python that runs bnsl: BNSL_FLOWER_BIN, else the repository's own .venv (the
# README's set-up: no activated venv needed), else the folder of `bnsl` or `flwr` on PATH
find_bin() {
    local repo_venv
    repo_venv="$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin"
    for dir in "$repo_venv" "$(dirname "$(command -v bnsl 2>/dev/null || echo /nonexistent/bnsl)")" \
               "$(dirname "$(command -v flwr 2>/dev/null || echo /nonexistent/flwr)")"; do
        if [ -x "$dir/flwr" ] && [ -x "$dir/python" ]; then echo "$dir"; return; fi
    done
    echo "$repo_venv"
}
BIN=${BNSL_FLOWER_BIN:-$(find_bin)}
PY="$BIN/python"
for exe in flwr flower-superlink flower-supernode python; do
    [ -x "$BIN/$exe" ] || { echo "error: $BIN/$exe not found (pip install -e '.[flower]' in the repository's .venv; or set BNSL_FLOWER_BIN to the folder holding flwr and the python with bnsl)" >&2; exit 2; }
done
shopt -s nullglob
SHARDS=("$SHARD_DIR"/*.csv)
shopt -u nullglob
[ ${#SHARDS[@]} -ge 1 ] || { echo "error: no *.csv in $SHARD_DIR" >&2; exit 2; }
OUT_ABS=$("$PY" -c 'import os, sys; print(os.path.abspath(sys.argv[1]))' "$OUT_DIR")
WORK="$OUT_ABS.flower"
rm -rf "$WORK"
mkdir -p "$WORK/logs" "$WORK/flwr-home"

PIDS=()
RUN_PID=
cleanup() {
    local code=$?
    trap - EXIT INT TERM
    # each was started in its own process group (setsid): the group goes, with the SuperExec and
    # ClientApp/ServerApp processes it started
    if [ -n "$RUN_PID" ]; then kill -TERM "$RUN_PID" 2>/dev/null || true; fi
    for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    # a process a SuperNode started in a session of its own (a SuperExec, a ClientApp being spawned) is in
    # none of those groups: every process of this run (its FLWR_HOME) but this script goes too
    if [ -d /proc ] && [ -n "${FLWR_HOME:-}" ]; then
        "$PY" - "$FLWR_HOME" "$$" <<'PYEOF' || true
import os, signal, sys, time
home, keep = ("FLWR_HOME=" + sys.argv[1]).encode(), {int(sys.argv[2]), os.getpid()}
def ours():
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) not in keep:
            try:
                with open(f"/proc/{p}/environ", "rb") as fh:
                    if home in fh.read().split(b"\0"):
                        found.append(int(p))
            except OSError:
                pass
    return found
for sig in (signal.SIGTERM, signal.SIGKILL):
    for pid in ours():
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    end = time.monotonic() + 3
    while ours() and time.monotonic() < end:
        time.sleep(0.1)
PYEOF
    fi
    exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free loopback ports: the SuperLink's (Flower 1.42 serves its Fleet, Control and Runtime APIs on one HTTP
# port), then one runtime API per SuperNode
read -r -a PORTS <<< "$("$PY" - "$(( 1 + ${#SHARDS[@]} ))" <<'PYEOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PYEOF
)"
LINK=${PORTS[0]}

export PATH="$BIN:$PATH"  # the SuperLink and SuperNodes start flower-superexec and flwr-*app from PATH
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 GRPC_VERBOSITY=ERROR
export FLWR_HOME="$WORK/flwr-home"
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "bnsl-local"

[superlink.bnsl-local]
address = "127.0.0.1:$LINK"
insecure = true
TOML

setsid "$BIN/flower-superlink" --insecure --isolation subprocess --disable-runtime-dependency-installation \
    --host 127.0.0.1 --port "$LINK" > "$WORK/logs/superlink.log" 2>&1 &
PIDS+=($!)

k=0
for csv in "${SHARDS[@]}"; do
    k=$((k + 1))
    abs=$("$PY" -c 'import os, sys; print(os.path.abspath(sys.argv[1]))' "$csv")
    name=$(basename "$csv")
    # the site's own limits: its node config (a real site writes its own; the coordinator cannot set them)
    cfg=$("$PY" - "$abs" "$name" "$WORK/site-$k" "${BNSL_SITE_MAX_EPSILON:-10}" <<'PYEOF'
import json, sys
csv, name, work, eps = sys.argv[1:]
items = {"csv": csv, "site-id": name, "state-dir": work + "/state", "transcript": work + "/transcript.jsonl",
         "max-epsilon": float(eps), "allow-non-private": True, "accept-seeded-noise": True, "accept-split-noise": True}
print(" ".join(f"{k}={json.dumps(v)}" for k, v in items.items()))
PYEOF
)
    setsid "$BIN/flower-supernode" --insecure --superlink "127.0.0.1:$LINK" --isolation subprocess \
        --host 127.0.0.1 --port "${PORTS[$k]}" --node-config "$cfg" \
        > "$WORK/logs/supernode-$k.log" 2>&1 &
    PIDS+=($!)
done

# wait until the SuperLink's control API and every SuperNode's runtime API answer
"$PY" - "${PORTS[@]}" <<'PYEOF' || { echo "error: the SuperLink or a SuperNode did not start; see $WORK/logs" >&2; exit 6; }
import socket, sys, time
end = time.monotonic() + 60
for port in map(int, sys.argv[1:]):
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > end:
                sys.exit(1)
            time.sleep(0.2)
PYEOF

RUN_CONFIG=$("$PY" - "$OUT_ABS" "${#SHARDS[@]}" "$@" <<'PYEOF'
import json, shlex, sys
out, n, *opts = sys.argv[1:]
print(f"options={json.dumps(shlex.join(opts))} participants={int(n)} out={json.dumps(out)} force=true")
PYEOF
)
echo "bnsl on Flower: ${#SHARDS[@]} SuperNode(s), SuperLink on 127.0.0.1:$LINK; logs in $WORK/logs" >&2
# How long a run may take scales with its plan: the ServerApp bounds every exchange by its own timeout
# (run config `timeout`, 300 s) and logs a line on the first exchange, every 10th and any slower than 30 s,
# so a healthy run is never silent for more than about 10 × 30 s + one exchange. The run is stopped when
# its log has been silent for BNSL_FLOWER_STALL seconds (default 900), or, when BNSL_FLOWER_TIMEOUT is set,
# when the whole run has taken that long.
STALL=${BNSL_FLOWER_STALL:-900}
CAP=${BNSL_FLOWER_TIMEOUT:-0}
for v in "$STALL" "$CAP"; do
    [[ "$v" =~ ^[0-9]+$ ]] || { echo "error: BNSL_FLOWER_STALL and BNSL_FLOWER_TIMEOUT take whole seconds, got '$v'" >&2; exit 2; }
done
RUN_LOG="$WORK/logs/flwr-run.log"
start=$(date +%s)
# in the background and polled, so that Ctrl-C or SIGTERM reach the traps at once
"$BIN/flwr" run "$APP_DIR" bnsl-local --run-config "$RUN_CONFIG" --stream > "$RUN_LOG" 2>&1 &
RUN_PID=$!
stopped=
size=-1
heard=$start
while kill -0 "$RUN_PID" 2>/dev/null; do
    sleep 1
    now=$(date +%s)
    grown=$(wc -c < "$RUN_LOG" 2>/dev/null || echo 0)
    if [ "$grown" != "$size" ]; then size=$grown; heard=$now; fi
    if [ "$CAP" -gt 0 ] && [ $((now - start)) -ge "$CAP" ]; then stopped=cap; break; fi
    if [ $((now - heard)) -ge "$STALL" ]; then stopped=stall; break; fi
done
if [ -n "$stopped" ]; then
    kill -TERM "$RUN_PID" 2>/dev/null || true
fi
code=0
wait "$RUN_PID" || code=$?
RUN_PID=
# plain-text logs: Flower colours its log lines; the files keep the text only
"$PY" - "$WORK/logs" <<'PYEOF' || true
import pathlib, re, sys
ansi = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
for log in pathlib.Path(sys.argv[1]).glob("*.log"):
    text = log.read_text(errors="replace")
    if "\x1b[" in text:
        log.write_text(ansi.sub("", text))
PYEOF
grep -E "bnsl:|ERROR|Error|error" "$WORK/logs/flwr-run.log" >&2 || true
if [ "$stopped" = cap ]; then
    echo "error: the Flower run did not finish within BNSL_FLOWER_TIMEOUT=$CAP s (unset it to allow any length while the run makes progress); see $WORK/logs" >&2
    exit 6
fi
if [ "$stopped" = stall ]; then
    echo "error: the Flower run logged nothing for $STALL s and was stopped (BNSL_FLOWER_STALL=SECONDS allows longer silences); see $WORK/logs" >&2
    exit 6
fi
if [ $code -ne 0 ] || [ ! -f "$OUT_ABS/$EXPECT" ]; then
    echo "error: the Flower run failed (flwr run exit $code); see $WORK/logs" >&2
    [ $code -ne 0 ] || code=6
    exit "$code"
fi
echo "run folder: $OUT_ABS ($(( $(date +%s) - start )) s)" >&2
