# The tenant-isolation scenarios of ibcmd (issue 30): misbehaving tenants
# cannot hijack or starve the others. Sourced by run.sh once the fabric is up
# (it gives on, through, counter, port_guid, port_lid, wait_for, cleanup,
# $dir, $pids, $here, $sim_so):
#
#   switch-hijack        a tenant answers (REJ, REP, MRA) the REQs the daemon
#                        routed to another tenant: dropped and counted, the
#                        real connections complete
#   switch-misbehaving-tenants-soak
#                        misbehaving tenants flood, never read, reconnect,
#                        register and listen without end while an honest one
#                        connects and disconnects 200 times
#
# Host A is Hca1's ibcmd, its socket open to every user (mode 0666, in a
# directory every user can reach); host B is Hca2's ibcmd. The honest
# processes ($IBFABRIC_TENANT_ISOLATION, ibfabric_tenant_isolation.c) run as
# root, the misbehaving ones (misbehaving_tenant.py) as other users, each its
# own uid (setpriv).

[ -x "${IBCMD:-}" ] && [ -f "${IBCMD_HARNESS:-}" ] && [ -x "${IBFABRIC_TENANT_ISOLATION:-}" ] ||
    { echo "SKIP: no ibcmd (IBCMD, IBCMD_HARNESS, IBFABRIC_TENANT_ISOLATION)"; exit 77; }
command -v setpriv >/dev/null 2>&1 || { echo "SKIP: setpriv not installed"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (tenants of other uids)"; exit 77; }

# as UID ARGS...: misbehaving_tenant.py ARGS as user UID (its group UID too,
# no other groups), the script on standard input: no directory of this tree
# need be readable by that user. It replaces the shell that runs it: run it
# in the background (`as ... &`, its pid in $!) or in a subshell.
as() {
    uid=$1
    shift
    exec setpriv --reuid="$uid" --regid="$uid" --clear-groups "$py" - "$@" <"$here/misbehaving_tenant.py"
}

# An interpreter other users may run (python3 may be a shim under /root).
py=
for candidate in /usr/bin/python3 "$(command -v python3 2>/dev/null)"; do
    [ -n "$candidate" ] || continue
    candidate=$(readlink -f "$candidate")
    if setpriv --reuid=64000 --regid=64000 --clear-groups "$candidate" -c '' 2>/dev/null; then
        py=$candidate
        break
    fi
done
[ -n "$py" ] || { echo "SKIP: no python3 that other users may run"; exit 77; }

# The sockets, where every user can reach them; DIR/HCA.sock links to them
# for through and counter.
sockdir=$(mktemp -d /tmp/ibcm-tenants.XXXXXX) && chmod 0755 "$sockdir" || exit 1
trap 'cleanup; rm -rf "$sockdir"' EXIT
# Every process's descriptors below 1024 (the daemons', the tenants'):
# umad2sim numbers its own umad descriptors from 1024 and takes any
# descriptor from there for one of them, so an ibcmd under it with more
# loses its port, then crashes in umad2sim (seen with the shipped unit's
# LimitNOFILE=16384 and 1,100 connections). On real hardware the limit is
# the unit's; here the quotas must keep the misbehaving users under 1024.
ulimit -n 1024 || exit 1

# shared_ibcmd HCA LEVEL: HCA's ibcmd at log level LEVEL, its socket open
# to every user; its pid in $ibcmd_pid.
shared_ibcmd() {
    SIM_HOST=$1 IBCM_LOG=$2 LD_PRELOAD="$sim_so $IBCMD_HARNESS" "$IBCMD" \
        --socket "$sockdir/$1.sock" --mode 0666 --timewait 600 ibsim0 >"ibcmd.$1.log" 2>&1 &
    ibcmd_pid=$!
    pids="$ibcmd_pid $pids"
    wait_for "ibcmd.$1.log" 10 "listening on" || { echo "ibcmd on $1 did not start"; cat "ibcmd.$1.log"; exit 1; }
    ln -sf "$sockdir/$1.sock" "$dir/$1.sock"
}

# wait_file NAME SECONDS: waits for DIR/NAME.
wait_file() {
    i=0
    until [ -e "$dir/$1" ]; do
        i=$((i + 1))
        [ $i -gt $(($2 * 10)) ] && return 1
        sleep 0.1
    done
}

stats_line() {
    "$IBCMD" --stats --socket "$dir/$1.sock" | tr '\n' ' '
    echo
}

case $scenario in
switch-hijack)
    # T1 (root, behind A's ibcmd) holds B's 3 REQs and publishes their comm
    # IDs; the attacker (uid 64001, behind the same ibcmd) answers them,
    # addressed to B: a REJ of the 1st, a REP of the 2nd, an MRA of the 3rd.
    # Then T1 answers. B's connections must all be T1's; the daemon must have
    # dropped and counted exactly the attacker's 3 MADs, and let T1's own MRA
    # and REJ of a 4th REQ through.
    shared_ibcmd Hca1 info
    shared_ibcmd Hca2 info
    IBFABRIC_SERVICE=0x12380000 through Hca1 "$IBFABRIC_TENANT_ISOLATION" hijack-server "$dir" >t1.out 2>&1 &
    t1=$!
    wait_file listening 20 || { echo "T1 never listened"; cat t1.out; exit 1; }
    IBFABRIC_SERVICE=0x12380000 through Hca2 "$IBFABRIC_TENANT_ISOLATION" hijack-client "$(port_guid Hca1)" \
        >b.out 2>&1 &
    b=$!
    wait_file reqs 30 || { echo "T1 never got B's REQs"; cat t1.out b.out; exit 1; }
    spoofed_before=$(counter Hca1 tx_spoofed)
    # shellcheck disable=SC2046 # the three comm IDs, one word each
    (as 64001 hijack "$sockdir/Hca1.sock" ibsim0 "$(port_lid Hca2)" $(cut -d' ' -f1 "$dir/reqs")) \
        >attacker.out 2>&1
    arc=$?
    spoofed=$(($(counter Hca1 tx_spoofed) - spoofed_before))
    touch "$dir/answer"
    wait $b
    brc=$?
    wait $t1
    t1rc=$?
    echo "--- attacker (uid 64001, rc $arc)"; cat attacker.out
    echo "--- T1 (rc $t1rc)"; cat t1.out
    echo "--- B (rc $brc)"; cat b.out
    echo "--- ibcmd on Hca1: $(stats_line Hca1)"
    grep -i "dropped" ibcmd.Hca1.log | head -n 10
    echo "the attacker's REJ, REP and MRA: tx_spoofed grew by $spoofed (3 expected);" \
        "tx_spoofed at the end $(counter Hca1 tx_spoofed)"
    [ $arc = 0 ] && [ $brc = 0 ] && [ $t1rc = 0 ] && [ "$spoofed" = 3 ] &&
        [ "$(counter Hca1 tx_spoofed)" = 3 ]
    ;;
switch-misbehaving-tenants-soak)
    # On A: misbehaving users (uids 64001..64003), past their quotas, while the honest tenant (root) connects to B and disconnects
    # $soak_connections times, in 4 processes one after the other (each
    # registers during the attack). Bounds: A's ibcmd's peak RSS (VmHWM)
    # and the lines of its log (IBCM_LOG=warn, the default).
    soak_connections=${IBFABRIC_SOAK_CONNECTIONS:-200}
    rss_bound_kib=$((${IBFABRIC_SOAK_RSS_MIB:-64} * 1024))
    log_bound=${IBFABRIC_SOAK_LOG_LINES:-200}
    rss_stop_kib=$((1024 * 1024))
    shared_ibcmd Hca2 warn
    shared_ibcmd Hca1 warn
    a=$ibcmd_pid
    guid_b=$(port_guid Hca2) lid_b=$(port_lid Hca2)
    IBFABRIC_SERVICE=0x12390000 IBCM_DEV_A=ibsim0 IBCM_SWITCH_SOCKET=$dir/Hca2.sock timeout 150 \
        "$IBFABRIC_TENANT_ISOLATION" soak-server "$soak_connections" >server.out 2>&1 &
    server=$!
    wait_for server.out 20 listening || { echo "B never listened"; cat server.out; exit 1; }
    # Samples A's RSS and descriptors. The attackers are stopped (and the
    # scenario fails) far above the RSS bound, to spare the machine (at
    # about 4 MiB a connection, as before issue 30, these attacks would take
    # 3 GB).
    (
        while kill -0 $a 2>/dev/null; do
            rss=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' /proc/$a/status)
            fds=$(ls /proc/$a/fd | wc -l)
            echo "$(date +%s.%N) ${rss:-0} $fds" >>rss.samples
            if [ "${rss:-0}" -gt $rss_stop_kib ]; then
                echo "A's ibcmd: its RSS passed $((rss_stop_kib / 1024)) MiB: the attackers were stopped" >rss.stopped
                kill $(cat attackers.pids) 2>/dev/null
            fi
            sleep 0.1
        done
    ) &
    pids="$! $pids"
    sleep 1
    rss_before=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' /proc/$a/status)
    # One misbehaving user (64002) listens without end (280 registrations of
    # 100 listens each: past its registrations and listens) and, once that
    # holds its registrations, opens 600 connections that never register
    # and never read (past its connections); another (64001) floods spoofed
    # MADs, a third (64003) connects, registers and leaves in a loop (past
    # its slices, each in timewait after it). Without quotas that takes more
    # descriptors than A has; with them user 64002 holds 512 connections at
    # most, 256 registered (each with a pidfd): 768 descriptors.
    sock=$sockdir/Hca1.sock
    as 64002 listen "$sock" ibsim0 120 280 100 >listen.out 2>&1 &
    echo $! >>attackers.pids
    as 64001 flood "$sock" ibsim0 "$lid_b" 120 5000 >flood.out 2>&1 &
    echo $! >>attackers.pids
    as 64003 reconnect "$sock" ibsim0 "$lid_b" 120 200 >reconnect.out 2>&1 &
    echo $! >>attackers.pids
    sleep 3
    : >stats.out
    if [ ! -f rss.stopped ]; then
        as 64002 stats "$sock" 120 600 >stats.out 2>&1 &
        echo $! >>attackers.pids
    fi
    attackers=$(cat attackers.pids)
    pids="$attackers $pids"
    sleep 2 # the attacks under way
    honest_failed=0 per=$((soak_connections / 4))
    started=$(date +%s)
    for k in 1 2 3 4; do
        IBFABRIC_SERVICE=0x12390000 through Hca1 "$IBFABRIC_TENANT_ISOLATION" soak-client "$guid_b" $per 100 \
            >honest.$k.out 2>&1 || honest_failed=1
    done
    took=$(($(date +%s) - started))
    [ $honest_failed = 0 ] || kill $server 2>/dev/null
    wait $server
    src=$?
    hwm=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' /proc/$a/status)
    kill $attackers 2>/dev/null
    for p in $attackers; do wait "$p"; done
    lines=$(wc -l <ibcmd.Hca1.log)
    for f in flood stats reconnect listen; do echo "--- $f: $(tr '\n' ' ' <$f.out)"; done
    for k in 1 2 3 4; do echo "--- honest $k: $(cat honest.$k.out)"; done
    echo "--- B: $(cat server.out)"
    [ -f rss.stopped ] && cat rss.stopped
    echo "--- A's ibcmd: $(stats_line Hca1)"
    echo "--- its log: $lines lines (bound $log_bound), the first 20:"
    head -n 20 ibcmd.Hca1.log
    peak_sampled=$(sort -k2 -n rss.samples | tail -n 1 | cut -d' ' -f2)
    peak_fds=$(sort -k3 -n rss.samples | tail -n 1 | cut -d' ' -f3)
    echo "honest tenant: $soak_connections connections in $took s, $([ $honest_failed = 0 ] && echo all completed || echo FAILED);" \
        "A's ibcmd: RSS $((${rss_before:-0} / 1024)) MiB before the attacks, peak RSS (VmHWM) $((${hwm:-0} / 1024)) MiB (sampled ${peak_sampled:-0} KiB, bound $((rss_bound_kib / 1024)) MiB)," \
        "at most ${peak_fds:-?} descriptors, $lines log lines (bound $log_bound)"
    failed=0
    [ $honest_failed = 0 ] && [ $src = 0 ] || { echo "FAIL: the honest tenant did not complete every connection"; failed=1; }
    [ -n "$hwm" ] && [ "$hwm" -le $rss_bound_kib ] || { echo "FAIL: peak RSS over the bound"; failed=1; }
    [ "$lines" -le "$log_bound" ] || { echo "FAIL: the log is over its bound"; failed=1; }
    [ "$(counter Hca1 tx_spoofed)" -gt 0 ] 2>/dev/null || { echo "FAIL: no spoofed MAD was counted"; failed=1; }
    [ "$(counter Hca1 over_quota)" -gt 0 ] 2>/dev/null || { echo "FAIL: no quota refusal was counted"; failed=1; }
    [ ! -f rss.stopped ] || { echo "FAIL: the attackers had to be stopped"; failed=1; }
    [ $failed = 0 ]
    ;;
esac
