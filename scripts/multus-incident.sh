#!/usr/bin/env bash
# Reproduces the Multus CNI incident under sockwatch and prints what it reports.
#
#   old daemon  : a Go program, net.Listen("unix", P) — its Close unlinks P
#   successor   : removes P's directory, re-creates it, binds and listens on P
#   old daemon  : graceful shutdown -> Close -> unlinks the successor's live socket
#
# Needs root, Go (apt-get install golang-go) and a built agent (cargo xtask run -- check).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $EUID -eq 0 ]] || { echo "multus-incident: needs root (eBPF)" >&2; exit 1; }
command -v go >/dev/null || { echo "multus-incident: needs Go: apt-get install golang-go" >&2; exit 1; }
command -v python3 >/dev/null || { echo "multus-incident: needs python3" >&2; exit 1; }
agent=target/release/sockwatch
[[ -x $agent ]] || agent=target/debug/sockwatch
[[ -x $agent ]] || { echo "multus-incident: build the agent first: cargo xtask run -- check" >&2; exit 1; }

work=$(mktemp -d /tmp/multus-demo.XXXXXX)
dir=$work/run/multus
sock=$dir/multus.sock
mkdir -p "$dir"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

CGO_ENABLED=0 GOCACHE=$work/gocache go build -o "$work/multus-daemon" agent/tests/go/golistener.go

"$agent" run --watch "$work/run" --events "$work/events.jsonl" 2>"$work/agent.log" &
pids+=($!)
until grep -q "running;" "$work/agent.log"; do sleep 0.2; done

echo "1. old daemon listens on $sock"
"$work/multus-daemon" "$sock" >"$work/old.out" &
old=$!
pids+=($old)
until grep -q listening "$work/old.out"; do sleep 0.1; done

echo "2. successor removes $dir, re-creates it, listens on the new socket"
python3 - "$dir" "$sock" <<'PY' &
import os, shutil, socket, sys, time
d, p = sys.argv[1], sys.argv[2]
shutil.rmtree(d); os.mkdir(d)
s = socket.socket(socket.AF_UNIX); s.bind(p); s.listen(16)
time.sleep(3600)
PY
pids+=($!)
until [[ -S $sock ]] && [[ $(stat -c %i "$sock") != "" ]]; do sleep 0.1; done
sleep 0.5

echo "3. old daemon shuts down gracefully: its listener's Close unlinks $sock"
kill -TERM "$old"
wait "$old" || true
sleep 1
[[ -e $sock ]] && echo "   (socket still there?)" || echo "   $sock is gone; the successor listens on an orphaned inode"

echo
echo "sockwatch's verdicts:"
grep '"verdict"' "$work/events.jsonl" | python3 -c "$(cat <<'PY'
import json, sys
def who(p):
    return "%s (pid %d)" % (p["comm"], p["tgid"])
for line in sys.stdin:
    v = json.loads(line)
    k = v["verdict"]
    if k == "takeover":
        print("  TAKEOVER: %s removed the live socket %s of %s and bound a new one there %d ms later (%s)" % (who(v["remover"]), v["path"], who(v["predecessor"]), v["gap_ns"] // 1000000, v["relation"]))
    elif k == "foreign_unlink":
        print("  FOREIGN UNLINK: %s deleted the live socket %s of %s (%s)" % (who(v["actor"]), v["path"], who(v["victim"]), v["relation"]))
    elif k == "orphan_opened":
        print("  ORPHANED LISTENER: %s listens on a socket nobody can reach (%s)" % (who(v["owner"]), v["cause"]))
    else:
        print("  %s: %s" % (k, line.strip()))
PY
)"
echo
echo "all events and verdicts: $work/events.jsonl"
