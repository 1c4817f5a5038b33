#!/bin/sh
# The real ibcmd under faults and misbehaving tenants (issue 30, after the
# merges of server-io and privs), on the simulated fabric as privs.sh runs
# it: each daemon started as root with --user nobody. Scenarios (all run,
# each says PASS or FAIL; exit 1 if any failed):
#
#   accept-enomem   one accept4 failing with ENOMEM (strace fault injection)
#                   must not leave a daemon that runs but never accepts
#                   again: after it, a connection is served, or the daemon
#                   has exited non-zero (so that Restart=on-failure restarts
#                   it). FAILS on 752e4e3: accept_loop returns on any error
#                   it does not know, silently; the listener is closed and
#                   the daemon lives on (ECONNREFUSED for every process).
#   spawn-failure   connections whose thread cannot start (RLIMIT_NPROC of
#                   the dropped user) give their place in the connection
#                   quota back: with --quota connections=2, two connections
#                   are served afterwards. (Held on 752e4e3.)
#   malformed-log   a tenant reconnecting and sending one malformed message
#                   each time writes at most the tenants' budget (20 lines
#                   per 10 s, docs/ibcmd.md) to the daemon's log at its
#                   default level. FAILS on 752e4e3: one warning per
#                   connection.
#   syscalls        every system call ibcmd --user makes, started as
#                   ibcmd.service starts it (no_new_privs inherited, only
#                   CAP_SETUID and CAP_SETGID), while a connection goes
#                   through it (strace -f), is in @system-service, the
#                   unit's SystemCallFilter (needs systemd-analyze; umad2sim
#                   stands for ib_umad's ioctls, which @system-service has).
#                   (Held on 752e4e3.)
#
#   daemon_faults.sh PEER LOGDIR   (IBCMD, IBCMD_HARNESS as for privs.sh;
#                                   DAEMON_FAULTS_ONLY=NAME: one scenario)
#
# Exit 77 (skipped) without ibsim, OpenSM, umad2sim, strace, prlimit, setpriv,
# python3 or root.
set -u
peer=$1 logroot=$2
here=$(cd "$(dirname "$0")" && pwd)
sim_so=${IBSIM_PRELOAD:-/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so}

for tool in ibsim opensm ibstat strace prlimit setpriv python3; do
    command -v $tool >/dev/null 2>&1 || { echo "SKIP: $tool not installed"; exit 77; }
done
[ -f "$sim_so" ] || { echo "SKIP: $sim_so not installed"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: not root (ibcmd must start as root to drop to nobody)"; exit 77; }
[ -x "${IBCMD:-}" ] && [ -f "${IBCMD_HARNESS:-}" ] || { echo "SKIP: no ibcmd (IBCMD, IBCMD_HARNESS)"; exit 77; }

dir=$logroot/daemon_faults
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
chmod 0755 "$dir"
IBSIM_SOCKNAME=ibcm-daemon-faults-$$
export IBSIM_SOCKNAME
# shellcheck source=fabric.sh
. "$here/fabric.sh"
start_fabric
wait_active Hca1 Hca2

failed=0
fail() { echo "FAIL: $*"; failed=1; }
# DAEMON_FAULTS_ONLY=NAME runs that scenario alone.
want() { [ -z "${DAEMON_FAULTS_ONLY:-}" ] || [ "$DAEMON_FAULTS_ONLY" = "$1" ]; }

# stop PID...: SIGTERM, and waits (bounded) until each is gone: the next
# daemon on the same HCA must not meet its agents.
stop() {
    kill "$@" 2>/dev/null
    for p in "$@"; do
        i=0
        while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    done
}

# daemon NAME HCA [WRAPPER...] -- [IBCMD OPTIONS...]: starts ibcmd --user
# nobody on HCA with its socket at DIR/NAME.sock and its log in
# ibcmd.NAME.log, under WRAPPER (strace); the wrapper's pid in $last,
# ibcmd's in $dpid (a wrapper stopped does not stop it).
daemon() {
    name=$1 hca=$2
    shift 2
    wrapper=
    while [ $# -gt 0 ] && [ "$1" != -- ]; do wrapper="$wrapper $1"; shift; done
    [ $# -gt 0 ] && shift
    # The preload goes to ibcmd alone (not to a wrapper: umad2sim would
    # make it a second process on the HCA).
    # shellcheck disable=SC2086
    SIM_HOST=$hca $wrapper env LD_PRELOAD="$sim_so $IBCMD_HARNESS" \
        "$IBCMD" --user nobody --socket "$dir/$name.sock" "$@" ibsim0 >"ibcmd.$name.log" 2>&1 3>&- &
    last=$!
    pids="$last $pids"
    wait_for "ibcmd.$name.log" 20 "listening on" || { echo "ibcmd $name did not start"; cat "ibcmd.$name.log"; exit 1; }
    dpid=$(ibcmd_pid "$name")
    pids="$dpid $pids"
}

# The pid of the ibcmd serving DIR/NAME.sock (under a wrapper or not).
ibcmd_pid() {
    for p in $(pgrep -f -- "--socket $dir/$1.sock"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = ibcmd ] && { echo "$p"; return; }
    done
}

# clients SOCKET N: opens N connections at once, asks each for the counters
# and says how many were answered (each within 10 s).
clients() {
    python3 - "$1" "$2" <<'EOF'
import socket, struct, sys
path, n = sys.argv[1], int(sys.argv[2])
conns, answered = [], 0
for seq in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    try:
        s.connect(path)
        s.send(struct.pack("<HBBI", 1, 5, 0, seq))
        conns.append(s)
    except OSError:
        pass
for s in conns:
    try:
        reply = s.recv(65536)
        if len(reply) >= 4 and reply[2] == 0x85:
            answered += 1
    except OSError:
        pass
print(answered)
EOF
}

if want accept-enomem; then
echo "=== accept-enomem"
daemon enomem Hca1 strace -f -qq -o "$dir/enomem.strace" -e trace=accept4 \
    -e inject=accept4:error=ENOMEM:when=1 --
sleep 1
served=$(clients "$dir/enomem.sock" 1)
pid=$(kill -0 "$dpid" 2>/dev/null && echo "$dpid")
grep accept4 enomem.strace | sed 's/^/    /'
if [ "$served" = 1 ]; then
    echo "PASS: served after an accept4 ENOMEM"
elif [ -z "$pid" ]; then
    wait "$last"; rc=$?
    if [ $rc != 0 ]; then
        echo "PASS: exited $rc after an accept4 ENOMEM"
    else
        fail "accept-enomem: exited 0 after an accept4 ENOMEM"
    fi
else
    fail "accept-enomem: ibcmd (pid $pid) still runs after an accept4 ENOMEM but serves no connection (answered: ${served:-0}); its log says:"
    grep ibcmd: ibcmd.enomem.log | sed 's/^/    /'
fi
stop "$dpid"
fi

if want spawn-failure; then
echo "=== spawn-failure"
daemon spawn Hca2 -- --quota connections=2
pid=$dpid
# As nobody (the daemon's user, whose limits it may set without
# CAP_SYS_RESOURCE): the soft limit only, then back to what it was.
as_nobody() { setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$@"; }
soft=$(sed -n 's/^Max processes *\([a-z0-9]*\) .*/\1/p' "/proc/$pid/limits")
as_nobody prlimit --pid "$pid" --nproc=1:
refused=$(clients "$dir/spawn.sock" 3)
as_nobody prlimit --pid "$pid" --nproc="$soft":
grep -h "cannot start a client thread" ibcmd.spawn.log | sed 's/^/    /'
served=$(clients "$dir/spawn.sock" 2)
echo "3 connections while no thread can start: $refused answered; then 2 at once: $served answered"
if [ "$refused" = 0 ] && [ "$served" = 2 ]; then
    echo "PASS: the connections whose thread did not start gave their quota back"
else
    fail "spawn-failure: $refused answered without threads, $served of 2 afterwards (quota connections=2)"
fi
stop "$pid"
fi

if want malformed-log; then
echo "=== malformed-log"
daemon malformed Hca2
python3 - "$dir/malformed.sock" <<'EOF'
import socket, sys
for _ in range(200):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(sys.argv[1])
    s.send(b"\xff\xff\x05\x00\x01\x00\x00\x00")
    try:
        s.recv(16)
    except OSError:
        pass
    s.close()
EOF
sleep 1
lines=$(grep -c "malformed message" ibcmd.malformed.log)
echo "200 connections, one malformed message each, in $(grep -c . ibcmd.malformed.log) log lines: $lines about it"
if [ "$lines" -le 20 ]; then
    echo "PASS: within the tenants' budget"
else
    fail "malformed-log: $lines lines for 200 malformed messages of one tenant (budget 20 per 10 s)"
fi
stop "$dpid"
fi

if want syscalls; then
echo "=== syscalls"
if command -v systemd-analyze >/dev/null 2>&1; then
    expand() {
        systemd-analyze syscall-filter "$1" 2>/dev/null | sed -n '2,$p' | sed 's/^ *//' |
            grep -v '^#' | grep -v '^$' | while read -r x; do
                case "$x" in @*) expand "$x" ;; *) echo "$x" ;; esac
            done
    }
    expand @system-service | sort -u >system-service.txt
    # As under ibcmd.service: no_new_privs inherited (NoNewPrivileges=yes),
    # only CAP_SETUID and CAP_SETGID (CapabilityBoundingSet=).
    daemon traced Hca1 strace -f -qq -s 256 -o "$dir/traced.strace" \
        setpriv --no-new-privs --bounding-set=-all,+setuid,+setgid -- --quota connections=8
    traced=$dpid
    daemon plain Hca2
    plain=$dpid
    IBCM_DEV_A=ibsim0 IBCM_SWITCH_SOCKET=$dir/plain.sock IBFABRIC_SERVICE=0x12390000 \
        timeout 60 "$peer" server "$dir" a >server.out 2>&1 &
    server=$!
    i=0
    until [ -s "$dir/server.gid" ]; do
        i=$((i + 1))
        [ $i -gt 300 ] && { echo "the server never listened"; cat server.out; break; }
        sleep 0.1
    done
    IBCM_DEV_A=ibsim0 IBCM_SWITCH_SOCKET=$dir/traced.sock IBFABRIC_SERVICE=0x12390000 \
        timeout 60 "$peer" client "$dir" a >client.out 2>&1
    crc=$?
    wait $server
    src=$?
    "$IBCMD" --stats --socket "$dir/traced.sock" >/dev/null
    stop "$traced" "$plain"
    sleep 1
    # ibcmd's calls: from its execve on (not setpriv's nor env's).
    sed -n '/execve("[^"]*\/ibcmd"/,$p' traced.strace |
        sed -n 's/^[0-9]* *\([a-z_0-9]*\)(.*/\1/p' | sort -u >traced.calls
    outside=$(comm -23 traced.calls system-service.txt | tr '\n' ' ')
    echo "connection through the traced daemon: client rc $crc, server rc $src; $(wc -l <traced.calls) distinct calls"
    [ $crc = 0 ] && [ $src = 0 ] || fail "syscalls: the connection through the traced daemon failed"
    if [ -z "$outside" ]; then
        echo "PASS: every call is in @system-service"
    else
        fail "syscalls: outside @system-service: $outside"
    fi
else
    echo "SKIP: syscalls (no systemd-analyze)"
fi
fi

[ $failed = 0 ] && echo "PASS: all scenarios"
[ $failed = 0 ]
