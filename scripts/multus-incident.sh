#!/usr/bin/env bash
# Reproduces the Multus CNI incident under sockwatch and prints what it reports.
#
#   old daemon  : a Go program, net.Listen("unix", P) — its Close unlinks P
#   successor   : removes P's directory, re-creates it, binds and listens on P
#   old daemon  : graceful shutdown -> Close -> unlinks the successor's live socket
#
# Needs root, Go (apt-get install golang-go) and a built agent (cargo xtask run -- check).
# SOCKWATCH_DEMO_LISTEN (default 127.0.0.1:19469) is where the agent serves the API that
# `sockwatch explain` reads.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $EUID -eq 0 ]] || { echo "multus-incident: needs root (eBPF)" >&2; exit 1; }
command -v go >/dev/null || { echo "multus-incident: needs Go: apt-get install golang-go" >&2; exit 1; }
agent=target/release/sockwatch
[[ -x $agent ]] || agent=target/debug/sockwatch
[[ -x $agent ]] || { echo "multus-incident: build the agent first: cargo xtask run -- check" >&2; exit 1; }
listen=${SOCKWATCH_DEMO_LISTEN:-127.0.0.1:19469}

work=$(mktemp -d /tmp/multus-demo.XXXXXX)
dir=$work/run/multus
sock=$dir/multus.sock
mkdir -p "$dir"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

CGO_ENABLED=0 GOCACHE=$work/gocache go build -o "$work/multus-daemon" agent/tests/go/golistener.go

"$agent" run --watch "$work/run" --format text --listen "$listen" \
    --events "$work/verdicts.txt" 2>"$work/agent.log" &
agent_pid=$!
pids+=("$agent_pid")
until grep -q "running;" "$work/agent.log"; do
    kill -0 "$agent_pid" 2>/dev/null || { cat "$work/agent.log" >&2; exit 1; }
    sleep 0.2
done

echo "1. old daemon listens on $sock"
"$work/multus-daemon" "$sock" >"$work/old.out" &
old=$!
pids+=("$old")
until grep -q listening "$work/old.out"; do sleep 0.1; done

echo "2. successor removes $dir, re-creates it, listens on the new socket"
"$work/multus-daemon" -rmdir "$sock" >"$work/new.out" &
pids+=($!)
until grep -q listening "$work/new.out"; do sleep 0.1; done
sleep 0.5

echo "3. old daemon shuts down gracefully: its listener's Close unlinks $sock"
kill -TERM "$old"
wait "$old" || true
sleep 1
[[ -e $sock ]] && echo "   (socket still there?)" || echo "   $sock is gone; the successor listens on an orphaned inode"

echo
echo "sockwatch's verdicts (run --format text):"
sed 's/^/  /' "$work/verdicts.txt"
echo
echo "sockwatch explain $sock:"
"$agent" explain "$sock" --agent "$listen" | sed 's/^/  /'
echo
echo "the agent's verdicts: $work/verdicts.txt; its log: $work/agent.log"
