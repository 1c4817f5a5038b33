#!/bin/bash
# Stage 2, PID 1 in the guest: SoftRoCE on a veth pair (rxe0 on veth0
# 10.77.0.1, rxe1 on veth1 10.77.0.2), ib_umad loaded, the kernel CM only when
# asked (/job/env: SRT_IBCM=1); then /job/cmd, its output and status into
# /job, and power off. PID 1 must never exit, so everything ends in finish().
# With SRT_NIC_IP (two VMs, run-2vm.sh) rxe0 sits on the virtio NIC instead,
# and SRT_VETH=0 leaves the veth pair out.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C
up() { cut -d' ' -f1 /proc/uptime; }
log() { echo "$(up) $*" >> /job/timings; }
finish() { log poweroff; sync; /bin/busybox poweroff -f; echo o > /proc/sysrq-trigger; sleep 10; }
trap finish EXIT
: > /job/timings
. /job/env
log "stage2 (kernel $(uname -r))"
mount -t tmpfs tmpfs /run
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs tmpfs /dev/shm
ln -sf /proc/self/fd /dev/fd 2>/dev/null
ip link set lo up
mkdir -p "/lib/modules/$SRT_KV"
mount --bind "$SRT_KROOT/lib/modules/$SRT_KV" "/lib/modules/$SRT_KV"
MODS="veth ib_core ib_uverbs rdma_rxe ib_umad"
[ -n "${SRT_NIC_IP:-}" ] && MODS="virtio_net $MODS"
[ "${SRT_IBCM:-0}" = 1 ] && MODS="$MODS ib_cm rdma_cm rdma_ucm"
modprobe -a $MODS || log "modprobe $MODS failed"
log "modules: $(cut -d' ' -f1 /proc/modules | tr '\n' ' ')"
DEVS=""
if [ -n "${SRT_NIC_IP:-}" ]; then
  NIC=$(ls /sys/class/net | grep -vE '^(lo|veth.*)$' | head -1)
  ip addr add "$SRT_NIC_IP" dev "$NIC"
  ip link set "$NIC" up
  rdma link add rxe0 type rxe netdev "$NIC" || log "rdma link add rxe0 ($NIC) failed"
  DEVS="rxe0"
fi
if [ "${SRT_VETH:-1}" = 1 ]; then
  A=10.77.0.1 B=10.77.0.2
  ip -batch - <<IP
link add veth0 type veth peer name veth1
addr add $A/24 dev veth0
addr add $B/24 dev veth1
link set veth0 up
link set veth1 up
IP
  # Both addresses are local: accept them as sources on the other veth, and
  # route locally generated traffic over the veth wire (see the shared NOTES).
  for k in all/accept_local veth0/accept_local veth1/accept_local; do echo 1 > /proc/sys/net/ipv4/conf/$k; done
  for k in all default veth0 veth1; do echo 0 > /proc/sys/net/ipv4/conf/$k/rp_filter; done
  ip -batch - <<IP
rule add pref 1000 lookup local
rule del pref 0
rule add pref 10 iif lo to $B lookup 100
rule add pref 11 iif lo to $A lookup 101
route add $B dev veth0 src $A table 100
route add $A dev veth1 src $B table 101
neigh replace $B lladdr $(cat /sys/class/net/veth1/address) dev veth0 nud permanent
neigh replace $A lladdr $(cat /sys/class/net/veth0/address) dev veth1 nud permanent
IP
  # The same for the IPv6 link-local addresses behind GID index 0.
  ll() { ip -6 -o addr show dev "$1" scope link | awk '{print $4}' | cut -d/ -f1; }
  for _ in $(seq 1 50); do [ -n "$(ll veth0)" ] && [ -n "$(ll veth1)" ] && break; sleep 0.1; done
  ip -6 neigh replace "$(ll veth1)" lladdr "$(cat /sys/class/net/veth1/address)" dev veth0 nud permanent
  ip -6 neigh replace "$(ll veth0)" lladdr "$(cat /sys/class/net/veth0/address)" dev veth1 nud permanent
  rdma link add rxe0 type rxe netdev veth0 || log "rdma link add rxe0 failed"
  rdma link add rxe1 type rxe netdev veth1 || log "rdma link add rxe1 failed"
  DEVS="rxe0 rxe1"
fi
for _ in $(seq 1 100); do
  ok=1
  for d in $DEVS; do d=/sys/class/infiniband/$d
    grep -q ACTIVE "$d/ports/1/state" 2>/dev/null || ok=0
    [ -e "$d/ports/1/gids/1" ] && grep -qv '^0000:0000:0000:0000:0000:0000' "$d/ports/1/gids/1" 2>/dev/null || ok=0
  done
  [ $ok = 1 ] && break
  sleep 0.1
done
log "rdma ready"
cd /job
bash /job/cmd > /job/stdout 2> /job/stderr < /dev/null
echo $? > /job/rc
log "cmd done rc=$(cat /job/rc)"
exit 0
