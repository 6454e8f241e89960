#!/usr/bin/env bash
# Reproduces the Multus CNI incident under sockwatch and prints what it reports.
#
#   old daemon  : a Go program, net.Listen("unix", P) — its Close unlinks P
#   successor   : removes P's directory, re-creates it, binds and listens on P
#   old daemon  : graceful shutdown -> Close -> unlinks the successor's live socket
#
# --guard: the agent runs with `--guard stale_owner` (docs/guard.md), so the kernel refuses
# the old daemon's unlink (EPERM, which Go's Close ignores); the script then checks that the
# successor's socket is still there and that a client connects to it, and prints the agent's
# UNLINK DENIED line. Needs BPF LSM (`bpf` in /sys/kernel/security/lsm) and python3; without
# BPF LSM the guard is unavailable and the incident happens as without --guard.
#
# Needs root, Go (apt-get install golang-go) and a built agent (cargo xtask run -- check).
# SOCKWATCH_DEMO_LISTEN (default 127.0.0.1:19469) is where the agent serves the API that
# `sockwatch explain` reads.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
guard=
case "${1:-}" in
    --guard) guard=1 ;;
    "") ;;
    *) echo "usage: scripts/multus-incident.sh [--guard]" >&2; exit 2 ;;
esac
[[ $EUID -eq 0 ]] || { echo "multus-incident: needs root (eBPF)" >&2; exit 1; }
command -v go >/dev/null || { echo "multus-incident: needs Go: apt-get install golang-go" >&2; exit 1; }
agent=target/release/sockwatch
[[ -x $agent ]] || agent=target/debug/sockwatch
[[ -x $agent ]] || { echo "multus-incident: build the agent first: cargo xtask run -- check" >&2; exit 1; }
listen=${SOCKWATCH_DEMO_LISTEN:-127.0.0.1:19469}
if [[ -n $guard ]]; then
    command -v python3 >/dev/null || { echo "multus-incident: --guard needs python3 (the client)" >&2; exit 1; }
    grep -qw bpf /sys/kernel/security/lsm 2>/dev/null \
        || echo "multus-incident: BPF LSM is not active (no bpf in /sys/kernel/security/lsm): the guard will be unavailable" >&2
fi

work=$(mktemp -d /tmp/multus-demo.XXXXXX)
dir=$work/run/multus
sock=$dir/multus.sock
mkdir -p "$dir"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

CGO_ENABLED=0 GOCACHE=$work/gocache go build -o "$work/multus-daemon" sockwatch/tests/go/golistener.go

agent_args=(run --watch "$work/run" --format text --listen "$listen" --events "$work/verdicts.txt")
[[ -z $guard ]] || agent_args+=(--guard stale_owner)
"$agent" "${agent_args[@]}" 2>"$work/agent.log" &
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

if [[ -z $guard ]]; then
    echo "3. old daemon shuts down gracefully: its listener's Close unlinks $sock"
else
    echo "3. old daemon shuts down gracefully: its listener's Close tries to unlink $sock (the guard should refuse it)"
fi
kill -TERM "$old"
wait "$old" || true
sleep 1
if [[ -z $guard ]]; then
    [[ -e $sock ]] && echo "   (socket still there?)" || echo "   $sock is gone; the successor listens on an orphaned inode"
elif [[ -S $sock ]] && python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(2)
s.connect(sys.argv[1])
' "$sock" 2>"$work/client.err"; then
    echo "   the successor survived: $sock is still there, and a client connects to it"
else
    echo "   the successor did not survive: $sock is gone or refuses clients ($(tail -n 1 "$work/client.err" 2>/dev/null))"
fi

echo
echo "sockwatch's verdicts (run --format text):"
sed 's/^/  /' "$work/verdicts.txt"
if [[ -n $guard ]]; then
    echo
    echo "the guard's refusal:"
    grep 'UNLINK DENIED' "$work/verdicts.txt" | sed 's/^/  /' \
        || { echo "  none; the agent's log on its guard:"; grep -i guard "$work/agent.log" | sed 's/^/  /' || true; }
fi
echo
echo "sockwatch explain $sock:"
"$agent" explain "$sock" --agent "$listen" | sed 's/^/  /'
echo
echo "the agent's verdicts: $work/verdicts.txt; its log: $work/agent.log"
