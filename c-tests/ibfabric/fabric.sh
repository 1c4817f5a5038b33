# Sourced by the ibfabric scripts that start their own simulated fabric
# (privs.sh, daemon_faults.sh; run.sh for cleanup and wait_for): what
# they share. Needs $dir (the scenario's directory, the current one),
# $here (this directory) and $sim_so (umad2sim).

# The processes to stop at exit, newest first.
pids=
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    for p in $pids; do
        i=0
        while kill -0 "$p" 2>/dev/null && [ $i -lt 30 ]; do sleep 0.1; i=$((i + 1)); done
        kill -9 "$p" 2>/dev/null
    done
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Waits up to $2 seconds for $3 to appear in file $1.
wait_for() {
    i=0
    while ! grep -q "$3" "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt $(($2 * 10)) ] && return 1
        sleep 0.1
    done
}

# Starts ibsim on net.ibcm (reading commands from a fifo this script holds
# open: it spins at the end of its stdin) and OpenSM, and waits until OpenSM
# is MASTER; exits 77 (skipped) when either does not come up.
start_fabric() {
    mkfifo ibsim.in && exec 3<>ibsim.in
    ibsim -s "$here/net.ibcm" >ibsim.log 2>&1 <ibsim.in &
    pids="$!"
    wait_for ibsim.log 10 "Network simulator ready" || { echo "SKIP: ibsim did not start"; exit 77; }
    mkdir -p opensm-cache
    OSM_CACHE_DIR=$dir/opensm-cache LD_PRELOAD=$sim_so opensm -f "$dir/opensm.log" >opensm.out 2>&1 </dev/null &
    pids="$! $pids"
    wait_for opensm.out 30 "Entering MASTER" || { echo "SKIP: OpenSM did not become MASTER"; exit 77; }
}

# Waits until each of the HCAs named is ACTIVE (OpenSM brought it up);
# exits 77 (skipped) when one is not within 30 s.
wait_active() {
    for hca in "$@"; do
        i=0
        until SIM_HOST=$hca LD_PRELOAD=$sim_so ibstat 2>/dev/null | grep -q "State: Active"; do
            i=$((i + 1))
            [ $i -gt 300 ] && { echo "SKIP: $hca never ACTIVE"; exit 77; }
            sleep 0.1
        done
    done
}
