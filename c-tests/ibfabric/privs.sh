#!/bin/sh
# ibcmd's least privilege on the simulated fabric (issue 30): two ibcmd
# started as root with --user nobody, one binding its socket (Hca1), one
# taking it from socket activation (Hca2, systemd-socket-activate --seqpacket,
# or LISTEN_PID/LISTEN_FDS set by python3 where that tool is missing). Each
# must run as nobody with no capability and no_new_privs in every thread
# (/proc/PID/task/*/status) while a connection Hca1 -> Hca2 goes through
# both; the one socket-activated must leave its socket in place at exit; an
# ibcmd that cannot drop (started as nobody, --user daemon) must refuse to
# serve (exit 1). Starts ibsim and OpenSM as run.sh does; exit 77 (skipped)
# without ibsim, OpenSM, umad2sim or root.
#
#   privs.sh PEER LOGDIR        (IBCMD, IBCMD_HARNESS as for run.sh's switch-*)
set -u
peer=$1 logroot=$2
here=$(cd "$(dirname "$0")" && pwd)
sim_so=${IBSIM_PRELOAD:-/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so}

for tool in ibsim opensm ibstat setpriv; do
    command -v $tool >/dev/null 2>&1 || { echo "SKIP: $tool not installed"; exit 77; }
done
[ -f "$sim_so" ] || { echo "SKIP: $sim_so not installed"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: not root (ibcmd must start as root to drop to nobody)"; exit 77; }
[ -x "${IBCMD:-}" ] && [ -f "${IBCMD_HARNESS:-}" ] || { echo "SKIP: no ibcmd (IBCMD, IBCMD_HARNESS)"; exit 77; }
nobody=$(id -u nobody) nogroup=$(id -g nobody)

dir=$logroot/privs
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || exit 1
# The daemons run as nobody in this directory (umad2sim's ./sys-PID).
chmod 0755 "$dir"
IBSIM_SOCKNAME=ibcm-privs-$$
export IBSIM_SOCKNAME
# shellcheck source=fabric.sh
. "$here/fabric.sh"
start_fabric
wait_active Hca1 Hca2 Hca3

failed=0
fail() { echo "FAIL: $*"; failed=1; }

# Hca1: ibcmd binds DIR/Hca1.sock as root, then becomes nobody (setting
# no_new_privs itself, in umad2sim's thread too).
SIM_HOST=Hca1 IBCM_LOG=info LD_PRELOAD="$sim_so $IBCMD_HARNESS" \
    "$IBCMD" --user nobody --socket "$dir/Hca1.sock" ibsim0 >ibcmd.Hca1.log 2>&1 3>&- &
bound=$!
pids="$bound $pids"

# Hca2: the socket is made and passed by socket activation, and ibcmd starts
# as under systemd/ibcmd.service.in: no_new_privs set (NoNewPrivileges=yes),
# CAP_SETUID and CAP_SETGID its only capabilities (CapabilityBoundingSet=).
# Each exec
# keeps the pid that LISTEN_PID names; the preload goes to ibcmd alone (it
# must not start umad2sim's client in the same pid twice).
if command -v systemd-socket-activate >/dev/null 2>&1; then
    activator=systemd-socket-activate
    systemd-socket-activate --seqpacket -l "$dir/Hca2.sock" -E SIM_HOST=Hca2 -E IBCM_LOG=info -E IBSIM_SOCKNAME \
        setpriv --no-new-privs --bounding-set=-all,+setuid,+setgid env "LD_PRELOAD=$sim_so $IBCMD_HARNESS" \
        "$IBCMD" --user nobody ibsim0 >ibcmd.Hca2.log 2>&1 3>&- &
else
    activator=python3
    command -v python3 >/dev/null 2>&1 || { echo "SKIP: neither systemd-socket-activate nor python3"; exit 77; }
    python3 -c '
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(sys.argv[1]); s.listen(128)
if s.fileno() != 3:
    os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")
os.execvp("setpriv", ["setpriv", "--no-new-privs", "--bounding-set=-all,+setuid,+setgid", "env"] + sys.argv[2:])
' "$dir/Hca2.sock" SIM_HOST=Hca2 IBCM_LOG=info "LD_PRELOAD=$sim_so $IBCMD_HARNESS" \
        "$IBCMD" --user nobody ibsim0 >ibcmd.Hca2.log 2>&1 3>&- &
fi
activated=$!
pids="$activated $pids"
echo "socket activation by $activator"

# systemd-socket-activate, like a socket unit, starts ibcmd on the first
# connection: this one waits in the backlog until ibcmd, started, answers.
wait_for ibcmd.Hca2.log 10 "Listening on\|listening on" || { echo "no socket for Hca2"; cat ibcmd.Hca2.log; exit 1; }
"$IBCMD" --stats --socket "$dir/Hca2.sock" >first.out 2>&1 || { echo "the first connection failed"; cat first.out ibcmd.Hca2.log; exit 1; }
echo "the first connection (queued until ibcmd accepted it) got $(wc -l <first.out) counters"
for hca in Hca1 Hca2; do
    wait_for "ibcmd.$hca.log" 15 "listening on" || { echo "ibcmd on $hca did not start"; cat "ibcmd.$hca.log"; exit 1; }
done
grep -q "passed by systemd" ibcmd.Hca2.log || fail "ibcmd on Hca2 did not take the passed socket"

# privileges PID: fails unless every thread of PID runs as nobody with no
# capability and no_new_privs.
privileges() {
    threads=0
    for status in /proc/$1/task/*/status; do
        threads=$((threads + 1))
        uid=$(sed -n 's/^Uid:[[:space:]]*//p' "$status" | tr -s '[:space:]' ' ' | sed 's/ $//')
        gid=$(sed -n 's/^Gid:[[:space:]]*//p' "$status" | tr -s '[:space:]' ' ' | sed 's/ $//')
        [ "$uid" = "$nobody $nobody $nobody $nobody" ] || { fail "$status: Uid $uid"; return; }
        [ "$gid" = "$nogroup $nogroup $nogroup $nogroup" ] || { fail "$status: Gid $gid"; return; }
        for f in CapPrm CapEff CapAmb; do
            v=$(sed -n "s/^$f:[[:space:]]*//p" "$status")
            [ "$v" = 0000000000000000 ] || { fail "$status: $f $v"; return; }
        done
        [ "$(sed -n 's/^NoNewPrivs:[[:space:]]*//p' "$status")" = 1 ] || { fail "$status: NoNewPrivs 0"; return; }
    done
    echo "pid $1: $threads threads, each: $(grep -E '^(Uid|Gid|Groups|CapPrm|CapEff|CapAmb|NoNewPrivs|Seccomp):' /proc/$1/status | tr -s '[:space:]' ' ')"
}
privileges $bound
privileges $activated
# Hca1's ibcmd set no_new_privs in every thread with its allow-all seccomp
# filter (Seccomp 2); Hca2's inherited it and needed none (Seccomp 0).
[ "$(sed -n 's/^Seccomp:[[:space:]]*//p' /proc/$bound/status)" = 2 ] || fail "Hca1's ibcmd has no seccomp filter"
[ "$(sed -n 's/^Seccomp:[[:space:]]*//p' /proc/$activated/status)" = 0 ] || fail "Hca2's ibcmd installed a seccomp filter"

# A connection Hca1 -> Hca2 through both daemons (the path from the SA
# through Hca1's, the CM MADs through both), checked again while the
# listening server is registered (a thread of the daemon serves it).
through() {
    hca=$1
    shift
    IBCM_DEV_A=ibsim0 IBCM_SWITCH_SOCKET=$dir/$hca.sock timeout 60 "$@"
}
IBFABRIC_SERVICE=0x12380000 through Hca2 "$peer" server "$dir" a >server.out 2>&1 &
server=$!
i=0
until [ -s "$dir/server.gid" ]; do
    i=$((i + 1))
    [ $i -gt 300 ] && { echo "the server never listened"; cat server.out; exit 1; }
    sleep 0.1
done
privileges $activated
IBFABRIC_SERVICE=0x12380000 through Hca1 "$peer" client "$dir" a >client.out 2>&1
crc=$?
wait $server
src=$?
echo "--- server (through Hca2's ibcmd, rc $src)"; cat server.out
echo "--- client (through Hca1's ibcmd, rc $crc)"; cat client.out
[ $src = 0 ] && [ $crc = 0 ] || fail "the connection through the two daemons failed"
for hca in Hca1 Hca2; do
    registered=$("$IBCMD" --stats --socket "$dir/$hca.sock" | sed -n 's/^registered //p')
    echo "ibcmd on $hca: registered $registered"
    [ "${registered:-0}" -ge 1 ] || fail "nothing registered with ibcmd on $hca"
done
# And once the processes have left.
privileges $bound
privileges $activated

# An ibcmd started as nobody cannot become another user: it refuses to
# serve. (In a directory of nobody's, for umad2sim's ./sys-PID.)
mkdir -p as-nobody && chown "$nobody:$nogroup" as-nobody
(cd as-nobody && setpriv --reuid="$nobody" --regid="$nogroup" --clear-groups \
    timeout 30 env SIM_HOST=Hca3 LD_PRELOAD="$sim_so $IBCMD_HARNESS" \
    "$IBCMD" --user daemon --socket "$dir/as-nobody/Hca3.sock" ibsim0) >ibcmd.Hca3.log 2>&1 3>&-
rc=$?
echo "--- ibcmd started as nobody with --user daemon (rc $rc)"; grep ibcmd: ibcmd.Hca3.log
[ $rc = 1 ] && grep -q "cannot become user daemon" ibcmd.Hca3.log || fail "it did not refuse (rc $rc)"

# Stopped: the passed socket stays (its unit's); nothing said about the
# bound one, which nobody may not remove from this root-owned directory.
kill $bound $activated
wait $bound; brc=$?
wait $activated; arc=$?
echo "--- ibcmd on Hca1 (rc $brc)"; grep ibcmd: ibcmd.Hca1.log
echo "--- ibcmd on Hca2 (rc $arc)"; grep ibcmd: ibcmd.Hca2.log
[ $brc = 0 ] && [ $arc = 0 ] || fail "an ibcmd did not stop cleanly"
[ -S "$dir/Hca2.sock" ] || fail "ibcmd removed the socket it was passed"
if grep -h "^ibcmd:" ibcmd.Hca1.log ibcmd.Hca2.log | grep -iE "warn|error|denied|cannot"; then
    fail "a daemon complained"
fi
[ $failed = 0 ] && echo "PASS: both ibcmd ran as nobody without capabilities and served the connection"
[ $failed = 0 ]
