#!/usr/bin/env bash
# run-2vm.sh [--a-ibcm] [--b-ibcm] [--timeout S] [--keep | --jobs DIR] 'COMMAND A' 'COMMAND B'
#
# Two SoftRoCE VMs (run-in-vm.sh) joined by one virtual Ethernet link that
# QEMU tunnels over host loopback (-netdev socket, 127.0.0.1 only):
#   VM A: virtio NIC 10.78.0.1/24 with rxe0 on it, no veth pair
#   VM B: virtio NIC 10.78.0.2/24 with rxe0 on it, no veth pair
# Each command runs as root in the caller's directory and sees SRT_ROLE=a|b,
# SRT_SELF_IP and SRT_PEER_IP. The kernel CM (ib_cm, rdma_cm, rdma_ucm) is
# loaded only in the VM(s) named by --a-ibcm / --b-ibcm.
#
# Prints A's then B's output, each line prefixed "[A] " / "[B] ", and exits
# with A's status if it is not 0, else B's. Each VM's $SRT_JOB is kept with
# --keep (printed) or --jobs DIR (DIR/a, DIR/b).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
AOPT=() BOPT=() COMMON=() KEEP=0 JOBS=
while (($#)); do
  case "$1" in
    --a-ibcm) AOPT+=(--ibcm) ;;
    --b-ibcm) BOPT+=(--ibcm) ;;
    --timeout) COMMON+=(--timeout "$2"); shift ;;
    --keep) KEEP=1 ;;
    --jobs) JOBS=$2; KEEP=1; shift ;;
    --) shift; break ;;
    -*) echo "run-2vm: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
(($# == 2)) || { echo "usage: run-2vm.sh [options] 'COMMAND A' 'COMMAND B'" >&2; exit 2; }

# A free pair of loopback TCP ports for QEMU's socket netdev.
PORT=$(python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ -n "$JOBS" ]; then mkdir -p "$JOBS"; else JOBS=$(mktemp -d /tmp/ibcm-2vm.XXXXXX); fi
vm() { # vm ROLE SELF PEER NETDEV OPTS... -- CMD
  local role=$1 self=$2 peer=$3 netdev=$4; shift 4
  "$HERE/run-in-vm.sh" "${COMMON[@]+"${COMMON[@]}"}" --job "$JOBS/$role" --no-veth \
    --netdev "$netdev" --nic-ip "$self/24" \
    --env SRT_ROLE="$role" --env SRT_SELF_IP="$self" --env SRT_PEER_IP="$peer" "$@" \
    > "$JOBS/$role.out" 2>&1
}
vm a 10.78.0.1 10.78.0.2 "socket,listen=127.0.0.1:$PORT" "${AOPT[@]+"${AOPT[@]}"}" -- "$1" &
PA=$!
# QEMU B's connect= fails at once if A's QEMU is not listening yet.
for _ in $(seq 1 200); do
  ss -Hltn "sport = :$PORT" 2>/dev/null | grep -q . && break
  sleep 0.05
done
vm b 10.78.0.2 10.78.0.1 "socket,connect=127.0.0.1:$PORT" "${BOPT[@]+"${BOPT[@]}"}" -- "$2" &
PB=$!
wait $PA; RA=$?
wait $PB; RB=$?
sed 's/^/[A] /' "$JOBS/a.out"
sed 's/^/[B] /' "$JOBS/b.out"
echo "run-2vm: A rc=$RA, B rc=$RB" >&2
if [ $KEEP = 1 ]; then echo "run-2vm: job dirs $JOBS/a $JOBS/b" >&2; else rm -rf "$JOBS"; fi
[ $RA != 0 ] && exit $RA
exit $RB
